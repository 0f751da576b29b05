"""``slea-rl eval CHECKPOINT [options] [hydra overrides]`` (also ``python -m recipe.forge.commands.eval``): a checkpoint's
figures on held-out tasks, the same at any evaluation batch size.

N held-out tasks (seeds ``env.val_seed_offset + 0..N-1``, never trained on) x k samples each are played once per
pass: with the checkpoint's library (``with_library``), without it (``without_library``) and, with
``--library-from``, with another checkpoint's library (``other_library``); a checkpoint without a library (a
baseline, a plain model) has the second pass only. Reported per pass: avg@k and pass@k with 95% intervals
(stats.py says which), success per task type, the valid-action ratio, steps per episode; and each pass
against ``with_library``, paired over the same tasks.

Independent of the batch size (``--batch-size``, the episodes stepping together): every episode is a function of
the seed, its task and its sample index only.

* its environment starts from its task's seed (the k samples of a task share it);
* its responses are drawn from its own sample stream (protocols.SampleStream, seeded from the seed, the task
  seed and the sample index): the local generator samples each row from the row's own torch generator, the
  chat-endpoint generator sends each request the seed of its stream's next draw;
* its experiences come from its own copy of the library (experience/episode_views.py), so what other episodes
  observed changes nothing it is shown.

The passes use the same streams, so their differences are paired (common random numbers). Floating-point sums
over a padded batch can differ from those of a single row in the last bits; at a near tie that can change a
greedy token, which the test of this rule would show.

The run config is the shipped config with, in order, the overrides of the run folder's newest Hydra record of a
started run (``hydra/*/.hydra/overrides.yaml``) that an evaluation may take from a received folder (the model path
and LoRA keys, the environment, rollout, data and algorithm keys; never an endpoint, a credential, an
interpolation or code: recipe/forge/runs/records.py), then the Hydra overrides given after the options, as for
``slea-rl``; what the record supplied and which of its keys were left out is printed. A prompt-only checkpoint is
played by the endpoint the command line names (``trainer.api.base_url``, required), never a record's. Written to
``--out`` (default ``<run folder>/eval/global_step_<k>/``; checked before anything is played: outside the checkpoint,
empty or an earlier evaluation, writable): ``evaluation.json``, ``evaluation.md``, ``episodes.jsonl`` (one line
per episode and pass) and ``trajectories/`` (rollout dumps that ``slea-rl-trajectories`` shows).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from recipe.forge.commands.eval.sources import EvalSource, EvalSourceError, identify, library_folder

PASS_DUMPS = {"with_library": "val", "without_library": "val_no_library", "other_library": "val_other_library"}


@dataclasses.dataclass(frozen=True)
class Episode:
    task: int  # index of the held-out task
    sample: int  # index of the sample of that task
    task_seed: int
    stream_seed: int


def stream_seed(seed: int, task_seed: int, sample: int) -> int:
    """The sample stream's seed of episode (task, sample): a function of these three numbers only."""
    return int(np.random.SeedSequence([int(seed), int(task_seed), int(sample)]).generate_state(1)[0])


def episode_plan(tasks: int, samples: int, seed: int, val_seed_offset: int) -> list[Episode]:
    """The N x k episodes, task by task."""
    from agent_system.environments.base import task_seeds

    return [Episode(i, j, int(task_seed), stream_seed(seed, int(task_seed), j))
            for i, task_seed in enumerate(task_seeds("val", tasks, val_seed_offset)) for j in range(samples)]


def episode_record(pass_name: str, episode: Episode, trajectory) -> dict[str, Any]:
    return {"pass": pass_name, "task": episode.task, "sample": episode.sample, "task_seed": episode.task_seed,
            "stream_seed": episode.stream_seed, "task_type": trajectory.task_type, "success": bool(trajectory.success),
            "reward": float(trajectory.episode_reward), "length": int(trajectory.length),
            "valid_actions": int(sum(step.is_action_valid for step in trajectory.steps)),
            "failure_reason": trajectory.failure_reason or None, "actions": [step.action for step in trajectory.steps],
            "responses": [step.response_text for step in trajectory.steps]}


class Player:
    """Plays episodes in batches of ``batch_size`` through the shared collector: an environment manager of one
    copy per episode (built once per batch size), each episode's environment reset with its task seed."""

    def __init__(self, run, collector, generator, sampling, batch_size: int):
        from agent_system.environments.env_manager import env_config_of
        from agent_system.environments.registry import get_env_manager_class

        env = env_config_of(run)
        self.env = dataclasses.replace(env, rollout=dataclasses.replace(env.rollout, n=1))
        self.manager_class = get_env_manager_class(env.env_name)
        self.collector, self.generator, self.sampling = collector, generator, sampling
        self.batch_size = batch_size
        self._managers: dict[int, Any] = {}

    def manager(self, size: int):
        if size not in self._managers:
            self._managers[size] = self.manager_class(self.env, num_tasks=size, split="val")
        return self._managers[size]

    def play(self, plan: Sequence[Episode], provider, bar=None) -> list[Any]:
        """The trajectories of ``plan``'s episodes, in plan order (``provider``: their experiences, or None)."""
        from agent_system.multi_turn_rollout.protocols import SampleStream

        trajectories = []
        for start in range(0, len(plan), self.batch_size):
            chunk = plan[start:start + self.batch_size]
            batch = self.collector.collect(self.manager(len(chunk)), self.generator, self.sampling,
                                           experience_provider=provider, seeds=[e.task_seed for e in chunk],
                                           dynamic_sampling=False, streams=[SampleStream(e.stream_seed) for e in chunk])
            trajectories.extend(batch.trajectories)
            if provider is not None and hasattr(provider, "forget"):
                provider.forget()
            if bar is not None:
                bar.update(len(chunk))
        return trajectories

    def close(self) -> None:
        for manager in self._managers.values():
            manager.close()
        self._managers.clear()


def model_generator(run, source: EvalSource, model_dir: Path | None, batch_size: int):
    """The local HF generator of the checkpoint's policy (``model_dir``: a plain model folder instead); damaged
    weights are an EvalSourceError naming the folder."""
    import torch

    from agent_system.config_checks import ConfigError

    from recipe.forge.hf.generation import HFGenerator
    from recipe.forge.hf.model_loading import PolicyConfig, build_policy
    from recipe.forge.hf.compute import resolve_compute_dtype, resolve_device

    policy_keys = run.policy
    weights = source.path / "policy" if model_dir is None else Path(model_dir)
    try:
        if model_dir is None:
            policy = build_policy(PolicyConfig(path=policy_keys.model_path, lora_rank=policy_keys.lora_rank,
                                               lora_alpha=policy_keys.lora_alpha,
                                               target_modules=policy_keys.target_modules, use_reference=False))
            policy.load_weights(weights)
        else:
            policy = build_policy(PolicyConfig(path=str(model_dir), lora_rank=0, use_reference=False))
    except ConfigError:
        raise
    except Exception as exc:  # transformers, safetensors, peft and torch raise many kinds for damaged weights
        text = str(exc).strip()
        raise EvalSourceError(f"{weights} cannot be loaded as the policy ({type(exc).__name__}: "
                              f"{text.splitlines()[0][:300] if text else ''})") from None
    device = resolve_device(run.local.device)
    bf16 = resolve_compute_dtype(run.local.compute_dtype, device) == "bf16"
    policy.model.to(device).eval()

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    return HFGenerator(policy.model, policy.tokenizer, batch_size, autocast=autocast,
                       response_prefix=run.local.response_prefix, share_prompt_prefix=run.local.share_prompt_prefix)


def passes_of(source: EvalSource, other_library: Path | None) -> list[tuple[str, Path | None]]:
    passes = [("with_library", source.library_dir)] if source.library_dir is not None else []
    passes.append(("without_library", None))
    if other_library is not None:
        passes.append(("other_library", other_library))
    return passes


def evaluate(run, source: EvalSource, *, tasks: int, samples: int, batch_size: int, seed: int,
             temperature: float | None = None, other_library: Path | None = None, out_dir: Path | None = None,
             progress: bool = True, model_dir: Path | None = None) -> dict[str, Any]:
    """Play every pass (see the module docstring), write the report into ``out_dir`` (None: nothing written) and
    return it. ``model_dir``: the Hugging Face folder to play instead of the checkpoint's policy (a plain model,
    or a verl checkpoint's merged actor)."""
    from tqdm.auto import tqdm

    from agent_system.multi_turn_rollout.prompt_fit import PromptBudget
    from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
    from recipe.forge.runs.rollout_dump import RolloutDump, chat_prompt, decoded_prompt, shown_entries
    from recipe.forge.hf.compute import seed_everything
    from recipe.forge.commands.eval.report import build_report, write_report
    from recipe.forge.experience import ExperienceSystem
    from recipe.forge.experience.episode_views import EpisodeViews

    for name, value in (("tasks", tasks), ("samples", samples), ("batch size", batch_size)):
        if value < 1:
            raise ValueError(f"the {name} must be >= 1, got {value}")
    seed_everything(seed)
    sampling = run.rollout.sampling(True)
    if temperature is not None:
        sampling = dataclasses.replace(sampling, temperature=float(temperature), do_sample=temperature > 0)
    if source.kind == "api":
        from recipe.forge.engines.api.generator import OpenAIGenerator

        generator, tokenizer, prompt_text = OpenAIGenerator(run.api), None, chat_prompt
        collector = TrajectoryCollector()
    else:
        generator = model_generator(run, source, model_dir, batch_size)
        tokenizer, prompt_text = generator.tokenizer, decoded_prompt(generator.tokenizer.decode)
        collector = TrajectoryCollector(prompt_budget=PromptBudget(run.rollout.prompt_length, generator.prompt_length))
    plan = episode_plan(tasks, samples, seed, run.env.val_seed_offset)
    player = Player(run, collector, generator, sampling, batch_size)
    passes = passes_of(source, other_library)
    by_pass: dict[str, list[dict[str, Any]]] = {}
    records: list[dict[str, Any]] = []
    try:
        with tqdm(total=len(plan) * len(passes), desc="evaluation episodes", disable=not progress) as bar:
            for pass_name, library_dir in passes:
                system = None if library_dir is None else ExperienceSystem.from_checkpoint(library_dir, tokenizer=tokenizer, view=True)
                provider = None if system is None else EpisodeViews(system, tokenizer)
                trajectories = player.play(plan, provider, bar)
                by_pass[pass_name] = [episode_record(pass_name, e, t) for e, t in zip(plan, trajectories)]
                records.extend(by_pass[pass_name])
                if out_dir is not None:
                    entries = shown_entries(trajectories, system.library if system is not None else None)
                    RolloutDump(out_dir / "trajectories", prompt_text).write(trajectories, source.iteration or 0, entries,
                                                                              pass_name=PASS_DUMPS[pass_name])
    finally:
        player.close()
    header = {"source": str(source.path), "kind": source.kind, "iteration": source.iteration,
              "env": run.env.env_name, "tasks": tasks, "samples": samples, "seed": seed, "batch_size": batch_size,
              "temperature": sampling.temperature if sampling.do_sample else 0.0,
              "libraries": {name: None if d is None else str(d) for name, d in passes}}
    report = build_report(header, by_pass)
    if out_dir is not None:
        write_report(out_dir, report, records)
    return report


def with_recorded(source: EvalSource, given: list[str]) -> list[str]:
    """The overrides the run config is composed with: what the run's newest Hydra record of a started run may supply
    (recipe/forge/runs/records.py: never an endpoint, credential, interpolation or code), then ``given`` (the
    command line's, which win). Says on stderr what was taken and which keys were left out."""
    from recipe.forge.runs.records import safe_overrides
    from recipe.forge.safe_text import terminal_text

    recorded = safe_overrides(source.run_dir, given)
    if recorded.record is not None:
        taken = " ".join(recorded.taken) or "nothing"
        print(terminal_text(f"run config: from the run's Hydra record {recorded.record}: {taken}"), file=sys.stderr)
        if recorded.left_out:
            print(terminal_text(f"run config: left out of that record (endpoints, credentials, code, interpolations "
                                f"and keys an evaluation does not read): {', '.join(recorded.left_out)}"),
                  file=sys.stderr)
    elif source.run_dir is not None and not given:
        print(terminal_text(f"run config: {source.run_dir} holds no Hydra record of a started run; the shipped config"
                            " and the command line's overrides"), file=sys.stderr)
    return recorded.taken + list(given)


def output_folder(out: Path | None, source: EvalSource, other_library: Path | None) -> Path:
    """The folder the evaluation is written to (default ``<run>/eval/global_step_<k>/``), checked before anything is
    played: outside the evaluated checkpoint or model and the other library's checkpoint (neither inside one
    nor holding one), empty or an earlier evaluation, and writable (a probe file is written and removed)."""
    from recipe.forge.commands.eval.report import REPORT_JSON

    if out is None:
        if source.run_dir is None:
            raise EvalSourceError(f"{source.path}: a plain model folder has no run folder; give --out")
        out = source.run_dir / "eval" / source.name
    out = out.expanduser().resolve()
    for name, guarded in (("the evaluated checkpoint", source.path), ("--library-from", other_library)):
        if guarded is None:
            continue
        guarded = guarded.resolve()
        if out == guarded or out.is_relative_to(guarded) or guarded.is_relative_to(out):
            raise EvalSourceError(f"--out {out} would write into {name} {guarded} (or a folder holding it): choose a "
                                  "folder outside it")
    if out.exists() and not out.is_dir():
        raise EvalSourceError(f"--out {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / REPORT_JSON).is_file():
        raise EvalSourceError(f"--out {out} is not empty and holds no earlier evaluation ({REPORT_JSON}): choose "
                              "an empty or new folder")
    probe = out / f".slea_rl_probe_{os.getpid()}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise EvalSourceError(f"--out {out} cannot be written ({exc.strerror or type(exc).__name__}); nothing was "
                              "played") from None
    return out


def run_eval(args: argparse.Namespace, given: list[str]) -> tuple[dict[str, Any], Path]:
    """``slea-rl eval`` once its arguments are parsed: every input checked, then the passes played."""
    if args.no_progress:  # transformers' own bars too (loading weights)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    source = identify(args.checkpoint)
    other = library_folder(args.library_from) if args.library_from is not None else None
    if source.kind == "api" and not any(item.lstrip("+").startswith("trainer.api.base_url=") for item in given):
        raise EvalSourceError(f"{source.path} is a prompt-only checkpoint: name the endpoint that plays it with "
                              "trainer.api.base_url=URL (a run's record never supplies one)")
    overrides = with_recorded(source, given)
    out_dir = output_folder(args.out, source, args.library_from if other is not None else None)
    run = load_config(overrides, source)
    if source.kind == "api":
        from recipe.forge.safe_text import terminal_text

        print(terminal_text(f"endpoint: {run.api.base_url} (model {run.api.model}, key from ${run.api.api_key_env})"),
              file=sys.stderr)
    with played_model(source) as model_dir:
        report = evaluate(run, source, tasks=run.data.val_batch_size if args.tasks is None else args.tasks,
                          samples=run.rollout.val_copies if args.samples is None else args.samples,
                          batch_size=args.batch_size, seed=run.seed if args.seed is None else args.seed,
                          temperature=args.temperature, other_library=other, out_dir=out_dir,
                          progress=not args.no_progress, model_dir=model_dir)
    return report, out_dir


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="slea-rl eval", description=" ".join(__doc__.split("\n\n")[0].split()),
                                epilog="Further arguments are Hydra overrides of the run config, as for slea-rl.")
    p.add_argument("checkpoint", type=Path, help="global_step_<k>/ of either engine, or a Hugging Face model folder")
    p.add_argument("--tasks", type=int, default=None, help="held-out tasks (default: data.val_batch_size)")
    p.add_argument("--samples", "-k", type=int, default=None,
                   help="samples per task (default: actor_rollout_ref.rollout.val_kwargs.n, else env.rollout.n)")
    p.add_argument("--batch-size", type=int, default=8, help="episodes stepping together (default 8); the figures do not depend on it")
    p.add_argument("--seed", type=int, default=None, help="default: the run config's env.seed")
    p.add_argument("--temperature", type=float, default=None,
                   help="default: actor_rollout_ref.rollout.val_kwargs.temperature (0: greedy)")
    p.add_argument("--library-from", type=Path, default=None, help="another checkpoint whose library is also evaluated")
    p.add_argument("--out", type=Path, default=None, help="default: <run folder>/eval/global_step_<k>/")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    from agent_system.config_checks import ConfigError

    from recipe.forge.runs.durable import CheckpointError
    from recipe.forge.runs.checkpoint_source import ExportError
    from recipe.forge.safe_text import terminal_text
    from recipe.forge.runs.torch_files import weights_only_loads

    args, overrides = parser().parse_known_args(argv)
    try:
        with weights_only_loads():  # no torch file of the checkpoint or model runs code (torch_files.py)
            report, out_dir = run_eval(args, overrides)
    except (EvalSourceError, ExportError, ConfigError, CheckpointError, ValueError) as exc:
        print(f"slea-rl eval: {terminal_text(exc)}", file=sys.stderr)
        return 2
    from recipe.forge.commands.eval.report import console_table

    print(console_table(report))
    print(f"written to {terminal_text(out_dir)}")
    return 0


@contextlib.contextmanager
def played_model(source: EvalSource):
    """The Hugging Face folder to play instead of a checkpoint's policy: a plain model's own folder; a verl
    checkpoint's actor merged by verl's model merger into a temporary folder (removed afterwards); None for
    the embedded and prompt-only engines' checkpoints."""
    if source.kind == "hf":
        yield source.path
    elif source.kind == "verl":
        from recipe.forge.runs.policy_weights import write_verl_policy

        with tempfile.TemporaryDirectory(prefix="slea_rl_eval_") as folder:
            write_verl_policy(source.policy, Path(folder))
            yield Path(folder)
    else:
        yield None


def load_config(overrides: list[str], source: EvalSource):
    """The checked run config of the shipped config with ``overrides``, on the engine that plays ``source``: the
    prompt-only engine's sections for its checkpoints, the embedded engine's for every model (a verl checkpoint's
    actor too, once merged)."""
    from recipe.forge.run_config import compose_config, load_run_config

    engine = "api" if source.kind == "api" else "local"
    kept = [item for item in overrides if not item.lstrip("+~").startswith("trainer.engine=")]
    return load_run_config(compose_config(kept + [f"trainer.engine={engine}"]))


if __name__ == "__main__":
    sys.exit(main())
