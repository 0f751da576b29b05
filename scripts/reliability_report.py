"""Reliability report: what a hostile user can feed in (issue 14), attacked in bounded time and counted.

    python scripts/reliability_report.py --json           # one JSON line of counts (about 10 min on 2 cores)
    python scripts/reliability_report.py --quick --json   # fewer repetitions (tests/foundation runs this)

Attacks and what each count means (the goal: every fault caught):

* config: bad overrides of the shipped config. ``config_clean_errors`` counts ConfigErrors that name the key;
  ``config_errors_after_model_load`` counts faults that only failed once a (tiny) model was built;
  ``config_cli_error_seconds_max``: wall time of ``python -m recipe.forge.main_forge <bad value>`` to its error.
* library: damaged experience-library files (bytes: truncation, bit flips, foreign documents; content with a
  valid checksum: NaN, wrong types, negative counts, unknown fields). ``library_clean_errors`` counts
  CheckpointErrors (and the viewer's exit code 2); ``library_half_restored`` counts loads that failed after
  changing the running system.
* kills mid-save: a forked writer saving trainer checkpoints (optimizer, RNGs, library) is SIGKILLed at random
  moments; ``unloadable_after_kill`` counts output folders a resume could not load afterwards.
  ``concurrent_save_failures``: two writers saving the same library folder at once.
* replaced files: optimizer.pt, critic.pt and a planted rng.pt hold a pickle that creates a marker file when
  unpickled; ``code_executed_on_resume`` says whether any resume created it.
* resume kills: an embedded-engine run (tiny model, NumberLine) is SIGKILLed mid-iteration and resumed with
  ``trainer.resume_mode=auto`` until done; ``resume_lost_or_duplicated_lines`` counts metrics.jsonl iterations
  missing or repeated, ``tensorboard_duplicate_steps`` TensorBoard steps seen twice.
* fuzz: random model outputs (any Unicode, lone surrogates, control characters, tag soup, long text) stepped
  through the environment managers and through a rollout into the experience library and its file;
  ``fuzz_crashes`` counts exceptions that escaped.
* workers and AppWorld: environment faults in worker processes (crash, hang, raise, unpicklable info) and
  AppWorld code that never ends; the ``*_contained`` counts say how many ended only their own episode.

Issue 23's attacks (scripts/reliability_attacks/, one module per area; each module's docstring says what its
counts mean and what "caught" is):

* run folder (``run_folder``): two runs on one folder, disk-full, read-only and permission-denied saves,
  escaping run paths, ``resume_mode=disable`` over folders and metrics files it did not write;
* sizes (``sizes``): a 100,000-character answer and 1-5 MB observations through the experience system;
* endpoints, exports, server (``endpoints``): a faulty chat endpoint under the prompt-only engine, markup and
  terminal escapes in lesson text, bad requests to the Search retrieval server;
* verl driver (``verl_driver``): a killed driver's Ray processes, a resumed verl metrics file;
* readers (issue 24; ``trajectory_viewer``, ``library_diff``): hostile model text and bad inputs on the trajectory
  page (slea-rl-trajectories) and in ``slea-rl-library diff``.

Issue 35's attacks (a received checkpoint or run folder, bounded inputs, silent failures, the cluster helper):

* received (``received``): planted pickles in every checkpoint file a command or resume reads; a run folder
  whose Hydra records name another endpoint, a secret, interpolations, code and an alias bomb; refused
  commands' records; eval's and export's output folders; damaged weights;
* bounded inputs (``bounded_inputs``): 5,000-digit integers and 100,000-deep lines in every JSON reader, a
  library diff with next_id 10^18, malformed and oversized image observations;
* run lifecycle (``run_lifecycle``): an endpoint answering only garbage, trainers started from Python on a held
  folder;
* cluster (``cluster``): the Ray cluster helper on a fresh machine, SIGKILLed (and SIGTERMed) mid-run, its port
  search for 5 to 250 nodes.

The report is the list ``ATTACKS`` (reliability_attacks.Attack: the attack, its "caught" condition, the totals
its counts feed); the JSON holds every count, ``caught`` (each attack's verdict), the totals ``total_code_ran``,
``total_secrets_sent_or_written``, ``total_runs_lost_or_mistaken``, ``total_tracebacks``,
``total_processes_left`` and ``total_hangs``, and ``all_caught``: every verdict true and every total 0.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import io
import json
import math
import os
import pickle
import random
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reliability_attacks import REPO, TOTALS, Attack, add_totals, compose_shipped  # noqa: E402
from reliability_attacks import bounded_inputs, cluster, received, run_lifecycle, sweeps  # noqa: E402
from recipe.forge.testing.received import RunsCode, small_system  # noqa: E402
from reliability_attacks.library_diff import attack_library_diff  # noqa: E402
from reliability_attacks.trajectory_viewer import attack_trajectory_page  # noqa: E402
from reliability_attacks.endpoints import (attack_endpoint_faults, attack_exports,  # noqa: E402
                                           attack_retrieval_server)
from reliability_attacks.run_folder import (attack_disk_faults, attack_escaping_paths,  # noqa: E402
                                            attack_foreign_folders, attack_run_folder_lock)
from reliability_attacks.sizes import attack_sizes  # noqa: E402
from reliability_attacks.verl_driver import attack_verl_driver  # noqa: E402
A = "actor_rollout_ref.actor"

# (values set on the shipped config, a word of the key the error must name)
CONFIG_FAULTS = [
    ({f"{A}.optim.lr": "abc"}, "optim.lr"), ({f"{A}.optim.lr": -1.0}, "optim.lr"),
    ({f"{A}.optim.lr": float("nan")}, "optim.lr"), ({f"{A}.grad_clip": "abc"}, "grad_clip"),
    ({f"{A}.grad_clip": 0}, "grad_clip"), ({f"{A}.optim.betas": [0.9]}, "betas"),
    ({f"{A}.optim.betas": [0.9, 1.5]}, "betas"), ({f"{A}.optim.weight_decay": "x"}, "weight_decay"),
    ({f"{A}.ppo_micro_batch_size_per_gpu": 0}, "ppo_micro_batch_size_per_gpu"),
    ({f"{A}.ppo_mini_batch_size": 2.5}, "ppo_mini_batch_size"), ({f"{A}.ppo_epochs": 0}, "ppo_epochs"),
    ({f"{A}.kl_loss_type": "nope"}, "kl_loss_type"), ({f"{A}.use_kl_loss": "maybe"}, "use_kl_loss"),
    ({f"{A}.policy_loss.loss_mode": "nope"}, "loss_mode"),
    ({"actor_rollout_ref.rollout.top_k": "abc"}, "top_k"), ({"actor_rollout_ref.rollout.top_k": -5}, "top_k"),
    ({"actor_rollout_ref.rollout.top_p": 0}, "top_p"), ({"actor_rollout_ref.rollout.temperature": -1}, "temperature"),
    ({"actor_rollout_ref.rollout.response_length": 0}, "response_length"),
    ({"actor_rollout_ref.model.lora_alpha": "abc"}, "lora_alpha"), ({"actor_rollout_ref.model.lora_rank": -1}, "lora_rank"),
    ({"actor_rollout_ref.model.path": "/nowhere/model"}, "model.path"),
    ({"actor_rollout_ref.model.path": "someone/not-cached-model"}, "model.path"),
    ({"trainer.resume_mode": "resume_path"}, "resume_from_path"),
    ({"trainer.resume_mode": "resume_path", "trainer.resume_from_path": "/nowhere/global_step_3"}, "resume_from_path"),
    ({"trainer.resume_mode": "sometimes"}, "resume_mode"), ({"trainer.total_training_steps": 0}, "total_training_steps"),
    ({"trainer.local.compute_dtype": "fp8"}, "compute_dtype"), ({"algorithm.adv_estimator": "nope"}, "adv_estimator"),
    ({"algorithm.forge.golden_capacity_per_level": 0}, "golden_capacity_per_level"),
    ({"algorithm.forge.top_k_golden": -1}, "top_k_golden"), ({"algorithm.forge.obs_similarity_threshold": 2}, "obs_similarity_threshold"),
    ({"algorithm.forge.checkpoint_dir": ""}, "checkpoint_dir"), ({"algorithm.gamma": 1.5}, "gamma"),
    ({"env.rollout.n": 0}, "rollout.n"), ({"env.appworld.timeout_s": 0}, "appworld.timeout_s"),
]
CLI_FAULTS = [f"{A}.optim.lr=abc", "algorithm.forge.golden_capacity_per_level=0"]


# ------------------------------------------------------------------------------------------------ helpers

def with_values(cfg, values: dict):
    from omegaconf import OmegaConf

    cfg = copy.deepcopy(cfg)
    for key, value in values.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


def fork_and_kill(child, delay_s: float) -> None:
    """Run ``child()`` in a forked process and SIGKILL it after ``delay_s`` (unless it finished)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                child()
        finally:
            os._exit(0)
    deadline = time.monotonic() + delay_s
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


# ------------------------------------------------------------------------------------------------ attacks

def attack_config(timing: bool) -> dict:
    from agent_system.config_checks import ConfigError
    from recipe.forge.main_forge import validate

    shipped = compose_shipped()
    clean = after_model = silent = 0
    for values, key in CONFIG_FAULTS:
        cfg = with_values(shipped, values)
        try:
            validate(cfg)
        except ConfigError as exc:
            clean += key in str(exc)
            continue
        try:  # not caught at start-up: does it fail once a model exists, or pass silently?
            build_trainer_and_step(cfg)
            silent += 1
        except Exception:  # noqa: BLE001  (any later failure is the finding)
            after_model += 1
    result = {"config_faults": len(CONFIG_FAULTS), "config_clean_errors": clean,
              "config_errors_after_model_load": after_model, "config_silently_accepted": silent}
    if timing:  # wall time depends on what else the machine runs; CPU time is the command's own cost
        wall, cpu = [], []
        for fault in CLI_FAULTS:
            started, before = time.perf_counter(), _children_cpu()
            proc = subprocess.run([sys.executable, "-m", "recipe.forge.main_forge", fault], cwd=REPO,
                                  capture_output=True, text=True, timeout=120)
            wall.append(time.perf_counter() - started)
            cpu.append(_children_cpu() - before)
            result.setdefault("config_cli_exit_codes", []).append(proc.returncode)
        result["config_cli_error_seconds_max"] = round(max(wall), 2)
        result["config_cli_error_cpu_seconds_max"] = round(max(cpu), 2)
    return result


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def build_trainer_and_step(cfg) -> None:
    from omegaconf import OmegaConf

    from recipe.forge.hf.tiny import script_policy
    from recipe.forge.engines.local.trainer import Components, LocalTrainer
    from recipe.forge.main_forge import validate

    tiny = ["env.env_name=gym_cards/NumberLine-v0", "env.max_steps=2", "env.rollout.n=2", "data.train_batch_size=1",
            "data.val_batch_size=1", "trainer.total_training_steps=1", "trainer.logger=[jsonl]",
            "trainer.local.progress=false", "actor_rollout_ref.rollout.response_length=4"]
    with tempfile.TemporaryDirectory() as out:
        merged = OmegaConf.merge(cfg, OmegaConf.from_dotlist(tiny + [f"trainer.default_local_dir={out}"]))
        trainer = LocalTrainer(validate(merged), Components(policy=script_policy("tiny", tiny=True)))
        trainer.train_iteration(0)


def _damaged_bytes(raw: bytes, rng: random.Random, count: int) -> list[bytes]:
    body = len(raw) - 1  # the final newline carries no content
    out = [b"", raw[: body // 2], raw[: body - 2], b'{"hello": "world"}', rng.randbytes(200),
           raw.replace(b'"schema_version": 1', b'"schema_version": 9', 1)]
    while len(out) < count:
        flipped = bytearray(raw)
        flipped[rng.randrange(body)] ^= 1 << rng.randrange(8)
        out.append(bytes(flipped))
    return out


def _content_edits() -> list:
    def entry(p):
        return p["library"]["entries"][0]

    def cluster(p):
        return p["index"]["clusters"][0]

    return [
        lambda p: entry(p).update(score=math.nan), lambda p: entry(p).update(score=10**400),
        lambda p: entry(p).update(cluster_ids=["3"]), lambda p: entry(p).update(cluster_ids=[1.5]),
        lambda p: entry(p).update(support=-4), lambda p: entry(p).update(retrieval_count=-1),
        lambda p: entry(p).update(extra=1), lambda p: entry(p).update(text=["x"]),
        lambda p: entry(p).update(zone="gold"), lambda p: entry(p).update(entry_id=10**6),
        lambda p: cluster(p).update(uses=-2), lambda p: cluster(p).update(color="red"),
        lambda p: p["index"].update(threshold=3.0), lambda p: p["index"].update(max_clusters=0),
        lambda p: p["library"].update(golden_capacity=-1), lambda p: p["counters"].update(bogus={}),
        lambda p: p["counters"]["retrieval"].update(bogus=1), lambda p: p["counters"]["totals"].update(merged="many"),
        lambda p: p.update(iteration=True), lambda p: p["library"].update(entries={"a": 1}),
    ]


def attack_library(byte_damages: int) -> dict:
    from recipe.forge.experience import CheckpointError
    from recipe.forge.experience.store import FILENAME, _canonical, load_payload
    from recipe.forge.commands.library_viewer import main as viewer_main

    rng = random.Random(14)
    faults = clean = half = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        system = small_system()
        system.save(folder)
        raw = (folder / FILENAME).read_bytes()
        original = load_payload(folder)
        variants = _damaged_bytes(raw, rng, byte_damages)
        for change in _content_edits():
            document = json.loads(raw)
            change(document["payload"])
            document["sha256"] = hashlib.sha256(_canonical(document["payload"])).hexdigest()
            variants.append(json.dumps(document, ensure_ascii=False).encode("utf-8"))
        deep = "[" * 100_000 + "]" * 100_000
        variants.append(raw.replace(b'"config":{', f'"config":{{"deep":{deep},'.encode(), 1))
        for data in variants:
            (folder / FILENAME).write_bytes(data)
            try:
                if load_payload(folder) == original:
                    continue  # the damage changed nothing that is read: not a fault
            except CheckpointError:
                pass
            except Exception:  # noqa: BLE001  (an escaping exception is the finding)
                pass
            faults += 1
            before = system.state()
            try:
                system.load(folder)
            except CheckpointError:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    clean += viewer_main([str(folder), "--quiet"]) == 2
            except Exception:  # noqa: BLE001
                pass
            half += system.state() != before
    return {"damaged_library_files": faults, "library_clean_errors": clean, "library_half_restored": half}


def _save_loop(out: Path) -> None:
    import numpy as np
    import torch

    from recipe.forge.runs.checkpoint import save_checkpoint

    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 64)).sum().backward()
    optimizer.step()
    rngs = {"sampler": torch.Generator().manual_seed(0), "shuffle": np.random.default_rng(0)}
    system = small_system()
    k = 0
    while True:
        k += 1
        save_checkpoint(out, k, optimizer=optimizer, rng=rngs, experience=system)
        system.save(out / "forge_library")


def attack_kills_mid_save(kills: int) -> dict:
    import numpy as np
    import torch

    from recipe.forge.runs.durable import CheckpointError
    from recipe.forge.runs.checkpoint import latest_checkpoint, load_checkpoint
    from recipe.forge.experience.store import load_payload

    rng = random.Random(7)
    unloadable = 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for _ in range(kills):
            fork_and_kill(lambda: _save_loop(out), rng.uniform(0.05, 0.6))
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    path = latest_checkpoint(out)
                if path is not None:
                    model = torch.nn.Linear(64, 64)
                    load_checkpoint(path, optimizer=torch.optim.AdamW(model.parameters()), experience=small_system(),
                                    rng={"sampler": torch.Generator(), "shuffle": np.random.default_rng()})
                if (out / "forge_library").exists():
                    load_payload(out / "forge_library")
            except (CheckpointError, OSError, ValueError):
                unloadable += 1
    return {"kills_mid_save": kills, "unloadable_after_kill": unloadable}


def attack_concurrent_writers(saves: int) -> dict:
    """Two processes save the same library folder at once; a failed save exits the writer with code 1."""
    from recipe.forge.experience.store import load_payload, save_payload

    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        state = small_system().state()
        pids = []
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    for _ in range(saves):
                        save_payload(tmp, state)
                except BaseException:  # noqa: BLE001
                    code = 1
                os._exit(code)
            pids.append(pid)
        for pid in pids:
            failures += os.waitpid(pid, 0)[1] != 0
        failures += load_payload(tmp) != state
    return {"concurrent_saves": 2 * saves, "concurrent_save_failures": failures}


def attack_replaced_files() -> dict:
    import numpy as np
    import torch

    from recipe.forge.runs.durable import CheckpointError
    from recipe.forge.runs.checkpoint import load_checkpoint, save_checkpoint

    executed = refused = attempts = 0
    with tempfile.TemporaryDirectory() as tmp:
        for target in ("optimizer.pt", "critic.pt", "rng.pt"):
            out = Path(tmp) / target
            marker = Path(tmp) / f"pwned-{target}"

            def parts():
                model, critic = torch.nn.Linear(3, 2), torch.nn.Linear(3, 1)
                return (torch.optim.AdamW(model.parameters()), critic, torch.optim.AdamW(critic.parameters()),
                        {"sampler": torch.Generator(), "shuffle": np.random.default_rng()})

            optimizer, critic, critic_optimizer, rngs = parts()
            path = save_checkpoint(out, 1, optimizer=optimizer, rng=rngs, critic=critic,
                                   critic_optimizer=critic_optimizer)
            if target == "rng.pt":
                (path / "rng.json").unlink()
            (path / target).write_bytes(pickle.dumps({"state": RunsCode(marker)}))
            attempts += 1
            optimizer, critic, critic_optimizer, rngs = parts()
            try:
                load_checkpoint(path, optimizer=optimizer, rng=rngs, critic=critic, critic_optimizer=critic_optimizer)
            except CheckpointError:
                refused += 1
            executed += marker.exists()
    return {"replaced_checkpoint_files": attempts, "replaced_files_refused": refused,
            "code_executed_on_resume": executed > 0}


def _resume_run(out: Path, iterations: int, policy) -> None:
    from recipe.forge.engines.local.trainer import Components, LocalTrainer
    from recipe.forge.main_forge import validate

    cfg = compose_shipped([
        "env.env_name=gym_cards/NumberLine-v0", "env.gym_cards.target_max=3", "env.max_steps=3", "env.rollout.n=2",
        "env.history_length=0", "data.train_batch_size=2", "data.val_batch_size=1",
        f"trainer.total_training_steps={iterations}", "trainer.test_freq=-1", "trainer.save_freq=1",
        "trainer.val_before_train=false", "trainer.resume_mode=auto", "trainer.local.progress=false",
        "trainer.logger=[jsonl,tensorboard]", f"trainer.default_local_dir={out}",
        "actor_rollout_ref.rollout.response_length=6", "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "algorithm.forge.warmup_iterations=0",
        "algorithm.forge.min_library_size=0", "algorithm.forge.library_save_freq=1",
    ])
    LocalTrainer(validate(cfg), Components(policy=copy.deepcopy(policy))).fit()


def attack_resume_kills(kills: int, iterations: int) -> dict:
    import torch

    from recipe.forge.hf.tiny import script_policy
    from recipe.forge.runs.tracking import read_metrics

    torch.set_num_threads(1)
    policy = script_policy("tiny", tiny=True)
    rng = random.Random(3)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        progressed = 0  # kills that came after at least one logged iteration (a resume had work to keep)
        for _ in range(kills):
            fork_and_kill(lambda: _resume_run(out, iterations, policy), rng.uniform(1.0, 6.0))
            progressed += (out / "metrics.jsonl").exists() and bool((out / "metrics.jsonl").read_text().strip())
        fork_and_kill(lambda: _resume_run(out, iterations, policy), 600.0)  # the last one runs to the end
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seen = [r["iteration"] for r in read_metrics(out / "metrics.jsonl")] if (out / "metrics.jsonl").exists() else []
        expected = list(range(1, iterations + 1))
        lost_or_duplicated = sum(abs(seen.count(i) - 1) for i in expected) + sum(i not in expected for i in seen)
        tb_duplicates = _tensorboard_duplicates(out / "tensorboard")
    return {"resume_kills": kills, "resume_kills_after_progress": progressed, "resume_iterations": iterations,
            "resume_lost_or_duplicated_lines": lost_or_duplicated, "tensorboard_duplicate_steps": tb_duplicates}


def _tensorboard_duplicates(folder: Path) -> int:
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        return 0
    events = EventAccumulator(str(folder))
    events.Reload()
    steps = [e.step for e in events.Scalars("success_rate")] if "success_rate" in events.Tags()["scalars"] else []
    return len(steps) - len(set(steps))


# fuzzed model outputs ---------------------------------------------------------------------------------------

PIECES = ["<action>", "</action>", "<think>", "</think>", "<search>", "</search>", "<answer>", "</answer>",
          "```python\n", "```", "\ud800", "\udfff", "\x00", "\u202e", "\ufeff", "\U0001f600", "up", "left", "+", "-",
          "search[shoes]", "click[buy now]", "go to desk 1", "print(1)", "apis.supervisor.complete_task()", "\n", " "]


def fuzz_text(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.3:
        return "".join(chr(rng.choice([rng.randrange(0x110000), rng.randrange(0xD800, 0xE000), rng.randrange(32)]))
                       for _ in range(rng.randrange(0, 60)))
    if kind < 0.9:
        return "".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 12)))
    return rng.choice(PIECES) * rng.randrange(100, 3000)


def fuzz_env(env_name: str, outputs: int, rng: random.Random, **env_overrides) -> tuple[int, int]:
    """Step a manager with fuzzed outputs; returns (outputs stepped, exceptions that escaped)."""
    from agent_system.environments.registry import get_env_manager_class
    from agent_system.testing.configs import env_config

    cfg = env_config(env_name, n=2, max_steps=6, **env_overrides)
    envs = get_env_manager_class(env_name)(cfg, num_tasks=4, split="train")
    stepped = crashes = 0
    try:
        envs.reset()
        while stepped < outputs:
            try:
                if not envs.active.any():
                    envs.reset()
                _, _, _, _ = envs.step([fuzz_text(rng) for _ in range(envs.num_envs)])
            except Exception:  # noqa: BLE001  (an escaping exception is the finding)
                crashes += 1
                envs.reset()
            stepped += envs.num_envs
    finally:
        envs.close()
    return stepped, crashes


class FuzzGenerator:
    """A Generator whose responses are fuzzed text."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def generate(self, messages, sampling):
        from agent_system.multi_turn_rollout.protocols import GenerationOutput

        return [GenerationOutput(fuzz_text(self.rng), [], [], []) for _ in messages]


def fuzz_rollout_into_library(rng: random.Random, iterations: int) -> tuple[int, int]:
    """Fuzzed outputs through the rollout, into library evolution, its file and back."""
    from agent_system.multi_turn_rollout.protocols import SamplingParams
    from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
    from agent_system.environments.registry import get_env_manager_class
    from agent_system.testing.configs import env_config
    from recipe.forge.experience import ExperienceSystem

    envs = get_env_manager_class("sokoban")(env_config("sokoban", n=2, max_steps=4), num_tasks=4, split="train")
    system = small_system()
    collector = TrajectoryCollector(progress=False)
    stepped = crashes = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(iterations):
            try:
                system.begin_iteration(i)
                batch = collector.collect(envs, FuzzGenerator(rng), SamplingParams(), experience_provider=system.provider)
                stepped += sum(len(t.steps) for t in batch.trajectories)
                system.evolve(batch.trajectories, i)
                system.save(tmp)
                ExperienceSystem.from_checkpoint(tmp, system.cfg)
            except Exception:  # noqa: BLE001
                crashes += 1
    envs.close()
    return stepped, crashes


def attack_fuzz(outputs_per_env: int) -> dict:
    rng = random.Random(11)
    total = crashes = 0
    targets = [("sokoban", {}), ("gym_cards/NumberLine-v0", {}), ("gym_cards/EZPoints-v0", {}),
               ("gym_cards/Blackjack-v0", {}), ("webshop", {"webshop": {"num_products": 30}}),
               ("search", {}), ("appworld", {"appworld": {"use_standin": True, "timeout_s": 5.0},
                                             "resources_per_worker": {"num_workers": 1}})]
    for env_name, overrides in targets:
        budget = outputs_per_env // 10 if env_name == "appworld" else outputs_per_env  # a process round trip each
        stepped, failed = fuzz_env(env_name, budget, rng, **overrides)
        total, crashes = total + stepped, crashes + failed
    stepped, failed = fuzz_rollout_into_library(rng, iterations=max(2, outputs_per_env // 200))
    return {"fuzzed_outputs": total + stepped, "fuzz_crashes": crashes + failed}


def attack_workers() -> dict:
    from agent_system.environments.episode import EnvSpec
    from agent_system.workers import ProcessEnvPool

    faults = ["crash", "hang", "raise", "unpicklable"]
    pool = ProcessEnvPool(EnvSpec("agent_system.testing.faulty_env:FaultyEnv", {}), num_envs=4, num_workers=2,
                          step_timeout_s=3.0)  # workers hold envs {0, 1} and {2, 3}; the hang fault waits 3 s
    contained = 0
    try:
        for fault in faults:
            pool.reset(range(4), range(4))
            res = pool.step([0, 1, 2, 3], [fault, "go", "go", "go"])
            own_failed = res[0].terminated and bool(res[0].info.get("failure_reason"))
            other_worker_fine = all(r.obs.endswith("count=1") for r in res[2:])
            contained += own_failed and other_worker_fine
    finally:
        pool.close()
    return {"worker_faults": len(faults), "worker_faults_contained": contained}


def attack_appworld() -> dict:
    from agent_system.environments.env_package.appworld.env import AppworldEnv
    from agent_system.workers.in_process import run_step

    codes = ["while True:\n    pass", "x = [0]\nwhile True:\n    x.append(x[-1] + 1)", "import os\nos.system('id')",
             "open('/tmp/slea_rl_appworld_probe', 'w')"]
    env = AppworldEnv(dataset="train", use_standin=True, timeout_s=2.0)
    contained = 0
    try:
        for code in codes:
            env.reset(0)
            result = run_step(env, code)
            contained += result.terminated and "timeout_s" in result.info.get("failure_reason", "") or \
                "Execution failed" in result.obs
    finally:
        env.close()
    return {"appworld_attacks": len(codes), "appworld_attacks_contained": contained}


# ------------------------------------------------------------------------------------------------ main

def issue_14_attacks(quick: bool) -> dict:
    """The counts of issue 14's attacks (this file): config, library files, kills, writers, fuzz, workers, resumes."""
    result: dict = {}
    result.update(attack_config(timing=not quick))
    result.update(attack_library(byte_damages=10 if quick else 30))
    result.update(attack_replaced_files())
    result.update(attack_kills_mid_save(kills=4 if quick else 20))
    result.update(attack_concurrent_writers(saves=20 if quick else 100))
    result.update(attack_fuzz(outputs_per_env=300 if quick else 1750))
    result.update(attack_workers())
    result.update(attack_appworld())
    result.update(attack_resume_kills(kills=2 if quick else 5, iterations=3 if quick else 6))
    return result


def issue_14_caught(r: dict) -> bool:
    """Issue 14's goal: every fault caught."""
    return (r["config_clean_errors"] == r["config_faults"] and r["config_errors_after_model_load"] == 0
            and r["library_clean_errors"] == r["damaged_library_files"] and r["library_half_restored"] == 0
            and r["unloadable_after_kill"] == 0 and r["fuzz_crashes"] == 0
            and r["resume_lost_or_duplicated_lines"] == 0 and r["tensorboard_duplicate_steps"] == 0
            and not r["code_executed_on_resume"] and r["concurrent_save_failures"] == 0
            and r["worker_faults_contained"] == r["worker_faults"]
            and r["appworld_attacks_contained"] == r["appworld_attacks"])


def issue_23_attacks(quick: bool) -> dict:
    """The counts of issue 23's attacks (scripts/reliability_attacks/)."""
    result: dict = {}
    for attack in (attack_run_folder_lock, attack_disk_faults, attack_escaping_paths, attack_foreign_folders,
                   attack_sizes, attack_endpoint_faults, attack_exports, attack_retrieval_server):
        counts = attack(quick)
        assert not set(counts) & set(result), f"{attack.__name__} reuses a count's name"
        result.update(counts)
    result.update(attack_verl_driver())
    return result


def issue_24_attacks(quick: bool) -> dict:
    """The counts of the attacks on issue 24's readers: the trajectory page and the library diff."""
    return {**attack_trajectory_page(quick), **attack_library_diff(quick)}


def issue_24_caught(r: dict) -> bool:
    """Hostile model text on the trajectory page and in the library diff stays inert; bad inputs are one line."""
    return (r["trajectory_payloads_inert"] == r["trajectory_payloads"] > 0
            and r["trajectory_bad_inputs_caught"] == r["trajectory_bad_inputs"] > 0 and r["trajectory_tracebacks"] == 0
            and r["diff_bad_inputs_one_line_exit_2"] == r["diff_bad_inputs"] > 0 and r["diff_tracebacks"] == 0
            and r["diff_console_control_chars"] == 0 and r["diff_markdown_live_tags"] == 0
            and r["diff_json_non_ascii"] == 0)


def issue_23_caught(r: dict) -> bool:
    """Issue 23's goal: zero runs lost, zero escapes (tracebacks instead of clear errors), zero markup executed,
    zero writes outside the run folder (each condition as its attack module's docstring states it)."""
    return (r["lock_runs_refused"] == r["lock_attempts"] > 0 and r["lock_refusals_naming_pid"] == r["lock_attempts"]
            and r["stale_locks_taken_over"] == r["stale_attempts"]
            and r["write_fault_clean_errors"] == r["write_fault_attempts"] > 0 and r["write_fault_tracebacks"] == 0
            and r["previous_checkpoint_intact"] == r["write_fault_runs"]
            and r["paths_refused"] == r["path_attacks"] > 0 and r["writes_outside_run_folder"] == 0
            and r["foreign_refused"] == r["foreign_attacks"] > 0
            and r["user_files_deleted"] == 0 and r["user_files_changed"] == 0
            and r["lessons_over_bound"] == 0 and r["prompt_messages_over_bound"] == 0 and r["prototypes_over_bound"] == 0
            and r["messages_checked"] > 0 and r["step_5mb_s"] < 5.0 and r["library_file_bytes"] < 2_000_000
            and r["runs_lost"] == 0 and r["tracebacks"] == 0 and r["requests_failed"] == 0
            and r["malformed_as_invalid"] == r["malformed_sent"] > 0
            and r["outage_clear_line"] == 1 and r["outage_saved"] == 1
            and r["markup_executed"] == 0 and r["markup_formed"] == 0
            and r["console_control_chars"] == 0 and r["export_attacks"] > 0
            and r["bad_answered_4xx"] == r["bad_requests"] > 0 and r["answered_5xx"] == 0
            and r["server_up_after"] == 1 and r["largest_answer_bytes"] < 50_000_000
            and r["ray_processes_left"] == 0 and r["verl_resume_lost_or_duplicated_lines"] == 0
            and r["ray_processes_below_killed_driver"] > 0 and r["ray_cluster_below_driver"] == 1)


# ------------------------------------------------------------------------------------------------ main

# Every attack of the report, in the order it runs. To add one: write ``attack_x(quick) -> dict`` (its counts, names
# not used elsewhere) in a module of reliability_attacks/ and append ``Attack(attack_x, caught, totals)`` here.
ATTACKS = [
    Attack(issue_14_attacks, issue_14_caught,
           {"code_ran": ("code_executed_on_resume",), "tracebacks": ("fuzz_crashes",),
            "runs_lost_or_mistaken": ("resume_lost_or_duplicated_lines", "unloadable_after_kill")}),
    Attack(issue_23_attacks, issue_23_caught,
           {"tracebacks": ("tracebacks", "write_fault_tracebacks"), "processes_left": ("ray_processes_left",),
            "runs_lost_or_mistaken": ("runs_lost", "user_files_deleted", "user_files_changed",
                                      "verl_resume_lost_or_duplicated_lines")}),
    Attack(issue_24_attacks, issue_24_caught, {"tracebacks": ("trajectory_tracebacks", "diff_tracebacks")}),
    *received.ATTACKS, *bounded_inputs.ATTACKS, *run_lifecycle.ATTACKS, *cluster.ATTACKS, *sweeps.ATTACKS,
]


def run_attacks(attacks: list[Attack], quick: bool) -> dict:
    """Every attack's counts, ``caught`` (each attack's verdict by name) and the totals they feed."""
    result: dict = {"caught": {}}
    for attack in attacks:
        counts = attack.run(quick)
        assert not set(counts) & set(result), f"{attack.name} reuses a count's name"
        result.update(counts)
        result["caught"][attack.name] = bool(attack.caught(counts))
    return add_totals(result, attacks)


def report(quick: bool) -> dict:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "disabled")
    started = time.perf_counter()
    result = run_attacks(ATTACKS, quick)
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def all_caught(r: dict) -> bool:
    """Every attack's faults caught, and every total (code run, secrets sent or written, runs lost or mistaken,
    tracebacks, processes left, hangs) 0."""
    return all(r["caught"].values()) and all(r[f"total_{total}"] == 0 for total in TOTALS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON line (default: one count per line)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions of each attack")
    args = parser.parse_args(argv)
    # what the attacked runs print (progress, a taken-over lock) goes to stderr: stdout holds the report alone
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
        warnings.simplefilter("ignore")
        result = report(args.quick)
    result["all_caught"] = all_caught(result)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        for key, value in sorted(result.items()):
            print(f"{key}: {value}")
    return 0 if result["all_caught"] else 1


if __name__ == "__main__":
    sys.exit(main())
