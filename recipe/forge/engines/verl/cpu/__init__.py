"""verl 0.9.1 on a CPU, as plug-ins: no fork of verl, its registries wherever they exist.

Selected by ``trainer.device=cpu`` (chosen automatically when no CUDA device is visible); then
:func:`recipe.forge.engines.verl.cpu.settings.apply_cpu_settings` fills in what the CPU needs and every Ray
process runs with ``VERL_PLATFORM=cpu``. The parts:

* ``platform``: the ``cpu`` platform in verl's ``PlatformRegistry`` (device ``cpu``, gloo collectives);
* ``engines``: verl's FSDP2 language-model and value engines registered for device ``cpu``;
* ``workers``: verl's actor/rollout/ref and critic workers that bring up a gloo process group first;
* ``hf_rollout``: the ``hf`` rollout backend (replica, server actor, in-worker weight adapter);
* ``object_store_engine``: the ``object_store`` checkpoint engine (weights to standalone rollout servers through
  Ray's object store: verl's separate_async mode);
* ``verl_private``: the only three places that reach past verl's public API (the third, the repacking of
  a vision-language batch's position ids, is not CPU-specific but has only been exercised here).

:func:`register` runs in every process through our ``verl.plugins`` entry point, before any module of ours
imports verl's trainer or workers (verl picks its platform on first use); what extends verl's engines and
checkpoint engines is registered when the process imports them.
"""

from __future__ import annotations

from importlib import import_module


def register() -> None:
    """Register the cpu platform in verl's registries now, and the hf rollout, the cpu FSDP engines, the
    object_store checkpoint engine and the position-ids fix once the process imports the verl modules they extend
    (after_import: most of a run's processes never import them)."""
    import recipe.forge.engines.verl.cpu.platform  # noqa: F401  must come first: registers the platform
    from recipe.forge.engines.verl.after_import import when_imported
    from recipe.forge.engines.verl.cpu.verl_private import install_position_ids_fix

    # each module registers its entries on import (where the process is importing it already, when it finishes)
    when_imported("verl.workers.rollout", lambda _: import_module("recipe.forge.engines.verl.cpu.hf_rollout"))
    when_imported("verl.workers.engine", lambda _: import_module("recipe.forge.engines.verl.cpu.engines"))
    when_imported("verl.checkpoint_engine",
                  lambda _: import_module("recipe.forge.engines.verl.cpu.object_store_engine"))
    install_position_ids_fix()
