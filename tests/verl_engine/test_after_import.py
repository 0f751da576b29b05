"""after_import.when_imported: an action runs right after its module's own code, once, or at once where the module
is already imported; an action that fails fails that import."""

from __future__ import annotations

import importlib
import sys

import pytest

from recipe.forge.engines.verl.after_import import when_imported


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A fresh importable package ``hooked_pkg`` with a submodule ``registry`` that records what imported it."""
    root = tmp_path / "hooked_pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "registry.py").write_text("ENTRIES = ['own code']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "hooked_pkg.registry"
    for name in [name for name in sys.modules if name.startswith("hooked_pkg")]:
        del sys.modules[name]


def test_an_action_runs_after_the_modules_code_before_the_import_returns_and_only_once(package):
    when_imported(package, lambda module: module.ENTRIES.append("action"))
    assert package not in sys.modules  # registering imports nothing
    module = importlib.import_module(package)
    assert module.ENTRIES == ["own code", "action"]
    importlib.reload(module)  # a second load of the module's code runs no pending action
    assert module.ENTRIES == ["own code"]


def test_an_action_for_an_imported_module_runs_at_once(package):
    module = importlib.import_module(package)
    when_imported(package, lambda imported: imported.ENTRIES.append("at once"))
    assert module.ENTRIES == ["own code", "at once"]


def test_a_failing_action_fails_the_import_with_its_error(package):
    def refuse(module):
        raise RuntimeError("registration refused")

    when_imported(package, refuse)
    with pytest.raises(RuntimeError, match="registration refused"):
        importlib.import_module(package)


@pytest.mark.parametrize("first", ["hooked_pkg.registry", "hooked_pkg.extension"])
def test_an_extension_registering_on_import_registers_once_whichever_module_is_imported_first(package, tmp_path,
                                                                                                 first):
    """The plug-in's pattern: the action imports an extension module that registers itself on import. Where the
    process imports the extension first, the extension's own import of the registry runs the action, which finds
    the extension half-imported; the extension registers when its code finishes (before the fix, a register()
    called from the action failed there)."""
    (tmp_path / "hooked_pkg" / "extension.py").write_text(
        "import hooked_pkg.registry as registry\nregistry.ENTRIES.append('extension')\n")
    when_imported(package, lambda _: importlib.import_module("hooked_pkg.extension"))
    importlib.import_module(first)
    assert sys.modules[package].ENTRIES == ["own code", "extension"]
