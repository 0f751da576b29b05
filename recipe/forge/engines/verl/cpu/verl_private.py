"""The two places where the CPU backend reaches past verl 0.9.1's public API, kept here and nowhere else.

1. verl looks up the in-worker rollout adapter (the object the actor worker pushes weights through) in the
   module-level dict ``verl.workers.rollout.base._ROLLOUT_REGISTRY``; there is no public registration call.
2. verl's FSDP2 engine builds ``CPUOffloadPolicy(pin_memory=True)`` for forward-only engines, by the name
   ``CPUOffloadPolicy`` in ``verl.workers.engine.fsdp.transformer_impl``; on a host without an accelerator,
   pinning fails ("Cannot access accelerator device").

tests/verl_engine/test_cpu_backend.py checks that both still exist in the installed verl, so an upgrade that
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
