"""Attack for scripts/reliability_report.py (issue 23, defect 3): huge answers and observations through the
experience system.

A policy answers with a 100,000-character one-word action at 1 MB and 5 MB observations, with a 100,000-character
task; the system clusters every step, evolves a library from those episodes (every extractor setting: rule in both
wordings, step credit, the oracle whose expert is the huge action), and shows the lessons at the next visits, placed
in the prompt messages the engines build. Counted: lessons (and their stored keys) over the bounds, prompt messages
whose experience text is over max_experience_length, prototypes over max_key_chars, the wall seconds of one step at
a new 5 MB observation, and the saved library file's bytes.

all_caught condition:
    r["lessons_over_bound"] == 0 and r["prompt_messages_over_bound"] == 0 and r["prototypes_over_bound"] == 0
    and r["messages_checked"] > 0 and r["step_5mb_s"] < 5.0 and r["library_file_bytes"] < 2_000_000
A test should assert exactly that (before the fix: two 100,000-character lessons, 100,182-character messages,
a 5 MB step that did not finish in 7 minutes and a 27 MB library file).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path


def attack_sizes(quick: bool) -> dict:
    from agent_system.multi_turn_rollout.injection import experience_messages
    from agent_system.multi_turn_rollout.protocols import StepQuery, StepRecord, TrajectoryRecord
    from recipe.forge.config_schema import ForgeConfig
    from recipe.forge.experience import ExperienceSystem, synthetic
    from recipe.forge.experience.render import WORD_CHARS
    from recipe.forge.experience.store import checkpoint_path

    answer = "x" * 100_000
    task = "put a clean mug in the coffeemachine " * 2_800
    page = " ".join(synthetic.corpus(40, seed=7))

    def observation(i: int, size: int) -> str:
        text = f"Room {i}. " + page
        return (text * (size // len(text) + 1))[:size]

    sizes = [1_000_000, 5_000_000] if quick else [1_000_000, 5_000_000, 5_000_000]
    settings = ([{"lesson_style": "imperative"}, {"lesson_style": "descriptive"}] if quick else
                [{"lesson_style": "imperative"}, {"lesson_style": "descriptive"}, {"lesson_credit": "step"},
                 {"extractor": "oracle"}])
    counts = {"size_attacks": 0, "lessons_over_bound": 0, "prompt_messages_over_bound": 0, "messages_checked": 0,
              "prototypes_over_bound": 0, "step_5mb_s": 0.0, "library_file_bytes": 0}
    for setting in settings:
        counts["size_attacks"] += 1
        forge = ForgeConfig(warmup_iterations=0, min_library_size=0, library_save_freq=1000, checkpoint_dir="unused",
                            **setting)
        system = ExperienceSystem.from_config(forge, gamma=0.95, invalid_action_penalty_coef=0.1)
        texts = [observation(i, size) for i, size in enumerate(sizes)]
        trajectories = []
        for i, obs in enumerate(texts):
            query = StepQuery(obs, task, "pick_clean_then_place", f"u{i % 2}", f"t{i}", 0)
            started = time.perf_counter()
            found = system.provide([query])[0]
            if len(obs) >= 5_000_000:
                counts["step_5mb_s"] = max(counts["step_5mb_s"], time.perf_counter() - started)
            steps = [StepRecord(uid=f"u{i % 2}", traj_uid=f"t{i}", step=k, anchor_obs=obs, messages=[],
                                plain_messages=[], response_text=f"<action>{action}</action>", action=action,
                                prompt_ids=[], response_ids=[], logprobs=[], reward=reward, is_action_valid=valid,
                                done=k == 2, cluster_id=found.cluster_id, admissible_actions=(answer, "go"),
                                expert_action=answer)
                     for k, (action, reward, valid) in enumerate([(answer, 0.0, False), (answer, 0.0, True),
                                                                  ("go" if i % 2 else answer, float(i % 2), True)])]
            trajectories.append(TrajectoryRecord(uid=f"u{i % 2}", traj_uid=f"t{i}", task=task,
                                                 task_type="k" * 100_000, steps=steps, episode_reward=float(i % 2),
                                                 success=bool(i % 2), length=3))
        system.evolve(trajectories, 0)
        system.begin_iteration(1)
        for i, obs in enumerate(texts):
            shown = system.provide([StepQuery(obs[:-1] + "#", task, "pick_clean_then_place", "u", f"v{i}", 0)])[0]
            for message in experience_messages(shown.text, "Your move.", forge.injection):
                if shown.text and shown.text in str(message["content"]):
                    counts["messages_checked"] += 1
                    too_long = system.renderer.count(shown.text) > forge.max_experience_length
                    too_long |= len(shown.text) > forge.max_experience_length * (WORD_CHARS + 1)
                    counts["prompt_messages_over_bound"] += bool(too_long)
        for entry in system.library.all_entries():
            stored = [entry.key, entry.task, entry.task_type or ""]
            if entry.advice is not None:
                stored += [entry.advice.state, *entry.advice.do, *entry.advice.avoid, entry.advice.expert or ""]
            over = len(entry.text) > forge.max_lesson_chars or max(map(len, stored)) > forge.max_key_chars
            counts["lessons_over_bound"] += bool(over)
        counts["prototypes_over_bound"] += sum(len(system.index.prototype(c)) > forge.max_key_chars
                                               for c in system.index.cluster_ids())
        with tempfile.TemporaryDirectory() as folder:
            size = checkpoint_path(system.save(Path(folder)).parent).stat().st_size
        counts["library_file_bytes"] = max(counts["library_file_bytes"], size)
    counts["step_5mb_s"] = round(counts["step_5mb_s"], 4)
    return counts


if __name__ == "__main__":
    import sys

    print(attack_sizes("--full" not in sys.argv))
