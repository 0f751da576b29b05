"""The CPU backend's pieces without Ray: registrations, the two private verl hooks, device selection and the CPU
settings, the hf rollout server (batching, stop strings, log-probs, weight updates), and the verl engine's
advantage-step rules (step groups = retrieval clusters, empty generations, stop strings, loggers, start-up checks)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from agent_system.config_checks import ConfigError


@pytest.fixture(scope="module")
def plugin():
    import recipe.forge.engines.verl.plugin  # noqa: F401


# ------------------------------------------------------------------------------------------- registrations
def test_verl_private_hooks_still_exist_in_the_installed_verl(plugin):
    from verl.workers.engine.fsdp import transformer_impl
    from verl.workers.rollout import base

    assert isinstance(base._ROLLOUT_REGISTRY, dict) and ("vllm", "async") in base._ROLLOUT_REGISTRY
    assert base._ROLLOUT_REGISTRY[("hf", "async")].endswith("hf_rollout.HFServerAdapter")
    assert base.get_rollout_class("hf", "async").__name__ == "HFServerAdapter"
    assert transformer_impl.CPUOffloadPolicy is not None
    from verl.workers import engine_workers
    from verl.workers.engine import base as engine_base

    from recipe.forge.engines.verl.cpu.verl_private import fix_3d_position_ids

    assert engine_workers.maybe_fix_3d_position_ids is engine_base.maybe_fix_3d_position_ids is fix_3d_position_ids


def test_the_task_runner_prints_no_config_or_validation_dump_and_the_hook_restores(plugin, capsys):
    import inspect

    from verl.trainer import main_ppo
    from verl.trainer.ppo.v1 import trainer_base

    from recipe.forge.engines.verl.cpu.verl_private import no_console_dumps
    from recipe.forge.engines.verl.task_runner import QuietTaskRunner

    # hook 4: verl's runner dumps the config through the pprint of its globals (main_ppo's, used for nothing else),
    # its V1 trainers the validation metrics through trainer_base's (used for those two dumps only)
    verl_runner = main_ppo.TaskRunnerV1.__ray_metadata__.modified_class.__mro__[1]
    assert "pprint(OmegaConf.to_container(config" in inspect.getsource(verl_runner.run)
    assert inspect.getsource(main_ppo).count("pprint(") == 1 and verl_runner.run.__globals__["pprint"] is main_ppo.pprint
    dumps = [line.strip() for line in inspect.getsource(trainer_base).splitlines() if "pprint(" in line]
    assert dumps == ['pprint(f"Initial validation metrics: {val_metrics}")',
                     'pprint(f"Final validation metrics: {last_val_metrics}")']
    originals = main_ppo.pprint, trainer_base.pprint
    with no_console_dumps(verl_runner.run):
        main_ppo.pprint({"a": 1})
        trainer_base.pprint({"val/success_rate": 1.0})
    assert (main_ppo.pprint, trainer_base.pprint) == originals and capsys.readouterr().out == ""
    main_ppo.pprint({"a": 1})
    assert capsys.readouterr().out == "{'a': 1}\n"  # restored
    assert issubclass(QuietTaskRunner.__ray_metadata__.modified_class, verl_runner)


def test_unpinned_offload_policy_forces_pin_memory_off_and_restores(plugin):
    from verl.workers.engine.fsdp import transformer_impl

    from recipe.forge.engines.verl.cpu.verl_private import unpinned_cpu_offload_policy

    original = transformer_impl.CPUOffloadPolicy
    with unpinned_cpu_offload_policy():
        policy = transformer_impl.CPUOffloadPolicy(pin_memory=True)  # what verl's forward-only engine asks for
        assert isinstance(policy, original) and policy.pin_memory is False
    assert transformer_impl.CPUOffloadPolicy is original


@pytest.mark.parametrize("lengths", [(9, 9, 9), (9, 12, 7)])
def test_vision_language_position_ids_as_transfer_queue_packs_them_select_rows_for_the_update(plugin, lengths):
    """(4, L) position ids of rows of one length come out of TransferQueue ragged in the 4 (its packing, reproduced
    here), of different lengths ragged in L (verl's layout, its ragged index lost in a pickle round trip); after
    the worker's fix the update's row selection gives every chosen row's own (4, L) positions in both cases."""
    import pickle

    from tensordict import TensorDict
    from verl.utils.tensordict_utils import index_select_tensor_dict, nested_tensor_from_tensor_list
    from verl.workers import engine_workers

    rows = [torch.arange(4 * n).reshape(4, n) + 100 * i for i, n in enumerate(lengths)]
    if len(set(lengths)) == 1:
        packed = torch.nested.as_nested_tensor(rows, layout=torch.jagged)  # transfer_queue's _pack_field_values
    else:
        packed = pickle.loads(pickle.dumps(nested_tensor_from_tensor_list(rows, ragged_idx=2)))
    data = TensorDict({"position_ids": packed}, batch_size=len(rows))
    engine_workers.maybe_fix_3d_position_ids(data)  # what verl's train_mini_batch does first
    selected = index_select_tensor_dict(data, [2, 0])["position_ids"].unbind()
    assert [t.tolist() for t in selected] == [rows[2].tolist(), rows[0].tolist()]


def test_platform_engines_and_replica_are_registered(plugin):
    from verl.plugin.platform import PlatformRegistry
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from recipe.forge.engines.verl.cpu.engines import CpuFSDPEngineWithLMHead, CpuFSDPEngineWithValueHead
    from recipe.forge.engines.verl.cpu.hf_rollout import HFReplica
    from recipe.forge.engines.verl.cpu.platform import PlatformCPU

    assert PlatformRegistry.get("cpu") is PlatformCPU
    platform = PlatformCPU()
    assert platform.device_name == "cpu" and platform.communication_backend_name() == "gloo"
    assert not platform.is_platform_available(use_smi_check=True)  # never auto-detected: chosen by VERL_PLATFORM
    available, total = platform.device_module.mem_get_info()
    assert 0 < available <= total
    assert platform.device_module.max_memory_allocated() == 0 and platform.device_module.is_available()
    for backend in ("fsdp", "fsdp2"):
        assert EngineRegistry._engines["language_model"][backend]["cpu"] is CpuFSDPEngineWithLMHead
        assert EngineRegistry._engines["value_model"][backend]["cpu"] is CpuFSDPEngineWithValueHead
    assert RolloutReplicaRegistry.get("hf") is HFReplica


# ------------------------------------------------------------------------------------- device and settings
def test_device_auto_resolves_to_cpu_without_cuda_and_to_cuda_when_joining_a_cluster(run_config_factory, monkeypatch):
    from recipe.forge.engines.verl.cpu.settings import resolve_device

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(run_config_factory(["trainer.engine=verl"])) == "cpu"
    assert resolve_device(run_config_factory(["trainer.device=cuda"])) == "cuda"
    assert resolve_device(run_config_factory(["+ray_kwargs.ray_init.address=auto"])) == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device(run_config_factory([])) == "cuda"
    with pytest.raises(ConfigError, match="trainer.device='tpu'"):
        resolve_device(run_config_factory(["trainer.device=tpu"]))


def test_cpu_settings_replace_gpu_only_choices_and_say_so(run_config_factory):
    from omegaconf import OmegaConf

    from recipe.forge.engines.verl.cpu.settings import CPU_SETTINGS, apply_cpu_settings

    cfg = run_config_factory(["trainer.engine=verl", "actor_rollout_ref.rollout.name=vllm",
                              "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "trainer.n_gpus_per_node=2"])
    changes = apply_cpu_settings(cfg)
    for key, (value, _) in CPU_SETTINGS.items():
        got = OmegaConf.select(cfg, key)
        assert (OmegaConf.to_container(got) if OmegaConf.is_config(got) else got) == value, key
    assert any(c.startswith("actor_rollout_ref.rollout.name: 'vllm' -> 'hf'") for c in changes)
    assert any(c.startswith("actor_rollout_ref.actor.strategy: 'fsdp' -> 'fsdp2'") for c in changes)
    assert not any(c.startswith("actor_rollout_ref.rollout.mode") for c in changes)  # already async: not reported
    ray_init = cfg.ray_kwargs.ray_init
    assert ray_init.num_gpus == 2 and ray_init.num_cpus >= 20  # verl's placement bundles ask 10 CPUs each
    assert ray_init.runtime_env.env_vars.VERL_PLATFORM == "cpu"


def test_cpu_settings_leave_the_resources_to_the_nodes_of_a_joined_cluster(run_config_factory, monkeypatch):
    # Ray refuses num_cpus/num_gpus in ray.init when it connects to an existing cluster: a CPU run that joins one
    # (tests/verl_engine/test_cpu_end_to_end.py runs one) takes the resources its nodes were started with
    from recipe.forge.engines.verl.cpu.settings import apply_cpu_settings

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    cfg = run_config_factory(["trainer.engine=verl", "trainer.device=cpu", "trainer.nnodes=2"])
    apply_cpu_settings(cfg)
    ray_init = cfg.ray_kwargs.ray_init
    assert ray_init.get("num_cpus") is None and ray_init.get("num_gpus") is None
    assert ray_init.runtime_env.env_vars.VERL_PLATFORM == "cpu"  # the job's processes on every node


def test_loggers_map_to_verl_tracking_backends(run_config_factory, tmp_path):
    from verl.utils.tracking import Tracking

    from recipe.forge.engines.verl.main import prepare_verl_config, verl_loggers

    # jsonl, console and tensorboard are ours (the forge trainer writes metrics.jsonl and TensorBoard in the run folder,
    # the driver prints the console line); verl's own file backend stays the user's choice
    assert verl_loggers(["console", "jsonl", "file", "console", "tensorboard", "wandb"]) == ["file", "wandb"]
    assert verl_loggers("jsonl") == []
    from recipe.forge.run_config import load_run_config

    cfg = prepare_verl_config(load_run_config(run_config_factory(["trainer.engine=verl",
                                                                  f"trainer.default_local_dir={tmp_path}"])))
    assert list(cfg.trainer.logger) == []  # the default [console, jsonl]: both ours
    assert list(cfg.trainer.slea_rl_loggers) == ["console", "jsonl"]
    assert set(cfg.trainer.logger) <= set(Tracking.supported_backend)
    assert cfg.data.dataloader_num_workers == 0


def test_a_forge_run_starts_no_reward_workers_unless_a_reward_model_is_on(run_config_factory, tmp_path, capsys):
    """The forge agent loop scores every trajectory from its environment, so verl's reward workers (8 by default,
    each a Ray process importing verl) would only idle; with a reward model on, verl scores through them."""
    from recipe.forge.engines.verl.main import prepare_verl_config
    from recipe.forge.run_config import load_run_config

    base = ["trainer.engine=verl", f"trainer.default_local_dir={tmp_path}"]
    assert run_config_factory(base).reward.num_workers == 8  # verl's default
    cfg = prepare_verl_config(load_run_config(run_config_factory(base)))
    assert cfg.reward.num_workers == 0
    assert "[slea-rl] verl: reward.num_workers: 8 -> 0" in capsys.readouterr().out
    cfg = prepare_verl_config(load_run_config(run_config_factory([*base, "reward.reward_model.enable=true"])))
    assert cfg.reward.num_workers == 8


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["algorithm.forge.use_distillation=true"], "divergence_type='jsd'"),
        (["algorithm.forge.extractor=llm", "trainer.device=cpu"], "algorithm.forge.extractor=llm"),
        (["algorithm.rollout_correction.bypass_mode=true", "actor_rollout_ref.rollout.calculate_log_probs=false"],
         "bypass_mode=True needs the rollout servers' log-probs"),
        (["algorithm.rollout_correction.rollout_is=token", "actor_rollout_ref.rollout.calculate_log_probs=false"],
         "rollout_is='token'"),
    ],
)
def test_run_verl_refuses_what_the_engine_cannot_honour_before_ray_starts(run_config_factory, tmp_path, overrides, key):
    import ray

    from recipe.forge.engines.verl.main import run_verl
    from recipe.forge.main_forge import validate

    cfg = run_config_factory(["trainer.engine=verl", f"trainer.default_local_dir={tmp_path}", *overrides])
    with pytest.raises(ConfigError, match=key.replace("(", r"\(")):
        run_verl(validate(cfg))
    assert not ray.is_initialized() and not (tmp_path / "forge_tasks").exists()


# ---------------------------------------------------------------------------------------- the hf server
@pytest.fixture(scope="module")
def tiny_answering_dir(tmp_path_factory):
    from recipe.forge.hf.tiny import save_tiny_model_dir

    return save_tiny_model_dir(tmp_path_factory.mktemp("answering"))


def test_sampling_parameters_map_and_unsupported_ones_are_refused():
    from recipe.forge.engines.verl.cpu.hf_rollout import sampling_from_request

    s = sampling_from_request({"temperature": 0, "top_p": 0.9, "top_k": -1, "stop": "</a>", "logprobs": True}, 64)
    assert (s.do_sample, s.top_p, s.top_k, s.max_new_tokens, s.stop) == (False, 0.9, -1, 64, ("</a>",))
    assert sampling_from_request({"temperature": 0.7, "max_tokens": 5}, 64).max_new_tokens == 5
    with pytest.raises(ValueError, match="repetition_penalty"):
        sampling_from_request({"repetition_penalty": 1.1}, 8)


def test_hf_server_batches_concurrent_requests_like_single_decoding(tiny_answering_dir):
    from transformers import AutoTokenizer

    from agent_system.multi_turn_rollout.protocols import SamplingParams
    from recipe.forge.engines.verl.cpu.hf_rollout import HFRolloutServer

    tokenizer = AutoTokenizer.from_pretrained(tiny_answering_dir)
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": f"Target: {t}"}], add_generation_prompt=True)
               for t in range(5)]
    prompts = [list(p["input_ids"] if isinstance(p, dict) or hasattr(p, "keys") else p) for p in prompts]
    server = HFRolloutServer(tiny_answering_dir, response_length=12, max_batch_size=3)
    params = {"temperature": 0, "stop": ["</action>"]}

    async def ask_all():
        return await asyncio.gather(*[server.generate(p, params, request_id=str(i)) for i, p in enumerate(prompts)])

    outputs = asyncio.run(ask_all())
    greedy = SamplingParams(temperature=0, do_sample=False, max_new_tokens=12, stop=("</action>",))
    for prompt, out in zip(prompts, outputs):
        alone = server.generator.generate_ids([prompt], greedy)[0]
        assert out.token_ids == alone.response_ids
        assert out.log_probs == pytest.approx(alone.logprobs, abs=1e-5)
        text = tokenizer.decode(out.token_ids, skip_special_tokens=True)
        assert "</action>" not in text or text.endswith("</action>")  # stops right after the stop string
    # log-probs are those of the sampled tokens under the model: recompute them with one forward pass
    prompt, out = prompts[0], outputs[0]
    ids = torch.tensor([prompt + out.token_ids])
    with torch.no_grad():
        logp = torch.log_softmax(server.model(ids).logits[0, len(prompt) - 1:-1].float(), dim=-1)
    expected = logp.gather(-1, torch.tensor(out.token_ids).unsqueeze(-1)).squeeze(-1)
    assert out.log_probs == pytest.approx(expected.tolist(), abs=1e-4)


def test_hf_server_takes_the_actors_weights_and_rejects_unknown_names(tiny_answering_dir):
    from recipe.forge.engines.verl.cpu.hf_rollout import HFRolloutServer

    server = HFRolloutServer(tiny_answering_dir, response_length=4)
    before = server.state_checksum()
    new = {name: torch.full_like(p, 0.01) for name, p in server.model.named_parameters()}
    assert server.update_weights(new) == 1
    expected = sum(0.01 * p.numel() for p in server.model.parameters())
    assert server.state_checksum() == pytest.approx(expected, rel=1e-4) and server.state_checksum() != before
    with pytest.raises(KeyError, match="not.a.weight"):
        server.update_weights({"not.a.weight": torch.zeros(1)})


def test_hf_server_decodes_prompts_with_images_as_one_forward_pass_scores_them(tiny_vlm_dir):
    """A vision-language policy: the prompt ids as verl's agent loop builds them (the processor expands each image
    into its pad tokens) and the PIL images as ``image_data``; the server's greedy tokens and log-probs are those of
    one forward pass of the model over prompt and response with the processor's pixels and the model's positions."""
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    from recipe.forge.hf.vision_processor import load_processor
    from recipe.forge.engines.verl.cpu.hf_rollout import HFRolloutServer

    rng = np.random.default_rng(3)
    images = [Image.fromarray(rng.integers(0, 256, size=shape, dtype=np.uint8)) for shape in ((56, 56, 3), (48, 80, 3))]
    processor = load_processor(str(tiny_vlm_dir))
    chats = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": f"Room {i}. Move."}]}]
             for i in range(len(images))]
    encoded = [processor(text=[processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)],
                         images=[image], return_tensors="pt") for chat, image in zip(chats, images)]
    server = HFRolloutServer(str(tiny_vlm_dir), response_length=6)
    params = {"temperature": 0}

    async def ask_all():
        return await asyncio.gather(*[server.generate(e["input_ids"][0].tolist(), params, image_data=[image])
                                      for e, image in zip(encoded, images)])

    outputs = asyncio.run(ask_all())
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir, dtype=torch.float32).eval()
    for e, out in zip(encoded, outputs):
        prompt = e["input_ids"][0].tolist()
        full = torch.tensor([prompt + out.token_ids])
        with torch.no_grad():
            logits = model(input_ids=full, attention_mask=torch.ones_like(full), pixel_values=e["pixel_values"],
                           image_grid_thw=e["image_grid_thw"],
                           mm_token_type_ids=(full == model.config.image_token_id).int()).logits[0].float()
        logp = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1)
        assert out.token_ids == logp.argmax(dim=-1).tolist()  # greedy
        expected = logp.gather(-1, torch.tensor(out.token_ids).unsqueeze(-1)).squeeze(-1)
        assert out.log_probs == pytest.approx(expected.tolist(), abs=1e-4)

    prompt = encoded[0]["input_ids"][0].tolist()
    with pytest.raises(ValueError, match="the prompt ids hold 4 image tokens but its 2 image"):
        asyncio.run(server.generate(prompt, params, image_data=images))
    with pytest.raises(ValueError, match="not videos"):
        asyncio.run(server.generate(prompt, params, video_data=[np.zeros((2, 56, 56, 3), dtype=np.uint8)]))


def test_hf_server_takes_a_vision_language_actors_weights_by_their_names(tiny_vlm_dir):
    """verl's FSDP actor loads the model with AutoModelForImageTextToText and sends its state_dict names
    (``model.visual.*``, ``model.language_model.*``): the server takes every one of them."""
    from transformers import AutoModelForImageTextToText

    from recipe.forge.engines.verl.cpu.hf_rollout import HFRolloutServer

    server = HFRolloutServer(str(tiny_vlm_dir), response_length=4)
    actor = AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir, dtype=torch.float32)
    weights = {name: torch.full_like(tensor, 0.02) for name, tensor in actor.state_dict().items()}
    assert any(name.startswith("model.visual.") for name in weights)
    assert server.update_weights(weights) == 1
    expected = sum(0.02 * p.numel() for p in server.model.parameters())
    assert server.state_checksum() == pytest.approx(expected, rel=1e-4)


def test_hf_server_of_a_text_model_refuses_images(tiny_answering_dir):
    from PIL import Image

    from recipe.forge.engines.verl.cpu.hf_rollout import HFRolloutServer

    server = HFRolloutServer(tiny_answering_dir, response_length=4)
    with pytest.raises(ValueError, match="has no image processor"):
        asyncio.run(server.generate([1, 2, 3], {"temperature": 0}, image_data=[Image.new("RGB", (56, 56))]))


# ------------------------------------------------------------------------------------ the advantage step
def test_action_stop_string_is_added_in_each_backends_words():
    from recipe.forge.engines.verl.agent_loop import with_action_stop

    vllm = with_action_stop({"temperature": 1.0, "stop": "###"}, "vllm")
    assert vllm["stop"] == ["###", "</action>"] and vllm["include_stop_str_in_output"] is True
    sglang = with_action_stop({"stop": ["</action>"]}, "sglang")
    assert sglang["stop"] == ["</action>"] and sglang["no_stop_trim"] is True and "include_stop_str_in_output" not in sglang


def _forge_algorithm(run_config_factory, gamma=0.5):
    """The paper's step part (discounted returns), whose figures the tests work by hand."""
    return run_config_factory([f"algorithm.gamma={gamma}", "algorithm.invalid_action_penalty_coef=0.1",
                               "algorithm.forge.step_value=return"]).algorithm


def test_step_groups_are_the_clusters_that_drove_retrieval_even_where_similarity_is_not_transitive(
        run_config_factory, make_row):
    """Anchors a, b, c with sim(a,b) = sim(a,c) = 0.9, sim(b,c) = 0.8: a worker put all three in its cluster 7;
    re-clustering them in the batch order b, c, a at 0.85 would make two groups. The advantage keeps one."""
    from recipe.forge.engines.verl.trainer import compute_batch_advantages

    algorithm = _forge_algorithm(run_config_factory)
    rows = [make_row("u-0", 0, 1.0, 1.0, 7, "b"), make_row("u-1", 0, 0.0, 0.0, 7, "c"),
            make_row("u-2", 0, 2.0, 2.0, 7, "a")]
    uid = np.array(["u"] * 3, dtype=object)
    mask = torch.ones(3, 4)
    out = compute_batch_advantages("forge", uid, mask, rows, np.ones(3, bool), algorithm)
    assert len(set(out["group_keys"].tolist())) == 1
    # one step group of three: A = (R - mean R) + w (R_step - mean R_step), R = R_step = 1, 0, 2 (mean 1)
    assert out["advantages"][:, 0].tolist() == pytest.approx([0.0, -2.0, 2.0])


def test_an_empty_generation_is_no_sample_but_its_reward_discounts_into_earlier_steps(run_config_factory, make_row):
    from recipe.forge.engines.verl.trainer import compute_batch_advantages

    algorithm = _forge_algorithm(run_config_factory, gamma=0.5)
    # trajectory u-0: steps 0, 1 (step 1 generated nothing), reward 4 at step 1; trajectory u-1: one step, reward 0
    rows = [make_row("u-0", 0, 0.0, 4.0, 1), make_row("u-0", 1, 4.0, 4.0, 1), make_row("u-1", 0, 0.0, 0.0, 1)]
    uid = np.array(["u"] * 3, dtype=object)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0]], dtype=torch.float32)
    out = compute_batch_advantages("forge", uid, mask, rows, np.ones(3, bool), algorithm)
    # trained rows 0 and 2: episode scores 4 and 0 (mean 2); step returns 0 + 0.5 * 4 = 2 and 0 (mean 1)
    assert out["advantages"][0, :2].tolist() == pytest.approx([2.0 + 1.0] * 2)
    assert out["advantages"][2, 0].item() == pytest.approx(-2.0 - 1.0)
    assert out["advantages"][1].abs().sum() == 0 and out["rm_scores"][1].abs().sum() == 0
    assert out["group_keys"][1] == -1


def test_provider_counters_come_from_the_workers_steps(make_row):
    from recipe.forge.engines.verl.row_codec import record_from_row
    from recipe.forge.experience.metrics import RetrievalStats

    shown = [(("1", "2"), False), ((), False), (("3",), True), ((), False)]
    rows = [{**make_row(f"u-{i}", 0, 0.0, 0.0, 0), "experience_ids": list(ids), "experience_fallback": fallback}
            for i, (ids, fallback) in enumerate(shown)]
    stats = RetrievalStats.from_records([record_from_row(row) for row in rows])
    assert (stats.queries, stats.hits, stats.injected, stats.fallbacks) == (4, 2, 3, 1)
    assert stats.as_metrics()["forge/provider_hit_rate"] == 0.5


def test_rollout_correction_runs_only_where_verl_runs_it(run_config_factory):
    """verl's rule: a correction section, not in bypass mode, and rollout log-probs on the rows (the trainer's
    step-level path and the student rows follow it; without log-probs nothing asks for the missing field)."""
    from recipe.forge.engines.verl.rollout_logprobs import has_rollout_log_probs, rollout_correction_runs

    def cfg(*overrides):
        return run_config_factory(["trainer.engine=verl", *overrides])

    assert has_rollout_log_probs(cfg()) and rollout_correction_runs(cfg())  # verl's defaults: metrics only
    assert not rollout_correction_runs(cfg("actor_rollout_ref.rollout.calculate_log_probs=false"))
    assert not has_rollout_log_probs(cfg("actor_rollout_ref.rollout.calculate_log_probs=false"))
    assert not rollout_correction_runs(cfg("algorithm.rollout_correction.bypass_mode=true"))
    assert not rollout_correction_runs(cfg("algorithm.rollout_correction=null"))
