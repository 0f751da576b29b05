"""Suite-wide test settings: GPU-only tests are skipped without CUDA; nothing may reach a model hub; the longest
modules run first. Also ``load_script``: import a file of scripts/ as a module (scripts/ is not a package)."""

import importlib.util
import json
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


def threads_per_worker() -> int | None:
    """Under `make test`'s worker processes (pytest-xdist), each worker's share of the cores this process may use,
    else None. Two workers each computing with every core would fight over them: torch's idle threads spin while
    the other worker's hold the cores, and one module's tests took twice as long, using 2.5 times the CPU time."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, len(os.sched_getaffinity(0)) // workers) if workers > 1 else None


WORKER_THREADS = threads_per_worker()
if WORKER_THREADS is not None:
    # before torch starts its thread pool; inherited by every run a test starts (set explicitly, it stays)
    os.environ.setdefault("OMP_NUM_THREADS", str(WORKER_THREADS))

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
MODULE_SECONDS = Path(__file__).resolve().parent / "module_seconds.json"


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

    items[:] = slowest_modules_first(items)
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


def slowest_modules_first(items: list) -> list:
    """The tests with their modules ordered by the seconds each took in a measured run (tests/module_seconds.json,
    written by scripts/module_seconds.py), most first; a module not measured yet comes after them, collection order
    otherwise and inside a module. `make test` hands whole modules to two worker processes in this order
    (``-n 2 --dist loadfile``), so the longest runs start first instead of last, when one worker would be left
    running them alone."""
    measured = json.loads(MODULE_SECONDS.read_text())
    root = MODULE_SECONDS.parents[1]
    position: dict[Path, int] = {}
    for item in items:
        position.setdefault(Path(item.path), len(position))

    def seconds(path: Path) -> float:
        return measured.get(path.relative_to(root).as_posix(), 0.0) if path.is_relative_to(root) else 0.0

    return sorted(items, key=lambda item: (-seconds(Path(item.path)), position[Path(item.path)]))


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
