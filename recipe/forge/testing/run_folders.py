"""Run-folder attacks' helpers (tests/local_engine/test_run_folder.py, scripts/reliability_attacks/run_folder.py):
a process that holds a run folder, and a folder's files."""

from __future__ import annotations

import textwrap
from pathlib import Path

from recipe.forge.runs.run_folder import LOCK_NAME

# python -c HOLDER <folder>: holds the folder's lock (as a run does), prints "holding", then waits to be killed
HOLDER = textwrap.dedent("""
    import sys, time
    from recipe.forge.runs.run_folder import hold_run_folder
    with hold_run_folder(sys.argv[1]):
        print("holding", flush=True)
        time.sleep(600)
""")


def files_under(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes, but the lock file a refused run may create."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != LOCK_NAME}


class TwoWriterPolicy:
    """A stand-in for the embedded policy with its two writers, as ``policy.save`` uses them: tokenizers (a 400 KB
    tokenizer.json) then safetensors (4 MB of weights); ``load_weights`` checks the weights came back."""

    def __init__(self):
        import torch
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel

        self.tensors = {"w": torch.arange(1_000_000, dtype=torch.float32)}
        self.tokenizer = Tokenizer(WordLevel({f"word{i}": i for i in range(20_000)}, unk_token="word0"))

    def save(self, directory: Path) -> None:
        from safetensors.torch import save_file

        directory.mkdir()
        self.tokenizer.save(str(directory / "tokenizer.json"))
        save_file(self.tensors, str(directory / "model.safetensors"))

    def load_weights(self, directory: Path) -> None:
        import torch
        from safetensors.torch import load_file

        assert torch.equal(load_file(str(directory / "model.safetensors"))["w"], self.tensors["w"])
