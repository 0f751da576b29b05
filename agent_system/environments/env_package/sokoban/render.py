"""RGB rendering of a Sokoban state with PIL (one square tile per cell)."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from agent_system.environments.env_package.sokoban.room import TARGET, WALL, Room, RoomState

TILE = 16
_COLORS = {
    "wall": (95, 60, 40),
    "floor": (220, 210, 180),
    "target": (200, 60, 60),
    "box": (190, 140, 40),
    "box_on_target": (60, 170, 60),
    "player": (40, 80, 200),
}


def render_rgb(room: Room, state: RoomState, tile: int = TILE) -> np.ndarray:
    """(H * tile, W * tile, 3) uint8 image of ``state``."""
    h, w = room.grid.shape
    img = Image.new("RGB", (w * tile, h * tile), _COLORS["floor"])
    draw = ImageDraw.Draw(img)
    for cell, kind in enumerate(room.grid.ravel()):
        r, c = divmod(cell, w)
        box = (c * tile, r * tile, (c + 1) * tile - 1, (r + 1) * tile - 1)
        if kind == WALL:
            draw.rectangle(box, fill=_COLORS["wall"])
        elif kind == TARGET:
            pad = tile // 4
            draw.ellipse((box[0] + pad, box[1] + pad, box[2] - pad, box[3] - pad), outline=_COLORS["target"], width=2)
    for b in state.boxes:
        r, c = divmod(b, w)
        color = _COLORS["box_on_target"] if room.grid.flat[b] == TARGET else _COLORS["box"]
        draw.rectangle((c * tile + 2, r * tile + 2, (c + 1) * tile - 3, (r + 1) * tile - 3), fill=color)
    r, c = divmod(state.player, w)
    draw.ellipse((c * tile + 3, r * tile + 3, (c + 1) * tile - 4, (r + 1) * tile - 4), fill=_COLORS["player"])
    return np.asarray(img, dtype=np.uint8)
