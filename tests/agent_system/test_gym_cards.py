"""Gym Cards: RL4VLM rules and rewards on hand-worked games, the formula evaluator against Python
arithmetic on random expression trees, the 24 solver, Blackjack hand values and dealer play."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_system.environments.env_package.gym_cards.blackjack import BlackjackEnv, hand_value
from agent_system.environments.env_package.gym_cards.cards import Card
from agent_system.environments.env_package.gym_cards.formula import FormulaError, evaluate, solve
from agent_system.environments.env_package.gym_cards.number_line import NumberLineEnv
from agent_system.environments.env_package.gym_cards.points import EZPointsEnv, Points24Env


# ----- NumberLine -----
def test_number_line_rewards():
    env = NumberLineEnv(max_position=5)
    env.reset(0)
    env.position, env.target = 1, 3
    assert env.step("+")[1:4] == (0.0, False, False)  # closer: 0
    assert env.step("-")[1:4] == (-1.0, False, False)  # farther: -1
    env.position = 0
    assert env.step("-")[1:4] == (-1.0, False, False)  # blocked at 0: not closer
    assert env.step("jump")[1] == -1.0  # unknown action: no move, not closer
    env.position = 2
    obs, r, term, trunc, info = env.step("+")
    assert (r, term, info["won"]) == (1.0, True, True) and obs == "Target: 3\nCurrent: 3"


def test_number_line_truncates_after_twice_max_position_steps_and_starts_off_target():
    env = NumberLineEnv(max_position=5)
    for seed in range(50):
        env.reset(seed)
        assert env.position != env.target and 0 <= env.position <= 5 and 0 <= env.target <= 5
    env.reset(1)
    truncs = [env.step("noop")[3] for _ in range(10)]
    assert truncs == [False] * 9 + [True]


# ----- EZPoints / Points24 -----
def fixed(env, ranks):
    env.reset(0)
    env.cards = [Card(r, "H") for r in ranks]
    env.numbers = [c.value for c in env.cards]
    env.formula, env._plan = [], None
    return env


def test_ezpoints_win_and_rewards():
    env = fixed(EZPointsEnv(), [3, 4])
    for tok in ["3", "*", "4"]:
        assert env.step(tok)[1:3] == (0.0, False)
    obs, r, term, trunc, info = env.step("=")
    assert (r, term, info["won"]) == (10.0, True, True)


def test_ezpoints_invalid_card_costs_one_and_grows_the_formula():
    env = fixed(EZPointsEnv(), [3, 4])
    assert env.step("5")[1:3] == (-1.0, False)  # not a card
    env.step("3")
    assert env.step("3")[1] == -1.0  # the only 3 is used up
    assert env.formula == [" ", "3", " "]
    assert env.step("-")[1] == -1.0  # '-' is not an EZPoints operator


def test_ezpoints_wrong_value_or_unused_card_loses():
    env = fixed(EZPointsEnv(), [3, 4])
    for tok in ["3", "+", "4"]:
        env.step(tok)
    assert env.step("=")[1:3] == (-1.0, True)  # 7 != 12
    env = fixed(EZPointsEnv(), [12, 2])  # Q counts 10: 10 + 2 = 12
    for tok in ["10", "+", "2"]:
        env.step(tok)
    assert env.step("=")[1] == 10.0
    env = fixed(EZPointsEnv(), [12, 2])
    env.step("10")
    assert env.step("=")[1] == -1.0  # 2 unused


def test_ezpoints_truncates_when_the_formula_is_longer_than_five():
    env = fixed(EZPointsEnv(), [3, 4])
    for _ in range(6):
        assert env.step("+")[1:4] == (0.0, False, False)
    assert env.step("+")[1:4] == (-1.0, False, True)


def test_ezpoints_deals_always_reach_twelve():
    env = EZPointsEnv()
    for seed in range(200):
        env.reset(seed)
        a, b = env.numbers
        assert a + b == 12 or a * b == 12
        assert all(1 <= n <= 10 for n in env.numbers)


def test_points24_with_parentheses_and_division():
    env = fixed(Points24Env(), [4, 7, 8, 8])
    tokens = ["4", "*", "(", "7", "-", "8", "/", "8", ")"]
    for tok in tokens:
        assert env.step(tok)[1] == 0.0
    assert env.step("=")[1:3] == (10.0, True)
    env = fixed(Points24Env(), [13, 11, 2, 2])  # K and J count 10
    for tok in ["10", "+", "10", "+", "2", "+", "2"]:
        env.step(tok)
    assert env.step("=")[1] == 10.0


def test_points24_malformed_formula_loses_without_crashing():
    env = fixed(Points24Env(), [1, 2, 3, 4])
    for tok in ["(", "1", "+", "2", "*"]:
        env.step(tok)
    assert env.step("=")[1:3] == (-1.0, True)


def test_formula_expert_solves_solvable_hands():
    env = Points24Env()
    wins = 0
    for seed in range(60):
        env.reset(seed)
        solvable = solve(env.numbers, 24) is not None
        for _ in range(20):
            _, _, term, _, _ = env.step(env.expert_action())
            if term:
                break
        assert env.won == solvable
        wins += env.won
    assert wins > 20


# ----- formula evaluator vs Python arithmetic -----
def expressions(depth: int):
    leaf = st.integers(1, 10).map(lambda n: [str(n)])
    if depth == 0:
        return leaf
    sub = expressions(depth - 1)
    node = st.tuples(sub, st.sampled_from("+-*/"), sub, st.booleans(), st.booleans()).map(
        lambda t: (["("] + t[0] + [")"] if t[3] else t[0]) + [t[1]] + (["("] + t[2] + [")"] if t[4] else t[2])
    )
    return st.one_of(leaf, node)


@settings(max_examples=300, deadline=None)
@given(expressions(3))
def test_evaluate_matches_python_fractions(tokens):
    source = " ".join(f"Fraction({t})" if t.isdigit() else t for t in tokens)
    try:
        expected = eval(source, {"Fraction": Fraction})  # reference: Python's own precedence rules
    except ZeroDivisionError:
        with pytest.raises(FormulaError):
            evaluate(tokens)
        return
    assert evaluate(tokens) == expected


@pytest.mark.parametrize("tokens", [[], ["3", "4"], ["+", "3"], ["(", "3"], ["3", ")"], ["3", "/", "(", "2", "-", "2", ")"], ["x"]])
def test_evaluate_rejects_malformed(tokens):
    with pytest.raises(FormulaError):
        evaluate(tokens)


def test_solver_formulas_are_correct_and_use_each_card_once():
    rng = np.random.default_rng(0)
    for _ in range(100):
        numbers = rng.integers(1, 11, size=4).tolist()
        formula = solve(numbers, 24)
        if formula is None:
            continue
        assert evaluate(formula) == 24
        assert sorted(int(t) for t in formula if t.isdigit()) == sorted(numbers)
    assert solve([1, 1, 1, 1], 24) is None
    assert evaluate(solve([3, 3, 8, 8], 24)) == 24  # needs division: 8 / (3 - 8 / 3)


def test_solver_agrees_with_brute_force_on_solvability():
    """Independent reference: all orderings, operators and the five bracketings of four numbers."""

    def brute(nums):
        shapes = [
            lambda a, b, c, d, o, p, q: f"(({a}{o}{b}){p}{c}){q}{d}",
            lambda a, b, c, d, o, p, q: f"({a}{o}({b}{p}{c})){q}{d}",
            lambda a, b, c, d, o, p, q: f"({a}{o}{b}){p}({c}{q}{d})",
            lambda a, b, c, d, o, p, q: f"{a}{o}(({b}{p}{c}){q}{d})",
            lambda a, b, c, d, o, p, q: f"{a}{o}({b}{p}({c}{q}{d}))",
        ]
        for perm in set(itertools.permutations(nums)):
            args = [f"Fraction({n})" for n in perm]
            for ops in itertools.product("+-*/", repeat=3):
                for shape in shapes:
                    try:
                        if eval(shape(*args, *ops), {"Fraction": Fraction}) == 24:
                            return True
                    except ZeroDivisionError:
                        pass
        return False

    rng = np.random.default_rng(1)
    for _ in range(25):
        nums = rng.integers(1, 11, size=4).tolist()
        assert (solve(nums, 24) is not None) == brute(nums), nums


# ----- Blackjack -----
def test_hand_values():
    c = lambda r: Card(r, "S")  # noqa: E731
    assert hand_value([c(1), c(13)]) == 21
    assert hand_value([c(1), c(1)]) == 12
    assert hand_value([c(1), c(5), c(12)]) == 16
    assert hand_value([c(9), c(7)]) == 16


def test_blackjack_bust_and_stand_outcomes():
    env = BlackjackEnv()
    env.reset(0)
    env.player = [Card(10, "S"), Card(12, "H")]
    env.rng = np.random.default_rng(0)
    while True:  # hit until bust: -1, terminated
        _, r, term, _, info = env.step("hit")
        if term:
            assert r == -1.0 and not info["won"] and hand_value(env.player) > 21
            break
        assert r == 0.0
    for seed in range(40):
        env.reset(seed)
        _, r, term, _, info = env.step("stand")
        dealer, player = hand_value(env.dealer), hand_value(env.player)
        assert term and dealer >= 17
        if len(env.dealer) > 2:  # the dealer drew only while below 17
            assert hand_value(env.dealer[:-1]) < 17
        expected = 1.0 if dealer > 21 or player > dealer else (0.0 if player == dealer else -1.0)
        assert r == expected and info["won"] == (expected > 0)


def test_blackjack_unknown_action_changes_nothing_and_hides_the_hole_card():
    env = BlackjackEnv()
    obs, info = env.reset(3)
    assert "face-down" in obs and env.dealer[1].describe() not in obs.split("\n")[0]
    assert env.step("double down")[1:4] == (0.0, False, False)
    assert len(env.player) == 2


@pytest.mark.parametrize("env_class", [NumberLineEnv, EZPointsEnv, Points24Env, BlackjackEnv])
def test_images_and_determinism(env_class):
    a, b = env_class(mode="rgb_array"), env_class(mode="rgb_array")
    oa, ia = a.reset(42)
    ob, ib = b.reset(42)
    assert oa == ob and np.array_equal(ia["image"], ib["image"])
    assert ia["image"].shape == (300, 300, 3) and ia["image"].dtype == np.uint8
    for action in ia["admissible_actions"][:3]:
        assert a.step(action)[:4] == b.step(action)[:4]
