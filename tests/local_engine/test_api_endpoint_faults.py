"""The prompt-only engine against a stub OpenAI-compatible endpoint with faults (agent_system/testing/chat_stub.py,
real HTTP on 127.0.0.1): every passing fault (HTTP 500, 502 with an HTML page, 503, a 429 with Retry-After, a
timeout, a transfer cut short) is retried and the request answers; a malformed reply (truncated JSON, an HTML
page, no choices, no message) is that step's invalid action, not a crash; with half of the requests failing
the run finishes; a persistent outage ends the run with one line naming the endpoint and the last error,
after saving the last finished iteration, from which the run resumes. Waits are kept short by config."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from agent_system.multi_turn_rollout.protocols import SamplingParams
from agent_system.testing.chat_stub import MALFORMED, TRANSIENT, ChatStub
from agent_system.testing.threaded_server import ThreadedServer
from recipe.forge.engines.api.generator import OpenAIGenerator
from recipe.forge.engines.api.retry import EndpointError
from recipe.forge.engines.api.runner import PromptOnlyRunner
from recipe.forge.engines.api.settings import ApiSettings
from recipe.forge.main_forge import validate

pytestmark = pytest.mark.timeout(300)
SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=8, stop=("</action>",))
PROMPT = [{"role": "user", "content": "Target: 1\nCurrent: 0"}]
FAST = {"timeout_s": 0.3, "retry_backoff_s": 0.01, "retry_max_backoff_s": 0.05, "retry_deadline_s": 20.0}


def serve(stub: ChatStub) -> ThreadedServer:
    return ThreadedServer(stub, log_level="critical")  # the cut transfers are logged as ASGI errors otherwise


def generator(url: str, **settings) -> OpenAIGenerator:
    return OpenAIGenerator(ApiSettings(base_url=f"{url}/v1", model="stub", **{**FAST, **settings}))


@pytest.mark.parametrize("fault", TRANSIENT)
def test_a_passing_fault_is_retried_and_the_request_answers(fault):
    stub = ChatStub.sequence([fault] * 3, slow_s=1.0)  # one more than the client's own two retries used to ride out
    with serve(stub) as server:
        gen = generator(server.base_url, max_retries=3)
        assert [o.text for o in gen.generate([PROMPT], SAMPLING)] == ["<action>+</action>"]
    assert stub.sent == {fault: 3, "ok": 1} and gen.retrier.retries == 3


def test_retry_after_is_honoured_and_backoff_grows_within_its_cap():
    stub = ChatStub.sequence(["429", "429"], retry_after="0.4")
    with serve(stub) as server:
        gen = generator(server.base_url, retry_backoff_s=0.001, retry_max_backoff_s=0.001)
        gen.generate([PROMPT], SAMPLING)
    gaps = [b - a for a, b in zip(stub.times, stub.times[1:])]
    assert len(gaps) == 2 and all(gap >= 0.38 for gap in gaps), gaps  # the server's wait, not the 1 ms backoff

    stub = ChatStub.sequence(["500"] * 6)
    with serve(stub) as server:
        gen = generator(server.base_url, max_retries=6, retry_backoff_s=0.02, retry_max_backoff_s=0.08)
        started = time.monotonic()
        gen.generate([PROMPT], SAMPLING)
        waited = time.monotonic() - started
    # full jitter below 0.02, 0.04, 0.08, 0.08, 0.08, 0.08: at most 0.38 s of waits in all
    assert gen.retrier.retries == 6 and waited < 0.38 + 1.0, waited


@pytest.mark.parametrize("fault", MALFORMED)
def test_a_malformed_reply_is_an_invalid_action_not_a_crash(fault):
    stub = ChatStub.sequence([fault])
    with serve(stub) as server:
        gen = generator(server.base_url)
        texts = [o.text for o in gen.generate([PROMPT, PROMPT], SAMPLING)]
    assert sorted(texts) == ["", "<action>+</action>"]  # one step without an action, the other answered
    assert gen.malformed == 1 and gen.retrier.retries == 0 and sum(stub.sent.values()) == 2


def test_out_of_retries_or_time_or_refused_is_one_endpoint_error_naming_the_endpoint():
    stub = ChatStub(lambda: "503")
    with serve(stub) as server:
        with pytest.raises(EndpointError) as caught:
            generator(server.base_url, max_retries=3).generate([PROMPT] * 4, SAMPLING)
        message = str(caught.value)
        assert f"{server.base_url}/v1" in message and "HTTP 503" in message and "max_retries=3" in message
        assert "\n" not in message
        with pytest.raises(EndpointError, match="retry_deadline_s"):
            generator(server.base_url, max_retries=100, retry_backoff_s=1.0, retry_max_backoff_s=1.0,
                      retry_deadline_s=0.5).generate([PROMPT], SAMPLING)
    assert sum(stub.sent.values()) < 4 * 4 + 10  # the other requests stopped once one had given up
    stub = ChatStub(lambda: "401")
    with serve(stub) as server:
        with pytest.raises(EndpointError, match=r"refused the request: HTTP 401"):
            generator(server.base_url).generate([PROMPT], SAMPLING)
    assert stub.sent == {"401": 1}  # a refusal is not retried


def api_run(compose_cfg, run_overrides, folder: Path, url: str, iterations: int, *extra: str):
    cfg = compose_cfg(run_overrides(folder, iterations=iterations) + [
        "trainer.engine=api", f"trainer.api.base_url={url}/v1", "trainer.api.model=stub",
        *(f"trainer.api.{k}={v}" for k, v in FAST.items()), "trainer.api.max_retries=20", *extra])
    return PromptOnlyRunner(validate(cfg))


def test_the_run_finishes_with_half_of_the_requests_failing(tmp_path, compose_cfg, run_overrides):
    stub = ChatStub.failing_share(0.5, seed=3, faults=(*TRANSIENT, *TRANSIENT, *MALFORMED), slow_s=0.6)
    with serve(stub) as server:
        history = api_run(compose_cfg, run_overrides, tmp_path, server.base_url, 2).fit()
    assert [h["iteration"] for h in history] == [1, 2]
    transient = sum(stub.sent[f] for f in TRANSIENT)
    malformed = sum(stub.sent[f] for f in MALFORMED)
    total = sum(stub.sent.values())
    assert transient >= 0.25 * total and malformed > 0, stub.sent
    last = history[-1]  # every fault accounted for: one retry per passing fault, one empty step per malformed
    assert last["api/retries"] == transient and last["api/malformed_replies"] == malformed
    assert last["api/requests"] + last["api/retries"] == total
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2


def test_a_persistent_outage_ends_the_run_with_one_line_after_saving_and_the_run_resumes(
        tmp_path, compose_cfg, run_overrides, monkeypatch, capsys):
    from recipe.forge import main_forge

    metrics = tmp_path / "run" / "metrics.jsonl"
    # up until iteration 1 is logged, then down for good
    stub = ChatStub(lambda: "503" if metrics.exists() and metrics.read_text().strip() else "ok")
    with serve(stub) as server:
        url = f"{server.base_url}/v1"
        # the command line a user runs (slea-rl = main_forge.main), in this process: Hydra's logging left alone
        monkeypatch.setattr(sys, "argv", [
            "slea-rl", *run_overrides(tmp_path / "run", iterations=3), "trainer.engine=api", f"trainer.api.base_url={url}",
            "trainer.api.model=stub", *(f"trainer.api.{k}={v}" for k, v in FAST.items()), "trainer.api.max_retries=2",
            "trainer.save_freq=-1", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"])
        with pytest.raises(SystemExit) as exit_info:
            main_forge.main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("endpoint error:")]
    assert len(lines) == 1, err[-3000:]
    line = lines[0]
    assert f"the endpoint {url}" in line and "HTTP 503" in line and "global_step_1" in line, line
    assert (tmp_path / "run" / "global_step_1" / "library").is_dir()
    assert [json.loads(row)["iteration"] for row in metrics.read_text().splitlines()] == [1]

    with serve(ChatStub(lambda: "ok")) as server:  # the endpoint is back: the run continues from iteration 1
        resumed = api_run(compose_cfg, run_overrides, tmp_path / "run", server.base_url, 3, "trainer.resume_mode=auto")
        history = resumed.fit()
    assert [h["iteration"] for h in history] == [2, 3]
    assert history[0]["forge/library_version"] == 2  # the saved library (one evolution) came back



@pytest.mark.parametrize("key, value", [("max_retries", "-1"), ("max_retries", "1.5"), ("retry_backoff_s", "-0.1"),
                                        ("retry_max_backoff_s", "-1"), ("retry_deadline_s", "0")])
def test_bad_retry_keys_are_refused_naming_the_key(tmp_path, compose_cfg, run_overrides, key, value):
    from agent_system.config_checks import ConfigError

    cfg = compose_cfg(run_overrides(tmp_path, iterations=1) + ["trainer.engine=api", f"trainer.api.{key}={value}"])
    with pytest.raises(ConfigError, match=rf"trainer\.api\.{key}="):
        validate(cfg)


def test_an_endpoint_that_only_answers_garbage_ends_the_run_with_one_line(tmp_path, run_overrides, monkeypatch,
                                                                           capsys):
    """Before the fix the run ended with exit 0, every reply malformed, and no line saying so."""
    from recipe.forge import main_forge

    with serve(ChatStub(lambda: "garbage")) as server:
        monkeypatch.setattr(sys, "argv", [
            "slea-rl", *run_overrides(tmp_path / "run", iterations=2), "trainer.engine=api",
            f"trainer.api.base_url={server.base_url}/v1", "trainer.api.model=stub", "hydra/job_logging=disabled",
            "hydra/hydra_logging=disabled"])
        with pytest.raises(SystemExit) as exit_info:
            main_forge.main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err, err[-3000:]
    [line] = [line for line in err.splitlines() if line.startswith("endpoint error:")]
    assert "held a valid action" in line and "iteration 1" in line and "trainer.api.model" in line, line
    assert not (tmp_path / "run" / "metrics.jsonl").exists() or not (tmp_path / "run" / "metrics.jsonl").read_text()


def test_a_later_iteration_of_garbage_is_a_warning_line(tmp_path, compose_cfg, run_overrides, capsys):
    metrics = tmp_path / "run" / "metrics.jsonl"
    stub = ChatStub(lambda: "garbage" if metrics.exists() and metrics.read_text().strip() else "ok")
    with serve(stub) as server:
        history = api_run(compose_cfg, run_overrides, tmp_path / "run", server.base_url, 2).fit()
    assert [h["iteration"] for h in history] == [1, 2] and history[-1]["valid_action_ratio"] == 0.0
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning: none of the")]
    assert len(warnings) == 1 and "in iteration 2" in warnings[0]
