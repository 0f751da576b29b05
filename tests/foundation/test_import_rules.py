"""The plan of the house, held by the imports (docs/architecture.md): engines are siblings over shared rooms,
commands stand side by side, ``agent_system`` never imports ``recipe``, and no import cycle.

The graph is read from the source (every ``import`` of a module, at the top or inside a function, but not those
under ``if TYPE_CHECKING:``, which never run); an import names the deepest module that exists, so
``from recipe.forge.runs import checkpoint`` is an edge to ``recipe.forge.runs.checkpoint``. A package's parents
are not edges: importing ``a.b`` runs ``a/__init__.py`` first, which is not an import cycle of ``a.b``.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("recipe", "agent_system")
ENGINES = "recipe.forge.engines"
COMMANDS = "recipe.forge.commands"
# the modules above the engines: the dispatcher runs any engine, the run config reads each engine's settings leaf
ABOVE_ENGINES = {"recipe.forge.main_forge", "recipe.forge.run_config"}


def module_files(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under ``packages`` (a package is its __init__.py)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST):
    """Import nodes that run: everything but the body of ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from _runtime_imports(ast.Module(body=[child], type_ignores=[]))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _runtime_imports(node)


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """Module -> the project modules it imports at run time."""
    files = module_files(root, packages)

    def owner(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        targets = set()
        for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    here = module.split(".") if is_package else module.split(".")[:-1]
                    here = here[:len(here) - (node.level - 1)]
                    base = ".".join(here + ([base] if base else []))
                names = [f"{base}.{alias.name}" for alias in node.names]
            for name in names:
                target = owner(name)
                if target is not None and target != module:
                    targets.add(target)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def room(module: str, package: str) -> str | None:
    """The engine (or command) a module belongs to: the first name below ``package``."""
    if not module.startswith(package + "."):
        return None
    return module[len(package) + 1:].split(".")[0]


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import against the plan, one line each."""
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            edge = f"{module} imports {target}"
            if module.startswith("agent_system") and target.startswith("recipe"):
                found.append(f"{edge}: agent_system never imports recipe")
            for package, kind in ((ENGINES, "engine"), (COMMANDS, "command")):
                mine, theirs = room(module, package), room(target, package)
                if mine and theirs and mine != theirs:
                    found.append(f"{edge}: one {kind} imports another")
            if room(target, ENGINES) and not room(module, ENGINES) and module not in ABOVE_ENGINES \
                    and not room(module, COMMANDS):
                found.append(f"{edge}: a shared room imports an engine")
            if room(target, COMMANDS) and target != COMMANDS and not room(module, COMMANDS):
                found.append(f"{edge}: a command is imported from outside the commands")
            if module == "recipe.forge.run_config" and room(target, ENGINES) and not target.endswith(".settings"):
                found.append(f"{edge}: the run config reads only each engine's settings leaf")
    return found


@pytest.fixture(scope="module")
def project_graph():
    return import_graph(REPO)


def test_the_project_keeps_the_plan(project_graph):
    assert violations(project_graph) == []


def test_the_project_has_no_import_cycle(project_graph):
    assert cycles(project_graph) == []


def test_no_engine_module_imports_the_embedded_engine_from_another_engine(project_graph):
    """The issue's check: nothing under engines/verl or engines/api imports engines/local."""
    offenders = [(m, t) for m, targets in project_graph.items() if room(m, ENGINES) in ("verl", "api")
                 for t in targets if room(t, ENGINES) == "local"]
    assert offenders == []


def test_the_graph_sees_every_kind_of_import(project_graph):
    """Known edges of the project, one per kind of import statement: a top-level ``from``, a function-level
    import, a ``from package import module`` and a package's own import of its submodule."""
    assert "recipe.forge.runs.durable" in project_graph["recipe.forge.runs.checkpoint"]
    assert "recipe.forge.engines.local.trainer" in project_graph["recipe.forge.main_forge"]
    assert "recipe.forge.commands.export.cli" in project_graph["recipe.forge.commands.export"]
    assert "agent_system.memory.simple" in project_graph["agent_system.memory"]


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_checks_find_what_breaks_the_plan(tmp_path):
    """A made-up tree with one fault of each kind; the checks name each one and nothing else."""
    _write(tmp_path, {
        "recipe/__init__.py": "",
        "recipe/forge/__init__.py": "",
        "recipe/forge/run_config.py": "from recipe.forge.engines.verl import main\n",
        "recipe/forge/runs/__init__.py": "",
        "recipe/forge/runs/checkpoint.py": "def save():\n    from recipe.forge.engines.local import trainer\n",
        "recipe/forge/engines/__init__.py": "",
        "recipe/forge/engines/local/__init__.py": "",
        "recipe/forge/engines/local/trainer.py": "from recipe.forge.runs import checkpoint\n",
        "recipe/forge/engines/local/settings.py": "",
        "recipe/forge/engines/verl/__init__.py": "",
        "recipe/forge/engines/verl/main.py": """
            from typing import TYPE_CHECKING
            from recipe.forge.engines.local.settings import LocalSettings
            if TYPE_CHECKING:
                from recipe.forge.run_config import RunConfig
            """,
        "recipe/forge/commands/__init__.py": "",
        "recipe/forge/commands/eval/__init__.py": "",
        "recipe/forge/commands/eval/evaluate.py": "from ..export import cli\n",
        "recipe/forge/commands/export/__init__.py": "from recipe.forge.commands.export.cli import main\n",
        "recipe/forge/commands/export/cli.py": "main = None\n",
        "agent_system/__init__.py": "",
        "agent_system/testing.py": "import recipe.forge.runs.checkpoint\n",
    })
    graph = import_graph(tmp_path)
    assert "recipe.forge.run_config" not in graph["recipe.forge.engines.verl.main"]  # under TYPE_CHECKING
    assert sorted(violations(graph)) == sorted([
        "agent_system.testing imports recipe.forge.runs.checkpoint: agent_system never imports recipe",
        "recipe.forge.commands.eval.evaluate imports recipe.forge.commands.export.cli: one command imports another",
        "recipe.forge.engines.verl.main imports recipe.forge.engines.local.settings: one engine imports another",
        "recipe.forge.run_config imports recipe.forge.engines.verl.main: the run config reads only each engine's "
        "settings leaf",
        "recipe.forge.runs.checkpoint imports recipe.forge.engines.local.trainer: a shared room imports an engine",
    ])
    assert cycles(graph) == [["recipe.forge.engines.local.trainer", "recipe.forge.runs.checkpoint"]]
