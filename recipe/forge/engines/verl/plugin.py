"""verl plugin entry point (group ``verl.plugins``): ``import verl`` imports this module in every process.

It registers, in verl's own registries:

* the CPU backend (recipe/forge/engines/verl/cpu): the ``cpu`` platform, FSDP2 engines for device ``cpu`` and
  the ``hf`` rollout. It comes first: verl picks its platform when a trainer or worker module is first imported;
* the advantage estimators ``forge`` and ``gigpo`` (verl.trainer.ppo.core_algos);
* the agent loop ``forge_agent`` (verl.experimental.agent_loop), used by the AgentLoopWorkers;
* the trainer mode ``forge`` (verl.trainer.ppo.v1), used by verl's TaskRunner.

The agent loop, the trainer mode, the CPU engines and the checkpoint engine are registered when the process
imports the verl module holding their registry (after_import.when_imported), not with ``import verl``: most of a
run's Ray processes never use them, and importing them cost each such process about a third of its start-up.

It also lets transformers build a vision-language model's processor without torchvision
(vision_processor.allow_processors_without_torchvision; nothing changes where torchvision is installed): verl
loads the processor in its workers (``hf_processor``), which otherwise returns None there with only a warning, and
the agent loop then refuses image observations.

It allows the restricted unpickler the numpy pieces of verl's saved RNG states (recipe/forge/runs/torch_files.py): the
run's Ray processes read every torch file with it (``TORCH_FORCE_WEIGHTS_ONLY_LOAD`` in their runtime_env).

It keeps the notes verl logs once per episode to once per process (quiet.each_note_once).

verl swallows errors raised here (and logs them only at DEBUG level), so the tests check in a fresh
subprocess that every registration really happened. The agent loop and trainer modules import verl
submodules; by the time verl runs its plugins its own package initialisation is complete.
"""

from recipe.forge.engines.verl.cpu import register as register_cpu_backend

register_cpu_backend()

from recipe.forge.hf.vision_processor import allow_processors_without_torchvision  # noqa: E402

allow_processors_without_torchvision()

from recipe.forge.estimator_registry import register_with_verl  # noqa: E402

register_with_verl()

from recipe.forge.runs.torch_files import allow_checkpoint_globals  # noqa: E402

allow_checkpoint_globals()

from recipe.forge.engines.verl.quiet import each_note_once  # noqa: E402

each_note_once()

from importlib import import_module  # noqa: E402

from recipe.forge.engines.verl.after_import import when_imported  # noqa: E402

when_imported("verl.experimental.agent_loop", lambda _: import_module("recipe.forge.engines.verl.agent_loop"))
when_imported("verl.trainer.ppo.v1", lambda _: import_module("recipe.forge.engines.verl.trainer"))
