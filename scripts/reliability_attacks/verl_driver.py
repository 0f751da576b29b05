"""Attack for scripts/reliability_report.py (issue 23, defect 2): the verl engine's driver killed, and its metrics
file resumed.

all_caught condition:
    r["ray_processes_left"] == 0 and r["verl_resume_lost_or_duplicated_lines"] == 0
    and r["ray_processes_below_killed_driver"] > 0 and r["ray_cluster_below_driver"] == 1
(before the fix: 39 Ray processes outlived a killed verl CPU run, and a resume left only the resumed step's line)
"""

from __future__ import annotations

import tempfile
from pathlib import Path


def attack_verl_driver() -> dict:
    """A verl driver (ray.init and an actor, the watchdog first, as run_verl starts it) SIGKILLed:
    ``ray_processes_left`` counts the processes below it still running 60 s later. A resume of the verl engine's
    metrics file (the forge trainer's writer behind verl's Tracking; killed after step 3, resumed from step 2):
    ``verl_resume_lost_or_duplicated_lines`` counts iterations missing or repeated afterwards."""
    from verl.utils.tracking import Tracking

    from agent_system.testing.ray_driver import kill_a_ray_driver
    from recipe.forge.runs.tracking import read_metrics
    from recipe.forge.engines.verl.metrics_file import MetricsFileTee, metrics_file_tracker

    killed = kill_a_ray_driver()
    with tempfile.TemporaryDirectory() as out:
        for steps, resumed_at in (([1, 2, 3], 0), ([3, 4], 2)):
            tee = MetricsFileTee(Tracking("p", "e", default_backend=[]), metrics_file_tracker(out, resumed_at, False))
            for step in steps:
                tee.log(data={"x": float(step)}, step=step)
        seen = [r["iteration"] for r in read_metrics(Path(out) / "metrics.jsonl")]
    return {"ray_processes_below_killed_driver": len(killed.below), "ray_processes_left": len(killed.left),
            "ray_cluster_below_driver": int({"gcs_server", "raylet"} <= set(killed.below) and killed.reapers == 1),
            "verl_resume_lost_or_duplicated_lines": len({1, 2, 3, 4} ^ set(seen)) + len(seen) - len(set(seen))}
