"""Blackjack (RL4VLM / Sutton & Barto rules, infinite deck): "hit" or "stand".

The dealer shows one card and hides one; the player holds two. Hit: draw a card; above 21 is a bust
(-1, the episode ends), else 0. Stand: the dealer draws until 17 or more, then +1 / 0 / -1 for a win,
draw or loss (a bust dealer loses). An ace counts 11 unless that busts the hand. No natural bonus.
Unknown actions leave the game unchanged with reward 0 (the step limit ends a game the policy cannot
play). ``won`` is True after a win.
"""

from __future__ import annotations

from agent_system.environments.env_package.gym_cards.base import CardGameEnv
from agent_system.environments.env_package.gym_cards.cards import Card, random_card
from agent_system.environments.env_package.gym_cards.render import render_table


def hand_value(cards: list[Card]) -> int:
    total = sum(c.value for c in cards)
    return total + 10 if any(c.rank == 1 for c in cards) and total + 10 <= 21 else total


def is_soft(cards: list[Card]) -> bool:
    total = sum(c.value for c in cards)
    return any(c.rank == 1 for c in cards) and total + 10 <= 21


class BlackjackEnv(CardGameEnv):
    task = "Play Blackjack against the dealer: get closer to 21 than the dealer without going over. Choose 'hit' to take a card or 'stand' to stop."

    def __init__(self, mode: str = "text"):
        super().__init__(mode)

    def actions(self) -> list[str]:
        return ["hit", "stand"]

    def _deal(self) -> None:
        self.dealer = [random_card(self.rng), random_card(self.rng)]
        self.player = [random_card(self.rng), random_card(self.rng)]
        self.finished = False

    def _step(self, action: str):
        move = action.lower()
        if move == "hit":
            self.player.append(random_card(self.rng))
            if hand_value(self.player) > 21:
                self.finished = True
                return -1.0, True, False, False
            return 0.0, False, False, False
        if move == "stand":
            while hand_value(self.dealer) < 17:
                self.dealer.append(random_card(self.rng))
            self.finished = True
            player, dealer = hand_value(self.player), hand_value(self.dealer)
            dealer = 0 if dealer > 21 else dealer
            reward = float((player > dealer) - (player < dealer))
            return reward, True, False, reward > 0
        return 0.0, False, False, False

    def _text(self) -> str:
        player = ", ".join(c.describe() for c in self.player)
        if self.finished:
            dealer = ", ".join(c.describe() for c in self.dealer) + f" (total {hand_value(self.dealer)})"
        else:
            dealer = f"{self.dealer[0].describe()} and one face-down card"
        return f"Dealer: {dealer}\nYour cards: {player} (total {hand_value(self.player)})"

    def _image(self):
        dealer = self.dealer if self.finished else [self.dealer[0], None]
        return render_table([("Dealer", dealer), ("Player", self.player)])

    def expert_action(self) -> str:
        """Basic strategy (simplified): soft hands hit below 18; hard hands stand on 17+, on 13-16 against
        a dealer 2-6, on 12 against 4-6, and hit otherwise."""
        total, up = hand_value(self.player), self.dealer[0].value
        up = 11 if up == 1 else up
        if is_soft(self.player):
            return "hit" if total < 18 else "stand"
        if total >= 17 or (13 <= total <= 16 and 2 <= up <= 6) or (total == 12 and 4 <= up <= 6):
            return "stand"
        return "hit"
