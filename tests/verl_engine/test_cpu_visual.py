"""The visual path on the distributed engine's CPU backend, end to end: ``examples/forge/run_sokoban.sh`` as a
user runs it on a machine without a GPU (``N_GPUS=1 MODEL=<folder> ... trainer.device=cpu`` and small sizes),
with the tiny random Qwen2.5-VL (tiny_vlm.py), visual Sokoban (the room as an image), forge for 2 iterations with
the library's gates open from the first (warm-up 0, minimum size 0), so that iteration 2 injects experiences; and
``examples/forge/run_gym_cards_vl.sh`` the same way with the tiny Qwen3-VL.

Through verl's own trainer, FSDP2 actor and reference workers, agent-loop worker and the hf rollout server: the
rows carry their images into the actor (``forge/rows_with_images``: verl's multi_modal_inputs), the rollout
server's log-probs agree with the actor's old log-probs on the same images, and the update has a gradient.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
STEPS = 2  # env.max_steps
TASKS, G = 2, 2


def cpu_overrides(out: Path) -> list[str]:
    """What a CPU run of a visual example needs besides ``trainer.device=cpu``: 2 tasks x 2 copies, 2 steps, short
    responses, a micro-batch that divides the rows, one agent-loop worker, local logging."""
    rows = TASKS * G * STEPS
    return [
        "trainer.device=cpu", "trainer.logger=[console,jsonl]", f"trainer.default_local_dir={out}/run",
        f"algorithm.forge.checkpoint_dir={out}/library", f"env.max_steps={STEPS}", f"env.rollout.n={G}",
        "env.history_length=0", f"data.train_batch_size={TASKS}", f"data.val_batch_size={TASKS}",
        "data.max_prompt_length=1024", "actor_rollout_ref.rollout.prompt_length=1024",
        "data.max_response_length=16", "actor_rollout_ref.rollout.response_length=16",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={TASKS}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={rows // 2}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={rows // 2}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={rows // 2}",
        "actor_rollout_ref.rollout.agent.num_workers=1", "reward.num_workers=1",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1", "trainer.total_training_steps=2",
        "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.val_before_train=false",
        "algorithm.forge.warmup_iterations=0", "algorithm.forge.min_library_size=0",
        "actor_rollout_ref.actor.optim.lr=1e-3",
    ]


def run_example(script: str, model: Path, out: Path, *extra: str, env: dict | None = None) -> list[dict]:
    """``N_GPUS=1 MODEL=<model> [env] bash <script> <cpu overrides> <extra>``; returns the run's metrics.jsonl
    rows."""
    from recipe.forge.runs.tracking import read_metrics

    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # the script's python3 is ours
    environment = {**os.environ, "N_GPUS": "1", "MODEL": str(model), "TOKENIZERS_PARALLELISM": "false", "PATH": path,
                   **(env or {})}
    log = out / "train.log"
    with open(log, "w") as handle:
        result = subprocess.run(["bash", script, *cpu_overrides(out), *extra], cwd=REPO, env=environment,
                                stdout=handle, stderr=subprocess.STDOUT)
    assert result.returncode == 0, log.read_text(errors="replace")[-4000:]
    return read_metrics(out / "run" / "metrics.jsonl")


def image_tokens(model: Path, height: int, width: int) -> int:
    """The image tokens the model's own image processor makes of one ``height`` x ``width`` picture (its
    resizing rules: the tiny model's processor holds at most 56 x 56 pixels)."""
    import numpy as np

    from recipe.forge.hf.vision_processor import load_processor

    processor = load_processor(str(model))
    grid = processor.image_processor(images=[np.zeros((height, width, 3), np.uint8)], return_tensors="pt")["image_grid_thw"]
    return int(grid.prod(dim=-1).sum()) // processor.image_processor.merge_size ** 2


def test_visual_sokoban_trains_two_forge_iterations_with_the_library_on_verls_cpu_backend(tiny_vlm_dir, tmp_path):
    from agent_system.environments.env_package.sokoban.render import TILE

    history = run_example("examples/forge/run_sokoban.sh", tiny_vlm_dir, tmp_path)
    assert [int(h["iteration"]) for h in history] == [1, 2]
    # the 6 x 6 room is drawn 96 x 96 pixels, larger than the tiny processor takes: it is resized by the processor's
    # own rules, not refused
    per_row = image_tokens(tiny_vlm_dir, 6 * TILE, 6 * TILE)
    assert per_row > 0
    for h in history:
        rows = h["num_steps"]  # one row per step: 2 tasks x 2 copies, at most 2 steps each
        assert TASKS * G <= rows <= TASKS * G * STEPS
        # every row reached the actor with its image, as many image tokens as the processor makes of the room
        assert h["forge/rows_with_images"] == rows and h["forge/image_tokens"] == rows * per_row
        assert h["actor/grad_norm"] > 0
        assert h["forge/rollout_actor_logprob_diff_max"] < 0.01  # the server saw the images the actor sees
    assert history[1]["forge/injecting"] == 1 and history[1]["forge/experiences_per_step"] > 0  # the library, injected


def test_gym_cards_with_a_qwen3_vl_policy_trains_two_forge_iterations_with_the_library(tmp_path):
    """``examples/forge/run_gym_cards_vl.sh``, whose default policy is a Qwen3-VL, with the tiny Qwen3-VL on
    NumberLine (its states recur across tasks, so iteration 2 finds lessons of iteration 1's states; EZPoints deals
    new cards to every task): the cards' 300 x 300 picture is resized by the processor's own rules."""
    from recipe.forge.hf.tiny_vlm import save_tiny_vlm_dir

    model = Path(save_tiny_vlm_dir(tmp_path / "tiny_qwen3_vl", family="qwen3_vl"))
    history = run_example("examples/forge/run_gym_cards_vl.sh", model, tmp_path, env={"ENV_NAME": "gym_cards/NumberLine-v0"})
    assert [int(h["iteration"]) for h in history] == [1, 2]
    per_row = image_tokens(model, 300, 300)
    for h in history:
        rows = h["num_steps"]
        assert h["forge/rows_with_images"] == rows and h["forge/image_tokens"] == rows * per_row > 0
        assert h["actor/grad_norm"] > 0 and h["forge/rollout_actor_logprob_diff_max"] < 0.01
    assert history[1]["forge/injecting"] == 1 and history[1]["forge/experiences_per_step"] > 0


def test_the_environments_page_shows_the_command_this_test_runs():
    """docs/environments.md's CPU command for the visual example is this test's: the same script and overrides."""
    import shlex

    doc = (REPO / "docs" / "environments.md").read_text()
    [line] = [ln for ln in doc.splitlines() if ln.startswith("N_GPUS=1 MODEL=") and "run_sokoban.sh" in ln]
    words = shlex.split(line)
    script = words.index("examples/forge/run_sokoban.sh")
    assert words[:script] == ["N_GPUS=1", "MODEL=models/tiny-qwen2.5-vl", "bash"]
    out = Path(words[script + 1:][2].split("=", 1)[1]).parent  # trainer.default_local_dir=<out>/run
    assert words[script + 1:] == cpu_overrides(out)
