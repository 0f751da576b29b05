"""Does a policy read the experiences injected into its prompt? A direct test, before spending a training run.

On every state of an environment with an expert (NumberLine by default), the prompt the rollout builds is given
to the model with and without a lesson, and the probability of the expert's action as the next answer is
measured:

* ``none``: no experience (the plain prompt);
* ``right``: one golden ``example`` entry in the rule extractor's wording, which names this state and the expert
  action, rendered by ``ExperienceRenderer`` and placed by ``experience_messages`` exactly as in training;
* ``wrong``: the same entry naming the other action;
* ``warning``: one warning ``diagnostic`` entry in the rule extractor's wording, from a failed episode that
  answered the other action at this state (the state lists its admissible actions, so the imperative wording
  names the action left untried there);
* ``loop``: one warning ``pattern`` entry in the rule extractor's wording, from a failed episode that answered the
  other action twice at this state and stayed there (the loop of a policy that answers one action everywhere).

And the answer format: ``p_valid`` is the probability that the answer is any admissible action, with no lesson
(``none``) and with the invalid-answer ``habit`` (the warning ``mistake`` of an episode that answered once in the
format, then invalidly); ``habit_valid_gap`` = P(valid | habit) - P(valid | none).

A model that uses the library puts more mass on the expert action with ``right`` than with ``wrong``:
``uses_library_gap`` = P(expert | right) - P(expert | wrong), 0 for a model that ignores the lesson;
``uses_warning_gap`` = P(expert | warning) - P(expert | none) says whether a failure's lesson moves the
policy towards what is left to try, ``uses_loop_gap`` = P(expert | loop) - P(expert | none) the same for the loop's
lesson; ``habit_valid_gap`` whether the habit's lesson keeps the answer format. Every
placement (``algorithm.forge.injection``: system, user_prefix, user_suffix) x lesson style
(``algorithm.forge.lesson_style``: descriptive, imperative) is measured and listed in ``table``;
``uses_library_gap`` and ``p_expert`` are those of the run's own settings (``settings``). The answer's
probability is that of its first token after the response prefix, with or without a leading space (NumberLine's
actions are single tokens, so this is the probability of the whole answer).

The settings come from the base config (``forge_trainer.yaml``: NumberLine positions 0..3, SmolLM2-135M, the
``<action>`` prefix the main job uses) or, with ``--preset NAME``, from ``+experiment=NAME`` on top of it: its
environment, model, response prefix, experience cap and style, lesson style and placement. ``--override``
adds Hydra overrides after the preset.

    python scripts/probe_experience_use.py --preset main_job --json         # the main job's settings
    python scripts/probe_experience_use.py                                  # the base config's settings
    python scripts/probe_experience_use.py --tiny --json                    # plumbing check, random weights
    python scripts/probe_experience_use.py --model runs/slea_rl/<run>/global_step_10/policy --json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch

CONFIG_DIR = Path(__file__).resolve().parents[1] / "recipe" / "forge" / "config"
DEFAULT_ENV, DEFAULT_TARGET_MAX, DEFAULT_PREFIX = "gym_cards/NumberLine-v0", 3, "<action>"


@dataclass(frozen=True)
class ProbeSettings:
    """What the probe takes from a run config."""

    model: str
    env_name: str
    target_max: int
    prefix: str
    max_tokens: int
    experience_style: str
    lesson_style: str
    injection: str


def settings_from_config(preset: str | None, overrides: list[str]) -> ProbeSettings:
    """The probe's settings from ``forge_trainer.yaml`` (+ ``+experiment=<preset>``) and the overrides. The base
    config's environment (Sokoban) has no single expert token, so without a preset the probe uses NumberLine
    positions 0..3 and the ``<action>`` prefix, as the main job does."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    extra = ([f"+experiment={preset}"] if preset else []) + list(overrides)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="forge_trainer", overrides=extra)
    forge = cfg.algorithm.forge
    env_name, target_max, prefix = DEFAULT_ENV, DEFAULT_TARGET_MAX, DEFAULT_PREFIX
    if preset:
        env_name = str(cfg.env.env_name)
        target_max = int(cfg.env.get("gym_cards", {}).get("target_max") or DEFAULT_TARGET_MAX)
        prefix = str(cfg.trainer.local.get("response_prefix") or "")
    return ProbeSettings(model=str(cfg.actor_rollout_ref.model.path), env_name=env_name, target_max=target_max,
                         prefix=prefix, max_tokens=int(forge.max_experience_length),
                         experience_style=str(forge.experience_style), lesson_style=str(forge.lesson_style),
                         injection=str(forge.injection))


def one_step_episode(observation: str, action: str, reward: float, admissible: tuple[str, ...] = ()):
    """A one-step episode that answered ``<action>{action}</action>`` at ``observation`` and returned ``reward``
    (a win when positive), as the rule extractor reads it."""
    from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord

    step = StepRecord(uid="probe", traj_uid="probe-0", step=0, anchor_obs=observation, messages=[],
                      plain_messages=[], response_text=f"<action>{action}</action>", action=action, prompt_ids=[],
                      response_ids=[], logprobs=[], reward=reward, is_action_valid=True, done=True,
                      admissible_actions=tuple(admissible))
    return TrajectoryRecord(uid="probe", traj_uid="probe-0", task="", task_type=None, steps=[step],
                            episode_reward=reward, success=reward > 0, length=1)


def rule_example(observation: str, action: str, lesson_style: str = "descriptive") -> str:
    """The rule extractor's golden ``example`` text for a one-step success that answered
    ``<action>{action}</action>`` at ``observation`` (recipe/forge/experience/extract_rule.py): the wording the
    library holds in training."""
    from recipe.forge.experience.extract_rule import RuleExtractor

    traj = one_step_episode(observation, action, 1.0)
    return next(c.text for c in RuleExtractor(lesson_style).golden(traj) if c.level == "example")


def rule_diagnostic(observation: str, failed: str, admissible: list[str], lesson_style: str = "descriptive") -> str:
    """The rule extractor's warning ``diagnostic`` text for a one-step failure that answered
    ``<action>{failed}</action>`` at ``observation``, where the environment listed ``admissible``."""
    from recipe.forge.experience.extract_rule import RuleExtractor

    traj = one_step_episode(observation, failed, -1.0, tuple(admissible))
    return next(c.text for c in RuleExtractor(lesson_style).warning(traj, 0.0) if c.level == "diagnostic")


def rule_loop(observation: str, repeated: str, admissible: list[str], lesson_style: str = "descriptive") -> str:
    """The rule extractor's warning ``pattern`` text for a failure that answered ``<action>{repeated}</action>`` twice
    at ``observation`` and stayed there, where the environment listed ``admissible``."""
    from dataclasses import replace

    from recipe.forge.experience.extract_rule import RuleExtractor

    traj = one_step_episode(observation, repeated, -1.0, tuple(admissible))
    stuck = replace(traj.steps[0], next_anchor_obs=observation, done=False)
    traj = replace(traj, steps=[stuck, replace(stuck, step=1, done=True)], episode_reward=-2.0, length=2)
    return next(c.text for c in RuleExtractor(lesson_style).warning(traj, 0.0) if c.level == "pattern")


def rule_mistake(observation: str, admissible: list[str], lesson_style: str = "descriptive") -> str:
    """The rule extractor's warning ``mistake`` text for a failure that answered ``<action>{admissible[0]}</action>``
    and then an invalid answer at ``observation``: the invalid-answer habit, as the library holds it in training."""
    from dataclasses import replace

    from recipe.forge.experience.extract_rule import RuleExtractor

    traj = one_step_episode(observation, admissible[0], -1.0, tuple(admissible))
    invalid = replace(traj.steps[0], step=1, response_text="<action> Response", action="", is_action_valid=False)
    traj = replace(traj, steps=[traj.steps[0], invalid], length=2)
    return next(c.text for c in RuleExtractor(lesson_style).warning(traj, 0.0) if c.level == "mistake")


def probe_states(env_name: str, target_max: int, states: int) -> dict[str, tuple[str, str, list[str]]]:
    """anchor observation -> (prompt, expert action, admissible actions) for the distinct states of ``states``
    task seeds."""
    from agent_system.environments import make_envs

    cfg = {"env": {"env_name": env_name, "max_steps": 1, "history_length": 0, "rollout": {"n": 1},
                   "gym_cards": {"target_max": target_max}},
           "data": {"train_batch_size": states, "val_batch_size": 1}}
    envs, _ = make_envs(cfg)
    observations, infos = envs.reset(list(range(states)))
    experts = envs.expert_actions(range(states))
    seen: dict[str, tuple[str, str, list[str]]] = {}
    for prompt, anchor, info, expert in zip(observations.text, observations.anchor, infos, experts):
        seen.setdefault(anchor, (prompt, expert, list(info.get("admissible_actions") or [])))
    envs.close()
    return seen


def probe(settings: ProbeSettings, states: int, tiny: bool = False) -> dict:
    """P(expert action) per state without, with the right and with the wrong lesson, for every placement x
    lesson style; the result's ``uses_library_gap`` is that of ``settings``' placement and style."""
    from agent_system.multi_turn_rollout.injection import INJECTIONS, experience_messages
    from recipe.forge.hf.tiny import script_policy
    from recipe.forge.experience.library import GOLDEN, WARNING, ExperienceEntry
    from recipe.forge.experience.render import LESSON_STYLES, ExperienceRenderer

    policy = script_policy(settings.model, tiny)
    tokenizer, model = policy.tokenizer, policy.model.eval()
    seen = probe_states(settings.env_name, settings.target_max, states)

    def first_tokens(action: str) -> set[int]:
        """The tokens that start ``action`` right after the prefix, with or without a leading space."""
        return {tokenizer.encode(variant, add_special_tokens=False)[0] for variant in (action, " " + action)}

    def answer_probability(prompt: str, answers: list[str], experience_text: str, placement: str) -> float:
        """P(the next answer is one of ``answers``) after the prompt with ``experience_text`` placed in it."""
        messages = experience_messages(experience_text, prompt, placement)
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + settings.prefix
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
        with torch.no_grad():
            probs = torch.softmax(model(ids, logits_to_keep=1).logits[0, -1].float(), dim=-1)
        return float(probs[sorted(set().union(*map(first_tokens, answers)))].sum())

    def expert_probability(prompt: str, expert: str, experience_text: str, placement: str) -> float:
        return answer_probability(prompt, [expert], experience_text, placement)

    def rendered(style: str, entry: ExperienceEntry) -> str:
        return ExperienceRenderer(settings.max_tokens, settings.experience_style, tokenizer, style).render([entry])[0]

    def lesson(anchor: str, action: str, style: str) -> str:
        return rendered(style, ExperienceEntry(0, rule_example(anchor, action, style), GOLDEN, "example", 1.0, "",
                                               None, anchor, []))

    def warning(anchor: str, failed: str, actions: list[str], style: str) -> str:
        return rendered(style, ExperienceEntry(0, rule_diagnostic(anchor, failed, actions, style), WARNING,
                                               "diagnostic", 1.0, "", None, anchor, []))

    def loop(anchor: str, repeated: str, actions: list[str], style: str) -> str:
        return rendered(style, ExperienceEntry(0, rule_loop(anchor, repeated, actions, style), WARNING, "pattern",
                                               1.0, "", None, anchor, []))

    def habit(anchor: str, actions: list[str], style: str) -> str:
        return rendered(style, ExperienceEntry(0, rule_mistake(anchor, actions, style), WARNING, "mistake", 1.0, "",
                                               None, anchor, []))

    none = [expert_probability(prompt, expert, "", "system") for prompt, expert, _ in seen.values()]
    valid_none = [answer_probability(prompt, actions, "", "system") for prompt, _, actions in seen.values()]
    table = []
    for placement, style in itertools.product(INJECTIONS, LESSON_STYLES):
        right, wrong, warned, looped, habits = [], [], [], [], []
        for anchor, (prompt, expert, actions) in seen.items():
            other = next(a for a in actions if a != expert)
            right.append(expert_probability(prompt, expert, lesson(anchor, expert, style), placement))
            wrong.append(expert_probability(prompt, expert, lesson(anchor, other, style), placement))
            warned.append(expert_probability(prompt, expert, warning(anchor, other, actions, style), placement))
            looped.append(expert_probability(prompt, expert, loop(anchor, other, actions, style), placement))
            habits.append(answer_probability(prompt, actions, habit(anchor, actions, style), placement))
        p = {"none": statistics.fmean(none), "right": statistics.fmean(right), "wrong": statistics.fmean(wrong),
             "warning": statistics.fmean(warned), "loop": statistics.fmean(looped)}
        valid = {"none": statistics.fmean(valid_none), "habit": statistics.fmean(habits)}
        table.append({"injection": placement, "lesson_style": style, "p_expert": p,
                      "uses_library_gap": p["right"] - p["wrong"], "uses_warning_gap": p["warning"] - p["none"],
                      "uses_loop_gap": p["loop"] - p["none"],
                      "p_valid": valid, "habit_valid_gap": valid["habit"] - valid["none"]})
    own = next(r for r in table if (r["injection"], r["lesson_style"]) == (settings.injection, settings.lesson_style))
    best = max(table, key=lambda r: r["uses_library_gap"])
    return {"model": "tiny-random-llama" if tiny else settings.model, "env": settings.env_name, "states": len(seen),
            "settings": settings.__dict__, "p_expert": own["p_expert"], "uses_library_gap": own["uses_library_gap"],
            "uses_warning_gap": own["uses_warning_gap"], "uses_loop_gap": own["uses_loop_gap"],
            "p_valid": own["p_valid"],
            "habit_valid_gap": own["habit_valid_gap"],
            "best": {"injection": best["injection"], "lesson_style": best["lesson_style"],
                     "uses_library_gap": best["uses_library_gap"]},
            "table": table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default=None, help="an experiment preset (recipe/forge/config/experiment/), "
                        "e.g. main_job")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a Hydra override after the preset (repeatable), e.g. algorithm.forge.injection=system")
    parser.add_argument("--model", default=None, help="a model path instead of the config's")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model instead of --model (plumbing only)")
    parser.add_argument("--states", type=int, default=64, help="task seeds drawn (distinct states are probed once)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    settings = settings_from_config(args.preset, args.override)
    if args.model:
        settings = ProbeSettings(**{**settings.__dict__, "model": args.model})
    result = probe(settings, args.states, args.tiny)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['model']} on {result['env']} ({result['states']} states), prefix {settings.prefix!r}")
    print(f"{'injection':>12} | {'lesson style':>12} | {'P none':>6} | {'P right':>7} | {'P wrong':>7} | "
          f"{'P warning':>9} | gap | warning gap | habit valid gap")
    for row in result["table"]:
        p = row["p_expert"]
        mark = "  <- settings" if (row["injection"], row["lesson_style"]) == (settings.injection,
                                                                               settings.lesson_style) else ""
        print(f"{row['injection']:>12} | {row['lesson_style']:>12} | {p['none']:.4f} | {p['right']:.4f}  | "
              f"{p['wrong']:.4f}  | {p['warning']:.4f}    | {row['uses_library_gap']:+.4f} | "
              f"{row['uses_warning_gap']:+.4f} | {row['habit_valid_gap']:+.4f}{mark}")
    print(f"uses_library_gap (settings: {settings.injection}, {settings.lesson_style}) = "
          f"{result['uses_library_gap']:+.4f}, uses_warning_gap = {result['uses_warning_gap']:+.4f}, "
          f"habit_valid_gap = {result['habit_valid_gap']:+.4f}")


if __name__ == "__main__":
    main()
