"""Driver-side pieces of the verl engine that need no Ray: rows -> trajectories, library save/load through the
trainer's driver, start-up validation of run_verl, and the agent loop's message layout and rows."""

from __future__ import annotations

import numpy as np
import pytest

from agent_system.config_checks import ConfigError
from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord
from agent_system.multi_turn_rollout.step import build_messages
from recipe.forge.engines.verl.agent_loop import view_image
from recipe.forge.engines.verl.episode import EpisodeView
from recipe.forge.engines.verl.library_driver import LibraryDriver
from recipe.forge.engines.verl.row_codec import StepExtras, row_from_record, trajectories_from_rows
from recipe.forge.experience.metrics import reward_metrics


def make_rows():
    """Two 2-step episodes of one task as the agent loop's rows (their extra_fields), rows out of step order; a
    first step records the room it led to."""
    def r(traj, step, reward, valid, ret, success, obs, next_obs=None):
        messages = [{"role": "user", "content": f"prompt {obs}"}]
        record = StepRecord(
            uid=traj.rsplit("-", 1)[0], traj_uid=traj, step=step, anchor_obs=obs, messages=messages,
            plain_messages=messages, response_text=f"<action>a{step}</action>", action=f"a{step}", prompt_ids=[],
            response_ids=[], logprobs=[], reward=reward, is_action_valid=valid, done=step == 1,
            admissible_actions=("push", f"wait{step}"), expert_action="push" if step == 0 else None,
            library_version=0, next_anchor_obs=next_obs,
        )
        episode = TrajectoryRecord(uid=record.uid, traj_uid=traj, task="push the box", task_type=None, steps=[],
                                   episode_reward=ret, success=success, length=2)
        return row_from_record(record, episode, StepExtras())

    return [
        r("u-1", 1, 10.0, True, 9.9, True, "room B"), r("u-1", 0, -0.1, True, 9.9, True, "room A", "room B"),
        r("u-2", 0, -0.1, False, -0.2, False, "room A", "room C"), r("u-2", 1, -0.1, True, -0.2, False, "room C"),
    ]


def test_rows_regroup_into_ordered_trajectories():
    trajs = {t.traj_uid: t for t in trajectories_from_rows(make_rows())}
    assert set(trajs) == {"u-1", "u-2"}
    won = trajs["u-1"]
    assert [s.step for s in won.steps] == [0, 1] and [s.anchor_obs for s in won.steps] == ["room A", "room B"]
    assert won.success and won.episode_reward == 9.9 and won.length == 2 and won.uid == "u"
    assert [s.done for s in won.steps] == [False, True]
    assert trajs["u-2"].steps[0].is_action_valid is False
    assert [s.admissible_actions for s in won.steps] == [("push", "wait0"), ("push", "wait1")]
    assert [s.expert_action for s in won.steps] == ["push", None]
    assert won.steps[0].messages == [{"role": "user", "content": "prompt room A"}]
    m = reward_metrics(list(trajs.values()), 0.5)
    assert m["forge/reward_mean"] == pytest.approx((9.9 - 0.2) / 2) and m["forge/positive_ratio"] == 0.5


def test_library_driver_evolves_saves_and_loads(run_config_factory, tmp_path):
    cfg = run_config_factory(
        ["trainer.engine=verl", "algorithm.adv_estimator=forge", "algorithm.forge.extractor=rule",
         f"algorithm.forge.checkpoint_dir={tmp_path / 'lib'}"]
    )
    driver = LibraryDriver.from_trainer_config(cfg)
    assert driver.enabled and driver.version == 0
    rows = make_rows()
    clusters = driver.absorb(rows)  # steps without a cluster get the driver's clusters
    assert all(c is not None and c >= 0 for c in clusters)
    assert clusters[1] == clusters[2]  # "room A" in both trajectories: one cluster
    metrics = driver.end_iteration([dict(r, cluster_id=c) for r, c in zip(rows, clusters)], iteration=0)
    assert metrics["forge/library_version"] == 1.0
    size = metrics["forge/library_total_size"]
    driver.save(str(tmp_path / "ckpt"))
    fresh = LibraryDriver.from_trainer_config(cfg)
    fresh.load_if_exists(str(tmp_path / "ckpt"))
    assert fresh.version == 1 and len(fresh.system.library) == size
    fresh.load_if_exists(str(tmp_path / "missing"))  # no checkpoint there: unchanged
    assert fresh.version == 1


def test_non_forge_estimators_have_no_library(run_config_factory):
    driver = LibraryDriver.from_trainer_config(run_config_factory(["algorithm.adv_estimator=grpo"]))
    assert not driver.enabled
    driver.begin_iteration(3)  # nothing to publish
    assert driver.absorb(make_rows()) == [None] * 4
    assert set(driver.end_iteration(make_rows(), 0)) == {"forge/reward_mean", "forge/reward_std", "forge/positive_ratio",
                                                         "forge/repeated_trajectories"}


def test_run_verl_rejects_a_bad_config_before_starting_anything(run_config_factory, tmp_path):
    from recipe.forge.engines.verl.main import run_verl
    from recipe.forge.main_forge import validate

    cfg = run_config_factory(["trainer.engine=verl", "env.max_steps=0", f"trainer.default_local_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="env.max_steps"):
        run_verl(validate(cfg))
    assert not (tmp_path / "forge_tasks").exists()


def test_the_agent_loop_gives_the_shared_message_builder_its_image_as_a_pil_image():
    from agent_system.multi_turn_rollout.protocols import StepExperience

    text_view = EpisodeView(prompt="the room", anchor_obs="#", image=None, task="t", task_type=None)
    assert view_image(text_view) is None
    image_view = EpisodeView(prompt="the room", anchor_obs="#", image=np.zeros((4, 4, 3), np.uint8), task="t", task_type=None)
    messages, plain = build_messages(image_view.prompt, view_image(image_view), StepExperience("tip"))
    user = plain[-1]["content"]
    assert user[0]["type"] == "image" and user[0]["image"].size == (4, 4) and user[1] == {"type": "text", "text": "the room"}
    assert messages[0] == {"role": "system", "content": "tip"} and messages[1] == plain[0]


@pytest.mark.parametrize("task_score", [None, 0.8])
def test_agent_loop_rows_carry_the_final_task_score_where_the_env_has_one(task_score):
    from agent_system.multi_turn_rollout.protocols import GenerationOutput, StepQuery
    from agent_system.multi_turn_rollout.step import finish_step, prepare_steps
    from recipe.forge.engines.verl.agent_loop import EpisodeStep, ServerGeneration, episode_outputs
    from recipe.forge.engines.verl.episode import StepOutcome

    view = EpisodeView(prompt="p", anchor_obs="page", image=None, task="buy shoes", task_type=None)

    def step(index, reward, score):
        outcome = StepOutcome(reward=reward, done=False, is_action_valid=True, action="click[x]", won=False,
                              failure_reason=None, task_score=score,
                              info={"action": "click[x]", "is_action_valid": True})
        output = GenerationOutput("<action>click[x]</action>", [1, 2], [3], [0.0])
        query = StepQuery(anchor_obs="page", task="buy shoes", task_type=None, uid="u", traj_uid="u-0", step=index)
        [prepared] = prepare_steps([query], [view.prompt], [None], None)
        record = finish_step(prepared, output, outcome.reward, outcome.done, outcome.info)
        generation = ServerGeneration(output, has_logprobs=True, multi_modal_data=None, server_fields={})
        return EpisodeStep(record, prepared.experience, view, outcome, generation, 0.1, None)

    first_score = None if task_score is None else 0.0
    rows = episode_outputs([step(0, 0.0, first_score), step(1, 0.0, task_score)], 0.5, eos_token_id=0)
    infos = [row.extra_fields["reward_extra_info"] for row in rows]
    if task_score is None:
        assert all("task_score" not in info for info in infos)
    else:
        assert [info["task_score"] for info in infos] == [0.8, 0.8]  # the episode's final score on every row
    assert infos[0]["episode_length"] == 2.0


def test_library_driver_credits_lessons_by_step_returns_with_the_algorithms_gamma(run_config_factory, tmp_path):
    """lesson_credit=step on the verl driver: the system is built from the algorithm section (gamma, penalty),
    and two copies of one task that took different actions at "room A" give a golden and a warning lesson."""
    cfg = run_config_factory(["trainer.engine=verl", "algorithm.adv_estimator=forge", "algorithm.forge.extractor=rule",
                              "algorithm.forge.lesson_credit=step", f"algorithm.forge.checkpoint_dir={tmp_path}"])
    driver = LibraryDriver.from_trainer_config(cfg)
    rows = make_rows()
    rows[2] = dict(rows[2], is_action_valid=True, action="wait0", response_text="<action>wait0</action>")
    clusters = driver.absorb(rows)
    driver.end_iteration([dict(r, cluster_id=c) for r, c in zip(rows, clusters)], iteration=0)
    texts = [(e.level, e.text) for e in driver.system.library.all_entries()]
    # the golden example: room A's credited one, or room B's (the won episode's last action, kept where no two actions
    # were compared), which the library merges with it as a near-duplicate
    assert [text for level, text in texts if level == "example"] in (
        ['At "room A", the action "a0" moved the task forward.'], ['At "room B", the action "a1" moved the task forward.'])
    [diagnostic] = [text for level, text in texts if level == "diagnostic"]
    assert diagnostic.startswith('At "room A", the action "wait0" led to a lower return than "a0"')


def test_agent_loop_rows_carry_the_expert_action_and_the_driver_reads_it_back():
    from agent_system.multi_turn_rollout.protocols import GenerationOutput, StepQuery
    from agent_system.multi_turn_rollout.step import finish_step, prepare_steps
    from recipe.forge.engines.verl.agent_loop import EpisodeStep, ServerGeneration, episode_outputs
    from recipe.forge.engines.verl.episode import StepOutcome

    def step(index, expert):
        view = EpisodeView(prompt="p", anchor_obs=f"Target: 2\nCurrent: {index}", image=None, task="t", task_type=None,
                           admissible_actions=("+", "-"), expert_action=expert)
        outcome = StepOutcome(reward=0.0, done=False, is_action_valid=True, action="+", won=False,
                              failure_reason=None, info={"action": "+", "is_action_valid": True})
        output = GenerationOutput("<action>+</action>", [1, 2], [3], [0.0])
        query = StepQuery(anchor_obs=view.anchor_obs, task="t", task_type=None, uid="u", traj_uid="u-0", step=index)
        [prepared] = prepare_steps([query], [view.prompt], [None], None)
        record = finish_step(prepared, output, outcome.reward, outcome.done, outcome.info, view.expert_action)
        generation = ServerGeneration(output, has_logprobs=True, multi_modal_data=None, server_fields={})
        return EpisodeStep(record, prepared.experience, view, outcome, generation, 0.1, None)

    rows = episode_outputs([step(0, "+"), step(1, None)], 0.5, eos_token_id=0)
    assert [row.extra_fields["expert_action"] for row in rows] == ["+", None]
    [trajectory] = trajectories_from_rows([row.extra_fields for row in rows])
    assert [s.expert_action for s in trajectory.steps] == ["+", None]


def test_the_lesson_quality_of_an_iteration_reaches_the_driver_metrics(run_config_factory, tmp_path):
    """make_rows' expert agrees with every action taken: the golden example (do a1 at room B) is right, the dead
    end (avoid a1 at room C, where the expert answers a1) is wrong; the other lessons name no action."""
    cfg = run_config_factory(["trainer.engine=verl", "algorithm.adv_estimator=forge", "algorithm.forge.extractor=rule",
                              "algorithm.forge.lesson_style=descriptive", f"algorithm.forge.checkpoint_dir={tmp_path}"])
    driver = LibraryDriver.from_trainer_config(cfg)
    rows = [dict(r, expert_action=r["action"]) for r in make_rows()]
    first = driver.end_iteration([dict(r, cluster_id=c) for r, c in zip(rows, driver.absorb(rows))], iteration=0)
    assert first["forge/library_precision"] == 0.5 and first["forge/lessons_checkable"] == 0.0
    entries = {e.level: e.entry_id for e in driver.system.library.all_entries()}
    # the next iteration's episodes of the same task (new episode uids: the driver evolves on each episode once)
    shown = [dict(r, experience_ids=[str(entries["example"]), str(entries["diagnostic"])] if i == 1 else [],
                  traj_uid=r["traj_uid"] + "-next") for i, r in enumerate(rows)]  # row 1 is u-1's first step
    second = driver.end_iteration([dict(r, cluster_id=c) for r, c in zip(shown, driver.absorb(shown))], iteration=1)
    assert second["forge/lesson_precision"] == 0.5 and second["forge/lessons_checkable"] == 1.0
    assert second["forge/lesson_precision/example"] == 1.0 and second["forge/lesson_precision/diagnostic"] == 0.0
    assert second["forge/lesson_conflict"] == 0.0  # the two lessons are about different states


def test_the_driver_counts_lesson_outcomes_on_its_own_clusters(run_config_factory, tmp_path):
    """The workers' rows carry worker-local cluster ids; the driver's evolve files them under its own clusters
    before it counts. A lesson linked to room C and shown to u-1 (won) at room A: u-1 is its shown episode; u-2
    (lost, rooms A and C, not shown it) its episode at the same clusters."""
    from recipe.forge.experience.library import Candidate
    from recipe.forge.experience.system import PROVISIONAL_BASE

    cfg = run_config_factory(["trainer.engine=verl", "algorithm.adv_estimator=forge", "algorithm.forge.extractor=rule",
                              f"algorithm.forge.checkpoint_dir={tmp_path}"])
    driver = LibraryDriver.from_trainer_config(cfg)
    rows = make_rows()  # u-1 won: B, A; u-2 lost: A, C (rows out of step order)
    room = dict(zip((r["anchor_obs"] for r in rows), driver.absorb(rows)))
    [lesson] = driver.system.library.insert_unchecked(
        [Candidate("Lesson about room C.", "golden", "principle", 1.0, cluster_ids=[room["room C"]])], 0)
    local = {"room A": PROVISIONAL_BASE + 1, "room B": PROVISIONAL_BASE + 2, "room C": PROVISIONAL_BASE + 3}
    shown = [dict(r, cluster_id=local[r["anchor_obs"]], experience_ids=[str(lesson)] if i == 1 else [])
             for i, r in enumerate(rows)]  # row 1 is u-1's first step, at room A
    driver.end_iteration(shown, iteration=0)
    entry = driver.system.library.entries[lesson]
    assert (entry.shown_episodes, entry.shown_successes, entry.unshown_episodes, entry.unshown_successes) == (1, 1, 1, 0)


def two_workers_rows():
    """One iteration's rows from two agent-loop workers, each minting worker-local cluster ids from
    PROVISIONAL_BASE: worker 1 ran task u (observations "room X", "room Z"), worker 2 task v ("room Y", "room Z").
    Both gave their first new observation the id PROVISIONAL_BASE, for different rooms, and "room Z" a different id
    in each; "room A" is a cluster the driver published."""
    from recipe.forge.experience.system import PROVISIONAL_BASE

    def r(traj, step, obs, cluster, worker, ret):
        messages = [{"role": "user", "content": f"prompt {obs}"}]
        record = StepRecord(uid=traj.rsplit("-", 1)[0], traj_uid=traj, step=step, anchor_obs=obs, messages=messages,
                            plain_messages=messages, response_text="<action>a</action>", action="a", prompt_ids=[],
                            response_ids=[], logprobs=[], reward=ret if step == 2 else 0.0, is_action_valid=True,
                            done=step == 2, cluster_id=cluster, library_version=1)
        episode = TrajectoryRecord(uid=record.uid, traj_uid=traj, task="push the box", task_type=None, steps=[],
                                   episode_reward=ret, success=ret > 0, length=3)
        return row_from_record(record, episode, StepExtras(agent_worker=worker))

    base = PROVISIONAL_BASE
    rows = []
    for copy, u_ret, v_ret in (("0", 1.0, 3.5), ("1", 0.0, 0.5)):
        rows += [r(f"u-{copy}", 0, "room A", None, "host:1", u_ret), r(f"u-{copy}", 1, "room X", base, "host:1", u_ret),
                 r(f"u-{copy}", 2, "room Z", base + 1, "host:1", u_ret)]
        rows += [r(f"v-{copy}", 0, "room A", None, "host:2", v_ret), r(f"v-{copy}", 1, "room Y", base, "host:2", v_ret),
                 r(f"v-{copy}", 2, "room Z", base + 5, "host:2", v_ret)]
    return rows


def test_two_workers_colliding_provisional_ids_map_to_the_right_driver_clusters(run_config_factory, tmp_path):
    from recipe.forge.experience.system import PROVISIONAL_BASE

    cfg = run_config_factory(["trainer.engine=verl", "algorithm.adv_estimator=forge", "algorithm.forge.extractor=rule",
                              f"algorithm.forge.checkpoint_dir={tmp_path}"])
    driver = LibraryDriver.from_trainer_config(cfg)
    [room_a] = driver.absorb([make_rows()[1]])  # the driver's own cluster of "room A", published before the rollout
    rows = [dict(row, cluster_id=room_a) if row["anchor_obs"] == "room A" else row for row in two_workers_rows()]
    clusters = driver.absorb(rows)
    by_room = {}
    for row, cluster in zip(rows, clusters):
        by_room.setdefault(row["anchor_obs"], set()).add(cluster)
    assert all(len(ids) == 1 for ids in by_room.values()), by_room  # one driver cluster per observation
    room = {obs: next(iter(ids)) for obs, ids in by_room.items()}
    assert room["room A"] == room_a  # the published cluster is kept
    # the same provisional id from two workers: two observations, two driver clusters; one observation under two
    # provisional ids: one driver cluster
    assert len({room["room A"], room["room X"], room["room Y"], room["room Z"]}) == 4
    assert all(cluster < PROVISIONAL_BASE for cluster in room.values())
    # the advantage's step groups are (task, cluster): the colliding ids of tasks u and v are four groups, not two
    metrics = driver.end_iteration(rows, iteration=0)
    assert metrics["forge/step_groups"] == 2 * 3  # per task: room A, its own new room, room Z
    assert metrics["forge/provider_queries"] == len(rows)  # retrieval counted over both workers' steps


def test_step_groups_of_one_task_do_not_depend_on_another_workers_ids():
    """compute_batch_advantages groups by (uid, cluster): task u's advantages are the same with or without task v's
    rows, which reuse u's provisional ids for other observations."""
    import torch

    from recipe.forge.config_schema import ForgeAlgoConfig
    from recipe.forge.engines.verl.trainer import compute_batch_advantages

    published = 3  # a cluster id of the driver's, for "room A"
    rows = [{**row, "reward_extra_info": {}, "cluster_id": published if row["cluster_id"] is None else row["cluster_id"]}
            for row in two_workers_rows()]
    algo = ForgeAlgoConfig(gamma=0.9)

    def advantages(subset):
        uid = np.array([row["uid"] for row in subset], dtype=object)
        mask = torch.ones(len(subset), 3, dtype=torch.int64)
        return compute_batch_advantages("forge", uid, mask, subset, np.ones(len(subset), dtype=bool), algo)["advantages"]

    both = advantages(rows)
    u_rows = [i for i, row in enumerate(rows) if row["uid"] == "u"]
    alone = advantages([rows[i] for i in u_rows])
    assert both[u_rows].abs().max() > 0
    torch.testing.assert_close(both[u_rows], alone)


def test_distribution_metrics_of_two_workers():
    from recipe.forge.engines.verl.distribution import distribution_metrics

    rows = two_workers_rows()
    assert distribution_metrics(rows) == {"forge/agent_workers_seen": 2.0, "forge/task_groups_split": 0.0,
                                          "forge/rollout_servers_seen": 0.0, "forge/library_versions_seen": 1.0}
    # a task whose copies ran in two workers, a second server, an older library version: each is counted
    moved = dict(rows[0], agent_worker="host:2", rollout_server="slea_rl_hf_server_1", library_version=0)
    metrics = distribution_metrics([moved, *rows[1:]])
    assert metrics["forge/task_groups_split"] == 1.0 and metrics["forge/rollout_servers_seen"] == 1.0
    assert metrics["forge/library_versions_seen"] == 2.0


def test_the_config_verl_runs_with_is_written_without_resolving_the_environment_or_keeping_secrets(tmp_path,
                                                                                                    monkeypatch):
    import yaml
    from omegaconf import OmegaConf

    from recipe.forge.engines.verl.driver_console import write_verl_config

    monkeypatch.setenv("SLEA_RL_TEST_SECRET", "s3cret-from-env")
    cfg = OmegaConf.create({"trainer": {"api": {"api_key": "s3cret-inline", "api_key_env": "OPENAI_API_KEY",
                                                "base_url": "https://user:pw@example.org/v1"},
                                        "note": "${oc.env:SLEA_RL_TEST_SECRET}", "steps": 4, "twice": "${.steps}"}})
    text = write_verl_config(cfg, str(tmp_path)).read_text()
    assert "s3cret" not in text and "pw@" not in text
    written = yaml.safe_load(text)["trainer"]
    assert written["note"] == "${oc.env:SLEA_RL_TEST_SECRET}" and written["api"]["api_key_env"] == "OPENAI_API_KEY"
    assert written["api"]["base_url"].endswith("@example.org/v1") and written["steps"] == 4
