"""Start-up check of the policy against the observations: an environment that shows images
(``env.sokoban.mode`` / ``env.gym_cards.mode`` = ``rgb_array``) with a text-only model stops the run before
anything loads, naming both keys, on the embedded and the verl engine. A vision-language model is accepted with
either kind of observation; the prompt-only engine's endpoint model is not judged (it cannot be inspected here)."""

from __future__ import annotations

import pytest

from agent_system.config_checks import ConfigError
from recipe.forge.main_forge import validate

MODEL = "actor_rollout_ref.model.path"
IMAGE_ENVS = {"env.sokoban.mode": ["env.env_name=sokoban", "env.sokoban.mode=rgb_array"],
              "env.gym_cards.mode": ["env.gym_cards.mode=rgb_array"]}  # the base run is NumberLine
TEXT_ENV = ["env.env_name=sokoban", "env.sokoban.mode=text"]


@pytest.fixture(scope="module")
def text_model_dir(tmp_path_factory):
    """A tiny random Llama with SmolLM2's tokenizer (recipe/forge/hf/tiny.py): a text-only model."""
    from recipe.forge.hf.tiny import save_tiny_model_dir

    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny_llama"), taught=False)


@pytest.fixture
def start(tmp_path, compose_cfg, run_overrides):
    """``start(engine, model_path, env_overrides)``: the start-up checks of that run (main_forge.validate)."""

    def factory(engine: str, model_path: str, env: list[str]):
        return validate(compose_cfg(run_overrides(tmp_path) + [f"trainer.engine={engine}", f"{MODEL}={model_path}",
                                                                *env]))

    return factory


@pytest.mark.parametrize("engine", ["local", "verl"])
@pytest.mark.parametrize("image_key", sorted(IMAGE_ENVS))
def test_an_image_environment_with_a_text_only_model_stops_at_start_up_naming_both_keys(start, text_model_dir, engine,
                                                                                        image_key):
    for model in (text_model_dir, "smollm2-135m-instruct"):
        with pytest.raises(ConfigError) as error:
            start(engine, model, IMAGE_ENVS[image_key])
        message = str(error.value)
        assert f"{image_key}=rgb_array gives image observations" in message
        assert f"{MODEL}={model!r} is a text-only model" in message and f"or {image_key}=text" in message


@pytest.mark.parametrize("engine", ["local", "verl"])
def test_a_vision_language_model_starts_with_image_and_with_text_observations(start, tiny_vlm_dir, engine):
    for env in (IMAGE_ENVS["env.sokoban.mode"], IMAGE_ENVS["env.gym_cards.mode"], TEXT_ENV):
        run = start(engine, str(tiny_vlm_dir), env)
        assert run.engine == engine and run.env.env_name in ("sokoban", "gym_cards/NumberLine-v0")


def test_a_text_only_model_starts_with_text_observations(start, text_model_dir):
    assert start("local", text_model_dir, TEXT_ENV).env.sokoban.mode == "text"


def test_a_model_that_cannot_be_inspected_offline_is_left_to_the_run(start):
    # the verl engine takes a hub id outside the local cache (its workers fetch it); the prompt-only engine's
    # model is the endpoint's
    assert start("verl", "Qwen/Qwen2.5-VL-3B-Instruct", IMAGE_ENVS["env.sokoban.mode"]).engine == "verl"
    assert start("api", "smollm2-135m-instruct", IMAGE_ENVS["env.sokoban.mode"]).engine == "api"
