"""The environment API: one gym-style episode (:class:`~agent_system.environments.episode.AgentEnv`, episode.py)
and a manager over B x G of them (:class:`EnvironmentManagerBase`).

How to add an environment (e.g. ``env_package/myenv/``)
--------------------------------------------------------
1. ``env_package/myenv/env.py``: a subclass of :class:`~agent_system.environments.episode.AgentEnv`.
   ``reset(seed) -> (obs, info)`` and ``step(action_text) -> (obs, reward, terminated, truncated, info)``.
   ``obs`` is text. ``info`` carries at least ``won`` (bool), ``task`` (the episode's task description) and
   ``task_type`` (str or None); ``admissible_actions`` (list[str]) where the environment has them; ``image``
   (HxWx3 uint8 numpy array) in image mode; ``hidden_state`` (str) where the observation does not identify the
   state: what it leaves out, equal for equal states (ALFWorld: a digest of its facts; the observation does not say
   what the agent holds), which step groups can tell states apart by (``step_state=environment``; a manager may
   override ``hidden_state`` instead). The same seed must give the same episode: the G copies of a
   task share one seed, and that is what makes them a group. Optionally implement ``expert_action()``
   (the action a scripted expert would take now, in the environment's own action language) so that
   ``scripts/bench_envs.py --policy expert`` and the tests can drive it, and so that every step record carries
   it (``StepRecord.expert_action``, which measures the library's lessons; an expert too slow to ask at every
   step is left out of the records with the manager's ``records_expert_actions = False``).
   The constructor takes keyword arguments only, all picklable: environments may be built inside worker
   processes from an :class:`~agent_system.environments.episode.EnvSpec`.
2. ``prompts/myenv.py``: ``build_prompt(ctx: PromptContext) -> str`` (see prompts/common.py), rendering
   the observation with and without history.
3. ``env_package/myenv/manager.py``: a subclass of :class:`EnvironmentManagerBase` that sets
   ``prompt_builder`` and ``heavy`` (True: environments live in worker processes with a per-step timeout)
   and implements ``env_spec(config, split)`` (split "train" or "val": validation must use held-out
   tasks). Override ``parse_action`` when the environment needs the action text normalised or checked
   (default: one of ``info["admissible_actions"]`` when listed, else any non-empty text),
   ``action_for_malformed`` for what a malformed answer sends (default "": no move; text games may pass
   the parsed text on), ``anchor_observation`` when the raw observation holds noise that should not split
   step groups, and ``memory_kind`` ("search" for query/result history).
4. Register ``"myenv": "agent_system.environments.env_package.myenv.manager:MyEnvManager"`` in registry.py
   (or call ``register_env_manager`` at import time of a plugin).
5. Settings of its own: a dataclass section (checked in ``__post_init__``) as a field ``myenv`` of
   ``EnvConfig`` in config.py, mirrored in forge_trainer.yaml and docs/configuration.md.
docs/adding_an_environment.md does all of this for a toy environment, and a test follows it.

Episodes that end because a worker crashed, hung past ``step_timeout_s``, the environment raised or returned a
malformed image observation (agent_system/environments/images.py) are recorded as failed, with
``info["failure_reason"]``; the rest of the batch carries on.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

from agent_system.environments.config import EnvConfig
from agent_system.environments.episode import EnvSpec
from agent_system.environments.images import checked_image
from agent_system.environments.projection import ParsedAction, parse_tagged_response, valid_unicode
from agent_system.environments.prompts.common import PromptContext
from agent_system.memory import BaseMemory, make_memory


def task_seeds(split: str, count: int, val_seed_offset: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """(count,) int64 seeds of ``split``'s tasks, the rule both engines use. Train: drawn by ``rng`` from
    [0, val_seed_offset); val: val_seed_offset + 0..count-1, the same held-out tasks every time (no rng)."""
    if split == "val":
        return int(val_seed_offset) + np.arange(count, dtype=np.int64)
    if split != "train":
        raise ValueError(f"split={split!r} is not one of ['train', 'val']")
    if rng is None:
        raise ValueError("training task seeds are drawn: task_seeds('train', ...) needs an rng")
    return rng.integers(0, int(val_seed_offset), size=count, dtype=np.int64)


@dataclass
class Observations:
    """What the manager hands the rollout for a set of environments (aligned lists).

    text: prompt for the policy (history and instructions included); anchor: raw observation only;
    image: HxWx3 uint8 arrays in image mode, else None; admissible: the actions the environment lists for the
    state (``info["admissible_actions"]``), empty where it lists none.
    """

    text: list[str]
    anchor: list[str]
    image: list[np.ndarray | None]
    admissible: list[tuple[str, ...]]


class EnvironmentManagerBase:
    """B tasks x G copies of an environment, stepped together by text actions.

    Index ``i`` runs task ``i // G``; the copies of a task share a seed (their ``uid``), each copy has its
    own ``traj_uid``. ``step`` only advances environments still active; finished ones keep their last
    state until the next ``reset``.
    """

    prompt_builder: ClassVar[Callable[[PromptContext], str]]
    heavy: ClassVar[bool] = False  # True: environments run in worker processes with a per-step timeout
    has_task_types: ClassVar[bool] = False  # True: success is also reported per info["task_type"]
    default_max_steps: ClassVar[int] = 15  # the environment's standard episode limit (env.max_steps=null)
    # False: the step records carry no expert action (an expert too slow to ask at every step of a rollout)
    records_expert_actions: ClassVar[bool] = True

    def __init__(self, config: EnvConfig, num_tasks: int, split: str, env_name: str | None = None, pool: Any = None):
        from agent_system.workers import make_pool

        if split not in ("train", "val"):
            raise ValueError(f"split={split!r} must be 'train' or 'val'")
        if num_tasks < 1:
            raise ValueError(f"num_tasks={num_tasks} must be >= 1")
        self.config = config
        self.env_name = env_name or config.env_name
        self.split = split
        self.num_tasks = num_tasks
        self.group_n = config.rollout.n
        self.num_envs = num_tasks * self.group_n
        self.max_steps = self.resolve_max_steps(config)
        self.pool = pool if pool is not None else make_pool(self.env_spec(config, split), self.num_envs, config.resources_per_worker, heavy=self.heavy)
        self.memory: BaseMemory = make_memory(config.memory, self.num_envs, self.memory_kind())
        # the training-task sampler: public so that trainers can checkpoint it for an exact resume
        self.task_rng = np.random.default_rng(config.seed)
        self.resets = 0
        self._reset_state()

    # ----- hooks for subclasses -----
    @classmethod
    def standard_max_steps(cls, config: EnvConfig) -> int:
        """The step limit this environment is usually run with (ALFWorld 50, WebShop 15, ...)."""
        return cls.default_max_steps

    @classmethod
    def resolve_max_steps(cls, config: EnvConfig) -> int:
        """``env.max_steps`` when set, else the environment's standard limit."""
        return config.max_steps if config.max_steps is not None else cls.standard_max_steps(config)

    @classmethod
    def env_spec(cls, config: EnvConfig, split: str) -> EnvSpec:
        """The environment to build for ``split`` ("train" or "val")."""
        raise NotImplementedError(f"{cls.__name__} must implement env_spec(config, split)")

    def memory_kind(self) -> str:
        """Which memory ``env.memory=simple`` resolves to for this environment ("simple" or "search")."""
        return "simple"

    def parse_action(self, action_text: str, info: Mapping[str, Any]) -> tuple[str, bool]:
        """Map the text inside <action> to what the environment receives, and whether it is a legal action.
        Default: legal when the environment lists no admissible actions or the text is one of them."""
        admissible = info.get("admissible_actions")
        if not admissible:
            return action_text, bool(action_text)
        lowered = {a.lower(): a for a in admissible}
        match = lowered.get(action_text.strip().lower())
        return (match, True) if match is not None else (action_text, False)

    def action_for_malformed(self, parsed: ParsedAction) -> str:
        """What the environment receives for a malformed response (the step still happens and is invalid).
        Default "": no move for a closed action set, so a malformed answer never acts by accident. Text
        environments may pass ``parsed.action`` on instead."""
        return ""

    def anchor_observation(self, obs: str, info: Mapping[str, Any]) -> str:
        """The raw observation used for step grouping and retrieval (no history, prompt or action list)."""
        return obs

    # ----- task seeds -----
    def next_task_seeds(self) -> np.ndarray:
        """Seeds of the next B tasks of this manager's split (:func:`task_seeds`); training draws advance
        ``task_rng``."""
        return task_seeds(self.split, self.num_tasks, self.config.val_seed_offset, self.task_rng)

    # ----- episode driving -----
    def _reset_state(self) -> None:
        n = self.num_envs
        self.active = np.zeros(n, dtype=bool)
        self.step_count = np.zeros(n, dtype=np.int64)
        self.episode_reward = np.zeros(n, dtype=np.float64)
        self.won = np.zeros(n, dtype=bool)
        self.terminated = np.zeros(n, dtype=bool)  # the environment (not a step limit) ended the episode
        self.state_anchors: list[str] = [""] * n  # each environment's anchor: its state's observation (keeps_state)
        self.hidden_states: list[str] = [""] * n  # what that observation leaves out of the state (info hidden_state)
        self.last_obs: list[str] = [""] * n
        self.last_info: list[dict[str, Any]] = [{} for _ in range(n)]
        self.failure_reason: list[str | None] = [None] * n
        self.task_seeds = np.zeros(self.num_tasks, dtype=np.int64)
        self.uids: list[str] = [""] * n
        self.traj_uids: list[str] = [""] * n
        self._experts: dict[int, str | None] = {}  # environment -> its expert's action at its current state

    def reset(self, seeds: Sequence[int] | None = None) -> tuple[Observations, list[dict[str, Any]]]:
        """Start B new tasks (``seeds`` of length B, default ``next_task_seeds()``), G copies each."""
        task_seeds = np.asarray(self.next_task_seeds() if seeds is None else seeds, dtype=np.int64)
        if task_seeds.shape != (self.num_tasks,):
            raise ValueError(f"reset needs {self.num_tasks} task seeds, got shape {task_seeds.shape}")
        self._reset_state()
        self.task_seeds = task_seeds
        env_seeds = np.repeat(task_seeds, self.group_n)
        results = self.pool.reset(list(range(self.num_envs)), [int(s) for s in env_seeds])
        self.memory.reset(self.num_envs)
        copy = np.tile(np.arange(self.group_n), self.num_tasks)
        self.resets += 1
        task_index = np.repeat(np.arange(self.num_tasks), self.group_n)
        # unique per group even if a seed repeats within or across resets; the seed stays readable
        self.uids = [f"{self.split}{self.resets}-{t}-seed{s}" for t, s in zip(task_index, env_seeds)]
        self.traj_uids = [f"{u}-copy{c}" for u, c in zip(self.uids, copy)]
        for i, res in enumerate(results):
            res.info = checked_image(res.info)
            self.last_obs[i] = res.obs
            self.last_info[i] = res.info
            self.state_anchors[i] = self.anchor_observation(res.obs, res.info)
            self.hidden_states[i] = self.hidden_state(res.obs, res.info)
            reason = res.info.get("failure_reason")
            self.active[i] = reason is None
            self.failure_reason[i] = reason
        idx = list(range(self.num_envs))
        return self.observations(idx), [self.last_info[i] for i in idx]

    def step(self, text_actions: Sequence[str | None]) -> tuple[Observations, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """Project and apply one model response per environment (entries for inactive environments are
        ignored and may be None).

        Returns next observations of all environments (prompts only for those still active, see
        ``active_observations``), rewards (num_envs,) float, dones (num_envs,) bool
        (True for every environment that is no longer active) and infos; each stepped environment's info
        has ``is_action_valid`` and ``action`` (the projected text sent to it).
        """
        if len(text_actions) != self.num_envs:
            raise ValueError(f"step needs {self.num_envs} actions (one per environment), got {len(text_actions)}")
        idx = np.flatnonzero(self.active).tolist()
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        if not idx:
            return self.active_observations(), rewards, ~self.active, list(self.last_info)
        actions, valid = self.project_actions([valid_unicode(text_actions[i]) for i in idx], idx)
        results = self.pool.step(idx, actions)
        self.memory.store(
            idx,
            [self.anchor_observation(self.last_obs[i], self.last_info[i]) for i in idx],
            actions,
            [r.obs for r in results],
        )
        for j, i in enumerate(idx):
            res = results[j]
            self._experts.pop(i, None)
            self.step_count[i] += 1
            rewards[i] = res.reward
            self.episode_reward[i] += res.reward
            info = checked_image(res.info)
            info["is_action_valid"] = bool(valid[j])
            info["action"] = actions[j]
            self.won[i] = bool(info.get("won", False))
            self.terminated[i] = bool(res.terminated)
            reason = info.get("failure_reason")
            if reason is not None:
                self.failure_reason[i] = reason
                if not res.obs:
                    info.setdefault("task", self.last_info[i].get("task", ""))
                    info.setdefault("task_type", self.last_info[i].get("task_type"))
            if res.obs or reason is None:
                self.last_obs[i] = res.obs
            self.last_info[i] = info
            if not self.keeps_state(res.obs, info):
                self.state_anchors[i] = self.anchor_observation(self.last_obs[i], info)
                self.hidden_states[i] = self.hidden_state(self.last_obs[i], info)
            if res.done or reason is not None or self.step_count[i] >= self.max_steps:
                self.active[i] = False
        return self.active_observations(), rewards, ~self.active, list(self.last_info)

    def keeps_state(self, obs: str, info: Mapping[str, Any]) -> bool:
        """Whether ``obs`` says the last action left the state as it was without showing the state (ALFWorld's
        "Nothing happens."): the anchor stays the observation of that state, so that every step's anchor (its step
        group, its cluster, its retrieval query) is a state, not an answer shared by every state. The prompt and
        the history still show ``obs``. Default: every observation shows its state."""
        return False

    def hidden_state(self, obs: str, info: Mapping[str, Any]) -> str:
        """What ``obs`` leaves out of its state, equal for equal states: the environment's ``info["hidden_state"]``,
        "" where it reports none (the observation shows the whole state)."""
        return str(info.get("hidden_state", ""))

    def hidden_state_of(self, indices: Sequence[int]) -> list[str]:
        """The hidden state (:meth:`hidden_state`) of the state each of ``indices`` is in: asked before a step, the
        state it acts on; after it, the state it reached (kept where :meth:`keeps_state`)."""
        return [self.hidden_states[i] for i in indices]

    def next_anchors(self, indices: Sequence[int]) -> list[str | None]:
        """The anchor each of ``indices`` reached with its last step (what the next step's anchor is, or would
        have been where a step limit ended the episode); None where the environment ended the episode (a terminal
        state, or an infrastructure failure)."""
        return [None if self.terminated[i] else self.state_anchors[i] for i in indices]

    def project_actions(self, responses: Sequence[str], indices: Sequence[int]) -> tuple[list[str], np.ndarray]:
        """Model responses -> (actions sent to the environments, validity mask). Never raises."""
        actions: list[str] = []
        valid = np.zeros(len(responses), dtype=bool)
        for j, (text, i) in enumerate(zip(responses, indices)):
            parsed: ParsedAction = parse_tagged_response(text, require_think=self.config.require_think)
            if not parsed.valid:
                actions.append(self.action_for_malformed(parsed))
                continue
            action, legal = self.parse_action(parsed.action, self.last_info[i])
            actions.append(action)
            valid[j] = legal
        return actions, valid

    def active_observations(self) -> Observations:
        """Observations of all environments, with prompts built only for the active ones ("" elsewhere:
        a finished environment is never prompted again)."""
        idx = np.flatnonzero(self.active).tolist()
        text = [""] * self.num_envs
        for i, prompt in zip(idx, self.build_text_obs(idx)):
            text[i] = prompt
        return replace(self._state_views(range(self.num_envs)), text=text)

    def observations(self, indices: Sequence[int]) -> Observations:
        return replace(self._state_views(indices), text=self.build_text_obs(indices))

    def _state_views(self, indices: Sequence[int]) -> Observations:
        """Anchor, image and admissible actions of ``indices`` (no prompts: ``text`` is left empty)."""
        infos = [self.last_info[i] for i in indices]
        return Observations(text=[""] * len(infos),
                            anchor=[self.state_anchors[i] for i in indices],
                            image=[info.get("image") for info in infos],
                            admissible=[tuple(str(a) for a in info.get("admissible_actions") or ()) for info in infos])

    def build_text_obs(self, indices: Sequence[int]) -> list[str]:
        """Prompts for the given environments: task, current observation, the last ``history_length``
        steps from memory (none at step 0 or when history_length is 0) and admissible actions."""
        histories = self.memory.fetch(indices, self.config.history_length)
        prompts = []
        for i, history in zip(indices, histories):
            info = self.last_info[i]
            ctx = PromptContext(
                task=str(info.get("task", "")),
                observation=self.last_obs[i],
                history=history,
                step=int(self.step_count[i]),
                history_length=self.config.history_length,
                admissible_actions=info.get("admissible_actions"),
                require_think=self.config.require_think,
                image_mode=info.get("image") is not None,
                extra=info,
            )
            prompts.append(type(self).prompt_builder(ctx))
        return prompts

    # ----- outcomes -----
    def task_types(self) -> list[str | None]:
        return [self.last_info[i].get("task_type") for i in range(self.num_envs)]

    def tasks(self) -> list[str]:
        return [str(self.last_info[i].get("task", "")) for i in range(self.num_envs)]

    def success_evaluator(self) -> dict[str, np.ndarray]:
        """Per-environment outcome arrays for the current episodes: ``success`` (num_envs,) bool from ``won``,
        plus ``success/<task_type>`` arrays (NaN outside that type) when ``has_task_types``."""
        out: dict[str, np.ndarray] = {"success": self.won.copy()}
        if not self.has_task_types:
            return out
        by_type: dict[str, list[int]] = defaultdict(list)
        for i, t in enumerate(self.task_types()):
            if t is not None:
                by_type[str(t)].append(i)
        for t, members in by_type.items():
            col = np.full(self.num_envs, np.nan)
            col[members] = self.won[members]
            out[f"success/{t}"] = col
        return out

    def expert_actions(self, indices: Sequence[int]) -> list[str | None]:
        """The expert action (AgentEnv.expert_action) at the current state of each of ``indices``; None for an
        environment that is no longer active or has no expert there.

        Each environment is asked at most once per state (one pool call for all that were not asked yet), so
        every caller at one state gets the same answer (the rollout recording it on the step, a scripted expert
        policy acting on it), and a stateful expert (a plan it advances, a solution it offers once) is consulted
        once per step, as it would be by an expert playing alone."""
        indices = [int(i) for i in indices]
        new = [i for i in dict.fromkeys(indices) if self.active[i] and i not in self._experts]
        if new:
            self._experts.update(zip(new, self.pool.call("expert_action", new)))
        return [self._experts[i] if self.active[i] else None for i in indices]

    def recorded_expert_actions(self, indices: Sequence[int]) -> list[str | None]:
        """The ``expert_action`` the step records of ``indices`` carry, asked by both engines at the state the
        policy acts on: :meth:`expert_actions`, or None for every one where the environment does not record its
        expert (``records_expert_actions`` False)."""
        return self.expert_actions(indices) if self.records_expert_actions else [None] * len(indices)

    def close(self) -> None:
        self.pool.close()
