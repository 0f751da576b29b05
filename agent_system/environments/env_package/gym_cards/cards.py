"""Playing cards: rank 1..13 (A, 2..10, J, Q, K) and suit; face cards count 10."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SUITS = ("H", "S", "D", "C")
SUIT_NAMES = {"H": "Hearts", "S": "Spades", "D": "Diamonds", "C": "Clubs"}
RANK_NAMES = {1: "A", 11: "J", 12: "Q", 13: "K"}


@dataclass(frozen=True)
class Card:
    rank: int  # 1..13
    suit: str  # one of SUITS

    @property
    def value(self) -> int:
        """Point value: face cards (J, Q, K) count 10, an ace 1."""
        return min(self.rank, 10)

    @property
    def label(self) -> str:
        return RANK_NAMES.get(self.rank, str(self.rank))

    def describe(self) -> str:
        return f"{self.label} of {SUIT_NAMES[self.suit]}"


def random_card(rng: np.random.Generator, low: int = 1, high: int = 13) -> Card:
    """A card with rank uniform in [low, high] and a uniform suit (an infinite deck)."""
    return Card(int(rng.integers(low, high + 1)), SUITS[int(rng.integers(len(SUITS)))])


def card_with_value(rng: np.random.Generator, value: int) -> Card:
    """A card worth ``value`` (1..10); a 10 is any of 10, J, Q, K."""
    rank = int(rng.choice([10, 11, 12, 13])) if value == 10 else value
    return Card(rank, SUITS[int(rng.integers(len(SUITS)))])
