"""Attacks for scripts/reliability_report.py (issue 35 item 4): what ``scripts/seed_sweep.py --reuse`` takes from a
run folder as a finished run's figures. Results in docs/results come from that script, so a stale or forged run
folder taken as finished is a run mistaken for another. Each case is a run folder as a sweep finds it (its record
``sweep_command.json`` and its ``metrics.jsonl``), put to the sweep's own reuse decision (``read_record`` and
``finished_figures``, what ``run_one`` asks before it runs anything).

all_caught condition:
    attack_sweep_reuse: r["sweep_stale_reused"] == 0 and r["sweep_stale_cases"] > 0
                        and r["sweep_good_reused"] == 1 and r["sweep_tracebacks"] == 0
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

from reliability_attacks import REPO, Attack

COMMAND = ["-m", "recipe.forge.main_forge", "+experiment=main_job", "env.seed=0"]


def _metrics(iterations: int, validated_last: bool = True) -> str:
    rows = [{"iteration": i, "success_rate": 0.5, **({"val/success_rate": 0.625} if validated_last and
                                                     i == iterations else {})} for i in range(1, iterations + 1)]
    return "".join(json.dumps(r) + "\n" for r in rows)


def _folder(base: Path, name: str, metrics: str, record: dict | str, sha_of: str | None = None) -> Path:
    """A run folder holding ``metrics`` and ``record`` (a dict gets the metrics' digest unless it has one;
    ``sha_of`` digests other text instead: the metrics were changed after the record was written)."""
    run = base / name
    run.mkdir()
    (run / "metrics.jsonl").write_text(metrics)
    if isinstance(record, dict):
        record = {"metrics_sha256": hashlib.sha256((sha_of or metrics).encode()).hexdigest(), **record}
        record = json.dumps(record)
    (run / "sweep_command.json").write_text(record)
    return run


def attack_sweep_reuse(quick: bool) -> dict:
    sys.path.insert(0, str(REPO / "scripts"))
    from seed_sweep import finished_figures, read_record

    base = Path(tempfile.mkdtemp(prefix="attack_sweep_reuse_"))
    try:
        asked = {"command": COMMAND, "iterations": 2}
        good = _folder(base, "good", _metrics(2), dict(asked))
        torn = _metrics(2)[:-12]
        stale = {
            "shorter budget": _folder(base, "shorter", _metrics(1), {"command": COMMAND, "iterations": 1}),
            "a 1-iteration run recorded as 2": _folder(base, "relabelled", _metrics(1), dict(asked)),
            "a torn last line": _folder(base, "torn", torn, dict(asked)),
            "metrics changed after the record": _folder(base, "forged", _metrics(2).replace("0.625", "1.0"),
                                                        dict(asked), sha_of=_metrics(2)),
            "another run's command": _folder(base, "other", _metrics(2),
                                             {"command": [*COMMAND[:-1], "env.seed=1"], "iterations": 2}),
            "a run still going (no digest)": _folder(base, "going", _metrics(2), json.dumps(asked)),
            "a damaged record": _folder(base, "damaged", _metrics(2), '{"command": ["-m", '),
            "a last iteration without validation": _folder(base, "unvalidated", _metrics(2, validated_last=False),
                                                           dict(asked)),
        }
        reused = tracebacks = 0
        for run in stale.values():
            try:
                record = read_record(run / "sweep_command.json")
                reused += record is not None and finished_figures(record, COMMAND, 2, run) is not None
            except Exception:  # noqa: BLE001 - a traceback is what the attack counts
                tracebacks += 1
        record = read_record(good / "sweep_command.json")
        good_reused = int(record is not None and finished_figures(record, COMMAND, 2, good) is not None)
        return {"sweep_stale_cases": len(stale), "sweep_stale_reused": reused, "sweep_good_reused": good_reused,
                "sweep_tracebacks": tracebacks}
    finally:
        shutil.rmtree(base, ignore_errors=True)


ATTACKS = [
    Attack(attack_sweep_reuse,
           lambda r: r["sweep_stale_reused"] == 0 and r["sweep_stale_cases"] > 0 and r["sweep_good_reused"] == 1
           and r["sweep_tracebacks"] == 0,
           {"runs_lost_or_mistaken": ("sweep_stale_reused",), "tracebacks": ("sweep_tracebacks",)}),
]
