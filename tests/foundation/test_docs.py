"""docs/configuration.md lists every key SLEA-RL adds, with the default the shipped config really has."""

import json
import re
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
OWN_SECTIONS = ("env", "algorithm.forge", "algorithm.gigpo", "trainer.local", "trainer.api")
OWN_KEYS = (
    "trainer.engine", "trainer.project_name", "trainer.experiment_name", "trainer.logger", "trainer.resume_mode",
    "data.train_batch_size", "data.val_batch_size", "algorithm.adv_estimator", "algorithm.gamma",
    "algorithm.use_kl_in_reward", "algorithm.invalid_action_penalty_coef", "trainer.total_training_steps",
    "trainer.test_freq", "trainer.save_freq", "actor_rollout_ref.model.path",
    "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.use_kl_loss", "actor_rollout_ref.actor.kl_loss_coef",
    "actor_rollout_ref.actor.kl_loss_type", "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.rollout.val_kwargs.temperature",
)


def _flatten(node, prefix):
    for key, value in node.items():
        if key == "_target_":
            continue
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}.{key}")
        else:
            yield f"{prefix}.{key}", value


def _render(value):
    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value)


def _documented():
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]*)` \|", (ROOT / "docs/configuration.md").read_text(), re.M)
    return dict(rows)


def test_every_own_key_is_documented_with_its_default():
    with initialize_config_dir(config_dir=str(ROOT / "recipe/forge/config"), version_base=None):
        cfg = OmegaConf.to_container(compose("forge_trainer"), resolve=False)
    expected = {}
    for section in OWN_SECTIONS:
        node = cfg
        for part in section.split("."):
            node = node[part]
        expected.update(_flatten(node, section))
    for key in OWN_KEYS:
        node = cfg
        for part in key.split("."):
            node = node[part]
        expected[key] = node
    documented = _documented()
    missing = sorted(set(expected) - set(documented))
    assert not missing, f"keys missing from docs/configuration.md: {missing}"
    wrong = {k: (documented[k], _render(v)) for k, v in expected.items() if documented[k] != _render(v)}
    assert not wrong, f"documented default differs from the config (doc, config): {wrong}"


def test_no_documented_key_is_stale():
    with initialize_config_dir(config_dir=str(ROOT / "recipe/forge/config"), version_base=None):
        cfg = compose("forge_trainer")
    stale = [key for key in _documented() if OmegaConf.select(cfg, key, default="__missing__") == "__missing__"]
    assert not stale, f"docs/configuration.md documents keys the config does not have: {stale}"


def test_no_file_cites_a_document_outside_the_repository():
    import subprocess

    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    texts = {name: (ROOT / name).read_bytes() for name in listed
             if (ROOT / name).is_file() and name != "tests/foundation/test_docs.py"}
    citing = {name for name, data in texts.items() if b"\0" not in data  # text files only
              and re.search(r"REFERENCE\.md|ARCHITECTURE\.md|\.\./shared|§", data.decode("utf-8", "replace"))}
    assert not citing, f"files citing documents a reader does not have: {sorted(citing)}"
