"""Offline ALFWorld game generator: solvable ``game.tw-pddl`` files of all six task types, from what the
``alfworld`` wheel ships (PDDL domain, grammar, goal templates, object constants, scene layouts).

A game is sampled deterministically from (split, seed): task type (seed mod 6, so every type is equally
represented), a floor plan of the split whose room type ALFRED allows for that task, a target object and
receptacle, and a placement of target and distractor objects into receptacles that may hold them. The
problem is written in the form ALFWorld's own games use (ALFRED ids such as ``Apple_bar__plus_00_dot_68...``,
:init right after :objects, no :metric or total-cost, canContain for every receptacle/object type pair
present). The walkthrough is derived from the placement and then *verified*: the game is loaded in
TextWorld's PDDL engine and the walkthrough is played; only a game whose every command is admissible and
whose last command wins is written (an unsolvable problem would otherwise crash ``load()`` later).

Files are written in the official layout, ``<root>/<split>/<task_type>-<Obj>-None-<Recep>-<scene>/
trial_G<seed>/{game.tw-pddl, traj_data.json}``, so the same loader reads generated and official data.
"""

from __future__ import annotations

import json
import os
import random
import types
from dataclasses import dataclass, field

from agent_system.environments.env_package.alfworld import scenes
from agent_system.environments.env_package.alfworld.scenes import APPLIANCE_FOR_TASK, LAMP_TYPES, TASK_TYPES, Receptacle, Scene

_PDDL_CHARS = (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_"))
_MAX_ATTEMPTS = 25


class GameGenerationError(RuntimeError):
    """No solvable game could be generated for the requested (split, seed)."""


def pddl_name(alfred_id: str) -> str:
    """ALFRED id -> PDDL identifier, e.g. "Apple|+00.68|+00.50|-02.20" -> "Apple_bar__plus_00_dot_68...". """
    for char, word in _PDDL_CHARS:
        alfred_id = alfred_id.replace(char, word)
    return alfred_id


@dataclass
class PlacedObject:
    alfred_id: str
    otype: str
    receptacle: Receptacle


@dataclass
class TaskSpec:
    """Everything that defines one generated game."""

    split: str
    seed: int
    task_type: str  # ALFRED name, e.g. "pick_clean_then_place_in_recep"
    scene: Scene
    object_target: str
    parent_target: str  # "" for look_at_obj_in_light
    toggle_target: str  # "" unless look_at_obj_in_light
    objects: list[PlacedObject]
    agent_location: str
    task_desc: str
    receptacle_locations: dict[str, str] = field(default_factory=dict)  # alfred id -> location id

    @property
    def dir_name(self) -> str:
        return f"{self.task_type}-{self.object_target}-None-{self.parent_target or self.toggle_target}-{self.scene.number}"


# ----------------------------------------------------------------------------------------------------------
# sampling


def _object_candidates(task_type: str, scene: Scene) -> list[tuple[str, str]]:
    """(object type, parent receptacle type) pairs the scene supports for this task type."""
    contain = scenes.can_contain()
    appliance, predicate = APPLIANCE_FOR_TASK.get(task_type, (None, None))
    if appliance is not None and not scene.receptacles_of(appliance):
        return []
    eligible = set(scene.object_types) - set(LAMP_TYPES)
    if predicate is not None:
        eligible &= scenes.action_objects()[predicate]
    rtypes = sorted({r.rtype for r in scene.receptacles})
    pairs = []
    for otype in sorted(eligible):
        sources = [r for r in rtypes if otype in contain.get(r, ())]
        if task_type == "look_at_obj_in_light":
            if sources:
                pairs.append((otype, ""))
            continue
        for parent in sources:
            # the object must start somewhere other than the goal receptacle type, and a state-change task
            # must not be "put it back into the appliance"
            if parent != appliance and any(s != parent for s in sources):
                pairs.append((otype, parent))
    return pairs


def _object_id(rng: random.Random, otype: str, receptacle: Receptacle, taken: set[str]) -> str:
    _, x, y, z = receptacle.alfred_id.split("|")[:4]
    while True:
        coords = [float(v) + rng.uniform(-0.3, 0.3) for v in (x, y, z)]
        alfred_id = otype + "|" + "|".join(f"{c:+06.2f}" for c in coords)
        if alfred_id not in taken:
            taken.add(alfred_id)
            return alfred_id


def _location_ids(rng: random.Random, scene: Scene) -> tuple[dict[str, str], str]:
    """One navigation point per receptacle (from its reach pose, kept unique) plus the agent's start point,
    which no receptacle shares (the game opens "in the middle of a room")."""
    used: set[str] = set()
    locations = {}
    for r in scene.receptacles:
        x, z, rot, horizon = r.pose
        while True:
            loc = f"loc|{round(x / 0.25)}|{round(z / 0.25)}|{(rot // 90) % 4}|{horizon}"
            if loc not in used:
                break
            horizon += 1
        used.add(loc)
        locations[r.alfred_id] = loc
    while True:
        start = f"loc|{rng.randint(-20, 20)}|{rng.randint(-20, 20)}|{rng.randint(0, 3)}|30"
        if start not in used:
            return locations, start


def sample_task(split: str, seed: int, attempt: int = 0) -> TaskSpec:
    """Sample the game for (split, seed); ``attempt`` > 0 re-samples after a failed verification."""
    import alfworld.gen.constants as constants
    import alfworld.gen.goal_library as goal_library

    rng = random.Random(f"alfworld:{split}:{seed}:{attempt}")
    task_type = list(TASK_TYPES)[seed % len(TASK_TYPES)]
    allowed_rooms = constants.GOALS_VALID[task_type]
    numbers = [n for n in scenes.split_scene_numbers(split) if scenes.load_scene(n).scene_type in allowed_rooms]
    rng.shuffle(numbers)
    contain = scenes.can_contain()
    for number in numbers:
        scene = scenes.load_scene(number)
        if task_type == "look_at_obj_in_light":
            if not scene.lamps or not [r for r in scene.receptacles if r.rtype not in scenes.openable_types()]:
                continue
        pairs = _object_candidates(task_type, scene)
        if not pairs:
            continue
        otype, parent = rng.choice(pairs)
        taken: set[str] = set()
        objects: list[PlacedObject] = []
        sources = [r for r in scene.receptacles if otype in contain.get(r.rtype, ()) and r.rtype != parent]
        low = 2 if task_type == "pick_two_obj_and_place" else 1
        for _ in range(rng.randint(low, 3)):
            r = rng.choice(sources)
            objects.append(PlacedObject(_object_id(rng, otype, r, taken), otype, r))
        toggle = ""
        if task_type == "look_at_obj_in_light":
            toggle = rng.choice(scene.lamps)
            stands = [r for r in scene.receptacles if r.rtype not in scenes.openable_types()]
            r = rng.choice(stands)
            objects.append(PlacedObject(_object_id(rng, toggle, r, taken), toggle, r))
        distractor_types = [t for t in scene.object_types if t != otype]
        rng.shuffle(distractor_types)
        for dtype in distractor_types[: rng.randint(5, 10)]:
            holders = [r for r in scene.receptacles if dtype in contain.get(r.rtype, ())]
            if not holders:
                continue
            for _ in range(rng.randint(1, 2)):
                r = rng.choice(holders)
                objects.append(PlacedObject(_object_id(rng, dtype, r, taken), dtype, r))
        locations, start = _location_ids(rng, scene)
        template = rng.choice(goal_library.gdict[task_type]["templates"])
        desc = template.format(obj=otype.lower(), recep=parent.lower(), toggle=toggle.lower(), mrecep="")
        return TaskSpec(split, seed, task_type, scene, otype, parent, toggle, objects, start, desc, locations)
    raise GameGenerationError(f"no floor plan of split {split!r} supports task type {task_type!r}")


# ----------------------------------------------------------------------------------------------------------
# PDDL problem


def problem_pddl(spec: TaskSpec) -> str:
    """The PDDL problem text of ``spec`` (ALFWorld's parser rules: :init right after :objects, no :metric)."""
    import alfworld.gen.constants as constants
    import alfworld.gen.goal_library as goal_library

    contain = scenes.can_contain()
    actions = scenes.action_objects()
    static_rtypes = sorted(set(constants.RECEPTACLES) - set(constants.MOVABLE_RECEPTACLES))
    otypes = sorted(constants.OBJECTS_SET - set(static_rtypes))
    loc = {k: pddl_name(v) for k, v in spec.receptacle_locations.items()}
    start = pddl_name(spec.agent_location)

    objects = ["agent1 - agent"]
    objects += [f"{t}Type - otype" for t in otypes]
    objects += [f"{t}Type - rtype" for t in static_rtypes]
    objects += [f"{pddl_name(o.alfred_id)} - object" for o in spec.objects]
    objects += [f"{pddl_name(r.alfred_id)} - receptacle" for r in spec.scene.receptacles]
    objects += [f"{l} - location" for l in sorted(set(loc.values()) | {start})]

    init = [f"(atLocation agent1 {start})"]
    for r in spec.scene.receptacles:
        name = pddl_name(r.alfred_id)
        init.append(f"(receptacleType {name} {r.rtype}Type)")
        init.append(f"(receptacleAtLocation {name} {loc[r.alfred_id]})")
        if r.rtype in scenes.openable_types():
            init.append(f"(openable {name})")
    for o in spec.objects:
        name = pddl_name(o.alfred_id)
        init.append(f"(objectType {name} {o.otype}Type)")
        init.append(f"(inReceptacle {name} {pddl_name(o.receptacle.alfred_id)})")
        init.append(f"(objectAtLocation {name} {loc[o.receptacle.alfred_id]})")
        if o.otype in LAMP_TYPES:
            init.append(f"(toggleable {name})")
            continue
        init.append(f"(pickupable {name})")
        for predicate, fact in (("Cleanable", "cleanable"), ("Heatable", "heatable"), ("Coolable", "coolable")):
            if o.otype in actions[predicate]:
                init.append(f"({fact} {name})")
        if o.otype in constants.MOVABLE_RECEPTACLES_SET:
            init.append(f"(isReceptacleObject {name})")
    present_r = sorted({r.rtype for r in spec.scene.receptacles})
    present_o = sorted({o.otype for o in spec.objects})
    init += [f"(canContain {rt}Type {ot}Type)" for rt in present_r for ot in present_o if ot in contain.get(rt, ())]

    goal = goal_library.gdict[spec.task_type]["pddl"].format(
        obj=spec.object_target, recep=spec.parent_target, toggle=spec.toggle_target, mrecep=""
    ).replace("#", "-")
    indent = "\n        "
    return (
        f"(define (problem plan_{spec.split}_{spec.seed})\n"
        f"    (:domain alfred)\n"
        f"    (:objects{indent}{indent.join(objects)}\n    )\n"
        f"    (:init{indent}{indent.join(init)}\n    )\n"
        f"{goal}"
    )


# ----------------------------------------------------------------------------------------------------------
# walkthrough


def walkthrough_steps(spec: TaskSpec) -> list[tuple[str, ...]]:
    """The expert plan as (verb, PDDL ids...) tuples, read off the placement (no planner)."""
    openable = scenes.openable_types()
    opened: set[str] = set()
    steps: list[tuple[str, ...]] = []

    def visit(r: Receptacle) -> None:
        steps.append(("go to", pddl_name(r.alfred_id)))
        if r.rtype in openable and r.alfred_id not in opened:
            steps.append(("open", pddl_name(r.alfred_id)))
            opened.add(r.alfred_id)

    targets = [o for o in spec.objects if o.otype == spec.object_target]
    num_needed = 2 if spec.task_type == "pick_two_obj_and_place" else 1
    goal_r = None
    if spec.parent_target:
        goal_r = min(spec.scene.receptacles_of(spec.parent_target), key=lambda r: r.alfred_id)
    for obj in targets[:num_needed]:
        visit(obj.receptacle)
        steps.append(("take", pddl_name(obj.alfred_id), pddl_name(obj.receptacle.alfred_id)))
        if spec.task_type in APPLIANCE_FOR_TASK:
            appliance_type = APPLIANCE_FOR_TASK[spec.task_type][0]
            appliance = min(spec.scene.receptacles_of(appliance_type), key=lambda r: r.alfred_id)
            verb = {"SinkBasin": "clean", "Microwave": "heat", "Fridge": "cool"}[appliance_type]
            steps.append(("go to", pddl_name(appliance.alfred_id)))
            steps.append((verb, pddl_name(obj.alfred_id), pddl_name(appliance.alfred_id)))
        if spec.task_type == "look_at_obj_in_light":
            lamp = next(o for o in spec.objects if o.otype == spec.toggle_target)
            steps.append(("go to", pddl_name(lamp.receptacle.alfred_id)))
            steps.append(("use", pddl_name(lamp.alfred_id)))
        else:
            visit(goal_r)
            steps.append(("move", pddl_name(obj.alfred_id), pddl_name(goal_r.alfred_id)))
    return steps


def entity_names(pddl_ids: list[str]) -> dict[str, str]:
    """Lower-cased PDDL id -> the name the game shows ("apple 2"), exactly as ALFWorld's demangler assigns
    it when names are not shuffled."""
    from alfworld.agents.utils.misc import Demangler

    infos = {i: types.SimpleNamespace(id=i) for i in pddl_ids}
    demangler = Demangler(game_infos=infos, shuffle=False)
    return {i: demangler.demangle_alfred_name(i) for i in pddl_ids}


_COMMANDS = {
    "go to": "go to {0}",
    "open": "open {0}",
    "take": "take {0} from {1}",
    "move": "move {0} to {1}",
    "clean": "clean {0} with {1}",
    "heat": "heat {0} with {1}",
    "cool": "cool {0} with {1}",
    "use": "use {0}",
}


def render_walkthrough(steps: list[tuple[str, ...]], names: dict[str, str]) -> list[str]:
    return [_COMMANDS[verb].format(*(names[a.lower()] for a in args)) for verb, *args in steps]


# ----------------------------------------------------------------------------------------------------------
# verification and files


def verify_walkthrough(game: dict, walkthrough: list[str]) -> None:
    """Load ``game`` in TextWorld's PDDL engine and play ``walkthrough``; raise GameGenerationError unless the
    game loads, is not won at the start, every command is admissible and the last one wins."""
    from agent_system.environments.env_package.alfworld.engine import AlfredTextGame

    try:
        engine = AlfredTextGame()
        state = engine.load_and_reset(game)
    except Exception as exc:  # an unsolvable or malformed problem fails inside fast-downward's translator
        raise GameGenerationError(f"game does not load: {type(exc).__name__}: {exc}") from exc
    if state["won"]:
        raise GameGenerationError("goal already holds in the initial state")
    for k, command in enumerate(walkthrough):
        if command not in state["admissible_commands"]:
            raise GameGenerationError(f"walkthrough step {k} {command!r} is not admissible")
        state = engine.step(command)
        if state["won"] != (k == len(walkthrough) - 1):
            raise GameGenerationError(f"walkthrough step {k} {command!r}: won={state['won']}")


def build_game(spec: TaskSpec) -> tuple[dict, dict]:
    """(game.tw-pddl content, traj_data.json content) for ``spec``, verified solvable."""
    import alfworld.info

    data_dir = os.path.join(os.path.dirname(alfworld.info.__file__), "data")
    with open(os.path.join(data_dir, "alfred.pddl")) as f:
        domain = f.read()
    with open(os.path.join(data_dir, "alfred.twl2")) as f:
        grammar = f.read().replace("UNKNOWN GOAL", spec.task_desc)
    problem = problem_pddl(spec)
    steps = walkthrough_steps(spec)
    ids = [pddl_name(o.alfred_id).lower() for o in spec.objects] + [pddl_name(r.alfred_id).lower() for r in spec.scene.receptacles]
    walkthrough = render_walkthrough(steps, entity_names(ids))
    game = {"pddl_domain": domain, "grammar": grammar, "pddl_problem": problem, "solvable": True, "walkthrough": walkthrough}
    verify_walkthrough(game, walkthrough)
    traj = {
        "task_type": spec.task_type,
        "task_id": f"trial_G{spec.seed}",
        "task_desc": spec.task_desc,
        "scene": {"floor_plan": spec.scene.name, "scene_num": spec.scene.number, "random_seed": spec.seed},
        "pddl_params": {
            "object_target": spec.object_target,
            "parent_target": spec.parent_target,
            "toggle_target": spec.toggle_target,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "generator": "slea_rl offline generator (not an official ALFWorld game)",
    }
    return game, traj


def generate_game(root: str, split: str, seed: int) -> str:
    """Generate (or find cached) the game for (split, seed) under ``root``; returns its game.tw-pddl path."""
    index_path = os.path.join(root, split, "index", f"{seed}.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            path = os.path.join(root, json.load(f)["game"])
        if os.path.exists(path):
            return path
    errors = []
    for attempt in range(_MAX_ATTEMPTS):
        spec = sample_task(split, seed, attempt)
        try:
            game, traj = build_game(spec)
        except GameGenerationError as exc:
            errors.append(str(exc))
            continue
        game_dir = os.path.join(root, split, spec.dir_name, f"trial_G{seed}")
        os.makedirs(game_dir, exist_ok=True)
        _write_json(os.path.join(game_dir, "traj_data.json"), traj)
        _write_json(os.path.join(game_dir, "game.tw-pddl"), game)
        _write_json(index_path, {"game": os.path.relpath(os.path.join(game_dir, "game.tw-pddl"), root)})
        return os.path.join(game_dir, "game.tw-pddl")
    raise GameGenerationError(f"no solvable game for split={split} seed={seed} after {_MAX_ATTEMPTS} attempts: {errors[-3:]}")


def _write_json(path: str, data: dict) -> None:
    """Atomic write: concurrent generators never leave a half-written file behind."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)
