"""Action projection: hand-worked cases and property tests on arbitrary text (it must never raise)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_system.environments.projection import parse_tagged_response


@pytest.mark.parametrize(
    "text, require_think, action, valid",
    [
        ("<think>box is left</think><action>left</action>", False, "left", True),
        ("<think>box is left</think><action>left</action>", True, "left", True),
        ("<action> up </action>", False, "up", True),
        ("<action>up</action>", True, "up", False),  # think required but missing
        ("<ACTION>down</ACTION>", False, "down", True),  # tags are case-insensitive
        ("<think>a</think><think>b</think><action>up</action>", True, "up", False),
        ("<think>unclosed <action>up</action>", False, "up", False),
        ("", False, "", False),
        ("move up", False, "", False),
        ("<action>up", False, "", False),  # unclosed
        ("<action></action>", False, "", False),
        ("<action>   </action>", False, "", False),
        ("<action><action>up</action></action>", False, "<action>up", False),  # nested
        ("<action>up</action><action>down</action>", False, "down", False),  # two blocks
        ("</action>up<action>", False, "", False),
        ("<action>go <b>north</b></action>", False, "go <b>north</b>", False),  # tags inside
        ("<action><></action>", False, "<>", False),  # an empty tag inside (found by hypothesis in CI)
        ("<action>a > b</action>", False, "a > b", True),  # a lone bracket is text
        ("<think>x</think>\n<action>go to cabinet 1</action>", True, "go to cabinet 1", True),
    ],
)
def test_hand_worked_cases(text, require_think, action, valid):
    parsed = parse_tagged_response(text, require_think=require_think)
    assert parsed.valid is valid
    assert parsed.action == action
    assert (parsed.reason is None) is valid


def test_none_and_non_string_input_is_invalid_not_an_error():
    assert parse_tagged_response(None).valid is False
    assert parse_tagged_response(12345).valid is False  # type: ignore[arg-type]


def test_very_long_inputs():
    long_action = "a" * 200_000
    parsed = parse_tagged_response(f"<think>{'t' * 100_000}</think><action>{long_action}</action>", require_think=True)
    assert parsed.valid and parsed.action == long_action
    assert not parse_tagged_response("<action>" * 50_000).valid


_pieces = st.sampled_from(["<action>", "</action>", "<think>", "</think>", "< action >", "</ACTION>", "up", " ", "\n", "ü", "🙂", "<", ">", "/"])


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), st.lists(_pieces, max_size=40).map("".join)), st.booleans())
def test_never_raises_and_valid_means_one_clean_block(text, require_think):
    parsed = parse_tagged_response(text, require_think=require_think)
    assert isinstance(parsed.action, str)
    if parsed.valid:
        lowered = text.lower().replace(" ", "")
        assert lowered.count("<action>") == 1 and lowered.count("</action>") == 1
        assert parsed.action and parsed.action == parsed.action.strip()
        assert "<" not in parsed.action or ">" not in parsed.action
        if require_think:
            assert lowered.count("<think>") == 1 and lowered.count("</think>") == 1


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="<>"), min_size=1, max_size=100).filter(lambda s: s.strip()), st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=100))
def test_round_trip_of_well_formed_answers(action, think):
    parsed = parse_tagged_response(f"<think>{think}</think><action>{action}</action>", require_think=True)
    assert parsed.valid
    assert parsed.action == action.strip()
    assert parsed.think == think.strip()
