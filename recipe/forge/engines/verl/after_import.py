"""Run a function once a module has been imported, without importing it: the plug-in registers what needs
verl's heavy modules (the FSDP engines, the agent loop, the trainer modes, the checkpoint engines) when the
process imports the module holding the registry, instead of importing them in every process that imports verl.

A verl run starts eight or more Ray processes; most never touch an engine or a trainer (the request balancer,
the transfer queue's controller and storage, the rollout servers, the driver), and importing those modules took
about 2.7 of the 7.8 s that ``import verl`` took in each of them on a CPU.

:func:`when_imported` runs ``action(module)`` at once where ``module_name`` is already imported, else right after
the module's own code has run (before the import statement that loads it returns, so no code of the importer
can reach the registry before ``action`` has run). An action that raises fails that import, with its error.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from types import ModuleType
from typing import Callable

Action = Callable[[ModuleType], None]


class _AfterImportFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: for a module with pending actions, the spec the other finders give, its
    loader's ``exec_module`` followed by the actions (each action runs once)."""

    def __init__(self) -> None:
        self.pending: dict[str, list[Action]] = {}
        self.lock = threading.Lock()

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.pending:
            return None
        spec = self._spec_from_the_other_finders(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_module = spec.loader.exec_module

        def run_then_act(module: ModuleType) -> None:
            run_module(module)
            with self.lock:
                actions = self.pending.pop(fullname, [])
            for action in actions:
                action(module)

        spec.loader.exec_module = run_then_act  # this loader instance loads this one module
        return spec

    def _spec_from_the_other_finders(self, fullname, path, target):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None


_FINDER = _AfterImportFinder()


def when_imported(module_name: str, action: Action) -> None:
    """Run ``action(module)`` once ``module_name`` is imported: now if it is, else right after it is."""
    module = sys.modules.get(module_name)
    if module is not None:
        action(module)
        return
    with _FINDER.lock:
        _FINDER.pending.setdefault(module_name, []).append(action)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
