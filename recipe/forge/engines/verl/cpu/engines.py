"""verl's FSDP2 training engines registered for device ``cpu``.

verl registers its FSDP engines (language model and value model) for ``cuda`` and ``npu`` only. On the CPU
platform the same engines work with ``strategy=fsdp2`` on a gloo device mesh, except for one line: the
forward-only (reference) engine builds ``CPUOffloadPolicy(pin_memory=True)``, and pinning host memory needs an
accelerator. The subclasses below build their FSDP module with unpinned host memory (the parameters already
live on the host) and are otherwise verl's engines unchanged.
"""

from __future__ import annotations

from verl.workers.engine.base import EngineRegistry
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

from recipe.forge.engines.verl.cpu.verl_private import unpinned_cpu_offload_policy

CPU_BACKENDS = ["fsdp", "fsdp2"]  # "fsdp" (FSDP1) is refused at start-up on the CPU: it needs a CUDA device id


class _UnpinnedOffloadMixin:
    def _build_fsdp_module(self, module):
        with unpinned_cpu_offload_policy():
            return super()._build_fsdp_module(module)


@EngineRegistry.register(model_type="language_model", backend=CPU_BACKENDS, device="cpu")
class CpuFSDPEngineWithLMHead(_UnpinnedOffloadMixin, FSDPEngineWithLMHead):
    """verl's FSDP actor / reference engine on the CPU."""


@EngineRegistry.register(model_type="value_model", backend=CPU_BACKENDS, device="cpu")
class CpuFSDPEngineWithValueHead(_UnpinnedOffloadMixin, FSDPEngineWithValueHead):
    """verl's FSDP critic engine on the CPU."""
