"""Card-table images with PIL: a green table, cards as white rounded rectangles with rank and suit, and
text lines (formula, labels). No image files are needed."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from agent_system.environments.env_package.gym_cards.cards import Card

CANVAS = (300, 300)
TABLE = (53, 101, 77)
_RED_SUITS = ("H", "D")
_FONT = ImageFont.load_default()
_BIG_FONT = ImageFont.load_default(size=36)


def _draw_card(draw: ImageDraw.ImageDraw, card: Card | None, xy: tuple[int, int], size: tuple[int, int]) -> None:
    x, y = xy
    w, h = size
    if card is None:  # face down
        draw.rounded_rectangle((x, y, x + w, y + h), radius=6, fill=(150, 30, 40), outline=(255, 255, 255), width=2)
        return
    draw.rounded_rectangle((x, y, x + w, y + h), radius=6, fill=(255, 255, 255), outline=(20, 20, 20), width=2)
    color = (200, 0, 0) if card.suit in _RED_SUITS else (0, 0, 0)
    draw.text((x + 6, y + 4), f"{card.label}{card.suit}", fill=color, font=_FONT)
    draw.text((x + w // 2 - 6, y + h // 2 - 6), card.label, fill=color, font=_FONT)


def render_table(rows: Sequence[tuple[str, Sequence[Card | None]]], lines: Sequence[str] = ()) -> np.ndarray:
    """(300, 300, 3) uint8 image: each row is a label and its cards (None = face down), then text lines."""
    img = Image.new("RGB", CANVAS, TABLE)
    draw = ImageDraw.Draw(img)
    card_size = (52, 74)
    y = 6
    for label, cards in rows:
        if label:
            draw.text((6, y), label, fill=(255, 255, 255), font=_FONT)
            y += 14
        for k, card in enumerate(cards):
            _draw_card(draw, card, (6 + k * (card_size[0] + 6), y), card_size)
        y += card_size[1] + 10
    for line in lines:
        draw.text((6, y), line, fill=(255, 255, 255), font=_FONT)
        y += 14
    return np.asarray(img, dtype=np.uint8)


def render_text_panel(lines: Sequence[str]) -> np.ndarray:
    """(300, 300, 3) uint8 image of text lines on white (NumberLine)."""
    img = Image.new("RGB", CANVAS, (255, 255, 255))
    draw = ImageDraw.Draw(img)
    for k, line in enumerate(lines):
        draw.text((30, 60 + 120 * k), line, fill=(0, 0, 0), font=_BIG_FONT)
    return np.asarray(img, dtype=np.uint8)
