"""The ``cpu`` device platform for verl (``VERL_PLATFORM=cpu``).

verl resolves its platform once per process, on the first ``get_platform()`` call, from the environment
variable ``VERL_PLATFORM`` and its ``PlatformRegistry``. verl 0.9.1 registers only accelerators; without this
class a CPU machine falls back to ``nvidia`` (device ``cuda``, backend ``nccl``). Registration happens in our
``verl.plugins`` entry point before anything else of ours imports verl's trainer or worker modules, so it is in
place in every process that ``import verl`` runs in.

verl calls ``get_torch_device().<fn>()`` for caches, streams, RNG state and memory statistics; ``torch.cpu``
lacks most of them, so :class:`CpuDeviceModule` supplies them: no-op caches and synchronisation, zero
allocator statistics, and the host's free/total memory for ``mem_get_info``.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Optional

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"


def host_memory() -> tuple[int, int]:
    """(available, total) bytes of host memory, from /proc/meminfo (0, 0 where it is unreadable)."""
    fields: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, value = line.split(":", 1)
                fields[name] = int(value.split()[0]) * 1024
    except OSError:
        return 0, 0
    return fields.get("MemAvailable", 0), fields.get("MemTotal", 0)


class CpuDeviceModule:
    """``torch.cuda``'s surface as verl uses it, on the CPU (a drop-in for ``get_torch_device()``)."""

    Stream = torch.cpu.Stream
    Event = torch.Event
    stream = staticmethod(torch.cpu.stream)
    current_stream = staticmethod(torch.cpu.current_stream)
    get_rng_state = staticmethod(torch.get_rng_state)
    set_rng_state = staticmethod(torch.set_rng_state)
    manual_seed = staticmethod(torch.manual_seed)
    manual_seed_all = staticmethod(torch.manual_seed)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def ipc_collect() -> None:
        return None

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        return None

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        return host_memory()

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def max_memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """verl's platform interface on the host CPU: device ``cpu``, collectives over gloo.

    Ray still schedules verl's workers on logical ``GPU`` resources (verl's resource pools count GPUs only), so
    a CPU run starts Ray with ``num_gpus`` logical GPUs; nothing here touches a real accelerator.
    """

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> CpuDeviceModule:
        return CpuDeviceModule()

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # only chosen explicitly (VERL_PLATFORM=cpu), never by verl's auto-detection
        return False

    def current_device(self) -> str:
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def selected() -> bool:
    """True when this process runs verl on the CPU platform."""
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME
