"""hw3lib.core.cost: the memory model and compute estimates, by hand-worked numbers; its constants against
the committed measurements; its predictions against the CPU rehearsal; the full profile's defaults fit."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from hw3lib.core import cost
from hw3lib.models.real_shape import course_shapes

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
GiB = 2**30

# A made-up model whose numbers are easy to follow by hand.
TOY = cost.Shape("toy", params=1000, layers=2, hidden=1024, vocab=151936, kv_heads=1, head_dim=4)


def load_bench(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_course_models_parameters_and_kv_cache():
    shapes = course_shapes()
    qwen3, math = shapes["Qwen/Qwen3-0.6B"], shapes["Qwen/Qwen2.5-Math-1.5B"]
    assert (qwen3.params, math.params) == (596_049_920, 1_543_714_304)  # the published counts (tied embeddings)
    assert qwen3.kv_bytes_per_token == 2 * 28 * 8 * 128 * 2 == 114_688  # keys + values, 28 layers, 8 KV heads of 128
    assert math.kv_bytes_per_token == 2 * 28 * 2 * 128 * 2 == 28_672
    assert qwen3.embedding_params == 151936 * 1024


def test_trainer_parts_and_peak_by_hand():
    parts = cost.trainer_parts(TOY, micro_tokens=10, micro_response_tokens=4, monitor_kl=True)
    assert (parts["masters"], parts["adam"], parts["grads"], parts["autocast_copies"],
            parts["reference"]) == (4000, 8000, 4000, 2000, 2000)
    # 10 tokens x 2 layers x A (width 1,024: factor 1) + 4 response tokens x 2 x L (the logits and their gradient)
    assert parts["activations"] == 10 * 2 * cost.ACTIVATION_BYTES_PER_TOKEN_LAYER + 4 * 2 * cost.LOGITS_BYTES_PER_TOKEN
    assert parts["output_head_gradient"] == 6 * 151936 * 1024  # bf16 [V, h] and its float32 cast
    # 4000 + 8000 + 4000 + 2000 + 2000 + the head's gradient + the activations: the fused optimizer step adds nothing
    assert cost.trainer_peak(parts) == 20000 + parts["output_head_gradient"] + parts["activations"]
    assert cost.trainer_resident_between_steps(parts) == 4000 + 8000 + 2000
    no_kl = cost.trainer_parts(TOY, 10, 4, monitor_kl=False)
    assert no_kl["reference"] == 0
    # activations scale with the width, logits with the vocabulary
    half = cost.Shape("half", 1000, 2, 512, 151936 // 2, 1, 4)
    assert cost.activation_bytes(half, 10, 4) == pytest.approx(parts["activations"] / 2, rel=1e-6)


def test_transformers_engine_parts_by_hand():
    # TOY: 1,000 parameters, 2 layers, 1 KV head of 4 -> 2 x 2 x 1 x 4 x 2 = 32 bytes of bf16 keys and values per token
    parts = cost.transformers_engine_parts(TOY, sequences=3, prompt_tokens=5, response_tokens=7)
    assert parts["weights"] == 2000  # the engine's own bf16 copy
    assert parts["kv_cache"] == 3 * (5 + 7) * 32 == 1152
    assert parts["sampling"] == 3 * 151936 * cost.SAMPLING_BYTES_PER_LOGIT
    # Qwen3-0.6B, the course's 256 rollouts of up to 1,024 tokens after a 128-token prompt in one call: 33.8 GB of cache
    qwen3 = course_shapes()["Qwen/Qwen3-0.6B"]
    assert cost.transformers_engine_parts(qwen3, 256, 128, 1024)["kv_cache"] == 256 * 1152 * 114_688


def test_gpu_plan_colocated_and_on_a_second_gpu_by_hand():
    shape = cost.Shape("s", params=GiB, layers=1, hidden=1, vocab=0, kv_heads=1, head_dim=1)  # no output head
    parts = cost.trainer_parts(shape, 0, 0, monitor_kl=False)
    peak = cost.trainer_peak(parts) + cost.GPU_RUNTIME_BYTES  # 16 GiB + 2 GiB copies + 2 GiB runtime = 20 GiB
    assert peak == 20 * GiB
    plan = cost.gpu_plan(shape, micro_batch=1, prompt_tokens=0, response_tokens=0, share=0.5,
                         device_bytes=80 * GiB)
    # awake engine 40 GiB beside the resident 12 GiB + 2 GiB runtime; training 22 GiB + the sleeping engine
    assert plan.generation_peak == 54 * GiB and plan.training_peak == 20 * GiB + cost.SLEEPING_ENGINE_BYTES
    assert plan.fits and plan.max_colocated_share == 0.82  # (80 - 14) / 80 = 0.825, rounded down
    crowded = cost.gpu_plan(shape, 1, 0, 0, share=0.9, device_bytes=80 * GiB)
    assert not crowded.fits  # 72 + 14 > 80
    second = cost.gpu_plan(shape, 1, 0, 0, share=0.9, colocated=False, device_bytes=80 * GiB)
    assert second.fits and (second.generation_peak, second.training_peak) == (int(0.9 * 80 * GiB), 20 * GiB)


def test_flops_and_the_generation_roofline_by_hand():
    shape = cost.Shape("s", params=1100, layers=1, hidden=10, vocab=10, kv_heads=1, head_dim=1)  # 100 embedding
    assert cost.forward_flops(shape, tokens=3, response_tokens=2) == 2 * 1000 * 3 + 2 * 100 * 2
    acc = cost.Accelerator("toy", peak_flops=1e6, bandwidth=1e3, compute_efficiency=0.5, bandwidth_efficiency=0.5)
    # prefill: 4 sequences x 5 prompt tokens, logits for 4 positions: (2*1000*20 + 2*100*4) / 5e5 = 0.0816 s
    # decode step: flops 2*1000*4 + 2*100*4 = 8800 -> 0.0176 s; bytes 2*1100 + 4 x (5 + 3/2) x 4 = 2304 -> 4.608 s
    assert cost.generation_seconds(shape, 4, 5, 3, acc) == pytest.approx(0.0816 + 3 * 4.608)


def test_grpo_step_phases_follow_the_config():
    from hw3lib.grpo.config import GRPOConfig

    shape = course_shapes()["Qwen/Qwen3-0.6B"]
    on_policy = GRPOConfig(n_eval_examples=1024, eval_every=10)
    phases = cost.grpo_step_seconds(on_policy, shape, 200, 1024)
    assert phases["log_prob_passes"] == 0  # on-policy: no old log-probs
    # validation: 1,024 questions sampled every 10 steps, a tenth of it per step
    assert phases["validation"] == pytest.approx(cost.generation_seconds(shape, 1024, 200, 1024) / 10)
    tokens, responses = 256 * 1224, 256 * 1024
    assert phases["training"] == pytest.approx(3 * cost.forward_flops(shape, tokens, responses)
                                               / (cost.H100.peak_flops * cost.H100.compute_efficiency))
    two_epochs = cost.grpo_step_seconds(on_policy.replace(epochs_per_rollout_batch=2, loss_type="grpo_clip"),
                                        shape, 200, 1024)
    assert two_epochs["training"] == pytest.approx(2 * phases["training"])
    assert two_epochs["log_prob_passes"] == pytest.approx(phases["training"] / 3)  # one forward for old log-probs
    assert cost.run_gpu_hours(on_policy, shape, 200, 1024) == pytest.approx(200 * sum(phases.values()) / 3600)


def test_constants_are_the_measured_ones():
    rehearsal = json.loads((RESULTS / "rehearse.json").read_text())
    params = course_shapes()["Qwen/Qwen3-0.6B"].params
    (checkpoint,) = rehearsal["phases"]["grpo"]["result"]["checkpoints"]
    assert checkpoint["policy_bytes"] / params == pytest.approx(cost.MASTER_BYTES, rel=0.01)
    assert checkpoint["optimizer_bytes"] / params == pytest.approx(cost.ADAM_BYTES, rel=0.01)
    fitted = json.loads((RESULTS / "memory_calibration.json").read_text())["fit"]
    assert fitted["activation_bytes_per_token_per_layer"] == pytest.approx(cost.ACTIVATION_BYTES_PER_TOKEN_LAYER,
                                                                           rel=0.02)
    assert fitted["logits_bytes_per_token"] == pytest.approx(cost.LOGITS_BYTES_PER_TOKEN, rel=0.02)
    # The saved logits are bf16 [tokens, 151,936]: 2 bytes per entry, plus a little.
    assert 2 * 151936 <= cost.LOGITS_BYTES_PER_TOKEN < 2.2 * 151936


def test_predictions_are_within_15_percent_of_the_cpu_rehearsal():
    bench = load_bench("cost_model")
    rows = bench.cpu_rows(json.loads((RESULTS / "rehearse.json").read_text()))
    checked = [row for row in rows if not row["calibrated"]]
    assert {row["phase"] for row in checked} >= {"grpo", "grpo_resume", "sft", "ei", "math_train", "math_eval"}
    assert all(abs(row["error"]) <= 0.15 for row in checked), [(r["phase"], round(r["error"], 3)) for r in checked]


@pytest.mark.parametrize("course", ["gsm8k-qwen3", "math-qwen2.5"])
def test_the_full_profiles_training_defaults_fit_one_gpu(course):
    from hw3lib.core.course import get_course
    from hw3lib.core.profile import get_profile
    from hw3lib.grpo.config import GRPOConfig
    from hw3lib.sft.config import EIConfig, SFTConfig

    shape = course_shapes()[get_course(course).model_for(get_profile("full"))]
    for config_class in (GRPOConfig, SFTConfig, EIConfig):
        cfg = config_class.for_profile("full", course=course)
        assert cfg.policy_device == cfg.rollout_device and cfg.gpu_memory_utilization == cost.COLOCATED_SHARE
        for kl in (False, True):
            plan = cost.gpu_plan(shape, cfg.micro_train_batch_size, 200, cfg.sampling_max_tokens,
                                 share=cfg.gpu_memory_utilization, monitor_kl=kl)
            assert plan.fits, (config_class.__name__, kl, plan)
    # The handout's 0.85 is for vLLM on its own GPU: colocated it does not leave Qwen2.5-Math-1.5B room.
    grpo = GRPOConfig.for_profile("full", course=course)
    at_085 = cost.gpu_plan(shape, grpo.micro_train_batch_size, 200, grpo.sampling_max_tokens, share=0.85)
    assert at_085.fits == (course == "gsm8k-qwen3")


def test_the_readme_shows_the_current_tables():
    bench = load_bench("cost_model")
    readme = (ROOT / "README.md").read_text()
    expected = bench.tables(bench.cpu_rows(json.loads((RESULTS / "rehearse.json").read_text())))
    assert bench.BEGIN + "\n" + expected + "\n" + bench.END in readme, \
        "README's cost tables are stale: run `python bench/cost_model.py --write-readme`"
