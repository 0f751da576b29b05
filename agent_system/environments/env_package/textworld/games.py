"""TextWorld games generated offline with ``tw-make`` and cached on disk (2-4 s to make one game).

Challenges: ``tw-coin_collector`` and ``tw-treasure_hunter`` (``--level``), and ``tw-cooking`` where the
level picks recipe size, rooms and skills (below). Train and validation games never share a seed; cooking
validation games also use TextWorld's ``valid`` food/preparation split.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

CHALLENGES = ("tw-coin_collector", "tw-treasure_hunter", "tw-cooking")
VAL_SEED_BASE = 1_000_000

# cooking level -> tw-make settings (a ladder of increasingly demanding recipes)
COOKING_LEVELS = {
    1: ["--recipe", "1", "--take", "1", "--go", "1"],
    2: ["--recipe", "2", "--take", "1", "--go", "6", "--open"],
    3: ["--recipe", "3", "--take", "2", "--go", "9", "--open", "--cook", "--cut"],
    4: ["--recipe", "3", "--take", "3", "--go", "12", "--open", "--cook", "--cut", "--drop"],
}


def tw_make_command(challenge: str, level: int, seed: int, split: str, output: str) -> list[str]:
    if challenge not in CHALLENGES:
        raise ValueError(f"unknown TextWorld challenge {challenge!r}; expected one of {CHALLENGES}")
    tw_make = os.path.join(os.path.dirname(sys.executable), "tw-make")
    cmd = [tw_make, challenge, "--seed", str(seed), "--output", output, "-f", "--silent"]
    if challenge == "tw-cooking":
        if level not in COOKING_LEVELS:
            raise ValueError(f"tw-cooking level {level} is not one of {sorted(COOKING_LEVELS)}")
        cmd += COOKING_LEVELS[level] + ["--recipe-seed", str(seed), "--split", "train" if split == "train" else "valid"]
    else:
        cmd += ["--level", str(level)]
    return cmd


def game_path(games_dir: str, challenge: str, level: int, split: str, seed: int) -> str:
    return os.path.join(os.path.expanduser(games_dir), challenge, f"level{level}", split, f"game_{seed}.z8")


def _make(job: tuple[str, int, int, str, str]) -> str:
    """Run tw-make into a temporary name, then move game.z8 and game.json (logic, walkthrough) into place."""
    challenge, level, seed, split, path = job
    tmp = path[: -len(".z8")] + f".tmp{os.getpid()}_{seed}.z8"
    cmd = tw_make_command(challenge, level, seed, split, tmp)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"tw-make failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr[-2000:]}")
    stem = tmp[: -len(".z8")]
    os.replace(stem + ".json", path[: -len(".z8")] + ".json")
    os.replace(tmp, path)
    if os.path.exists(stem + ".ni"):
        os.remove(stem + ".ni")
    return path


def ensure_games(games_dir: str, challenge: str, level: int, split: str, num_games: int, progress: bool = True) -> list[str]:
    """Paths of ``num_games`` games of ``split``, generating (two at a time) the ones not cached yet."""
    from tqdm import tqdm

    base = 0 if split == "train" else VAL_SEED_BASE
    paths = [game_path(games_dir, challenge, level, split, base + k) for k in range(num_games)]
    tw_make_command(challenge, level, base, split, paths[0])  # validates challenge and level up front
    missing = [(challenge, level, base + k, split, p) for k, p in enumerate(paths) if not os.path.exists(p)]
    if missing:
        os.makedirs(os.path.dirname(paths[0]), exist_ok=True)
        with ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1))) as pool:
            list(tqdm(pool.map(_make, missing), total=len(missing), desc=f"tw-make {challenge} level {level} {split}", disable=not progress))
    return paths
