"""Where a split's ALFWorld games come from: the official data when it exists, else the offline generator.

Official data (``alfworld-download`` fills ``$ALFWORLD_DATA``): ``json_2.1.1/train`` (train),
``json_2.1.1/valid_seen`` (eval_in_distribution) and ``json_2.1.1/valid_unseen`` (eval_out_of_distribution),
each trial folder holding ``traj_data.json`` and ``game.tw-pddl``. As in ALFWorld, movable-receptacle and
sliced tasks are skipped and only games marked solvable are kept.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor

from agent_system.environments.env_package.alfworld.scenes import TASK_TYPES

SPLITS = ("train", "eval_in_distribution", "eval_out_of_distribution")
OFFICIAL_SPLIT_DIRS = {"train": "train", "eval_in_distribution": "valid_seen", "eval_out_of_distribution": "valid_unseen"}


def official_data_root(data_path: str) -> str | None:
    """The configured data path, else $ALFWORLD_DATA, when it holds json_2.1.1; None otherwise."""
    for candidate in (data_path, os.environ.get("ALFWORLD_DATA", "")):
        if candidate:
            root = os.path.expanduser(os.path.expandvars(candidate))
            if os.path.isdir(os.path.join(root, "json_2.1.1")):
                return root
            if data_path and candidate == data_path:
                raise FileNotFoundError(f"env.alfworld.data_path={data_path!r} has no json_2.1.1 folder (run alfworld-download)")
    return None


def task_type_of(game_file: str) -> str:
    """Short task type ("pick", "clean", ...) from the game's folder name, e.g.
    ``pick_clean_then_place_in_recep-Cloth-None-CounterTop-424/trial_.../game.tw-pddl`` -> "clean"."""
    folder = os.path.basename(os.path.dirname(os.path.dirname(game_file)))
    return TASK_TYPES.get(folder.split("-", 1)[0], "unknown")


def collect_official_games(root: str, split: str) -> list[str]:
    import json

    split_dir = os.path.join(root, "json_2.1.1", OFFICIAL_SPLIT_DIRS[split])
    games = []
    for folder, _dirs, files in os.walk(split_dir):
        if "traj_data.json" not in files or "game.tw-pddl" not in files:
            continue
        if "movable" in folder or "Sliced" in folder:
            continue
        path = os.path.join(folder, "game.tw-pddl")
        with open(path) as f:
            if not json.load(f).get("solvable", False):
                continue
        if task_type_of(path) != "unknown":
            games.append(path)
    if not games:
        raise FileNotFoundError(f"no solvable ALFWorld games under {split_dir}")
    return sorted(games)


def _generate_one(args: tuple[str, str, int]) -> str:
    from agent_system.environments.env_package.alfworld.game_generator import generate_game

    return generate_game(*args)


def generated_games(root: str, split: str, num_games: int, workers: int | None = None, progress: bool = True) -> list[str]:
    """Game files for seeds 0..num_games-1 of ``split`` under ``root``, generating the missing ones
    (in parallel processes; each is verified solvable, then cached on disk)."""
    from tqdm import tqdm

    root = os.path.expanduser(root)
    jobs = [(root, split, seed) for seed in range(num_games)]
    missing = [j for j in jobs if not os.path.exists(os.path.join(root, split, "index", f"{j[2]}.json"))]
    if missing:
        workers = workers or min(len(missing), os.cpu_count() or 1)
        desc = f"generating ALFWorld {split} games"
        if workers == 1:
            for job in tqdm(missing, desc=desc, disable=not progress):
                _generate_one(job)
        else:
            with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
                list(tqdm(pool.map(_generate_one, missing), total=len(missing), desc=desc, disable=not progress))
    return [_generate_one(j) for j in jobs]  # all cached now: this only reads the index files


def game_files_for(split: str, data_path: str, generated_dir: str, num_generated: int) -> list[str]:
    if split not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; expected one of {SPLITS}")
    root = official_data_root(data_path)
    if root is not None:
        return collect_official_games(root, split)
    return generated_games(generated_dir, split, num_generated)
