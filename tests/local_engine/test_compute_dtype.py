"""trainer.local.compute_dtype=auto: bf16 only where the device computes it natively."""

import pytest
import torch

from recipe.forge.engines.local.settings import LocalSettings
from recipe.forge.hf.compute import resolve_compute_dtype
from recipe.forge.config_rules import ConfigError

CPU = torch.device("cpu")


@pytest.mark.parametrize("flags, expected", [
    (frozenset({"avx2", "fma"}), "fp32"),                          # AVX2 only: bf16 would be emulated
    (frozenset({"avx512f", "avx512bw"}), "fp32"),                  # AVX-512 without its bf16 extension
    (frozenset({"avx512f", "avx512_bf16"}), "bf16"),
    (frozenset({"amx_bf16", "amx_tile"}), "bf16"),
    (frozenset(), "fp32"),                                         # flags unreadable
])
def test_auto_on_a_cpu_follows_its_bf16_flags(flags, expected):
    assert resolve_compute_dtype("auto", CPU, flags) == expected


@pytest.mark.parametrize("choice", ["fp32", "bf16"])
def test_an_explicit_choice_is_kept_whatever_the_cpu(choice):
    assert resolve_compute_dtype(choice, CPU, frozenset()) == choice
    assert resolve_compute_dtype(choice, CPU, frozenset({"avx512_bf16"})) == choice


def test_an_unknown_dtype_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="trainer.local.compute_dtype"):
        LocalSettings(compute_dtype="fp16")
