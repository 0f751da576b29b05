"""Does a policy read the experiences injected into its prompt? A direct test, before spending a training run.

On every state of an environment with an expert (NumberLine by default), the prompt the rollout builds is given
to the model three ways, and the probability of the expert's action as the next answer is measured:

* ``none``: no experience (the plain prompt);
* ``right``: a system message rendered exactly as in training (``ExperienceRenderer``, compact style) holding
  one golden ``example`` entry in the rule extractor's wording, which names this state and the expert action;
* ``wrong``: the same entry naming the other action.

A model that uses the library puts more mass on the expert action with ``right`` than with ``wrong``
(``uses_library_gap`` = P(expert | right) - P(expert | wrong), 0 for a model that ignores the system message).
The answer's probability is that of its first token after the response prefix, with or without a leading space
(NumberLine's actions are single tokens, so this is the probability of the whole answer).

    python scripts/probe_experience_use.py                                  # SmolLM2-135M-Instruct
    python scripts/probe_experience_use.py --tiny --json                    # plumbing check, random weights
    python scripts/probe_experience_use.py --model runs/slea_rl/<run>/global_step_10/policy --json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch


def rule_example(observation: str, action: str) -> str:
    """The rule extractor's golden ``example`` text for a one-step success that took ``action`` at
    ``observation`` (recipe/forge/experience/extract_rule.py): the wording the library holds in training."""
    from agent_system.multi_turn_rollout.protocols import StepRecord, TrajectoryRecord
    from recipe.forge.experience.extract_rule import RuleExtractor

    step = StepRecord(uid="probe", traj_uid="probe-0", step=0, anchor_obs=observation, messages=[],
                      plain_messages=[], response_text=action, action=action, prompt_ids=[], response_ids=[],
                      logprobs=[], reward=1.0, is_action_valid=True, done=True)
    traj = TrajectoryRecord(uid="probe", traj_uid="probe-0", task="", task_type=None, steps=[step],
                            episode_reward=1.0, success=True, length=1)
    return next(c.text for c in RuleExtractor().golden(traj) if c.level == "example")


def probe(model_path: str, env_name: str, target_max: int, states: int, prefix: str, tiny: bool = False) -> dict:
    from agent_system.environments import make_envs
    from agent_system.multi_turn_rollout.protocols import StepExperience
    from agent_system.multi_turn_rollout.rollout_loop import build_messages
    from recipe.forge.engines.local.tiny import script_policy
    from recipe.forge.experience.library import GOLDEN, ExperienceEntry
    from recipe.forge.experience.render import ExperienceRenderer

    policy = script_policy(model_path, tiny)
    tokenizer, model = policy.tokenizer, policy.model.eval()
    renderer = ExperienceRenderer(max_tokens=300, tokenizer=tokenizer)
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

    def first_tokens(action: str) -> set[int]:
        """The tokens that start ``action`` right after the prefix, with or without a leading space."""
        return {tokenizer.encode(variant, add_special_tokens=False)[0] for variant in (action, " " + action)}

    def expert_probability(prompt: str, expert: str, experience_text: str) -> float:
        messages, _ = build_messages(prompt, None, StepExperience(text=experience_text))
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + prefix
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
        with torch.no_grad():
            probs = torch.softmax(model(ids).logits[0, -1].float(), dim=-1)
        return float(probs[sorted(first_tokens(expert))].sum())

    def system_text(anchor: str, action: str) -> str:
        entry = ExperienceEntry(0, rule_example(anchor, action), GOLDEN, "example", 1.0, "", None, anchor, [])
        return renderer.render([entry])[0]

    rows = {"none": [], "right": [], "wrong": []}
    for anchor, (prompt, expert, actions) in seen.items():
        other = next(a for a in actions if a != expert)
        rows["none"].append(expert_probability(prompt, expert, ""))
        rows["right"].append(expert_probability(prompt, expert, system_text(anchor, expert)))
        rows["wrong"].append(expert_probability(prompt, expert, system_text(anchor, other)))
    mean = {k: statistics.fmean(v) for k, v in rows.items()}
    return {"model": "tiny-random-llama" if tiny else model_path, "env": env_name, "states": len(seen),
            "p_expert": mean, "uses_library_gap": mean["right"] - mean["wrong"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model instead of --model (plumbing only)")
    parser.add_argument("--env", default="gym_cards/NumberLine-v0")
    parser.add_argument("--target-max", type=int, default=3)
    parser.add_argument("--states", type=int, default=64, help="task seeds drawn (distinct states are probed once)")
    parser.add_argument("--prefix", default="<action>", help="the response prefix used in training")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    result = probe(args.model, args.env, args.target_max, args.states, args.prefix, args.tiny)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['model']} on {result['env']} ({result['states']} states)")
    for name, value in result["p_expert"].items():
        print(f"  P(expert action | {name:5s} experience) = {value:.4f}")
    print(f"  uses_library_gap = {result['uses_library_gap']:+.4f}")


if __name__ == "__main__":
    main()
