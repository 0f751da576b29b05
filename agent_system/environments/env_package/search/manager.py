"""SearchEnvironmentManager: Search-R1 episodes over a retrieval server, with SearchMemory.

Data: ``env.search.train_data`` / ``val_data`` (parquet or JSONL from preprocess_search_r1_dataset.py) and
the server at ``env.search.search_url``. With no train_data, a generated offline QA set is used, and with
``env.search.launch_server`` a BM25 server over its corpus (or over ``env.search.corpus_path`` for real
data) is started for the manager's lifetime.
"""

from __future__ import annotations

import atexit
from typing import Any, Sequence

import numpy as np

from agent_system.environments.base import EnvironmentManagerBase

from agent_system.environments.episode import EnvSpec
from agent_system.environments.config import EnvConfig
from agent_system.environments.env_package.search.env import parse_search_action
from agent_system.environments.prompts import search as search_prompt
from agent_system.environments.projection import parse_tagged_response

_servers: dict[str, Any] = {}  # corpus path -> LocalRetrievalServer started by a manager of this process


def _local_server_url(corpus_path: str) -> str:
    from agent_system.environments.env_package.search.local_server import LocalRetrievalServer

    server = _servers.get(corpus_path)
    if server is None or not server.is_running():
        server = _servers[corpus_path] = LocalRetrievalServer(corpus_path)
    return server.url


@atexit.register
def _stop_local_servers() -> None:
    for server in _servers.values():
        server.stop()


def resolve_data(config: EnvConfig, split: str) -> tuple[str, str]:
    """(QA file for ``split``, retrieval URL) after applying the built-in data set and launch_server rules."""
    s = config.search
    if not s.train_data:
        from agent_system.environments.env_package.search.synthetic import ensure_builtin_dataset

        paths = ensure_builtin_dataset(s.data_cache_dir, s.builtin_num_questions)
        qa_file = paths["train" if split == "train" else "val"]
        url = _local_server_url(paths["corpus"]) if s.launch_server else s.search_url
        return qa_file, url
    qa_file = s.train_data if split == "train" else s.val_data  # both set: checked at start-up
    url = _local_server_url(s.corpus_path) if (s.launch_server and s.corpus_path) else s.search_url
    return qa_file, url


class SearchEnvironmentManager(EnvironmentManagerBase):
    """In-process environments by default, with the step's searches sent as one batch (BatchedSearchPool);
    ``env.resources_per_worker.num_workers > 0`` spreads them over worker processes instead."""
    default_max_steps = 10

    prompt_builder = staticmethod(search_prompt.build_prompt)
    heavy = False
    has_task_types = True  # task_type = the question's data source (nq, hotpotqa, ...)

    def __init__(self, config: EnvConfig, num_tasks: int, split: str, env_name: str | None = None, pool: Any = None):
        if pool is None and config.resources_per_worker.num_workers == 0:
            from agent_system.environments.env_package.search.batched_pool import BatchedSearchPool

            pool = BatchedSearchPool(self.env_spec(config, split), num_tasks * config.rollout.n)
        super().__init__(config, num_tasks, split, env_name=env_name, pool=pool)

    @classmethod
    def env_spec(cls, config: EnvConfig, split: str) -> EnvSpec:
        qa_file, url = resolve_data(config, split)
        return EnvSpec(
            "agent_system.environments.env_package.search.env:SearchEnv",
            {"qa_file": qa_file, "search_url": url, "topk": config.search.topk, "timeout_s": config.search.timeout_s},
        )

    def memory_kind(self) -> str:
        return "search"

    def project_actions(self, responses: Sequence[str], indices: Sequence[int]) -> tuple[list[str], np.ndarray]:
        """A response is valid when it holds exactly one complete, non-empty <search> or <answer> block (and
        a <think> block when require_think); the environment receives that block, or the raw text."""
        actions, valid = [], np.zeros(len(responses), dtype=bool)
        for j, text in enumerate(responses):
            text = text if isinstance(text, str) else ""
            parsed = parse_search_action(text)
            if parsed is None:
                actions.append(text)
                continue
            kind, content = parsed
            actions.append(f"<{kind}>{content}</{kind}>")
            tag = parse_tagged_response(text, require_think=self.config.require_think, action_tag=kind)
            other = "answer" if kind == "search" else "search"
            valid[j] = tag.valid and f"<{other}>" not in text.lower()
        return actions, valid
