"""LLM extraction: strategy extraction from successes, failure diagnosis from failures.

The model is any callable ``llm(prompt: str) -> str``: the policy model served by an engine, or
:class:`OpenAICompatibleLLM` for any OpenAI-compatible chat endpoint (vLLM, SGLang, llama.cpp server, ...).
The reply should be a JSON list of ``{"level": ..., "text": ...}``; the parser also accepts the list inside a
code fence or surrounded by prose, and ``level: text`` lines. Items with an unknown level, empty or overlong
text, and replies with nothing usable are dropped and counted in ``stats["malformed"]``; a failing call is
counted in ``stats["llm_errors"]``. Neither ever raises. The candidates carry no advice (``Candidate.advice`` is
None): free text names no checkable action, so lesson_quality.py counts them as not checkable.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

from agent_system.environments.projection import valid_unicode
from agent_system.json_input import loads as read_json
from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord
from recipe.forge.experience.bounds import cut, shorten
from recipe.forge.experience.library import GOLDEN, LEVELS, WARNING, Candidate

LLM = Callable[[str], str]
MAX_TEXT_CHARS = 600
MAX_STEPS_SHOWN = 30
MAX_ACTIONS_SHOWN = 10  # a state's admissible actions are listed when there are at most this many
MAX_TASK_SHOWN = 500  # characters of the task (and 80 of the task type) a prompt quotes

STRATEGY_PROMPT = """You are analysing a SUCCESSFUL episode of an agent to extract reusable strategies.
Task: {task}
Task type: {task_type}
Return: {reward}
Steps (observation -> action):
{steps}

Write up to three lessons another agent can reuse:
- "principle": a general rule for this task type,
- "method": the concrete procedure that solved this task,
- "example": one decisive observation and the action that worked there.
Answer ONLY with a JSON list like [{{"level": "principle", "text": "..."}}, ...]."""

FAILURE_PROMPT = """You are diagnosing a FAILED episode of an agent to extract warnings.
Task: {task}
Task type: {task_type}
Return: {reward}
Steps (observation -> action, [invalid] marks invalid actions):
{steps}

Write up to three warnings:
- "mistake": the error to avoid in general,
- "pattern": the recurring behaviour (loop, dead end, invalid-action habit) that caused the failure,
- "diagnostic": the specific step where the episode went wrong and what to do instead.
Answer ONLY with a JSON list like [{{"level": "mistake", "text": "..."}}, ...]."""

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_LINE = re.compile(r"^\s*(?:[-*\d.)]+\s*)?\**\"?(\w+)\"?\**\s*[:\-]\s*(.+?)\s*$")


def format_steps(traj: TrajectoryRecord) -> str:
    """One line per step (the last ``MAX_STEPS_SHOWN``): ``<step>. <observation> -> <action>``, marked
    ``[invalid]`` where the action was, and followed by the state's admissible actions where the environment lists
    at most ``MAX_ACTIONS_SHOWN`` (what the model can name as "what to do instead")."""
    return "\n".join(map(_step_line, traj.steps[-MAX_STEPS_SHOWN:])) or "(no steps)"


def _step_line(s: StepRecord) -> str:
    line = f"{s.step}. {shorten(s.anchor_obs, 200)} -> {shorten(s.action, 100)}{'' if s.is_action_valid else ' [invalid]'}"
    if 0 < len(s.admissible_actions) <= MAX_ACTIONS_SHOWN:
        line += " [admissible: " + ", ".join(shorten(a, 40) for a in s.admissible_actions) + "]"
    return line


def parse_llm_output(reply: str, zone: str) -> tuple[list[tuple[str, str]], int]:
    """(level, text) pairs found in ``reply`` for ``zone``, and the number of malformed items dropped."""
    allowed = LEVELS[zone]
    items = _json_items(reply)
    if items is None:
        items = [{"level": m.group(1), "text": m.group(2)} for m in map(_LINE.match, reply.splitlines()) if m]
    good: list[tuple[str, str]] = []
    bad = 0
    for item in items:
        level = str(item.get("level", "")).strip().lower() if isinstance(item, dict) else ""
        text = item.get("text") if isinstance(item, dict) else None
        if level in allowed and isinstance(text, str) and text.strip() and len(text) <= MAX_TEXT_CHARS:
            good.append((level, " ".join(text.split())))
        else:
            bad += 1
    if not good and not bad:
        bad = 1  # nothing usable at all
    return good, bad


def _json_items(reply: str) -> list[Any] | None:
    sources = [m.group(1) for m in _FENCE.finditer(reply)] + [reply]
    for source in sources:
        start, end = source.find("["), source.rfind("]")
        if start < 0 or end <= start:
            continue
        try:
            value = read_json(source[start : end + 1], "the reply")  # any model text: huge numbers, deep nesting
        except ValueError:
            continue
        if isinstance(value, list):
            return value
    return None


class LLMExtractor:
    """Calls ``llm`` once per selected trajectory; never raises on a bad reply or a failed call."""

    def __init__(self, llm: LLM):
        if not callable(llm):
            raise TypeError(f"the LLM extractor needs a callable llm(prompt) -> str, got {type(llm).__name__}")
        self.llm = llm
        self.stats = {"llm_calls": 0, "llm_errors": 0, "malformed": 0}

    def extract(
        self, successes: Sequence[TrajectoryRecord], failures: Sequence[TrajectoryRecord], threshold: float,
        batch: Sequence[TrajectoryRecord] = (),
    ) -> list[Candidate]:
        out: list[Candidate] = []
        for traj in successes:
            out.extend(self._one(traj, GOLDEN, STRATEGY_PROMPT, float(traj.episode_reward)))
        for traj in failures:
            out.extend(self._one(traj, WARNING, FAILURE_PROMPT, float(threshold - traj.episode_reward)))
        return out

    def _one(self, traj: TrajectoryRecord, zone: str, template: str, score: float) -> list[Candidate]:
        prompt = template.format(task=cut(traj.task, MAX_TASK_SHOWN), task_type=cut(traj.task_type or "unknown", 80),
                                 reward=f"{traj.episode_reward:g}", steps=format_steps(traj))
        self.stats["llm_calls"] += 1
        try:
            reply = self.llm(prompt)
        except Exception:  # an unreachable endpoint must not stop training: count it and move on
            self.stats["llm_errors"] += 1
            return []
        if not isinstance(reply, str):
            self.stats["malformed"] += 1
            return []
        pairs, bad = parse_llm_output(reply, zone)
        self.stats["malformed"] += bad
        anchor = traj.steps[-1] if zone == WARNING and traj.steps else (traj.steps[0] if traj.steps else None)
        key = anchor.anchor_obs if anchor is not None else traj.task
        clusters = [anchor.cluster_id] if anchor is not None and anchor.cluster_id is not None else []
        return [Candidate(text=text, zone=zone, level=level, score=score, task=traj.task, task_type=traj.task_type,
                          key=key, cluster_ids=list(clusters)) for level, text in pairs]


class OpenAICompatibleLLM:
    """``llm(prompt) -> str`` over an OpenAI-compatible chat-completions endpoint."""

    def __init__(self, base_url: str, model: str, api_key: str = "EMPTY", temperature: float = 0.2,
                 max_tokens: int = 512, timeout: float = 60.0, http_client: Any | None = None):
        from openai import OpenAI

        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, http_client=http_client,
                             max_retries=1)

    def __call__(self, prompt: str) -> str:
        reply = self.client.chat.completions.create(
            model=self.model,
            messages=[{"role": "user", "content": prompt}],
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )
        return valid_unicode(reply.choices[0].message.content)
