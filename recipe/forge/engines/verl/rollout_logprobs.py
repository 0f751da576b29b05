"""When the distributed engine has the rollout servers' log-probs, and what needs them.

verl writes ``rollout_log_probs`` on the rows only with ``actor_rollout_ref.rollout.calculate_log_probs=true``.
Three things read them: the rollout correction's bypass mode (the rollout log-probs become the old ones), its
importance weights and rejection (``rollout_is`` / ``rollout_rs``), and the ``forge/rollout_actor_logprob_diff_max``
metric. Without them verl skips the correction's metrics; a correction that was asked for cannot happen at all,
so it is refused before Ray starts instead of failing on a missing field after the first rollout.
"""

from __future__ import annotations

from typing import Any

from agent_system.config_checks import ConfigError


def _correction(cfg: Any) -> Any:
    return cfg.algorithm.get("rollout_correction", None)


def has_rollout_log_probs(cfg: Any) -> bool:
    """Whether the rollout servers return the log-probs of the tokens they sample."""
    return bool(cfg.actor_rollout_ref.rollout.calculate_log_probs)


def rollout_correction_runs(cfg: Any) -> bool:
    """verl's rule for its decoupled correction step: a correction section, not in bypass mode, and rollout
    log-probs on the rows."""
    correction = _correction(cfg)
    return correction is not None and not correction.get("bypass_mode", False) and has_rollout_log_probs(cfg)


def check_rollout_log_probs(cfg: Any) -> None:
    """Refuse a rollout correction that needs rollout log-probs the servers are told not to compute."""
    correction = _correction(cfg)
    if has_rollout_log_probs(cfg) or correction is None:
        return
    asked = [f"algorithm.rollout_correction.{key}={correction.get(key)!r}"
             for key in ("bypass_mode", "rollout_is", "rollout_rs") if correction.get(key)]
    if asked:
        raise ConfigError(
            f"{', '.join(asked)} needs the rollout servers' log-probs, and "
            "actor_rollout_ref.rollout.calculate_log_probs=false turns them off: set it to true, or drop the correction")
