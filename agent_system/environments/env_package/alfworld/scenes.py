"""The scene catalogue the offline game generator draws from: what the ``alfworld`` wheel ships.

Per AI2-THOR floor plan the wheel holds ``FloorPlanN-objects.json`` (object types present in the scene) and
``FloorPlanN-openable.json`` (every receptacle instance, ALFRED id -> the agent pose [x, z, rotation,
horizon] from which it is reached). Object constants (what can contain what, what can be heated / cooled /
cleaned / toggled) come from ``alfworld.gen.constants``. Nothing here runs THOR or the planner.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass

# The six ALFWorld task types: ALFRED's name -> the short name used in logs and metrics.
TASK_TYPES: dict[str, str] = {
    "pick_and_place_simple": "pick",
    "look_at_obj_in_light": "look",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "pick2",
}

# Appliance a state-change task needs, and the predicate that marks an object as eligible for it.
APPLIANCE_FOR_TASK = {
    "pick_clean_then_place_in_recep": ("SinkBasin", "Cleanable"),
    "pick_heat_then_place_in_recep": ("Microwave", "Heatable"),
    "pick_cool_then_place_in_recep": ("Fridge", "Coolable"),
}
LAMP_TYPES = ("DeskLamp", "FloorLamp")


@dataclass(frozen=True)
class Receptacle:
    alfred_id: str  # e.g. "Cabinet|+00.68|+00.50|-02.20" or "Sink|+00.71|+00.82|-01.77|SinkBasin"
    rtype: str  # e.g. "Cabinet", "SinkBasin"
    pose: tuple[float, float, int, int]  # agent pose that reaches it: x, z, rotation (deg), horizon (deg)


@dataclass(frozen=True)
class Scene:
    number: int
    scene_type: str  # Kitchen | LivingRoom | Bedroom | Bathroom
    receptacles: tuple[Receptacle, ...]
    object_types: tuple[str, ...]  # pickupable object types present in the scene
    lamps: tuple[str, ...]  # toggleable light sources present (DeskLamp / FloorLamp)

    @property
    def name(self) -> str:
        return f"FloorPlan{self.number}"

    def receptacles_of(self, rtype: str) -> list[Receptacle]:
        return [r for r in self.receptacles if r.rtype == rtype]


def _constants():
    import alfworld.gen.constants as constants

    return constants


@functools.lru_cache(maxsize=1)
def can_contain() -> dict[str, frozenset[str]]:
    """Receptacle type -> object types it may hold (ALFRED's VAL_RECEPTACLE_OBJECTS)."""
    return {r: frozenset(objs) for r, objs in _constants().VAL_RECEPTACLE_OBJECTS.items()}


@functools.lru_cache(maxsize=1)
def action_objects() -> dict[str, frozenset[str]]:
    """Cleanable / Heatable / Coolable / Toggleable / Sliceable -> object types."""
    return {k: frozenset(v) for k, v in _constants().VAL_ACTION_OBJECTS.items()}


@functools.lru_cache(maxsize=1)
def pickupable_types() -> frozenset[str]:
    """Object types that some receptacle may hold, without sliced variants (ALFWorld text games have no slicing)."""
    held = set().union(*can_contain().values())
    return frozenset(t for t in held if not t.endswith("Sliced"))


@functools.lru_cache(maxsize=1)
def openable_types() -> frozenset[str]:
    return frozenset(_constants().OPENABLE_CLASS_SET)


def _scene_type(number: int) -> str:
    for scene_type, numbers in _constants().SCENE_TYPE.items():
        if number in numbers:
            return scene_type
    raise ValueError(f"FloorPlan{number} is not in any ALFRED scene type")


def _layout_dir() -> str:
    return os.path.join(os.path.dirname(_constants().__file__), "layouts")


def _receptacle_type(alfred_id: str) -> str:
    # Sinks and bathtubs are addressed by their basin: "Sink|x|y|z|SinkBasin".
    parts = alfred_id.split("|")
    return parts[-1] if len(parts) == 5 else parts[0]


@functools.lru_cache(maxsize=None)
def load_scene(number: int) -> Scene:
    """Read one floor plan's layout files (raises FileNotFoundError naming the file when absent)."""
    base = os.path.join(_layout_dir(), f"FloorPlan{number}")
    with open(base + "-objects.json") as f:
        present = set(json.load(f))
    with open(base + "-openable.json") as f:
        poses = json.load(f)
    static_receptacles = set(_constants().RECEPTACLES) - set(_constants().MOVABLE_RECEPTACLES)
    receptacles = []
    for alfred_id in sorted(poses):
        rtype = _receptacle_type(alfred_id)
        if rtype not in static_receptacles or rtype not in can_contain():
            continue
        x, z, rot, horizon = poses[alfred_id]
        receptacles.append(Receptacle(alfred_id, rtype, (float(x), float(z), int(rot), int(horizon))))
    objects = tuple(sorted(present & pickupable_types()))
    lamps = tuple(sorted(present & set(LAMP_TYPES)))
    return Scene(number, _scene_type(number), tuple(receptacles), objects, lamps)


def split_scene_numbers(split: str) -> list[int]:
    """ALFRED's scene split: training floor plans for train and eval_in_distribution (unseen task
    instances in seen rooms), the held-out floor plans for eval_out_of_distribution."""
    c = _constants()
    if split in ("train", "eval_in_distribution"):
        numbers = c.TRAIN_SCENE_NUMBERS
    elif split == "eval_out_of_distribution":
        numbers = c.TEST_SCENE_NUMBERS
    else:
        raise ValueError(f"unknown ALFWorld split {split!r}; expected train, eval_in_distribution or eval_out_of_distribution")
    available = {int(n[len("FloorPlan"):-len("-objects.json")]) for n in os.listdir(_layout_dir()) if n.endswith("-objects.json")}
    return sorted(n for n in numbers if n in available)
