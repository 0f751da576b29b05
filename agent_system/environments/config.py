"""Typed schema of the ``env`` config section, validated at start-up (before any environment or model).

Each environment family has its own sub-section; ``env.env_name`` picks the manager (see registry.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from agent_system.config_checks import ConfigError, check_choice, check_int, check_range
from agent_system.environments.env_package.dial_lock.config import DialLockConfig


@dataclass
class RolloutGroupConfig:
    n: int = 8  # G: environments per task, all starting from the same initial state


@dataclass
class ResourcesConfig:
    num_workers: int = 0  # worker processes for heavy environments; 0 = min(batch, cpu count)
    num_cpus: Optional[float] = None  # refused when set: environment workers are OS processes, not Ray actors
    step_timeout_s: float = 120.0  # a worker step taking longer is treated as hung: restarted, episode failed


@dataclass
class SokobanConfig:
    dim_room: list = field(default_factory=lambda: [6, 6])
    num_boxes: int = 1
    search_depth: int = 30  # reverse-play depth of the generator (harder rooms with more)
    mode: str = "text"  # text | rgb_array


@dataclass
class GymCardsConfig:
    mode: str = "text"  # text | rgb_array
    target_max: int = 5  # NumberLine: positions 0..target_max


@dataclass
class AlfworldConfig:
    data_path: str = ""  # official data (ALFWORLD_DATA); empty = generated games cache
    generated_games_dir: str = "~/.cache/slea_rl/alfworld_games"
    num_generated_games: int = 64
    eval_dataset: str = "eval_in_distribution"  # eval_in_distribution | eval_out_of_distribution
    # the anchor of a step after "Nothing happens.": "state", the observation of the state it was said in (the
    # command changed nothing), or "text", the words themselves (published GiGPO: one step group for every such
    # step, whatever its state)
    nothing_happens_anchor: str = "state"


@dataclass
class SearchConfig:
    search_url: str = "http://127.0.0.1:8000/retrieve"
    topk: int = 3
    timeout_s: float = 10.0
    train_data: str = ""  # parquet/JSONL QA file; empty = the generated offline QA set (not a benchmark)
    val_data: str = ""
    corpus_path: str = ""  # JSONL {id, contents}: with launch_server, serve it locally (real data)
    launch_server: bool = True  # start a local BM25 server (built-in corpus, or corpus_path) instead of search_url
    data_cache_dir: str = "~/.cache/slea_rl/search"  # where the generated QA set and corpus are written
    builtin_num_questions: int = 1000


@dataclass
class WebshopConfig:
    use_builtin_shop: bool = True  # the generated offline shop; False = the real WebShop package
    num_products: int = 200
    use_small: bool = True


@dataclass
class TextworldConfig:
    challenge: str = "tw-coin_collector"  # tw-coin_collector | tw-treasure_hunter | tw-cooking
    level: int = 1
    games_dir: str = "~/.cache/slea_rl/textworld_games"
    num_games: int = 16


@dataclass
class AppworldConfig:
    python: str = ""  # interpreter of AppWorld's own environment (it pins old pydantic / SQLAlchemy); "" = this one
    dataset: str = "train"
    val_dataset: str = "dev"
    use_standin: bool = False  # True: the bundled stand-in apps instead of AppWorld (tests / demos, not a benchmark)
    timeout_s: float = 30.0  # limit per code execution; past it the bridge (and all it started) is killed


@dataclass
class EnvConfig:
    env_name: str = "sokoban"
    seed: int = 0
    max_steps: Optional[int] = None  # None: the environment's standard limit (manager.standard_max_steps)
    history_length: int = 2
    memory: str = "simple"  # simple | search | none
    require_think: bool = False  # True: <think>...</think> is required for a valid action
    val_seed_offset: int = 1_000_000  # validation seeds start here: never seen in training
    rollout: RolloutGroupConfig = field(default_factory=RolloutGroupConfig)
    resources_per_worker: ResourcesConfig = field(default_factory=ResourcesConfig)
    sokoban: SokobanConfig = field(default_factory=SokobanConfig)
    gym_cards: GymCardsConfig = field(default_factory=GymCardsConfig)
    alfworld: AlfworldConfig = field(default_factory=AlfworldConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    webshop: WebshopConfig = field(default_factory=WebshopConfig)
    textworld: TextworldConfig = field(default_factory=TextworldConfig)
    appworld: AppworldConfig = field(default_factory=AppworldConfig)
    dial_lock: DialLockConfig = field(default_factory=DialLockConfig)

    def image_mode_key(self) -> str | None:
        """``env.sokoban.mode`` or ``env.gym_cards.mode`` when that key, set to ``rgb_array`` for the chosen
        environment, makes the observations images; None when they are text."""
        family = self.env_name.split("/")[0]
        if family in ("sokoban", "gym_cards") and getattr(self, family).mode == "rgb_array":
            return f"env.{family}.mode"
        return None

    def validate(self, known_env_names: list[str]) -> None:
        check_choice("env.env_name", self.env_name, known_env_names)
        check_int("env.seed", self.seed, 0)
        if self.max_steps is not None:
            check_int("env.max_steps", self.max_steps, 1)
        check_int("env.history_length", self.history_length, 0)
        check_choice("env.memory", self.memory, ["simple", "search", "none"])
        check_int("env.rollout.n", self.rollout.n, 1)
        check_int("env.val_seed_offset", self.val_seed_offset, 1)
        check_int("env.resources_per_worker.num_workers", self.resources_per_worker.num_workers, 0)
        if self.resources_per_worker.num_cpus is not None:
            raise ConfigError(
                f"env.resources_per_worker.num_cpus={self.resources_per_worker.num_cpus!r}: nothing here reads it. "
                "Environment workers are OS processes inside each agent-loop worker (or the trainer), not Ray actors "
                "with resources of their own; size them with env.resources_per_worker.num_workers and, on the "
                "distributed engine, actor_rollout_ref.rollout.agent.num_workers. Remove the override.")
        check_range("env.resources_per_worker.step_timeout_s", self.resources_per_worker.step_timeout_s, 0, low_inclusive=False)
        room = list(self.sokoban.dim_room)
        if len(room) != 2 or any(isinstance(d, bool) or not isinstance(d, int) or d < 4 for d in room):
            raise ConfigError(f"env.sokoban.dim_room={room!r} must be two integers >= 4")
        check_int("env.sokoban.num_boxes", self.sokoban.num_boxes, 1, (room[0] - 2) * (room[1] - 2) - 1)
        check_int("env.sokoban.search_depth", self.sokoban.search_depth, 1)
        check_choice("env.sokoban.mode", self.sokoban.mode, ["text", "rgb_array"])
        check_choice("env.gym_cards.mode", self.gym_cards.mode, ["text", "rgb_array"])
        check_int("env.gym_cards.target_max", self.gym_cards.target_max, 1)
        check_choice("env.alfworld.eval_dataset", self.alfworld.eval_dataset, ["eval_in_distribution", "eval_out_of_distribution"])
        check_int("env.alfworld.num_generated_games", self.alfworld.num_generated_games, 1)
        check_choice("env.alfworld.nothing_happens_anchor", self.alfworld.nothing_happens_anchor, ["state", "text"])
        check_int("env.search.topk", self.search.topk, 1)
        check_range("env.search.timeout_s", self.search.timeout_s, 0, low_inclusive=False)
        check_int("env.search.builtin_num_questions", self.search.builtin_num_questions, 5)
        if self.env_name == "search" and bool(self.search.train_data) != bool(self.search.val_data):
            given, missing = ("val_data", "train_data") if self.search.val_data else ("train_data", "val_data")
            raise ConfigError(
                f"env.search.{given} is set but env.search.{missing} is empty; set both (validation must use "
                "held-out questions) or neither (the built-in QA set)"
            )
        check_int("env.webshop.num_products", self.webshop.num_products, 1)
        check_choice("env.textworld.challenge", self.textworld.challenge, ["tw-coin_collector", "tw-treasure_hunter", "tw-cooking"])
        max_level = {"tw-coin_collector": 300, "tw-treasure_hunter": 30, "tw-cooking": 4}[self.textworld.challenge]
        check_int("env.textworld.level", self.textworld.level, 1, max_level)
        check_range("env.appworld.timeout_s", self.appworld.timeout_s, 0, low_inclusive=False)
        check_int("env.textworld.num_games", self.textworld.num_games, 1)


def env_config_from_mapping(section: Mapping[str, Any] | None, prefix: str = "env") -> EnvConfig:
    """Build an EnvConfig from a plain mapping, rejecting unknown keys with their full name."""
    return _build(EnvConfig, dict(section or {}), prefix)


def _build(cls: type, values: dict, prefix: str):
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(f"unknown key {prefix}.{unknown[0]}; known keys of {prefix}: {sorted(known)}")
    kwargs = {}
    for name, value in values.items():
        f = known[name]
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{prefix}.{name}={value!r} must be a section (mapping)")
            value = _build(type(default), dict(value), f"{prefix}.{name}")
        elif isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        elif isinstance(default, list):
            value = list(value) if not isinstance(value, (str, bytes)) and hasattr(value, "__iter__") else value
        elif default is not None and not isinstance(value, type(default)):
            raise ConfigError(f"{prefix}.{name}={value!r} must be of type {type(default).__name__}")
        kwargs[name] = value
    return cls(**kwargs)
