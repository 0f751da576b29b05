"""The batched HF generator: log-probs equal a fresh forward pass, left padding changes nothing, stop strings."""

import pytest
import torch

from agent_system.multi_turn_rollout.protocols import SamplingParams
from recipe.forge.hf.generation import HFGenerator
from recipe.forge.hf.sequences import pack, response_logits, token_logprobs

pytestmark = pytest.mark.timeout(300)


def conversations(texts):
    return [[{"role": "user", "content": t}] for t in texts]


def test_sampled_logprobs_match_recomputed_forward(tokenizer, make_tiny):
    model = make_tiny(taught=False)
    gen = HFGenerator(model, tokenizer, batch_size=8, generator=torch.Generator().manual_seed(1))
    # Prompts of different lengths, so rows are left-padded differently.
    texts = ["hi", "Target: 3\nCurrent: 0", "a much longer prompt " * 5, "x"]
    outs = gen.generate(conversations(texts), SamplingParams(temperature=0.7, max_new_tokens=12, stop=()))
    packed = pack([o.prompt_ids for o in outs], [o.response_ids for o in outs], tokenizer.pad_token_id)
    with torch.no_grad():
        recomputed = token_logprobs(response_logits(model, packed), packed.responses, temperature=0.7)
    for row, out in enumerate(outs):
        assert len(out.response_ids) == len(out.logprobs) > 0
        assert torch.allclose(recomputed[row, :len(out.logprobs)], torch.tensor(out.logprobs), atol=1e-4)


def test_greedy_output_does_not_depend_on_batch_neighbours(tokenizer, make_tiny):
    model = make_tiny(taught=False)
    gen = HFGenerator(model, tokenizer, batch_size=8)
    greedy = SamplingParams(temperature=0.0, do_sample=False, max_new_tokens=8, stop=())
    alone = gen.generate(conversations(["Target: 2\nCurrent: 1"]), greedy)[0]
    batched = gen.generate(conversations(["long " * 30, "Target: 2\nCurrent: 1", "z"]), greedy)[1]
    assert alone.response_ids == batched.response_ids
    assert alone.prompt_ids == batched.prompt_ids


def test_generation_stops_right_after_the_stop_string_or_eos(tokenizer, make_tiny):
    model = make_tiny(taught=True)
    gen = HFGenerator(model, tokenizer, batch_size=16, generator=torch.Generator().manual_seed(0))
    outs = gen.generate(conversations(["Target: 3\nCurrent: 0"] * 16), SamplingParams(temperature=1.0, max_new_tokens=20))
    closed = [o for o in outs if "</action>" in o.text]
    assert 0 < len(closed) < len(outs)
    for out in closed:
        # "<action>±</action>" is 7 tokens: decoding ends at the closing tag, not at the 20-token budget.
        assert out.text.endswith("</action>"), out.text
        assert len(out.response_ids) == 7
    for out in outs:
        if out not in closed:
            assert out.response_ids[-1] == tokenizer.eos_token_id


def test_response_prefix_is_part_of_prompt_and_text(tokenizer, make_tiny):
    model = make_tiny(taught=False)
    gen = HFGenerator(model, tokenizer, response_prefix="<action>")
    out = gen.generate(conversations(["hello"]), SamplingParams(temperature=0.0, do_sample=False, max_new_tokens=3,
                                                                 stop=()))[0]
    assert out.text.startswith("<action>")
    assert tokenizer.decode(out.prompt_ids).endswith("<action>")
    assert len(out.response_ids) == 3
