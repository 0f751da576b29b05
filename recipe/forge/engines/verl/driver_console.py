"""What the verl engine's driver shows of a run: the config verl runs with, written to the run folder (verl's
runner would print it, about 1,000 lines), and one short console line per iteration, read from the metrics file the
forge trainer writes in a Ray process, as the embedded engine prints it (docs/distributed.md, "What a run prints")."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from recipe.forge.runs.console import say
from recipe.forge.runs.durable import write_text_atomic
from recipe.forge.runs.records import redacted
from recipe.forge.runs.tracking import console_line, read_metrics
from recipe.forge.runs.write_faults import writing


def write_verl_config(cfg: DictConfig, folder: str) -> Path:
    """The config verl runs with as ``<folder>/verl_config.yaml`` (verl's runner would print it to the console): as
    Hydra records a config, interpolations such as ``${oc.env:NAME}`` kept as written (never resolved: the file may
    be handed on with the run), credential values and URL user info redacted (runs/records.py)."""
    path = Path(folder) / "verl_config.yaml"
    text = OmegaConf.to_yaml(OmegaConf.create(redacted(OmegaConf.to_container(cfg, resolve=False))))
    with writing("verl's config", path):
        write_text_atomic(path, text)
    return path


class MetricsConsole:
    """The driver's console line per iteration on the verl engine: a thread reads the metrics file the forge trainer
    writes (in a Ray process, whose own prints come with Ray's prefix) and prints each new iteration's short line
    (tracking.console_line), as the embedded engine does; ``after``: the last iteration already shown (a resume's
    restored step; -1 on a fresh start, so a validation before training shows as iteration 0). The lines past
    ``after`` that the file holds at the start are an interrupted run's, which the trainer drops once it starts:
    never shown."""

    def __init__(self, folder: str, after: int, every_s: float = 1.0):
        self.path = Path(folder) / "metrics.jsonl"
        self.shown = after
        self.every_s = every_s
        self.stale = [record for record in self._records() if _iteration(record) > after]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="slea-rl-metrics-console", daemon=True)

    def __enter__(self) -> "MetricsConsole":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self.show_new()

    def _watch(self) -> None:
        while not self._stop.wait(self.every_s):
            self.show_new()

    def _records(self) -> list[dict]:
        if not self.path.is_file():
            return []
        with warnings.catch_warnings():  # a line being appended right now is read whole next time
            warnings.simplefilter("ignore")
            return read_metrics(self.path)

    def show_new(self) -> None:
        """Print the lines of the iterations logged since the last call."""
        for record in self._records():
            iteration = _iteration(record)
            if iteration > self.shown and record not in self.stale:
                say(console_line(iteration, record), prefix="")
                self.shown = iteration


def _iteration(record: dict) -> int:
    """A metrics record's iteration (-1 for a record without a number there)."""
    iteration = record.get("iteration")
    return int(iteration) if isinstance(iteration, (int, float)) else -1
