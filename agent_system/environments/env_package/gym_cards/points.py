"""Formula games over cards, written one token per step: EZPoints (2 cards, + * =, target 12) and
Points24 (4 cards, + - * / ( ) =, target 24).

Rules and rewards (RL4VLM): a number token must be a card value not yet used up (else -1 and the
formula grows by a blank, the episode goes on); operators are always accepted; "=" ends the episode with
+10 when the formula equals the target and uses every card, else -1. A step taken when the formula is
already longer than ``max_formula_length`` ends the episode (truncated) with -1. Face cards count 10.
Unknown tokens count as invalid (-1, a blank). Deals are not filtered: some Points24 hands have no solution.
"""

from __future__ import annotations

from collections import Counter

from agent_system.environments.env_package.gym_cards.base import CardGameEnv
from agent_system.environments.env_package.gym_cards.cards import Card, card_with_value, random_card
from agent_system.environments.env_package.gym_cards.formula import FormulaError, evaluate, solve
from agent_system.environments.env_package.gym_cards.render import render_table

BLANK = " "


class FormulaCardEnv(CardGameEnv):
    target_points: int
    operators: tuple[str, ...]
    max_formula_length: int

    def actions(self) -> list[str]:
        return [str(n) for n in range(1, 11)] + list(self.operators) + ["="]

    def _new_cards(self) -> list[Card]:
        raise NotImplementedError

    def _deal(self) -> None:
        self.cards = self._new_cards()
        self.numbers = [c.value for c in self.cards]
        self.formula: list[str] = []
        self._plan: list[str] | None = None

    def _step(self, action: str):
        if len(self.formula) > self.max_formula_length:
            return -1.0, False, True, False
        if action == "=":
            used = Counter(t for t in self.formula if t.isdigit())
            try:
                correct = evaluate(self.formula) == self.target_points
            except FormulaError:
                correct = False
            won = correct and used == Counter(str(n) for n in self.numbers)
            return (10.0 if won else -1.0), True, False, won
        if action in self.operators:
            self.formula.append(action)
            return 0.0, False, False, False
        remaining = Counter(str(n) for n in self.numbers) - Counter(t for t in self.formula if t.isdigit())
        if action.isdigit() and remaining[action] > 0:
            self.formula.append(action)
            return 0.0, False, False, False
        self.formula.append(BLANK)
        return -1.0, False, False, False

    def _text(self) -> str:
        cards = ", ".join(f"{c.describe()} ({c.value})" for c in self.cards)
        return f"Cards: {cards}\nFormula: {' '.join(self.formula)}"

    def _image(self):
        return render_table([("", self.cards)], [f"Formula: {' '.join(self.formula)}"])

    def expert_action(self) -> str | None:
        """Next token of a solving formula (then "="), planned from the empty formula; None without one."""
        if self._plan is None:
            self._plan = solve(self.numbers, self.target_points) or []
        pos = len(self.formula)
        if self.formula != self._plan[:pos]:
            return None
        return self._plan[pos] if pos < len(self._plan) else "="


class EZPointsEnv(FormulaCardEnv):
    target_points = 12
    operators = ("+", "*")
    max_formula_length = 5
    task = "Use both cards exactly once with '+' and '*' to write a formula equal to 12, one token per step, then finish with '='. Face cards (J, Q, K) count as 10."

    def __init__(self, mode: str = "text"):
        super().__init__(mode)

    def _new_cards(self) -> list[Card]:
        first = random_card(self.rng, 2, 13)
        value = first.value
        if 12 % value == 0 and self.rng.random() <= 0.5:
            second = card_with_value(self.rng, 12 // value)
        else:
            second = card_with_value(self.rng, 12 - value)
        cards = [first, second]
        return cards[::-1] if self.rng.random() <= 0.5 else cards


class Points24Env(FormulaCardEnv):
    target_points = 24
    operators = ("+", "-", "*", "/", "(", ")")
    max_formula_length = 20
    task = "Use all four cards exactly once with '+', '-', '*', '/', '(' and ')' to write a formula equal to 24, one token per step, then finish with '='. Face cards (J, Q, K) count as 10."

    def __init__(self, mode: str = "text"):
        super().__init__(mode)

    def _new_cards(self) -> list[Card]:
        return [random_card(self.rng) for _ in range(4)]
