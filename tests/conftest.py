"""Suite-wide test settings: GPU-only tests are skipped without CUDA; nothing may reach a model hub. Also
``load_script``: import a file of scripts/ as a module (scripts/ is not a package)."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# CI (CI=true, which .ci/run sets) runs the property tests on derandomized examples, so a red run is
# reproducible; locally each run draws new examples and keeps exploring.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI", "").lower() in ("1", "true"):
    settings.load_profile("ci")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def import_script(filename: str):
    """scripts/<filename> as a fresh module, registered in sys.modules (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(f"script_under_test_{Path(filename).stem}", SCRIPTS / filename)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_script():
    return import_script


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


def pytest_sessionfinish(session, exitstatus):
    """Close what tests of the verl engine's worker pieces left open in this process before the interpreter tears
    down: the environment and library thread pools and the idle environment managers (whose worker processes
    would otherwise be stopped only by atexit handlers, during teardown), and a Ray session. Imports nothing."""
    import sys

    for module, closer in (("recipe.forge.engines.verl.episode", "shutdown_environment_executor"),
                           ("recipe.forge.engines.verl.library_channel", "shutdown_library_loader"),
                           ("recipe.forge.engines.verl.manager_pool", "close_process_manager_pool")):
        if module in sys.modules:
            getattr(sys.modules[module], closer)()
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
