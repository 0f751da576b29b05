"""The forge agent loop driven through verl's own V1 agent-loop manager (AgentLoopManagerTQ), on CPU.

Real: Ray, TransferQueue (SimpleStorage, one unit), verl's AgentLoopWorkerTQ and its postprocessing into
TransferQueue, verl's dataset and collate, verl's ReplayBuffer sampling, the forge trainer's advantage step
(trainer.advantage_step) on the stored rows and its driver state (forge_steps.ForgeSteps: evolution, checkpoint,
validation dump), the experience library published through the broker. ForgeTrainer's own hooks, which hand verl's
moments to those two, need verl's actor workers: tests/verl_engine/test_cpu_end_to_end.py runs them. Stand-in: the LLM server client
(ScriptedLLMClient), because verl 0.9.1 has no CPU rollout backend.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]

G = 3  # sessions (environment copies) per task
TASKS = 2
MAX_STEPS = 3
GAMMA = 0.95
PENALTY = 0.1


@pytest.fixture(scope="module")
def verl_stack(tiny_model_dir, run_config_factory, tmp_path_factory, verl_rollout):
    from transformers import AutoTokenizer
    from verl.trainer.ppo.utils import create_rl_dataset

    from recipe.forge.engines.verl.main import prepare_verl_config
    from recipe.forge.run_config import load_run_config
    from recipe.forge.engines.verl.scripted_client import ScriptedLLMClient

    out = tmp_path_factory.mktemp("verl_run")
    cfg = run_config_factory(
        [
            "trainer.engine=verl",
            "trainer.device=cuda",  # the settings of a GPU run; only the LLM client is a stand-in
            "algorithm.adv_estimator=forge",
            f"algorithm.gamma={GAMMA}",
            f"algorithm.invalid_action_penalty_coef={PENALTY}",
            "algorithm.forge.step_value=return",  # the paper's discounted returns, which naive_forge_advantage works
            "algorithm.forge.warmup_iterations=0",
            "algorithm.forge.min_library_size=0",
            "algorithm.forge.extractor=rule",
            f"algorithm.forge.checkpoint_dir={out / 'library'}",
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.agent.num_workers=1",
            "data.max_prompt_length=2048",
            "data.max_response_length=128",
            "actor_rollout_ref.rollout.prompt_length=2048",
            "actor_rollout_ref.rollout.response_length=128",  # longer than any scripted response: no truncation
            f"data.train_batch_size={TASKS}",
            "env.env_name=sokoban",
            f"env.max_steps={MAX_STEPS}",
            f"env.rollout.n={G}",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",  # divides a rank's 32 x G / 8 rows
            "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
            "transfer_queue.backend.SimpleStorage.total_storage_size=10000",
            f"trainer.default_local_dir={out}",
            "trainer.total_training_steps=2",
        ]
    )
    cfg = prepare_verl_config(load_run_config(cfg))
    with verl_rollout.agent_loop_stack(cfg, ScriptedLLMClient(cfg)) as manager:
        tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
        dataset = create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None, is_train=True, max_samples=8)
        yield {"cfg": cfg, "manager": manager, "tokenizer": tokenizer, "dataset": dataset, "helpers": verl_rollout}


def rollout(stack, first_row: int, global_steps: int):
    """Submit TASKS prompts like verl's trainer does and sample the finished groups from the replay buffer."""
    rows = [stack["dataset"][i] for i in range(first_row, first_row + TASKS)]
    meta, _ = stack["helpers"].submit_tasks(stack["manager"], rows, global_steps)
    return meta, [r["extra_info"]["seed"] for r in rows]


def fetch(meta, fields):
    import transfer_queue as tq

    return tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=fields)


def with_old_log_probs(meta):
    """What verl's old-log-prob pass leaves in TransferQueue (no actor here: the rollout's own log-probs)."""
    import transfer_queue as tq

    data = fetch(meta, ["rollout_log_probs"])
    data["old_log_probs"] = data.pop("rollout_log_probs")
    tq.kv_batch_put(keys=meta.keys, partition_id=meta.partition_id, fields=data)
    return meta


def naive_forge_advantage(rows, uids, w=1.0):
    """Per-sample loops straight from the definition (mean_norm, episode stats over step samples)."""
    n = len(rows)
    score = [r["episode_reward"] - PENALTY * (not r["is_action_valid"]) for r in rows]
    by_traj = defaultdict(list)
    for i, r in enumerate(rows):
        by_traj[r["traj_uid"]].append(i)
    step_return = [0.0] * n
    for members in by_traj.values():
        members.sort(key=lambda i: rows[i]["step"])
        running = 0.0
        for i in reversed(members):
            running = rows[i]["reward"] + GAMMA * running
            step_return[i] = running
    step_return = [x - PENALTY * (not r["is_action_valid"]) for x, r in zip(step_return, rows)]
    advantages = []
    for i in range(n):
        same_uid = [j for j in range(n) if uids[j] == uids[i]]
        episode = score[i] - (sum(score[j] for j in same_uid) / len(same_uid) if len(same_uid) > 1 else 0.0)
        group = [j for j in same_uid if rows[j]["cluster_id"] == rows[i]["cluster_id"]]
        step = step_return[i] - sum(step_return[j] for j in group) / len(group) if len(group) > 1 else 0.0
        advantages.append(episode + w * step)
    return np.array(advantages)


def test_forge_agent_rows_reach_the_batch_and_the_trainer_step(verl_stack):
    from recipe.forge.engines.verl.forge_steps import ForgeSteps
    from recipe.forge.engines.verl.scripted_client import DEFAULT_RESPONSES
    from recipe.forge.engines.verl.trainer import advantage_step

    cfg, tokenizer = verl_stack["cfg"], verl_stack["tokenizer"]
    forge = ForgeSteps(cfg)
    forge.begin_iteration(0)

    meta, seeds = rollout(verl_stack, 0, global_steps=1)
    data = fetch(meta, ["uid", "prompts", "responses", "response_mask", "rm_scores", "rollout_log_probs", "extra_fields"])
    uids = data.pop("uid").tolist()
    rows = [getattr(e, "data", e) for e in data.pop("extra_fields").tolist()]

    # one row per environment step, G sessions per task, keys {uid}_{session}_{step}
    assert len(set(uids)) == TASKS
    trajs = defaultdict(list)
    for key, uid, row in zip(meta.keys, uids, rows):
        assert key.startswith(uid) and key.endswith(f"_{row['step']}")
        assert row["traj_uid"].startswith(uid)
        assert "reward_extra_info" in row and row["reward_extra_info"]["episode_return"] == row["episode_reward"]
        trajs[row["traj_uid"]].append(row)
    assert len(trajs) == TASKS * G
    for steps in trajs.values():
        steps.sort(key=lambda r: r["step"])
        assert [r["step"] for r in steps] == list(range(len(steps)))
        assert 1 <= len(steps) <= MAX_STEPS
        assert steps[-1]["episode_reward"] == pytest.approx(sum(r["reward"] for r in steps))
        assert all(r["library_version"] == 0 for r in steps)
        # the weights version the scripted server reports, as the first and last version of every response
        assert all(r["policy_version"] == r["policy_version_last"] == 1 for r in steps)
        assert all(r["cluster_id"] is not None for r in steps)
    # the G copies of a task start from the same room
    for uid in set(uids):
        first = {r["anchor_obs"] for r in rows if r["step"] == 0 and r["traj_uid"].startswith(uid)}
        assert len(first) == 1

    # tokens: responses decode to the scripted text, the prompt holds the observation, log-probs arrive
    responses = data["responses"].to_padded_tensor(tokenizer.pad_token_id)
    prompts = data["prompts"].to_padded_tensor(tokenizer.pad_token_id)
    logprobs = data["rollout_log_probs"].to_padded_tensor(0.0)
    for i, row in enumerate(rows):
        text = tokenizer.decode(responses[i], skip_special_tokens=True)
        assert text == row["response_text"] and text in DEFAULT_RESPONSES
        assert row["is_action_valid"] == ("<action>" in text)
        assert row["anchor_obs"] in tokenizer.decode(prompts[i], skip_special_tokens=True)
        # the BFS expert's move at the state acted on (a start is always solvable; a push may end that)
        assert row["expert_action"] in (("up", "down", "left", "right") if row["step"] == 0
                                        else ("up", "down", "left", "right", None))
        n_tokens = int(data["response_mask"][i].sum())
        assert n_tokens == len(tokenizer.encode(text, add_special_tokens=False))
        assert logprobs[i, :n_tokens].eq(-0.25).all()
        # verl copies the last step's reward_score onto every row: all equal the episode return here
        assert float(data["rm_scores"][i].sum()) == pytest.approx(row["episode_reward"])

    # the trainer's advantage step on the stored rows equals the definition, grouped by the clusters that drove
    # retrieval in the worker
    metrics: dict = {}
    advantage_step(with_old_log_probs(meta), forge, cfg, metrics)
    assert metrics["forge/rollout_actor_logprob_diff_max"] == 0.0
    stored = fetch(meta, ["advantages", "returns", "rm_scores", "response_mask"])
    mask = stored["response_mask"].to_padded_tensor(0)
    advantages = stored["advantages"].to_padded_tensor(0.0)
    expected = naive_forge_advantage(rows, uids)
    absorbed = forge.library.absorb(rows)  # the library files them under the driver's clusters
    assert all(c is not None and c >= 0 for c in absorbed)
    for i in range(len(rows)):
        n_tokens = int(mask[i].sum())
        np.testing.assert_allclose(advantages[i, :n_tokens].numpy(), expected[i], rtol=1e-5, atol=1e-5)
        penalised = rows[i]["episode_reward"] - PENALTY * (not rows[i]["is_action_valid"])
        assert float(stored["rm_scores"][i].sum()) == pytest.approx(penalised, abs=1e-5)

    # evolution on the driver publishes version 1; the next rollout's rows record it
    metrics = forge.library.end_iteration(
        [{**r, "cluster_id": c} for r, c in zip(rows, absorbed)], iteration=0
    )
    assert metrics["forge/library_version"] == 1.0
    assert metrics["forge/reward_mean"] == pytest.approx(np.mean([t[-1]["episode_reward"] for t in trajs.values()]))
    forge.begin_iteration(1)
    meta2, _ = rollout(verl_stack, TASKS, global_steps=2)
    data2 = fetch(meta2, ["prompts", "extra_fields"])
    rows2 = [getattr(e, "data", e) for e in data2.pop("extra_fields").tolist()]
    assert {r["library_version"] for r in rows2} == {1}
    # the rule extractor admitted entries from round one and the gates are open: steps whose observation the
    # library covers are augmented (a novel observation may find nothing), and the text is in the prompt
    assert metrics["forge/library_total_size"] > 0
    prompts2 = data2["prompts"].to_padded_tensor(tokenizer.pad_token_id)
    augmented = 0
    for i, row in enumerate(rows2):
        assert bool(row["experience_text"]) == bool(row["experience_ids"])
        if row["experience_text"]:
            augmented += 1
            assert row["experience_text"] in tokenizer.decode(prompts2[i], skip_special_tokens=True)
    assert augmented > 0, "no step of the second rollout received experiences"


def naive_verdict(advice) -> str | None:
    """right / wrong / None of a lesson's advice against its expert, by the definition (lesson_quality.py)."""
    if advice is None or advice.expert is None:
        return None
    expert = " ".join(advice.expert.split()).casefold()
    do = {" ".join(a.split()).casefold() for a in advice.do}
    avoid = {" ".join(a.split()).casefold() for a in advice.avoid}
    return "wrong" if expert in avoid or (do and expert not in do) else "right"


def naive_precision(verdicts) -> float | None:
    checked = [v for v in verdicts if v is not None]
    return checked.count("right") / len(checked) if checked else None


def test_iteration_end_evolves_and_checkpoints_the_library(verl_stack, monkeypatch, tmp_path):
    """ForgeSteps through two iterations in the order ForgeTrainer calls it (the step's rows, verl's checkpoint,
    the iteration's end after the weight sync): episode metrics, evolution from this step's rows with the
    workers' clusters, the forge/* metrics, the library saved into the checkpoint and resumed from it. The
    second iteration runs with the first one's lessons, so its lesson-quality figures count lessons the steps
    were shown, against a count over the rows by the definition."""
    import copy

    from recipe.forge.engines.verl.forge_steps import ForgeSteps

    cfg = verl_stack["cfg"]
    forge = ForgeSteps(cfg)
    forge.begin_iteration(0)
    meta, _ = rollout(verl_stack, 0, global_steps=1)  # the same tasks again, under new uids
    rows = [getattr(e, "data", e) for e in fetch(meta, ["extra_fields"]).pop("extra_fields").tolist()]

    evolved_from = []
    end_iteration = forge.library.end_iteration

    def recorded_end_iteration(rows, iteration):
        evolved_from.extend(rows)
        return end_iteration(rows, iteration)

    monkeypatch.setattr(forge.library, "end_iteration", recorded_end_iteration)
    metrics = forge.keep_iteration(rows, policy_version=1)
    episodes = {r["traj_uid"]: r["success"] for r in rows}
    assert metrics["num_trajectories"] == len(episodes) == TASKS * G
    assert metrics["success_rate"] == pytest.approx(sum(episodes.values()) / len(episodes))
    forge.checkpoint_saved(str(tmp_path / "global_step_1"))
    logged = forge.end_iteration(0, {})
    assert evolved_from == rows and all(r["cluster_id"] >= 0 for r in rows)  # this step's rows, with clusters
    assert logged["forge/library_version"] == 1.0 and "forge/reward_mean" in logged
    assert logged["forge/lessons_checkable"] == 0.0  # an empty library showed nothing
    # Sokoban's steps record no expert action (its solver is too slow for every step), so the rule extractor's
    # lessons are not checkable: each is given advice at its state, right for every other lesson and wrong for the
    # rest, which the shown lessons' figures must then count
    from recipe.forge.experience.library import Advice

    lessons = sorted(forge.library.system.library.entries.values(), key=lambda e: e.entry_id)
    assert len(lessons) > 1
    for k, entry in enumerate(lessons):
        entry.advice = Advice(entry.key, do=("up",), expert="up" if k % 2 == 0 else "down")

    forge.begin_iteration(1)  # the first evolution published its lessons; the next iteration opens
    meta, _ = rollout(verl_stack, 0, global_steps=2)
    rows = [getattr(e, "data", e) for e in fetch(meta, ["extra_fields"]).pop("extra_fields").tolist()]
    shown_from = copy.deepcopy(forge.library.system.library.entries)  # what the steps were shown lessons from
    forge.keep_iteration(rows, policy_version=2)
    checkpoint = tmp_path / "global_step_2"
    forge.checkpoint_saved(str(checkpoint))
    timing_raw: dict = {}
    logged = forge.end_iteration(1, timing_raw)
    injected = [naive_verdict(shown_from[int(i)].advice) for r in rows for i in r["experience_ids"]]
    assert "right" in injected and "wrong" in injected, "the shown lessons must mix right and wrong ones"
    assert logged["forge/lessons_checkable"] == pytest.approx(sum(v is not None for v in injected) / len(injected))
    expected = naive_precision(injected)
    assert ("forge/lesson_precision" in logged) == (expected is not None)
    assert logged.get("forge/lesson_precision") == pytest.approx(expected)
    library = forge.library.system.library.entries
    assert logged.get("forge/library_precision") == pytest.approx(naive_precision(
        naive_verdict(e.advice) for e in library.values()))
    assert "forge_library" in timing_raw
    assert (checkpoint / "forge_library").exists()
    fresh = ForgeSteps(cfg)  # next iteration: a fresh driver resumes the saved library
    fresh.library.load_if_exists(str(checkpoint / "forge_library"))
    assert fresh.library.version == 2
    assert len(fresh.library.system.library) == logged["forge/library_total_size"]


def test_validation_runs_with_the_evolved_library_and_is_dumped(verl_stack, tmp_path):
    """ForgeSteps around one validation batch as verl's ``_validate`` submits and samples it (ForgeTrainer's
    validation hooks call it so): ``begin_validation`` publishes the library this iteration evolved (the rows
    record its version), the replay buffer tap keeps the batch's rows, and ``end_validation`` writes them as
    ``val/<global step>.jsonl``."""
    import copy
    import json

    from verl.trainer.ppo.utils import create_rl_dataset

    from recipe.forge.engines.verl.forge_steps import ForgeSteps
    from recipe.forge.engines.verl.validation_dump import ValidationRowTap

    cfg, tokenizer = verl_stack["cfg"], verl_stack["tokenizer"]
    dump = tmp_path / "rollouts"
    driver_cfg = copy.deepcopy(cfg)  # the driver's config, with a dump folder (typed once per config object)
    driver_cfg.trainer.rollout_data_dir = str(dump)
    forge = ForgeSteps(driver_cfg, decode=tokenizer.decode)
    forge.begin_iteration(0)
    meta, _ = rollout(verl_stack, 0, global_steps=1)
    rows = [getattr(e, "data", e) for e in fetch(meta, ["extra_fields"]).pop("extra_fields").tolist()]
    clusters = forge.library.absorb(rows)
    forge.library.end_iteration([{**r, "cluster_id": c} for r, c in zip(rows, clusters)], iteration=0)
    assert forge.library.version == 1 and len(forge.library.system.library) > 0

    forge.begin_validation(0)  # at global step 1: after iteration 0
    dataset = create_rl_dataset(cfg.data.val_files, cfg.data, tokenizer, None, is_train=False, max_samples=2)
    tasks = [dataset[i] for i in range(2)]
    meta, _ = verl_stack["helpers"].submit_tasks(verl_stack["manager"], tasks, 1, validate=True,
                                                 wrap=lambda buffer: ValidationRowTap(buffer, forge.keep_validation_batch))
    data = fetch(meta, ["prompts", "extra_fields"])
    rows = [getattr(e, "data", e) for e in data.pop("extra_fields").tolist()]
    prompts = data["prompts"].to_padded_tensor(tokenizer.pad_token_id)
    metrics = forge.end_validation(1)

    assert {r["library_version"] for r in rows} == {1}  # the library evolved by iteration 0, not the one it ran with
    episodes = {r["traj_uid"]: r for r in rows}  # every row carries its episode's outcome
    assert cfg.actor_rollout_ref.rollout.val_kwargs.n == G  # its default: env.rollout.n copies, as in training
    assert metrics["val/num_trajectories"] == len(episodes) == 2 * G
    assert metrics["val/num_steps"] == len(rows)
    assert metrics["val/success_rate"] == pytest.approx(np.mean([r["success"] for r in episodes.values()]))
    assert "val/forge/lessons_checkable" in metrics  # the lessons shown, checked as on the embedded engine
    lines = [json.loads(line) for line in (dump / "val" / "1.jsonl").read_text().splitlines()]
    assert sorted(p.relative_to(dump).as_posix() for p in dump.rglob("*")) == ["val", "val/1.jsonl"]
    assert len(lines) == len(rows) and {line["step"] for line in lines} == {1}
    by_step = {(line["traj_uid"], line["turn"]): line for line in lines}
    entries = forge.library.system.library.entries
    for i, row in enumerate(rows):
        line = by_step[(row["traj_uid"], row["step"])]
        assert line["input"] == tokenizer.decode(prompts[i]).replace(tokenizer.pad_token, "")  # the row's prompt
        assert line["observation"] == row["anchor_obs"] and line["output"] == row["response_text"]
        assert line["score"] == row["reward"] and line["experience_ids"] == row["experience_ids"]
        for entry in line["experiences"]:
            assert (entry["level"], entry["text"]) == (entries[int(entry["id"])].level, entries[int(entry["id"])].text)
            assert entry["text"] in line["input"]

    # the second pass, as the embedded engine runs it: the same held-out tasks without the library
    assert forge.validation_passes == ("val", "val_no_library")
    forge.begin_validation(0, "val_no_library")
    meta, _ = verl_stack["helpers"].submit_tasks(verl_stack["manager"], tasks, 1, validate=True,
                                                 wrap=lambda buffer: ValidationRowTap(buffer, forge.keep_validation_batch))
    plain_rows = [getattr(e, "data", e) for e in fetch(meta, ["extra_fields"]).pop("extra_fields").tolist()]
    plain = forge.end_validation(1, "val_no_library")
    assert {r["library_version"] for r in plain_rows} == {None}  # nothing published: no library
    assert all(not r["experience_ids"] and not r["experience_text"] for r in plain_rows)
    assert set(plain) == {k.replace("val/", "val_no_library/", 1) for k in metrics if not k.startswith("val/forge/")}
    assert plain["val_no_library/num_trajectories"] == metrics["val/num_trajectories"]
    assert (dump / "val_no_library" / "1.jsonl").read_text().count("\n") == len(plain_rows)
    with pytest.raises(RuntimeError, match="kept no rows"):  # a pass whose rows never reached the tap
        forge.end_validation(1)
