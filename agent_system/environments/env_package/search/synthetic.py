"""A generated offline QA set and corpus for the Search environment (tests, demos, benchmarks when no
wiki-18 corpus is available). NOT a real benchmark: facts about fictional people, one passage each, plus
distractor passages that mention them; questions ask for a fact of one person, so one good query finds the
answer passage. Deterministic by seed."""

from __future__ import annotations

import json
import os
import random

from agent_system.environments.env_package.search.corpus import Passage, write_corpus

_SYLLABLES = ["ka", "lo", "mi", "ren", "tu", "sa", "vel", "dor", "an", "is", "ber", "qui", "zo", "mar", "eth", "ol", "nik", "pra"]
_CITIES = ["Aldmere", "Brightwater", "Coldharbor", "Dunmoor", "Eastvale", "Frostford", "Greywick", "Highmont", "Ironbridge", "Juniper Bay", "Kingsreach", "Lowmarsh"]
_JOBS = ["painter", "chemist", "violinist", "architect", "astronomer", "novelist", "engineer", "botanist", "sculptor", "cartographer"]
_WORKS = ["bridge", "symphony", "atlas", "telescope", "garden", "novel", "cathedral", "theorem", "vaccine", "mural"]


def _name(rng: random.Random, taken: set[str]) -> str:
    while True:
        first = "".join(rng.choice(_SYLLABLES) for _ in range(2)).capitalize()
        last = "".join(rng.choice(_SYLLABLES) for _ in range(3)).capitalize()
        if f"{first} {last}" not in taken:
            taken.add(f"{first} {last}")
            return f"{first} {last}"


def generate(num_people: int, seed: int = 0) -> tuple[list[Passage], list[dict]]:
    """(passages, QA rows); each row: question, golden_answers, data_source="synthetic", split."""
    rng = random.Random(seed)
    taken: set[str] = set()
    people = []
    for _ in range(num_people):
        people.append({
            "name": _name(rng, taken), "city": rng.choice(_CITIES), "year": str(rng.randint(1700, 1990)),
            "job": rng.choice(_JOBS), "work": f"the {rng.choice(['Northern', 'Silver', 'Hidden', 'Great', 'Last'])} {rng.choice(_WORKS).title()}",
        })
    passages, rows = [], []
    for k, p in enumerate(people):
        article = "an" if p["job"][0] in "aeiou" else "a"
        text = (f"{p['name']} was {article} {p['job']} born in {p['city']} in {p['year']}. "
                f"{p['name']} is best known for {p['work']}.")
        passages.append(Passage(str(len(passages)), f"\"{p['name']}\"\n{text}"))
        other = people[(k + 1) % len(people)]
        passages.append(Passage(str(len(passages)), f"\"{p['city']}\"\n{p['city']} is a town known for its {p['job']}s, among them {other['name']}."))
        kind = rng.randrange(4)
        question, answer = [
            (f"In which city was {p['name']} born?", p["city"]),
            (f"In what year was {p['name']} born?", p["year"]),
            (f"What was the profession of {p['name']}?", p["job"]),
            (f"What is {p['name']} best known for?", p["work"]),
        ][kind]
        rows.append({"question": question, "golden_answers": [answer], "data_source": "synthetic", "split": "val" if k % 5 == 4 else "train"})
    return passages, rows


def ensure_builtin_dataset(cache_dir: str, num_people: int, seed: int = 0) -> dict[str, str]:
    """Write (once) corpus.jsonl, train.jsonl and val.jsonl under ``cache_dir``; returns their paths."""
    root = os.path.join(os.path.expanduser(cache_dir), f"synthetic_{num_people}_{seed}")
    paths = {name: os.path.join(root, f"{name}.jsonl") for name in ("corpus", "train", "val")}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    os.makedirs(root, exist_ok=True)
    passages, rows = generate(num_people, seed)
    tmp = {k: f"{v}.{os.getpid()}.tmp" for k, v in paths.items()}
    write_corpus(tmp["corpus"], passages)
    for split in ("train", "val"):
        with open(tmp[split], "w", encoding="utf-8") as f:
            for r in rows:
                if r["split"] == split:
                    f.write(json.dumps(r) + "\n")
    for k in paths:
        os.replace(tmp[k], paths[k])
    return paths
