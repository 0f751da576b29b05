"""Attacks for scripts/reliability_report.py (issue 23, defects 4, 5 and 8): a faulty chat endpoint under the
prompt-only engine, hostile lesson text through the library viewer's exports and console, and bad requests to
the Search retrieval server. Each imports project code, uses real HTTP on 127.0.0.1 (agent_system/testing/
threaded_server.py) and real files, and returns counts.

all_caught conditions:
    attack_endpoint_faults:  r["runs_lost"] == 0 and r["tracebacks"] == 0 and r["requests_failed"] == 0
                             and r["malformed_as_invalid"] == r["malformed_sent"] > 0
                             and r["outage_clear_line"] == 1 and r["outage_saved"] == 1
    attack_exports:          r["markup_executed"] == 0 and r["markup_formed"] == 0
                             and r["console_control_chars"] == 0 and r["export_attacks"] > 0
    attack_retrieval_server: r["bad_answered_4xx"] == r["bad_requests"] > 0 and r["answered_5xx"] == 0
                             and r["server_up_after"] == 1 and r["largest_answer_bytes"] < 50_000_000
A test should assert exactly these (before the fixes: the run died within 7 requests at 50% failures with a
raw traceback; the rendered Markdown export ran the injected handlers in Chromium and the console printed raw
ANSI/OSC escapes; topk NaN gave HTTP 500, a 200 MB body and a 4,096 x topk 1,000 request were served).
`markup_executed` is counted in headless Chromium when one is installed (`browser_checked` says whether it
was); without one, `markup_formed` (tags or javascript: links the Markdown renderer produced) stands in.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from reliability_attacks import compose_shipped

TINY_RUN = [  # a NumberLine run small enough for seconds: 2 tasks x 2 copies, at most 3 steps
    "env.env_name=gym_cards/NumberLine-v0", "env.gym_cards.target_max=3", "env.max_steps=3", "env.rollout.n=2",
    "env.history_length=0", "data.train_batch_size=2", "data.val_batch_size=1", "trainer.test_freq=-1",
    "trainer.save_freq=-1", "trainer.val_before_train=false", "trainer.local.progress=false",
    "trainer.logger=[jsonl]", "algorithm.forge.warmup_iterations=0", "algorithm.forge.min_library_size=0",
    "trainer.engine=api", "trainer.api.model=stub", "trainer.api.timeout_s=0.3", "trainer.api.retry_backoff_s=0.01",
    "trainer.api.retry_max_backoff_s=0.05", "trainer.api.retry_deadline_s=20",
]


def _prompt_only_runner(folder: Path, url: str, iterations: int, *extra: str):
    from recipe.forge.engines.api.runner import PromptOnlyRunner
    from recipe.forge.main_forge import validate

    cfg = compose_shipped([
        *TINY_RUN, f"trainer.total_training_steps={iterations}", f"trainer.default_local_dir={folder}",
        f"algorithm.forge.checkpoint_dir={folder}/library", f"trainer.api.base_url={url}/v1", *extra])
    return PromptOnlyRunner(validate(cfg))


def attack_endpoint_faults(quick: bool) -> dict:
    """Every fault alone against the generator, a run with half of its requests failing, a persistent outage."""
    from agent_system.multi_turn_rollout.protocols import SamplingParams
    from agent_system.testing.chat_stub import MALFORMED, TRANSIENT, ChatStub
    from agent_system.testing.threaded_server import ThreadedServer
    from recipe.forge.engines.api.generator import OpenAIGenerator
    from recipe.forge.engines.api.retry import EndpointError
    from recipe.forge.engines.api.settings import ApiSettings

    counts = {"endpoint_attacks": 0, "requests_failed": 0, "malformed_sent": 0, "malformed_as_invalid": 0,
              "runs_lost": 0, "tracebacks": 0, "outage_clear_line": 0, "outage_saved": 0}
    sampling = SamplingParams(temperature=0.0, max_new_tokens=8, stop=("</action>",))
    prompt = [{"role": "user", "content": "Target: 1\nCurrent: 0"}]
    for fault in (*TRANSIENT, *MALFORMED):
        counts["endpoint_attacks"] += 1
        stub = ChatStub.sequence([fault] * (3 if fault in TRANSIENT else 1), slow_s=1.0)
        with ThreadedServer(stub, log_level="critical") as server:
            gen = OpenAIGenerator(ApiSettings(base_url=f"{server.base_url}/v1", model="stub", timeout_s=0.3,
                                              max_retries=4, retry_backoff_s=0.01))
            try:
                text = gen.generate([prompt], sampling)[0].text
            except Exception:
                counts["tracebacks"] += 1
                continue
        if fault in MALFORMED:
            counts["malformed_sent"] += 1
            counts["malformed_as_invalid"] += int(text == "" and gen.malformed == 1)
        else:
            counts["requests_failed"] += int(text != "<action>+</action>")

    with tempfile.TemporaryDirectory() as tmp:
        for seed in (range(1) if quick else range(3)):  # half of the requests fail, a fifth of them malformed
            counts["endpoint_attacks"] += 1
            stub = ChatStub.failing_share(0.5, seed, faults=(*TRANSIENT, *TRANSIENT, *MALFORMED), slow_s=0.6)
            with ThreadedServer(stub, log_level="critical") as server:
                try:
                    history = _prompt_only_runner(Path(tmp) / f"half{seed}", server.base_url, 2,
                                                  "trainer.api.max_retries=20").fit()
                    counts["runs_lost"] += int([h["iteration"] for h in history] != [1, 2])
                except Exception:
                    counts["runs_lost"] += 1
                    counts["tracebacks"] += 1
            counts["malformed_sent"] += sum(stub.sent[f] for f in MALFORMED)
            counts["malformed_as_invalid"] += int(history[-1]["api/malformed_replies"]) if history else 0

        counts["endpoint_attacks"] += 1  # up for iteration 1, then down for good
        folder = Path(tmp) / "outage"
        metrics = folder / "metrics.jsonl"
        stub = ChatStub(lambda: "503" if metrics.exists() and metrics.read_text().strip() else "ok")
        with ThreadedServer(stub, log_level="critical") as server:
            try:
                _prompt_only_runner(folder, server.base_url, 3, "trainer.api.max_retries=2").fit()
                counts["runs_lost"] += 1  # it cannot finish against a dead endpoint
            except EndpointError as exc:
                line = str(exc)
                counts["outage_clear_line"] = int("\n" not in line and f"{server.base_url}/v1" in line
                                                  and "HTTP 503" in line)
                counts["outage_saved"] = int((folder / "global_step_1" / "library").is_dir())
            except Exception:
                counts["tracebacks"] += 1
    return counts


MARKUP = [
    '<script>console.log("PWNED-1")</script>',
    '<img src=x onerror="console.log(\'PWNED-2\')">',
    '<iframe srcdoc="<script>console.log(&quot;PWNED-3&quot;)</script>"></iframe>',
    '<svg onload="console.log(\'PWNED-4\')"></svg>',
    '[click](javascript:console.log("PWNED-5")) ![x](javascript:console.log("PWNED-6"))',
    '<a href="javascript:console.log(\'PWNED-7\')">x</a> <javascript:alert(1)> {: onclick="x"}',
]
ESCAPES = ["clear \x1b[2J\x1b[H", "title \x1b]0;owned\x07", "csi \x9b31m", "bell \x07 back\x08 cr\r", "bidi \u202eevil"]
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
PAGE_TAGS = {"h1", "h2", "h3", "p", "table", "thead", "tbody", "tr", "th", "td"}  # what the export itself makes


def _live_markup(page: str) -> int:
    """Tags a rendered page holds beyond the export's own, and event-handler or javascript: attributes."""
    from html.parser import HTMLParser

    class Tags(HTMLParser):
        found = 0

        def handle_starttag(self, tag, attrs):
            live = [k for k, v in attrs if k.startswith("on") or "javascript:" in (v or "").lower()]
            self.found += int(tag not in PAGE_TAGS) + len(live)

    parser = Tags()
    parser.feed(page)
    return parser.found


def attack_exports(quick: bool) -> dict:
    """Hostile lessons (markup, terminal escapes) and a hostile prototype through --export-md and the console."""
    import contextlib
    import io

    from agent_system.testing.browser import dump_dom, find_chromium
    from recipe.forge.config_schema import ForgeConfig
    from recipe.forge.experience import ExperienceSystem
    from recipe.forge.experience.library import Candidate
    from recipe.forge.commands.library_viewer import main as viewer_main

    counts = {"export_attacks": 0, "markup_formed": 0, "markup_executed": 0, "console_control_chars": 0,
              "browser_checked": False}
    system = ExperienceSystem.from_config(ForgeConfig(warmup_iterations=0, min_library_size=0,
                                                      library_save_freq=1000, checkpoint_dir="unused"))
    levels = [("warning", "mistake"), ("warning", "pattern"), ("golden", "principle"), ("golden", "example")]
    texts = MARKUP + ESCAPES
    system.library.insert_unchecked([Candidate(f"lesson {i}: {t}", *levels[i % 4], 1.0 - i / 100)
                                     for i, t in enumerate(texts)], iteration=0)
    system.index.assign("room " + "".join(ESCAPES), 0)
    counts["export_attacks"] = len(texts) + 1
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        system.save(folder / "ck")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            viewer_main([str(folder / "ck"), "--export-md", str(folder / "library.md")])
        counts["console_control_chars"] = len(CONTROL.findall(printed.getvalue()))
        try:
            import markdown
        except ImportError:
            return counts
        page = markdown.markdown((folder / "library.md").read_text(encoding="utf-8"), extensions=["tables"])
        counts["markup_formed"] = _live_markup(page)
        browser = find_chromium()
        if browser is not None:
            html_page = folder / "library.html"
            html_page.write_text(f"<html><head><meta charset='utf-8'></head><body>{page}</body></html>",
                                 encoding="utf-8")
            _, console = dump_dom(browser, html_page, folder / "profile")
            counts["markup_executed"] = sum(1 for m in console if "PWNED" in m)
            counts["browser_checked"] = True
    return counts


def attack_retrieval_server(quick: bool) -> dict:
    """Malformed, out-of-range and oversized requests to a real retrieval server with the shipped limits."""
    import httpx

    from agent_system.environments.env_package.search.corpus import Passage
    from agent_system.environments.env_package.search.retrieval_server import create_app
    from agent_system.environments.env_package.search.retrievers import BM25Retriever
    from agent_system.testing.threaded_server import ThreadedServer

    passages = [Passage(str(i), f"Person {i}\nperson {i} was a painter born in city{i % 7}") for i in range(200)]
    huge = (40 if quick else 200) * 2**20
    bad = [f'{{"queries": ["painter"], "topk": {v}}}' for v in
           ("NaN", "Infinity", "-Infinity", "-1", "0", "1e309", '"3"', "true", "2.5", "null]", "1000")]
    bad += ["not json", "", "[1, 2]", '{"topk": 3}', '{"queries": "painter"}', '{"queries": [1, null]}',
            '{"queries": ["x"], "return_scores": "yes"}', json.dumps({"queries": ["painter"] * 4097}),
            json.dumps({"queries": ["painter"] * 4096, "topk": 1000}),
            json.dumps({"queries": ["painter"] * 4096, "topk": 100}),
            b'{"queries": ["' + b"a" * huge + b'"]}']
    counts = {"bad_requests": 0, "bad_answered_4xx": 0, "answered_5xx": 0, "largest_answer_bytes": 0,
              "server_up_after": 0}

    def chunks():  # an oversized body with no Content-Length
        yield b'{"queries": ["'
        for _ in range(20 * 2**4):
            yield b"a" * 2**16
        yield b'"]}'

    with ThreadedServer(create_app(BM25Retriever(passages))) as server:
        url = f"{server.base_url}/retrieve"
        headers = {"content-type": "application/json"}
        for body in [*bad, None]:
            counts["bad_requests"] += 1
            try:
                reply = httpx.post(url, content=chunks() if body is None else body, headers=headers, timeout=60)
            except httpx.HTTPError:
                continue
            counts["bad_answered_4xx"] += int(400 <= reply.status_code < 500)
            counts["answered_5xx"] += int(reply.status_code >= 500)
            counts["largest_answer_bytes"] = max(counts["largest_answer_bytes"], len(reply.content))
        good = httpx.post(url, json={"queries": ["painter born city3"], "topk": 2}, timeout=30)
        counts["server_up_after"] = int(good.status_code == 200 and len(good.json()["result"][0]) == 2)
    return counts
