"""The retrieval server's request limits over real HTTP (uvicorn on 127.0.0.1): bodies over the limit are
answered 413, too many queries, a ``topk`` out of range (NaN, infinities, negatives, zero, strings, booleans)
or too many documents per answer 400, each with a one-line ``detail``; nothing is answered 500 and the server
keeps serving. The defaults refuse the 4,096 x topk 1,000 request that gave a 635 MB answer."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from agent_system.environments.env_package.search.corpus import Passage
from agent_system.environments.env_package.search.request_limits import ServerLimits
from agent_system.environments.env_package.search.retrieval_server import create_app, main
from agent_system.environments.env_package.search.retrievers import BM25Retriever
from agent_system.testing.threaded_server import ThreadedServer

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]
PASSAGES = [Passage(str(i), f"Person {i}\nperson {i} was a painter born in city{i % 7}") for i in range(50)]


@pytest.fixture(scope="module")
def retriever():
    return BM25Retriever(PASSAGES)


@pytest.fixture(scope="module")
def small(retriever):
    """A server with small limits: 2,000-byte bodies, 8 queries, topk 5, 20 documents per answer."""
    limits = ServerLimits(max_body_bytes=2000, max_queries=8, max_topk=5, max_results=20)
    with ThreadedServer(create_app(retriever, default_topk=3, limits=limits)) as server:
        yield f"{server.base_url}/retrieve"


@pytest.fixture(scope="module")
def default(retriever):
    """A server with the shipped default limits."""
    with ThreadedServer(create_app(retriever)) as server:
        yield f"{server.base_url}/retrieve"


def post_raw(url: str, body: bytes | str) -> httpx.Response:
    return httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=30)


def assert_refused(reply: httpx.Response, status: int, *words: str) -> None:
    assert reply.status_code == status, (reply.status_code, reply.text)
    detail = reply.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail
    for word in words:
        assert word in detail, detail


@pytest.mark.parametrize("topk", ["NaN", "Infinity", "-Infinity", "-1", "0", "1e309", '"3"', "true", "2.5"])
def test_a_bad_topk_is_answered_400_naming_topk(default, topk):
    assert_refused(post_raw(default, f'{{"queries": ["painter"], "topk": {topk}}}'), 400, "topk")


def test_malformed_bodies_are_answered_400(default):
    assert_refused(post_raw(default, "not json"), 400, "JSON")
    assert_refused(post_raw(default, '{"topk": 3}'), 400, "queries")
    assert_refused(post_raw(default, '{"queries": [1, null]}'), 400, "queries.0")
    assert_refused(post_raw(default, '[1, 2]'), 400)
    assert_refused(post_raw(default, '{"queries": ["x"], "return_scores": "yes"}'), 400, "return_scores")


def test_the_defaults_refuse_the_635_mb_answer(default):
    assert_refused(httpx.post(default, json={"queries": ["painter"] * 4096, "topk": 1000}, timeout=30), 400, "topk")
    assert_refused(httpx.post(default, json={"queries": ["painter"] * 4097, "topk": 1}, timeout=30), 400, "4096")
    assert_refused(httpx.post(default, json={"queries": ["painter"] * 4096, "topk": 100}, timeout=30), 400,
                   "65536")
    reply = httpx.post(default, json={"queries": ["painter"] * 4096, "topk": 3}, timeout=60)
    assert reply.status_code == 200 and len(reply.json()["result"]) == 4096


def test_query_count_topk_and_result_limits(small):
    assert_refused(httpx.post(small, json={"queries": ["painter"] * 9, "topk": 1}, timeout=10), 400, "9 queries", "8")
    assert_refused(httpx.post(small, json={"queries": ["painter"], "topk": 6}, timeout=10), 400, "topk=6", "5")
    assert_refused(httpx.post(small, json={"queries": ["painter"] * 5, "topk": 5}, timeout=10), 400, "25", "20")
    reply = httpx.post(small, json={"queries": ["painter"] * 4, "topk": 5}, timeout=10)
    assert reply.status_code == 200 and [len(docs) for docs in reply.json()["result"]] == [5] * 4
    assert len(httpx.post(small, json={"queries": ["painter"]}, timeout=10).json()["result"][0]) == 3


def test_bodies_over_the_limit_are_answered_413(small):
    within = json.dumps({"queries": ["painter " * 200]})
    assert len(within) <= 2000 and post_raw(small, within).status_code == 200
    over = json.dumps({"queries": ["painter " * 260]})
    assert_refused(post_raw(small, over), 413, "2000 bytes")

    def chunks():  # no Content-Length: the streamed bytes are counted
        yield b'{"queries": ["'
        for _ in range(10):
            yield b"painter " * 50
        yield b'"]}'

    reply = httpx.post(small, content=chunks(), headers={"content-type": "application/json"}, timeout=10)
    assert_refused(reply, 413, "2000 bytes")


def test_a_40_mb_body_is_refused_without_reading_it(default):
    body = b'{"queries": ["' + b"a" * (40 * 2**20) + b'"]}'
    assert_refused(post_raw(default, body), 413, str(16 * 2**20))


def test_the_server_keeps_serving_after_bad_requests(small):
    for bad in ('{"queries": ["x"], "topk": NaN}', "{", '{"queries": ["' + "a" * 5000 + '"]}'):
        assert post_raw(small, bad).status_code in (400, 413)
    reply = httpx.post(small, json={"queries": ["painter born city3"], "topk": 2}, timeout=10)
    assert reply.status_code == 200 and len(reply.json()["result"][0]) == 2


@pytest.mark.parametrize("args, words", [(["--max-topk", "0"], "max_topk=0"), (["--topk", "9", "--max-topk", "5"], "topk=9"),
                                          (["--max-body-bytes", "-5"], "max_body_bytes=-5")])
def test_bad_limits_on_the_command_line_are_refused(args, words, capsys, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "0", "contents": "x"}\n')
    with pytest.raises(SystemExit) as exit_info:
        main(["--corpus", str(corpus), *args])
    assert exit_info.value.code == 2 and words in capsys.readouterr().err


def test_the_limits_and_their_defaults_are_documented():
    text = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    defaults = ServerLimits()
    for option, value in [("--max-body-bytes", defaults.max_body_bytes), ("--max-queries", defaults.max_queries),
                          ("--max-topk", defaults.max_topk), ("--max-results", defaults.max_results)]:
        assert f"`{option}` (default {value}" in text, option
