"""Where the policy computes and in which dtype (``trainer.local.device``, ``trainer.local.compute_dtype``), and
the process's random seeds: the embedded engine's trainer and ``slea-rl eval`` set them up the same way."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch


def resolve_device(choice: str) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags() -> frozenset[str]:
    """The CPU feature flags Linux reports (empty where /proc/cpuinfo is not readable)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    return frozenset(word for line in text.splitlines() if line.startswith("flags") for word in line.split()[2:])


def resolve_compute_dtype(choice: str, device: torch.device, flags: frozenset[str] | None = None) -> str:
    """``trainer.local.compute_dtype``: fp32 or bf16 as given; ``auto`` = bf16 where the device computes it
    natively (a CUDA GPU with bf16, a CPU with AVX512-BF16 or AMX), else fp32: without native support a CPU
    emulates bf16 matrix products several times slower than fp32 ones."""
    if choice != "auto":
        return choice
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if CPU_BF16_FLAGS & (cpu_flags() if flags is None else flags) else "fp32"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
