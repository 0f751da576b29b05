"""One typed config in every Ray process of the verl engine (issue 38 item 2): the agent loop, the step hooks and
the library driver read the RunConfig built once per process from the config verl hands it, never a raw key."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TYPED_READERS = ("recipe/forge/engines/verl/agent_loop.py", "recipe/forge/engines/verl/forge_steps.py",
                 "recipe/forge/engines/verl/library_driver.py")
RAW_CONFIG = {"config", "cfg"}  # what these modules call verl's config object


def raw_reads(path: Path) -> list[str]:
    """Reads of a key of verl's config in ``path``: ``config.<key>`` / ``self.config.<key>`` / ``cfg[...]`` and
    any OmegaConf call (the config may still be handed on whole, to process_run_config)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        target = node.value if isinstance(node, (ast.Attribute, ast.Subscript)) else None
        names_config = (isinstance(target, ast.Name) and target.id in RAW_CONFIG) or (
            isinstance(target, ast.Attribute) and target.attr in RAW_CONFIG)
        if names_config:
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "OmegaConf":
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("module", TYPED_READERS)
def test_no_raw_config_key_is_read_below_the_entry_point(module):
    assert raw_reads(ROOT / module) == []


def test_the_reader_finds_a_raw_read(tmp_path):
    """The check above can fail: each way of reading a raw key is found, handing the config on whole is not."""
    path = tmp_path / "sample.py"
    path.write_text("def f(self, config, cfg):\n    a = config.algorithm\n    b = self.config.env\n"
                    "    c = cfg['trainer']\n    d = OmegaConf.select(config, 'x')\n"
                    "    return process_run_config(self.config)\n")
    assert len(raw_reads(path)) == 4


def test_the_run_config_is_typed_once_per_config_object(run_config_factory, monkeypatch):
    from recipe.forge.engines.verl import process_config

    calls = []
    real = process_config.load_run_config
    monkeypatch.setattr(process_config, "load_run_config", lambda cfg: calls.append(cfg) or real(cfg))
    cfg = run_config_factory(["trainer.engine=verl", "algorithm.adv_estimator=gigpo"])
    first = process_config.process_run_config(cfg)
    assert process_config.process_run_config(cfg) is first and len(calls) == 1  # every reader: the same object
    assert first.algorithm.adv_estimator == "gigpo" and first.verl.mode == "sync"
    other = run_config_factory(["trainer.engine=verl", "trainer.v1.trainer_mode=colocate_async"])
    assert process_config.process_run_config(other).verl.mode == "colocate_async" and len(calls) == 2
