"""Malformed image observations (issue 35 item 8) and oversized ones (item 11): every engine takes its images from
the environment managers, which end such an episode as failed, naming the problem, before any processor, model or
endpoint sees the image; the rest of the batch carries on. The prompt-only engine's request encoder holds the
same bound (before the fix a 16,000 x 16,000 frame made a 256 MB request)."""

from __future__ import annotations

import numpy as np
import pytest

from agent_system.environments.images import MAX_IMAGE_PIXELS, image_problem
from agent_system.testing.configs import env_config
from agent_system.testing.faulty_env import IMAGES, FaultyEnvironmentManager
from recipe.forge.engines.api.chat_content import png_data_url

MALFORMED = sorted(set(IMAGES) - {"good"})


def test_a_malformed_image_ends_only_its_own_episode_naming_the_problem():
    kinds = ["good", *MALFORMED]
    cfg = env_config(n=len(kinds), resources_per_worker={"num_workers": 1, "step_timeout_s": 30.0})
    manager = FaultyEnvironmentManager(cfg, num_tasks=1, split="train", env_name="testing/faulty")
    try:
        manager.reset([2])
        obs, _, dones, infos = manager.step([f"<action>image:{kind}</action>" for kind in kinds])
        assert obs.image[0].shape == (8, 8, 3) and not dones[0] and infos[0].get("failure_reason") is None
        for i, kind in enumerate(kinds[1:], 1):
            assert dones[i] and obs.image[i] is None, kind
            assert infos[i]["failure_reason"].startswith("the environment's image observation "), kind
            assert "\n" not in infos[i]["failure_reason"]
        assert manager.failure_reason[1:] == [info["failure_reason"] for info in infos[1:]]
        obs, _, dones, _ = manager.step(["<action>image:good</action>"] + [None] * len(MALFORMED))
        assert not dones[0] and obs.image[0] is not None  # the good episode carries on
    finally:
        manager.close()


@pytest.mark.parametrize("kind", MALFORMED)
def test_the_request_encoder_refuses_what_the_managers_refuse(kind):
    with pytest.raises(ValueError, match="an image observation ") as refused:
        png_data_url(IMAGES[kind]())
    assert str(refused.value) == f"an image observation {image_problem(IMAGES[kind]())}"


def test_the_largest_image_taken_makes_a_request_under_20_mb():
    side = int(MAX_IMAGE_PIXELS ** 0.5)
    noise = np.random.default_rng(0).integers(0, 256, (side, side, 3), dtype=np.uint8)  # PNG cannot shrink it
    assert len(png_data_url(noise)) < 20_000_000
