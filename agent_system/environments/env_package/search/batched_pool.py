"""BatchedSearchPool: Search environments in this process whose searches of one step reach the retrieval
server as ONE request (the server answers a batch of 64 about ten times faster per query than 64 single
requests; scripts/bench_retrieval.py)."""

from __future__ import annotations

from typing import Sequence

from agent_system.environments.episode import StepResult, failed_result
from agent_system.environments.env_package.search.client import RetrievalError
from agent_system.environments.env_package.search.env import parse_search_action
from agent_system.workers.in_process import InProcessEnvPool, env_error_reason, run_step


class BatchedSearchPool(InProcessEnvPool):
    def step(self, indices: Sequence[int], actions: Sequence[str]) -> list[StepResult]:
        parsed = [parse_search_action(a) for a in actions]
        searching = [j for j, p in enumerate(parsed) if p is not None and p[0] == "search"]
        retrieved: dict[int, list[dict] | RetrievalError] = {}
        if searching:
            first = self.envs[indices[searching[0]]]
            try:
                docs = first.client.retrieve([parsed[j][1] for j in searching], first.topk)
                retrieved = dict(zip(searching, docs))
            except RetrievalError as exc:
                retrieved = {j: exc for j in searching}
        results = []
        for j, (i, action) in enumerate(zip(indices, actions)):
            if j not in retrieved:
                results.append(run_step(self.envs[i], action))
                continue
            try:
                obs, reward, terminated, truncated, info = self.envs[i].search_result(retrieved[j])
                results.append(StepResult(obs, float(reward), bool(terminated), bool(truncated), info))
            except Exception as exc:  # an environment bug ends this episode, not the batch
                results.append(failed_result(env_error_reason(exc)))
        return results
