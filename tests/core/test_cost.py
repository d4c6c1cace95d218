"""hw3lib.core.cost and hw3lib.core.memory: the memory model (trainer, LoRA, gradient checkpointing, float32,
engines, the GRPO/SFT/EI/evaluation/async plans) and the compute estimates, by hand-worked numbers; the constants
against the committed measurements; the predictions against the CPU rehearsal; the full profile's defaults fit;
the README's tables are the model's."""

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
    assert (parts["masters"], parts["adam"], parts["grads"], parts["working_copy"],
            parts["reference"]) == (4000, 8000, 4000, 2000, 2000)
    # 10 tokens x 2 layers x A (width 1,024: factor 1) + 4 response tokens x 2 x L (the logits and their gradient)
    assert parts["activations"] == 10 * 2 * cost.ACTIVATION_BYTES_PER_TOKEN_LAYER + 4 * 2 * cost.LOGITS_BYTES_PER_TOKEN
    assert parts["output_head_gradient"] == 6 * 151936 * 1024  # bf16 [V, h] and its float32 cast
    # 4000 + 8000 + 4000 + 2000 + 2000 + the head's gradient + the activations: the fused optimizer step adds nothing
    assert cost.trainer_peak(parts) == 20000 + parts["output_head_gradient"] + parts["activations"]
    # masters, moments, the reference and the bf16 working copy, which stays while the engine generates (issue 45)
    assert cost.trainer_resident_between_steps(parts) == 4000 + 8000 + 2000 + 2000
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
    # awake engine 40 GiB beside the resident 4 + 8 + 2 (the bf16 working copy) + 2 GiB runtime; training 22 GiB
    # + the sleeping engine
    assert plan.generation_peak == 56 * GiB and plan.training_peak == 20 * GiB + cost.SLEEPING_ENGINE_BYTES
    assert plan.fits and plan.max_colocated_share == 0.65  # (68 - 16) / 80: within 85% of the card
    crowded = cost.gpu_plan(shape, 1, 0, 0, share=0.8, device_bytes=80 * GiB)
    assert not crowded.fits  # 64 + 16 = 80 <= the card, but over its 68 GiB budget
    second = cost.gpu_plan(shape, 1, 0, 0, share=0.9, colocated=False, device_bytes=80 * GiB)
    # the engine alone on its GPU: its share and its process's CUDA context
    assert second.fits and (second.generation_peak, second.training_peak) == (
        int(0.9 * 80 * GiB) + cost.CUDA_CONTEXT_BYTES, 20 * GiB)


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


def test_the_gpu_paths_attention_terms_are_the_measured_ones():
    """Through transformers' SDPA with the shared-prefix mask (bench/memory_calibration.py --gpu-path, on CPU) each
    layer saves 4,992 more bytes per token than through the plain path: the derived K/V head copies (4,096 at
    Qwen3-0.6B: 2 x (16 - 8) heads x 128 x 2 bytes) and the masked kernels' remainder; the logits are unchanged."""
    from hw3lib.core import memory

    plain = json.loads((RESULTS / "memory_calibration.json").read_text())["fit"]
    masked_run = json.loads((RESULTS / "memory_calibration_gpu_path.json").read_text())
    assert masked_run["gpu_path"] is True
    masked = masked_run["fit"]
    extra = masked["activation_bytes_per_token_per_layer"] - plain["activation_bytes_per_token_per_layer"]
    qwen3 = course_shapes()["Qwen/Qwen3-0.6B"]
    copies = memory.kv_copy_bytes_per_token_layer(qwen3)
    assert copies == 4096 and copies < extra  # most of it is the copies
    assert copies + memory.masked_attention_bytes_per_token_layer(qwen3) == pytest.approx(extra, rel=0.01)
    assert masked["logits_bytes_per_token"] == pytest.approx(plain["logits_bytes_per_token"], rel=0.01)


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
    # The handout's 0.85 is for vLLM on its own GPU: colocated it leaves neither course's trainer room within the
    # plan's 85% headroom (Qwen3-0.6B: 14 x P + 2 GiB + 0.85 x the card is 96% of it).
    grpo = GRPOConfig.for_profile("full", course=course)
    at_085 = cost.gpu_plan(shape, grpo.micro_train_batch_size, 200, grpo.sampling_max_tokens, share=0.85)
    assert not at_085.fits


def test_the_readme_and_the_gpu_page_show_the_current_tables():
    bench = load_bench("cost_model")
    readme, gpu_page = (ROOT / "README.md").read_text(), (ROOT / "docs" / "gpu.md").read_text()
    expected = bench.tables(bench.cpu_rows(json.loads((RESULTS / "rehearse.json").read_text())))
    assert bench.BEGIN + "\n" + expected + "\n" + bench.END in gpu_page, \
        "docs/gpu.md's cost tables are stale: run `python bench/cost_model.py --write-readme`"
    # "What fits your card": the fit table and the 24 GB recipes, as hw3lib.core.preflight computes them
    assert bench.FIT_BEGIN + "\n" + bench.fit_text() + "\n" + bench.FIT_END in readme, \
        "README's fit table is stale: run `python bench/cost_model.py --write-readme`"
    # what each notebook costs each course: the totals the notebooks themselves print (hw3lib.experiments.plan)
    assert bench.SUMMARY_BEGIN + "\n" + bench.summary_table() + "\n" + bench.SUMMARY_END in readme, \
        "README's notebook costs are stale: run `python bench/cost_model.py --write-readme`"


def test_the_notebook_cost_summary_is_the_plans_totals():
    from hw3lib.core.course import COURSE_NAMES
    from hw3lib.core.preflight import nominal_device
    from hw3lib.experiments.plan import notebook_plan

    bench = load_bench("cost_model")
    rows = {line.split(" | ")[0].strip("| `"): line for line in bench.summary_table().splitlines()[2:]}
    assert list(rows) == list(COURSE_NAMES)
    plan = notebook_plan("05", "full", "cs336-a5", extras=False, device=nominal_device("H100-80GB"))
    cells = rows["cs336-a5"].split(" | ")
    assert cells[4].startswith(f"{plan.total[0]:.1f} / ")  # notebook 05's column
    assert cells[2].startswith("- [+")  # Best-of-N is an extra for CS336: nothing, plus its cost as an extra


# ---- hw3lib.core.memory: LoRA, gradient checkpointing, float32, engines, phases -------------------------------

# A made-up model with LoRA's sizes: width 1,024 (activation factor 1), Qwen's vocabulary (logits factor 1),
# 8 query heads and 2 KV heads of 128, MLP 2,048, 2 layers; 155,582,464 of its 400 M parameters are the embedding.
# Its decoder layer saves 73,908 bytes per token: the measured 82,100 less its MLP share at Qwen3-0.6B's MLP width
# (8 x 3,072 = 24,576) plus 8 x its own 2,048 (hw3lib.core.memory.layer_activation_bytes).
LORA_TOY_LAYER = 82_100 - 8 * 3072 + 8 * 2048
LORA_TOY = cost.Shape("lora-toy", params=400_000_000, layers=2, hidden=1024, vocab=151936, kv_heads=2, head_dim=128,
                      heads=8, intermediate=2048)
# One GiB of parameters, no output head, no activations: every term a round number of GiB.
ROUND = cost.Shape("round", params=GiB, layers=1, hidden=1, vocab=0, kv_heads=1, head_dim=1)


def test_the_course_shapes_are_the_models_built_from_their_configs():
    assert cost.COURSE_SHAPES == course_shapes()
    qwen3 = cost.COURSE_SHAPES["Qwen/Qwen3-0.6B"]
    assert (qwen3.max_positions, qwen3.heads, qwen3.intermediate) == (40960, 16, 3072)


def test_lora_params_by_hand():
    # per layer and unit of rank: q 1,024+1,024, k 1,024+256, v 1,024+256, o 1,024+1,024, gate and up 1,024+2,048
    # each, down 2,048+1,024 = 15,872; rank 4, 2 layers: 2 x 4 x 15,872
    assert cost.lora_params(LORA_TOY, 4) == 126_976
    assert cost.lora_params(LORA_TOY, 4, ("q_proj", "v_proj")) == 2 * 4 * (2048 + 1280)
    # Qwen3-0.6B: 7 x 1,024 + 2 x 2,048 + 2 x 1,024 + 3 x 3,072 = 22,528 per unit of rank and layer
    shapes = course_shapes()
    assert cost.lora_params(shapes["Qwen/Qwen3-0.6B"], 16) == 28 * 16 * 22_528 == 10_092_544
    # Qwen2.5-Math-1.5B: 7 x 1,536 + 2 x 1,536 + 2 x 256 + 3 x 8,960 = 41,216
    assert cost.lora_params(shapes["Qwen/Qwen2.5-Math-1.5B"], 16) == 28 * 16 * 41_216
    # peft's own count of trainable parameters at Qwen3-0.6B's width (bench/results/bench_lora.json, measured)
    measured = {(row["layers"], row["lora_rank"]): row["trainable_params"]
                for row in json.loads((RESULTS / "bench_lora.json").read_text())["results"]}
    for layers in (2, 4):
        shape = cost.Shape("q", 0, layers, 1024, 151936, 8, 128, heads=16, intermediate=3072)
        assert cost.lora_params(shape, 16) == measured[(layers, 16)]
    with pytest.raises(ValueError, match="lm_head"):
        cost.lora_params(LORA_TOY, 4, ("lm_head",))
    with pytest.raises(ValueError, match="from_config"):
        cost.lora_params(TOY, 4)


def test_lora_trainer_parts_by_hand():
    parts = cost.trainer_parts(LORA_TOY, micro_tokens=10, micro_response_tokens=4, monitor_kl=True, lora_rank=4)
    adapters = 126_976
    assert parts["masters"] == 4 * (400_000_000 + adapters)  # the frozen float32 base and the adapters' masters
    assert (parts["adam"], parts["grads"]) == (8 * adapters, 4 * adapters)  # adapters only
    assert parts["autocast_copies"] == 2 * (400_000_000 + adapters)  # each frozen weight's cast saved for backward
    assert parts["output_head_gradient"] == 0 and parts["reference"] == 0  # frozen head; KL from the frozen base
    # each layer saves its inputs once more for the adapters: 2 bytes x (6 x 1,024 + 2,048) = 16,384 per token;
    # 10 tokens x 2 layers x (73,908 + 16,384) + 4 response tokens x 2 x 314,400
    assert cost.lora_activation_bytes_per_token_layer(LORA_TOY) == 16_384
    assert LORA_TOY_LAYER == 73_908
    assert parts["activations"] == 10 * 2 * (73_908 + 16_384) + 4 * 2 * 314_400 == 4_321_040
    assert cost.trainer_resident_between_steps(parts) == 4 * (400_000_000 + adapters) + 8 * adapters


def test_gradient_checkpointing_by_hand():
    # kept: each layer's float32 input, 10 tokens x 2 layers x 4 bytes x 1,024; plus one layer recomputed
    # (10 x 82,100) and the logits (unchanged: the head is outside the checkpointed layers)
    assert cost.activation_bytes(TOY, 10, 4, checkpointing=True) == 81_920 + 821_000 + 2_515_200
    full = cost.trainer_parts(TOY, 10, 4, monitor_kl=False, checkpointing=True)
    assert full["working_copy"] == 2000  # full fine-tuning: the bf16 working copy of every weight
    # LoRA with checkpointing: only the head's and one layer's frozen copies are held at once:
    # 2 x (155,582,464 + (400,000,000 - 155,582,464) // 2 layers + the adapters)
    lora = cost.trainer_parts(LORA_TOY, 10, 4, monitor_kl=False, lora_rank=4, checkpointing=True)
    assert lora["autocast_copies"] == 2 * (155_582_464 + 122_208_768 + 126_976) == 555_836_416
    assert lora["activations"] == 81_920 + 10 * (LORA_TOY_LAYER + 16_384) + 2_515_200
    # Qwen3-0.6B, a microbatch of 2 x (200 + 1,024) tokens: the layers' 5.6 GB become 0.48 GB
    qwen3 = course_shapes()["Qwen/Qwen3-0.6B"]
    logits = 2 * 2048 * cost.LOGITS_BYTES_PER_TOKEN
    assert cost.activation_bytes(qwen3, 2448, 2048) == 2448 * 28 * 82_100 + logits
    assert cost.activation_bytes(qwen3, 2448, 2048, checkpointing=True) == 2448 * 28 * 4096 + 2448 * 82_100 + logits


def test_float32_training_by_hand():
    parts = cost.trainer_parts(TOY, 10, 4, monitor_kl=True, precision="float32")
    assert parts["working_copy"] == 0 and parts["reference"] == 4000  # the working copy shares the masters; a float32 reference
    assert parts["output_head_gradient"] == 4 * 151936 * 1024  # the head's gradient straight in float32
    assert parts["activations"] == 2 * (10 * 2 * 82_100) + 2 * (4 * 2 * 314_400)  # twice the bf16 bytes
    lora = cost.trainer_parts(LORA_TOY, 10, 4, monitor_kl=False, lora_rank=4, precision="float32")
    assert lora["autocast_copies"] == 0  # and no second cast of the adapters' inputs
    assert lora["activations"] == 2 * (10 * 2 * LORA_TOY_LAYER) + 2 * (4 * 2 * 314_400)


def test_engine_needs_by_hand():
    qwen3 = course_shapes()["Qwen/Qwen3-0.6B"]
    # bf16 weights + the workspace + one sequence of the model's own 40,960 tokens at 114,688 bytes each
    assert cost.engine_needs(qwen3, cost.Engine()) == 2 * 596_049_920 + 2 * GiB + 40_960 * 114_688
    assert cost.engine_needs(qwen3, cost.Engine(max_model_len=1280)) == 2 * 596_049_920 + 2 * GiB + 1280 * 114_688
    # a float32 engine: weights and cache twice
    assert cost.engine_needs(qwen3, cost.Engine(max_model_len=1280, dtype="float32")) == \
        4 * 596_049_920 + 2 * GiB + 2 * 1280 * 114_688
    assert cost.engine_needs(qwen3, cost.Engine("transformers")) == 0  # no share to hold


def test_training_plans_by_hand():
    trainer = cost.Trainer(micro_batch=1, prompt_tokens=0, response_tokens=0)
    # ROUND's trainer: peak 4 + 8 + 4 + 2 = 18 GiB + 2 GiB runtime; resident 4 + 8 + 2 (the bf16 working copy)
    # = 14 GiB + 2 GiB runtime
    plan = cost.grpo_plan(ROUND, trainer, cost.Engine(share=0.5), 80 * GiB)
    # generation: 16 GiB + the engine's 40; training: 20 GiB + the sleeping engine's 2
    assert plan.peaks == {"generation": 56 * GiB, "training": 22 * GiB} and plan.fits
    assert plan.engine_needs == 4 * GiB  # 2 GiB of bf16 weights + 2 GiB workspace (no context: max_positions 0)
    # 4 / 80; the budget is 85% of the card, 68 GiB: (68 - 16) / 80
    assert plan.budget == int(0.85 * 80 * GiB) and (plan.min_share, plan.max_share) == (0.05, 0.65)
    assert cost.sft_plan(ROUND, trainer, cost.Engine(), 80 * GiB).peaks == {"validation": 56 * GiB,
                                                                              "training": 22 * GiB}
    assert cost.ei_plan(ROUND, trainer, cost.Engine(), 80 * GiB).peaks == {"sampling": 56 * GiB, "sft": 22 * GiB}
    # on two GPUs: the engine alone (its share + its process's 0.5 GiB context), the trainer alone
    apart = cost.grpo_plan(ROUND, trainer, cost.Engine(share=0.5), 80 * GiB, colocated=False)
    assert apart.peaks == {"generation (engine's GPU)": 40 * GiB + GiB // 2, "training (policy's GPU)": 20 * GiB}
    # an engine too small for its weights and workspace: 0.04 x 80 = 3.2 GiB < 4 GiB
    assert not plan.with_share(0.04).fits and plan.with_share(0.05).fits


def test_evaluation_async_and_transformers_plans_by_hand():
    trainer = cost.Trainer(1, 0, 0)
    # evaluation: the engine's 0.75 x 80 = 60 GiB and its process's context
    assert cost.eval_plan(ROUND, cost.Engine(share=0.75), 80 * GiB).peaks == {"evaluation": 60 * GiB + GiB // 2}
    # async on one GPU at 0.5: training = the learner's 20 + its sleeping engine's 2 + the generator's 0.5 + 40;
    # validation = the learner's resident 16 + 0.5 + both engines awake, 80
    same = cost.async_plan(ROUND, trainer, cost.Engine(share=0.5), 80 * GiB)
    assert same.peaks == {"training": 62 * GiB + GiB // 2, "validation": 96 * GiB + GiB // 2} and not same.fits
    # the largest share within the 68 GiB budget: min((68 - 22.5) / 80, (68 - 16.5) / (2 x 80)) = 0.321875 -> 0.32
    assert same.max_share == 0.32 and same.with_share(0.32).fits and not same.with_share(0.33).fits
    # async on two GPUs: the learner's engine sits on the rollout GPU too, awake: 2 x 0.5 GiB + 2 x 40 GiB
    apart = cost.async_plan(ROUND, trainer, cost.Engine(share=0.5), 80 * GiB, same_gpu=False)
    assert apart.peaks == {"generation and validation (engine's GPU)": 81 * GiB, "training (policy's GPU)": 20 * GiB}
    # the engine's GPU holds engines alone (no trainer estimate): its limit is the whole card, (80 - 1) / 160 = 0.49375
    assert apart.max_share == 0.49
    # the transformers engine (no share): its bf16 weights, and while generating 2 rows x (3 + 5) tokens x
    # 4 bytes of KV per token (2 x 1 layer x 1 head x 1 x 2 bytes); asleep it keeps its weights
    engine = cost.Engine("transformers", batch=2, prompt_tokens=3, max_tokens=5)
    plan = cost.grpo_plan(ROUND, trainer, engine, 80 * GiB)
    assert plan.peaks == {"generation": 16 * GiB + 2 * GiB + 64, "training": 20 * GiB + 2 * GiB} and plan.fits
    # a float32 engine wrapping the policy: no weights of its own, a float32 cache
    wrapped = cost.grpo_plan(ROUND, trainer, cost.Engine("transformers", dtype="float32", batch=2, prompt_tokens=3,
                                                         max_tokens=5, wraps_policy=True), 80 * GiB)
    assert wrapped.peaks == {"generation": 16 * GiB + 128, "training": 20 * GiB}
