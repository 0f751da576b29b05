"""AlfworldEnvironmentManager: ALFWorld text games in worker processes (resets cost 0.2-6 s each)."""

from __future__ import annotations

from agent_system.environments.base import EnvironmentManagerBase

from agent_system.environments.episode import EnvSpec
from agent_system.environments.config import EnvConfig
from agent_system.environments.env_package.alfworld.game_files import game_files_for
from agent_system.environments.prompts import alfworld as alfworld_prompt


NOTHING_HAPPENS = "Nothing happens."


class AlfworldEnvironmentManager(EnvironmentManagerBase):
    """Train on the ``train`` split; validate on ``env.alfworld.eval_dataset``. Games come from the official
    data (``env.alfworld.data_path`` or $ALFWORLD_DATA) or, when there is none, from the offline generator
    (cached under ``env.alfworld.generated_games_dir``). Task types are logged as success/<type>."""
    default_max_steps = 50

    prompt_builder = staticmethod(alfworld_prompt.build_prompt)
    heavy = True
    has_task_types = True
    # once the agent strays from the walkthrough its expert calls the PDDL planner (up to tens of seconds a call on a
    # pick-two game): rollouts do not ask it at every step, and the step records carry no expert action
    records_expert_actions = False

    def keeps_state(self, obs, info) -> bool:
        """ALFWorld answers every command that changes nothing with the same text, whatever the state: with
        ``env.alfworld.nothing_happens_anchor=state`` (the default) that text is no state of its own."""
        return self.config.alfworld.nothing_happens_anchor == "state" and obs.strip() == NOTHING_HAPPENS

    @classmethod
    def env_spec(cls, config: EnvConfig, split: str) -> EnvSpec:
        a = config.alfworld
        alf_split = "train" if split == "train" else a.eval_dataset
        files = game_files_for(alf_split, a.data_path, a.generated_games_dir, a.num_generated_games)
        return EnvSpec("agent_system.environments.env_package.alfworld.env:AlfworldEnv", {"game_files": files})
