# The interpreter every run script starts, so a script works without an activated virtual environment; sourced by
# the scripts, not run on its own. PYTHON: $PYTHON when set; else python3 on PATH when it has SLEA-RL installed
# (an activated venv or conda environment, a GPU cluster's install); else the repository's own .venv (`make venv`).

if [[ -z "${PYTHON:-}" ]]; then
    PYTHON=python3
    if ! python3 -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('verl') and u.find_spec('hydra')))" >/dev/null 2>&1; then
        PYTHON="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv/bin/python"
        if [[ ! -x "$PYTHON" ]]; then
            echo "no interpreter with SLEA-RL installed: run 'make venv' in the repository (or activate its environment, or set PYTHON)" >&2
            exit 2
        fi
    fi
fi
