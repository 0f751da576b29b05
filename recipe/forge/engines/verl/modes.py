"""verl's V1 trainer modes as SLEA-RL names them: the values of ``trainer.v1.trainer_mode`` and the forge trainer
registered in verl's trainer registry for each (recipe/forge/engines/verl/trainer.py). A leaf: it imports nothing."""

from __future__ import annotations

VERL_MODES = ("sync", "colocate_async", "separate_async")
ASYNC_MODES = ("colocate_async", "separate_async")
# verl mode -> the trainer class registered for it in verl's trainer registry
REGISTERED_MODES = {"sync": "forge", "colocate_async": "forge_colocate_async", "separate_async": "forge_separate_async"}
MODE_KEY = "trainer.v1.trainer_mode"


def verl_mode(value: object) -> str | None:
    """The verl mode of a ``trainer.v1.trainer_mode`` value: a verl mode or the forge trainer's registered name of
    one (run_verl writes the registered name into verl's config); None for anything else."""
    text = str(value)
    if text in VERL_MODES:
        return text
    return {name: mode for mode, name in REGISTERED_MODES.items()}.get(text)
