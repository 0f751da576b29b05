"""The prompt-only engine sends image observations (visual Sokoban) to its endpoint as OpenAI ``image_url`` content
parts with PNG data URLs, and text observations as plain string content, as before. Against the stub endpoint
of agent_system/testing/chat_stub.py (real HTTP on 127.0.0.1), which keeps each request's JSON body."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from agent_system.environments import make_envs
from agent_system.environments.env_package.sokoban.env import SokobanEnv
from agent_system.multi_turn_rollout.injection import experience_messages
from agent_system.multi_turn_rollout.protocols import SamplingParams
from agent_system.testing.chat_stub import ChatStub
from agent_system.testing.threaded_server import ThreadedServer
from recipe.forge.engines.api.generator import OpenAIGenerator
from recipe.forge.engines.api.retry import EndpointError
from recipe.forge.engines.api.runner import PromptOnlyRunner
from recipe.forge.engines.api.settings import ApiSettings
from recipe.forge.main_forge import validate

pytestmark = pytest.mark.timeout(300)
SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=8, stop=("</action>",))
PNG_URL = "data:image/png;base64,"


def decode(part: dict) -> np.ndarray:
    """The pixels of an ``image_url`` part's PNG data URL, decoded by PIL."""
    assert part["type"] == "image_url" and part["image_url"]["url"].startswith(PNG_URL)
    image = Image.open(io.BytesIO(base64.b64decode(part["image_url"]["url"][len(PNG_URL):])))
    assert image.format == "PNG"
    return np.asarray(image)


def send(messages: list[dict]) -> list[dict]:
    """The request bodies the generator sends for ``messages``."""
    stub = ChatStub.sequence([])
    with ThreadedServer(stub, log_level="critical") as server:
        generator = OpenAIGenerator(ApiSettings(base_url=f"{server.base_url}/v1", model="stub"))
        assert [o.text for o in generator.generate([messages], SAMPLING)] == ["<action>+</action>"]
    return stub.bodies


@pytest.mark.parametrize("as_pil", [False, True], ids=["array", "pil"])
def test_an_image_observation_arrives_as_a_png_with_the_observations_pixels(as_pil):
    _, info = SokobanEnv(mode="rgb_array").reset(seed=3)
    pixels = info["image"]
    assert pixels.shape == (96, 96, 3) and len(np.unique(pixels.reshape(-1, 3), axis=0)) > 2  # a drawn room
    image = Image.fromarray(pixels) if as_pil else pixels  # verl's form / the embedded and prompt-only engines'
    [body] = send(experience_messages("Push boxes onto targets.", "Your move?", "system", image=image))
    system, user = body["messages"]
    assert system == {"role": "system", "content": "Push boxes onto targets."}
    assert user["role"] == "user" and [part["type"] for part in user["content"]] == ["image_url", "text"]
    assert user["content"][1] == {"type": "text", "text": "Your move?"}
    assert np.array_equal(decode(user["content"][0]), pixels)


def test_a_text_observation_is_sent_as_plain_string_content():
    [body] = send(experience_messages("Push boxes onto targets.", "Your move?", "user_prefix"))
    assert body["messages"] == [{"role": "user", "content": "Push boxes onto targets.\n\nYour move?"}]


@pytest.mark.parametrize("image", [np.zeros((4, 4, 3), dtype=np.float64), np.zeros((4, 4), dtype=np.uint8), "a.png"],
                         ids=["float", "gray", "path"])
def test_an_image_that_is_no_rgb_picture_is_refused_before_anything_is_sent(image):
    stub = ChatStub.sequence([])
    with ThreadedServer(stub, log_level="critical") as server:
        generator = OpenAIGenerator(ApiSettings(base_url=f"{server.base_url}/v1", model="stub"))
        with pytest.raises(ValueError, match="an image observation is .*not an HxWx3 uint8 array"):
            generator.generate([experience_messages("", "Your move?", image=image)], SAMPLING)
    assert stub.bodies == [] and generator.malformed == 0


@pytest.mark.parametrize("mode", ["rgb_array", "text"])
def test_prompt_only_sokoban_sends_each_observation_as_the_environment_shows_it(tmp_path, compose_cfg, run_overrides,
                                                                               mode):
    """The first round of requests of an iteration holds the observations a fresh reset of the same training
    environments gives: in image mode the picture and the prompt, in text mode the prompt as a string."""
    stub = ChatStub.sequence([])
    with ThreadedServer(stub, log_level="critical") as server:
        run = validate(compose_cfg(run_overrides(tmp_path, iterations=1) + [
            "trainer.engine=api", f"trainer.api.base_url={server.base_url}/v1", "trainer.api.model=stub",
            "env.env_name=sokoban", f"env.sokoban.mode={mode}", "env.max_steps=2"]))
        fresh = make_envs(run)[0]
        observations, _ = fresh.reset()
        fresh.close()
        with pytest.raises(EndpointError, match="held a valid action"):  # the stub's "+" is no Sokoban move
            PromptOnlyRunner(run).fit()
    first = [body["messages"] for body in stub.bodies[:fresh.num_envs]]
    assert len(stub.bodies) >= fresh.num_envs == 4 and all(len(messages) == 1 for messages in first)
    contents = [messages[0]["content"] for messages in first]
    if mode == "text":
        assert all("image_url" not in str(body) for body in stub.bodies)
        assert sorted(contents) == sorted(observations.text)
        return
    assert all([part["type"] for part in content] == ["image_url", "text"] for content in contents)
    sent = sorted((content[1]["text"], decode(content[0]).tobytes()) for content in contents)
    assert sent == sorted((text, image.tobytes()) for text, image in zip(observations.text, observations.image))
    assert all(isinstance(body["messages"][-1]["content"], list) for body in stub.bodies)  # every step's picture
