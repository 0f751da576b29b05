"""The four places where our plug-ins reach past verl 0.9.1's public API, kept here and nowhere else.

1. verl looks up the in-worker rollout adapter (the object the actor worker pushes weights through) in the
   module-level dict ``verl.workers.rollout.base._ROLLOUT_REGISTRY``; there is no public registration call.
2. verl's FSDP2 engine builds ``CPUOffloadPolicy(pin_memory=True)`` for forward-only engines, by the name
   ``CPUOffloadPolicy`` in ``verl.workers.engine.fsdp.transformer_impl``; on a host without an accelerator,
   pinning fails ("Cannot access accelerator device").
3. A vision-language row's position ids are (4, L): text positions and the three rotary ones. TransferQueue packs
   a field's per-row tensors with ``torch.nested.as_nested_tensor(layout=torch.jagged)``, which for rows of one
   length L succeeds with the 4 as the ragged dimension; verl's ``maybe_fix_3d_position_ids`` (called by its
   training worker and engine, by that name, in ``verl.workers.engine_workers`` and ``verl.workers.engine.base``)
   then declares L ragged, and the update's first row selection fails ("split_with_sizes expects split_sizes to
   sum exactly to L"). Rows of different lengths pack another way and are not affected, so a batch whose rows
   all have one length (a tiny model whose responses all run to the length limit) meets it; it is not
   CPU-specific. :func:`fix_3d_position_ids` repacks such a tensor and does verl's fix otherwise.
4. verl's ``TaskRunnerV1.run`` prints the whole resolved config with ``pprint``, a global of its function (of
   ``verl.trainer.main_ppo``, its only use there; in the Ray process, the globals cloudpickle rebuilt for the
   function, as ``main_ppo.TaskRunnerV1`` names Ray's actor class, not this one): about 1,000 console lines per run;
   and its V1 trainers print the whole validation metrics dict, before training and after the last iteration, with
   the ``pprint`` of ``verl.trainer.ppo.v1.trainer_base`` (its only two uses there): about 100 lines per run.
   :func:`no_console_dumps` makes both print nothing within the block (the driver writes the config to the run
   folder; every metric is in metrics.jsonl and the console's one line per iteration).

tests/verl_engine/test_cpu_backend.py checks that all four still exist in the installed verl, so an upgrade that
moves them fails loudly there instead of at run time.
"""

from __future__ import annotations

import contextlib
import functools
import threading

_PATCH_LOCK = threading.Lock()


def register_rollout_adapter(name: str, qualified_class: str) -> None:
    """Make ``actor_rollout_ref.rollout.name=<name>`` (mode ``async``) resolve to ``qualified_class``."""
    from verl.workers.rollout import base

    base._ROLLOUT_REGISTRY[(name, "async")] = qualified_class


@contextlib.contextmanager
def unpinned_cpu_offload_policy():
    """Within the block, verl's FSDP engine module builds its ``CPUOffloadPolicy`` with ``pin_memory=False``."""
    from verl.workers.engine.fsdp import transformer_impl

    with _PATCH_LOCK:
        original = transformer_impl.CPUOffloadPolicy

        @functools.wraps(original)
        def unpinned(*args, **kwargs):
            return original(*args, **{**kwargs, "pin_memory": False})

        transformer_impl.CPUOffloadPolicy = unpinned
        try:
            yield
        finally:
            transformer_impl.CPUOffloadPolicy = original


@contextlib.contextmanager
def no_console_dumps(runner_run):
    """Within the block, the ``pprint`` that verl's TaskRunner ``run`` function (``runner_run``) dumps its config with
    and the one its V1 trainers dump validation metrics with print nothing (hook 4)."""
    from verl.trainer.ppo.v1 import trainer_base

    scopes = [runner_run.__globals__, vars(trainer_base)]
    with _PATCH_LOCK:
        originals = [scope["pprint"] for scope in scopes]
        for scope in scopes:
            scope["pprint"] = lambda *args, **kwargs: None
        try:
            yield
        finally:
            for scope, original in zip(scopes, originals):
                scope["pprint"] = original


def fix_3d_position_ids(data) -> None:
    """verl's ``maybe_fix_3d_position_ids``, also for (bs, 4, L) position ids packed ragged in the 4 (hook 3)."""
    from verl.utils.tensordict_utils import nested_tensor_from_tensor_list

    if "position_ids" not in data.keys():
        return
    positions = data["position_ids"]
    if not positions.is_nested or positions.dim() != 3:
        return
    values, offsets = positions.values(), positions.offsets()
    sizes = offsets.diff()
    # packed ragged in the 4: the values are the rows' (4, L) blocks stacked, (bs * 4, L), every block 4 high;
    # ragged in L (verl's layout) they are (4, sum of L), which never has as many rows as that sum
    if values.dim() == 2 and int(offsets[-1]) == values.shape[0] and bool((sizes == sizes[0]).all()):
        rows = [values[int(start):int(end)] for start, end in zip(offsets[:-1], offsets[1:])]
        data["position_ids"] = nested_tensor_from_tensor_list(rows, ragged_idx=2)
    else:
        positions._ragged_idx = 2  # verl's own fix (the index is lost in a pickle round trip)


def install_position_ids_fix() -> None:
    """Make verl's training worker and engine call :func:`fix_3d_position_ids` (idempotent): each of the three
    modules that bind the name gets it once the process imports that module."""
    from recipe.forge.engines.verl.after_import import when_imported

    for module in ("verl.utils.tensordict_utils", "verl.workers.engine_workers", "verl.workers.engine.base"):
        when_imported(module, lambda imported: setattr(imported, "maybe_fix_3d_position_ids", fix_3d_position_ids))
