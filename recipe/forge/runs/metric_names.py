"""One name per metric on both engines, and the names older metrics files used.

Timing follows verl's ``timing_s/<phase>`` with verl's phase names where the phase is the same (``gen``: the
rollout, ``adv``: the advantages, ``update_actor``: the update, ``step``: the whole iteration); the embedded
engine's own phases keep their names under the same prefix. Episode statistics use the names of the
engine-independent rollout metrics (agent_system/multi_turn_rollout/rollout_loop.py), which verl does not
define: ``success_rate``, ``episode_reward/mean``, ``episode_length/mean``, ``valid_action_ratio``,
``num_trajectories``, ``num_steps``.
"""

from __future__ import annotations

from typing import Any

# the name a metric had in files written before the names were unified -> its name now
RENAMED = {
    "timing/rollout_s": "timing_s/gen",
    "timing/prepare_s": "timing_s/prepare",
    "timing/forge_advantage_s": "timing_s/adv",
    "timing/update_s": "timing_s/update_actor",
    "timing/forge_retrieval_s": "timing_s/forge_retrieval",
    "timing/forge_evolution_s": "timing_s/forge_evolution",
    "timing/phases_total_s": "timing_s/phases_total",
    "timing/iteration_s": "timing_s/step",
    "timing/forge_share": "perf/forge_time_share",
    "episode/success_rate": "success_rate",  # the verl engine's former names
    "episode/return_mean": "episode_reward/mean",
    "episode/return_std": "episode_reward/std",
    "episode/length_mean": "episode_length/mean",
    "episode/valid_action_ratio": "valid_action_ratio",
    "episode/num_trajectories": "num_trajectories",
    "episode/num_steps": "num_steps",
}


VALIDATION_PREFIXES = ("val/", "val_no_library/")


def current_name(key: str) -> str:
    """The current name of a metric key, also under a validation prefix (``val/episode/success_rate``)."""
    for prefix in VALIDATION_PREFIXES:
        if key.startswith(prefix):
            return prefix + current_name(key[len(prefix):])
    return RENAMED.get(key, key)


def with_current_names(record: dict[str, Any]) -> dict[str, Any]:
    """A metrics record with every former name read as its current name; a current name present wins."""
    out = {current_name(k): v for k, v in record.items() if current_name(k) != k}
    out.update({k: v for k, v in record.items() if current_name(k) == k})
    return out
