"""Prompt-only mode against a small OpenAI-compatible server started here, backed by a tiny local model."""

import pytest

from agent_system.multi_turn_rollout.protocols import SampleStream, SamplingParams
from agent_system.testing.threaded_server import ThreadedServer
from recipe.forge.engines.api.generator import OpenAIGenerator
from recipe.forge.engines.api.runner import PromptOnlyRunner
from recipe.forge.engines.api.settings import ApiSettings
from recipe.forge.main_forge import validate

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def chat_server(tokenizer, make_tiny):
    """/v1/chat/completions over HFGenerator with a tiny answering model; cuts the stop string off the reply
    and names it in ``stop_reason`` like vLLM does, samples from a request's ``seed`` where it sends one, and
    records the requests it saw."""
    from fastapi import FastAPI

    from recipe.forge.hf.generation import HFGenerator

    generator = HFGenerator(make_tiny(taught=True), tokenizer)
    seen = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    def complete(body: dict):
        seen.append(body)
        sampling = SamplingParams(temperature=body.get("temperature", 1.0) or 0.0,
                                  do_sample=(body.get("temperature") or 0) > 0,
                                  max_new_tokens=body.get("max_tokens", 16), stop=tuple(body.get("stop") or ()))
        streams = None if body.get("seed") is None else [SampleStream(body["seed"])]  # vLLM's per-request seed
        out = generator.generate([body["messages"]], sampling, streams=streams)[0]
        text, reason, matched = out.text, "length", None
        for stop in sampling.stop:
            if stop in text:
                text, reason, matched = text[:text.index(stop)], "stop", stop
        if out.response_ids and out.response_ids[-1] == tokenizer.eos_token_id:
            reason = "stop"
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason,
                             "stop_reason": matched}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}

    with ThreadedServer(app) as server:
        yield f"{server.base_url}/v1", seen


def test_openai_generator_restores_the_cut_stop_string(chat_server):
    url, seen = chat_server
    gen = OpenAIGenerator(ApiSettings(base_url=url, model="tiny", max_concurrency=4))
    outs = gen.generate([[{"role": "user", "content": f"Target: {i}\nCurrent: 0"}] for i in range(8)],
                        SamplingParams(temperature=1.0, max_new_tokens=12))
    closed = [o.text for o in outs if o.text.endswith("</action>")]
    assert closed, [o.text for o in outs]
    assert all(t in ("<action>+</action>", "<action>-</action>") for t in closed)
    assert all(body["stop"] == ["</action>"] and body["model"] == "tiny" for body in seen)


def test_prompt_only_mode_evolves_the_library_without_updates(tmp_path, chat_server, compose_cfg, run_overrides):
    import json

    url, seen = chat_server
    dump = tmp_path / "rollouts"
    cfg = compose_cfg(run_overrides(tmp_path, iterations=2) + [
        "trainer.engine=api", f"trainer.api.base_url={url}", "trainer.api.model=tiny", "trainer.test_freq=2",
        "trainer.save_freq=2", f"trainer.rollout_data_dir={dump}"])
    history = PromptOnlyRunner(validate(cfg)).fit()
    assert [h["iteration"] for h in history] == [1, 2]
    last = history[-1]
    assert last["forge/library_total_size"] > 0
    assert "val/success_rate" in last and "val_no_library/success_rate" in last
    assert last["api/requests"] == len(seen)
    assert (tmp_path / "global_step_2" / "library").exists()
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 2

    # trainer.rollout_data_dir: training and both validation passes, one line per step, the prompt as the endpoint
    # got it (chat messages)
    files = {"1.jsonl": (history[0], ""), "2.jsonl": (last, ""), "val/2.jsonl": (last, "val/"),
             "val_no_library/2.jsonl": (last, "val_no_library/")}
    assert sorted(p.relative_to(dump).as_posix() for p in dump.rglob("*.jsonl")) == sorted(files)
    for name, (metrics, prefix) in files.items():
        lines = [json.loads(line) for line in (dump / name).read_text().splitlines()]
        assert len(lines) == metrics[f"{prefix}num_steps"]
        for line in lines:
            assert line["input"].startswith(("system: ", "user: ")) and line["observation"] in line["input"]
            assert [e["id"] for e in line["experiences"]] == line["experience_ids"]
            assert all(e["text"] in line["input"] for e in line["experiences"])
            assert not (prefix == "val_no_library/" and line["experience_ids"])


def test_prompt_only_mode_resumes_library_and_task_sampler(tmp_path, chat_server, compose_cfg, run_overrides):
    url, _ = chat_server
    api = ["trainer.engine=api", f"trainer.api.base_url={url}", "trainer.api.model=tiny", "trainer.test_freq=-1",
           "trainer.save_freq=1"]

    def run(folder, iterations, *extra):
        cfg = compose_cfg(run_overrides(tmp_path / folder, iterations=iterations) + api + list(extra))
        runner = PromptOnlyRunner(validate(cfg))
        return runner, runner.fit()

    straight, _ = run("a", 3)
    run("b", 2)
    resumed, history = run("b", 3, "trainer.resume_mode=auto")
    assert [h["iteration"] for h in history] == [3]
    # the library came back with its two evolutions (a fresh start would be at version 1 after one iteration)
    assert history[0]["forge/library_version"] == 3
    # the training tasks drawn continue the interrupted sequence: the samplers end in the same state
    assert resumed.train_envs.task_rng.bit_generator.state == straight.train_envs.task_rng.bit_generator.state
    assert (tmp_path / "b" / "global_step_2" / "rng.json").exists()  # JSON: nothing is unpickled on resume


def test_prompt_only_val_only_evaluates_the_saved_library_without_evolving_it(tmp_path, chat_server, compose_cfg,
                                                                              run_overrides):
    url, seen = chat_server
    api = ["trainer.engine=api", f"trainer.api.base_url={url}", "trainer.api.model=tiny", "trainer.test_freq=-1",
           "trainer.save_freq=1"]
    trained = compose_cfg(run_overrides(tmp_path / "run", iterations=1) + api)
    PromptOnlyRunner(validate(trained)).fit()
    training_metrics = (tmp_path / "run" / "metrics.jsonl").read_text()

    cfg = compose_cfg(run_overrides(tmp_path / "eval", iterations=1) + api + [
        "trainer.val_only=true", "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={tmp_path / 'run' / 'global_step_1'}"])
    runner = PromptOnlyRunner(validate(cfg))
    assert (runner.experience.version, len(runner.experience.library)) == (0, 0)
    history = runner.fit()

    assert [h["iteration"] for h in history] == [1]
    assert {"val/success_rate", "val_no_library/success_rate"} <= set(history[0])
    # the checkpoint's library (one evolution), used for validation and not evolved any further
    assert runner.experience.version == 1 and len(runner.experience.library) > 0
    assert not list((tmp_path / "eval").glob("global_step_*")), "val_only must not write checkpoints"
    assert (tmp_path / "eval" / "eval" / "global_step_1" / "metrics.jsonl").exists()
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == training_metrics


def test_slea_rl_eval_of_a_prompt_only_checkpoint_is_the_same_at_any_batch_size(tmp_path, chat_server, compose_cfg,
                                                                                run_overrides):
    """Each request of an episode carries its stream's seed, so an endpoint that honours ``seed`` gives each
    episode the same samples whichever episodes share its batch."""
    import json

    from recipe.forge.commands.eval.evaluate import main as eval_main

    url, seen = chat_server
    overrides = run_overrides(tmp_path / "run", iterations=1) + [
        "trainer.engine=api", f"trainer.api.base_url={url}", "trainer.api.model=tiny", "trainer.save_freq=1"]
    PromptOnlyRunner(validate(compose_cfg(overrides))).fit()
    trained_requests = len(seen)
    episodes = {}
    for batch_size in (1, 3):
        out = tmp_path / f"eval_b{batch_size}"
        argv = [str(tmp_path / "run" / "global_step_1"), "--tasks", "2", "--samples", "3", "--batch-size",
                str(batch_size), "--temperature", "1.0", "--out", str(out), "--no-progress", *overrides]
        assert eval_main(argv) == 0
        episodes[batch_size] = (out / "episodes.jsonl").read_text()
        report = json.loads((out / "evaluation.json").read_text())
        assert report["kind"] == "api" and set(report["passes"]) == {"with_library", "without_library"}
    assert episodes[1] == episodes[3]
    assert all(isinstance(body.get("seed"), int) for body in seen[trained_requests:])
    lines = [json.loads(line) for line in episodes[1].splitlines()]
    assert len({json.dumps(line["responses"]) for line in lines}) > 1  # sampled: not one answer for all
