"""hw3lib.core.preflight: the device (real, simulated, CPU), the dtype it supports, the memory check of a run's
config on the card with hand-worked numbers, the settings named when it does not fit (and that they fit), the
README's fit table and the 24 GB recipes."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from hw3lib.core import cost
from hw3lib.core import preflight as pf
from hw3lib.grpo.config import GRPOConfig
from hw3lib.sft.config import EIConfig, SFTConfig

GiB = 2**30
P3 = 596_049_920  # Qwen3-0.6B's parameters
H100 = pf.simulated_device("H100-80GB")
L4 = pf.simulated_device("L4-24GB")
T4 = pf.simulated_device("T4-16GB")
CLASSES = {"grpo": GRPOConfig, "sft": SFTConfig, "ei": EIConfig}


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch):
    """The full profile as a student's GPU machine sees it: no simulation, rehearsal or model overrides."""
    for name in ("HW3_SIMULATE_GPU", "HW3_REHEARSAL", "HW3_MODEL", "HW3_MATH_MODEL", "HW3_ENGINE"):
        monkeypatch.delenv(name, raising=False)


def full(course: str, kind: str = "grpo", **overrides):
    return CLASSES[kind].for_profile("full", course=course, **overrides)


# ---- the device ----------------------------------------------------------------------------------------------

def test_simulated_cards_parse():
    assert H100 == pf.DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", int(79.2 * GiB), (9, 0), 1, simulated=True)
    assert pf.simulated_device("t4-16gb").capability == (7, 5)  # keys in any case
    two = pf.simulated_device("2xL4-24GB")
    assert (two.name, two.count) == ("NVIDIA L4", 2)
    assert pf.simulated_device("MyCard:24:8.6") == pf.DeviceInfo("cuda", "MyCard", 24 * GiB, (8, 6), 1, simulated=True)


@pytest.mark.parametrize("value", ["", "foo", "X:abc:8.0", "X:24:8", "X:-3:8.0", ":24:8.0", "0xL4-24GB"])
def test_simulation_errors_name_the_variable_and_the_forms(value):
    with pytest.raises(pf.PreflightError) as caught:
        pf.simulated_device(value)
    message = str(caught.value)
    assert "$HW3_SIMULATE_GPU" in message and "NAME:GiB:major.minor" in message and "L4-24GB" in message
    assert isinstance(caught.value, ValueError)


def test_detect_device_on_a_cpu_reads_the_environment(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu = pf.detect_device()
    assert cpu.kind == "cpu" and cpu.capability is None and cpu.total_bytes > 0 and not cpu.simulated
    monkeypatch.setenv("HW3_SIMULATE_GPU", "RTX4090-24GB")
    assert pf.detect_device() == pf.simulated_device("RTX4090-24GB")
    monkeypatch.setenv("HW3_SIMULATE_GPU", "nonsense")
    with pytest.raises(pf.PreflightError, match="nonsense"):
        pf.detect_device()


def test_detect_device_reads_the_real_gpu_first(monkeypatch):
    import torch

    props = SimpleNamespace(name="NVIDIA L4", total_memory=23_034 * 2**20, major=8, minor=9)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    # A kept notebook kernel holds 3,000 MiB elsewhere; this process already reserves 1,000 MiB of its own.
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index=0: (19_034 * 2**20, 23_034 * 2**20))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda index=0: 1_000 * 2**20)
    monkeypatch.setenv("HW3_SIMULATE_GPU", "T4-16GB")  # a real GPU wins
    info = pf.detect_device()
    # free to this run: the driver's free 19,034 MiB + its own 1,000 MiB, not the card's 23,034
    assert info == pf.DeviceInfo("cuda", "NVIDIA L4", 23_034 * 2**20, (8, 9), 2, free_bytes=20_034 * 2**20)
    assert info.available_bytes == 20_034 * 2**20 and "19.6 GiB free" in info.describe()


def test_supported_dtype():
    assert pf.supported_dtype(H100)[0] == pf.supported_dtype(L4)[0] == "bfloat16"
    assert pf.supported_dtype(pf.simulated_device("X:16:8.0"))[0] == "bfloat16"  # 8.0 is the threshold
    dtype, reason = pf.supported_dtype(T4)
    assert dtype == "float32" and "7.5" in reason and "vLLM" in reason and "float32" in reason
    assert pf.supported_dtype(pf.simulated_device("V100-16GB"))[0] == "float32"
    assert pf.supported_dtype(pf.DeviceInfo("cpu", "x86_64", 24 * GiB, None, 1))[0] == "float32"


def test_every_card_is_found_by_its_own_name_and_others_are_not():
    for card in pf.CARDS:
        info = pf.DeviceInfo("cuda", card.name, int(card.gib * GiB), card.capability, 1)
        assert pf.card_for(info) == card, card.key
        assert pf.accelerator_for(info) == cost.Accelerator(card.name, card.peak_flops, card.bandwidth)
    a100_pcie = pf.DeviceInfo("cuda", "NVIDIA A100 80GB PCIe", 80 * GiB, (8, 0), 1)
    assert pf.card_for(a100_pcie).key == "A100-80GB"
    assert pf.card_for(pf.DeviceInfo("cuda", "NVIDIA A100-PCIE", 79 * GiB, (8, 0), 1)).key == "A100-80GB"  # by memory
    l40s = pf.DeviceInfo("cuda", "NVIDIA L40S", 44 * GiB, (8, 9), 1)  # not an L4
    assert pf.card_for(l40s) is None
    fallback = pf.accelerator_for(l40s)
    assert fallback.peak_flops == cost.H100.peak_flops and "assumed" in fallback.name and "L40S" in fallback.name
    assert pf.accelerator_for(H100).peak_flops == cost.H100.peak_flops == 989e12


# ---- the check -----------------------------------------------------------------------------------------------

def test_the_summary_names_a_cached_model_folder_without_the_machines_path(tmp_path, monkeypatch, capsys):
    """A warm start lives in $HW3_CACHE_DIR; the line a run prints (`lifecycle.check_fits`, what notebooks store)
    names it from there, not from / (the store refuses outputs with a machine's absolute path), and a hub name or
    `tiny` stays as it is."""
    from hw3lib.core.io import shown_model
    from hw3lib.core.lifecycle import check_fits

    monkeypatch.setenv("HW3_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(pf, "detect_device", lambda *a, **k: pf.DeviceInfo("cpu", "x86_64", 24 * GiB, None, 1))
    folder = str(tmp_path / "keyword_sft" / "bf385eb6f4e1")
    assert shown_model(folder) == "$HW3_CACHE_DIR/keyword_sft/bf385eb6f4e1"
    assert shown_model("tiny") == "tiny" and shown_model("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    check_fits("GRPO", GRPOConfig.for_profile("smoke", model=folder))
    printed = capsys.readouterr().out
    assert printed.startswith("preflight grpo of $HW3_CACHE_DIR/keyword_sft/bf385eb6f4e1 on ") and str(tmp_path) not in printed


def test_no_check_on_a_cpu_or_for_a_cpu_run():
    cpu = pf.DeviceInfo("cpu", "x86_64", 24 * GiB, None, 1)
    report = pf.preflight(full("gsm8k-qwen3"), "grpo", cpu)
    assert not report.checked and report.fits and "no GPU" in report.note and "no memory check" in report.summary()
    real_l4 = pf.DeviceInfo("cuda", "NVIDIA L4", int(22.5 * GiB), (8, 9), 1)  # a real GPU, a smoke (CPU) config
    report = pf.preflight(GRPOConfig.for_profile("smoke"), "grpo", real_l4)
    assert not report.checked and report.note == "the run is on the CPU"
    with pytest.raises(ValueError, match="choose one of grpo"):
        pf.preflight(full("gsm8k-qwen3"), "train", H100)


@pytest.mark.parametrize("course", ["gsm8k-qwen3", "math-qwen2.5"])
def test_an_h100_fits_both_courses_defaults(course):
    for kind in ("grpo", "sft", "ei"):
        report = pf.preflight(full(course, kind), kind, H100)
        assert report.checked and report.fits and report.dtype == "bfloat16", (kind, report.summary())


def qwen3_training_peak(rows: int, prompt: int = 200) -> int:
    """By hand: 18 x P (masters, moments, gradients, bf16 copies) + the head's 6 x 151,936 x 1,024 + rows x (prompt +
    1,024) tokens x 28 layers x (82,100 + the K/V head copies of a GPU's masked SDPA, 2 x (16 - 8) heads x 128 x 2
    = 4,096, + the masked kernels' measured 896) + the boolean mask, rows x (prompt + 1,024)^2 + 2 x rows x 1,024 response tokens x 314,400 (the logits
    and their gradient) + 2 GiB runtime + 2 GiB of the sleeping engine."""
    tokens = rows * (prompt + 1024)
    return (18 * P3 + 6 * 151936 * 1024 + tokens * 28 * (82_100 + 4096 + 896) + rows * (prompt + 1024) ** 2
            + 2 * rows * 1024 * 314_400 + 4 * GiB)


def test_the_h100_numbers_by_hand():
    report = pf.preflight(full("gsm8k-qwen3"), "grpo", H100)
    card = int(79.2 * GiB)
    budget = int(0.85 * card)  # the plan's headroom: 85% of the memory free to the run (here the whole card)
    # the loop's rows: the most whose training peak stays within the budget (15 by hand: 65.6 GiB; 16 would be 69.0)
    assert qwen3_training_peak(15) <= budget < qwen3_training_peak(16)
    assert report.forward_rows == 15 and report.budget == budget and report.prompt_tokens == 200
    # generation: masters + moments + the bf16 working copy (14 x P) + 2 GiB runtime + the engine's 0.5 of the card
    assert report.peaks == {"generation": 14 * P3 + 2 * GiB + int(0.5 * card), "training": qwen3_training_peak(15)}
    # the engine's context: 200 + 1,024 tokens rounded up to 1,280; bf16 weights + 2 GiB workspace + its KV cache
    assert report.engine_needs == 2 * P3 + 2 * GiB + 1280 * 114_688
    summary = report.summary()
    assert ("15 rows per forward of 200 + budget tokens: generation 49.4 GiB, training 65.6 GiB of 79.2 GiB "
            "(budget 67.3 GiB: 85% of 79.2 GiB free) -- fits") in summary and "H100" in summary


def test_memory_held_elsewhere_shrinks_the_plan():
    """A kept kernel's 20 GiB on the card: the plan is made against what is free, so the loop packs fewer rows, and
    a run that only fit the whole card is refused in one line naming the free memory."""
    crowded = dataclasses.replace(H100, free_bytes=H100.total_bytes - 20 * GiB)
    report = pf.preflight(full("gsm8k-qwen3"), "grpo", crowded)
    budget = int(0.85 * crowded.free_bytes)
    assert report.fits and report.budget == budget and report.forward_rows < 15
    assert qwen3_training_peak(report.forward_rows) <= budget < qwen3_training_peak(report.forward_rows + 1)
    full_only = dataclasses.replace(H100, free_bytes=30 * GiB)  # the generation phase alone needs 49.4 GiB
    with pytest.raises(pf.PreflightError, match=r"budget of 25.5 GiB \(85% of the 30.0 GiB free\)"):
        pf.preflight(full("gsm8k-qwen3"), "grpo", full_only)


def test_a_t4_picks_float32_and_refuses_bf16():
    with pytest.raises(pf.PreflightError, match=r"dtype='bfloat16' cannot run here.*Set dtype='float32'"):
        pf.preflight(full("gsm8k-qwen3"), "grpo", T4)
    cfg = full("gsm8k-qwen3", dtype="float32")
    with pytest.raises(pf.PreflightError) as caught:
        pf.preflight(cfg, "grpo", T4)
    assert caught.value.report.dtype == "float32" and "vLLM refuses" in caught.value.report.dtype_reason
    assert caught.value.options[0] == {"lora_rank": 16, "gradient_checkpointing": True}
    report = pf.preflight(cfg.replace(**caught.value.options[0]), "grpo", T4)
    assert report.fits and report.dtype == "float32"


def test_a_24gb_card_refuses_full_finetuning_of_the_math_model_naming_what_fits():
    cfg = full("math-qwen2.5")
    with pytest.raises(pf.PreflightError) as caught:
        pf.preflight(cfg, "grpo", L4)
    message = str(caught.value)
    assert "\n" not in message  # one paragraph
    assert "does not fit NVIDIA L4" in message and "generation needs 33.4 GiB" in message
    assert "`lora_rank=16, gradient_checkpointing=True, gpu_memory_utilization=0.49`" in message
    assert caught.value.suggestions == caught.value.report.suggestions and caught.value.options
    for changes in caught.value.options:  # every named setting, applied, passes
        assert pf.preflight(cfg.replace(**changes), "grpo", L4).fits, changes


def test_the_handouts_share_is_refused_colocated_and_a_share_that_fits_is_named():
    cfg = full("math-qwen2.5", gpu_memory_utilization=0.85)
    with pytest.raises(pf.PreflightError) as caught:
        pf.preflight(cfg, "grpo", H100)
    # (0.85 x 79.2 GiB - 14 x 1,543,714,304 - 2 GiB) / 79.2 GiB = 0.571 -> 0.57 (masters, moments and the bf16
    # working copy resident while the engine generates, within the plan's 85% headroom)
    assert caught.value.options[0] == {"gpu_memory_utilization": 0.57}
    assert "gpu_memory_utilization=0.57" in str(caught.value)


def test_two_gpus_are_needed_for_two_devices():
    cfg = full("gsm8k-qwen3", policy_device="cuda:1", gpu_memory_utilization=0.85)
    with pytest.raises(pf.PreflightError, match=r"policy_device='cuda:1', but this machine has 1 GPU.*need two"):
        pf.preflight(cfg, "grpo", H100)
    report = pf.preflight(cfg, "grpo", pf.simulated_device("2xH100-80GB"))
    card = int(79.2 * GiB)
    assert report.fits and report.peaks["generation (engine's GPU)"] == int(0.85 * card) + cost.CUDA_CONTEXT_BYTES


def test_async_on_one_gpu_holds_both_engines_and_the_trainer():
    with pytest.raises(pf.PreflightError) as caught:
        pf.preflight(full("gsm8k-qwen3"), "async", H100)
    card = int(79.2 * GiB)
    # validation: the learner's resident 14 x P + 2 GiB, the generator's context, two engines at 0.5 each
    assert caught.value.report.peaks["validation"] == 14 * P3 + 2 * GiB + GiB // 2 + 2 * int(0.5 * card)
    # the share that fits: (0.85 x card - 14 x P - 2.5 GiB) / (2 x card) = 0.360 -> 0.36
    assert caught.value.options[0] == {"gpu_memory_utilization": 0.36}
    fitted = pf.preflight(full("gsm8k-qwen3", gpu_memory_utilization=0.36), "async", H100)
    # the learner's rows fit beside the generator's awake engine (async_plan), not the engine-asleep plan of GRPO
    alone = pf.preflight(full("gsm8k-qwen3", gpu_memory_utilization=0.36), "grpo", H100)
    assert fitted.fits and 2 <= fitted.forward_rows < alone.forward_rows
    assert max(fitted.peaks.values()) <= fitted.budget


def test_evaluation_requests_in_every_form():
    expected = pf.preflight(pf.EvalRequest("Qwen/Qwen3-0.6B"), "eval", L4)
    assert expected.peaks == {"evaluation": int(0.85 * int(22.5 * GiB)) + cost.CUDA_CONTEXT_BYTES}
    assert pf.preflight({"model": "Qwen/Qwen3-0.6B"}, "eval", L4) == expected
    profile = SimpleNamespace(model="Qwen/Qwen3-0.6B", gpu_memory_utilization=0.85, dtype="bfloat16", device="cuda",
                              engine="vllm", eval_max_tokens=1024)
    assert pf.preflight(profile, "eval", L4) == expected
    with pytest.raises(ValueError, match="'model' and any of"):
        pf.preflight({"model": "Qwen/Qwen3-0.6B", "share": 0.5}, "eval", L4)


def test_evaluation_on_a_t4_names_a_shorter_context_or_float16():
    request = pf.EvalRequest("Qwen/Qwen3-0.6B", dtype="float32")
    with pytest.raises(pf.PreflightError) as caught:
        pf.preflight(request, "eval", T4)
    # a float32 engine holds 4 x P of weights, 2 GiB of workspace and one 40,960-token sequence at 2 x 114,688
    # bytes per token: 13.0 GiB, more than 0.85 x 14.6 GiB
    assert caught.value.report.engine_needs == 4 * P3 + 2 * GiB + 40_960 * 2 * 114_688
    options = caught.value.options
    assert {"max_model_len": 16384} in options and {"dtype": "float16"} in options
    for changes in options:
        assert pf.preflight(dataclasses.replace(request, **changes), "eval", T4).fits, changes


def test_tiny_stand_in_and_local_models(tmp_path):
    from transformers import Qwen3Config

    from hw3lib.models import stand_in

    assert (pf.STAND_IN_PREFIX, pf.STAND_IN_MARKER) == (stand_in.PREFIX, stand_in.MARKER)
    tiny = pf.preflight(full("gsm8k-qwen3", model="tiny"), "grpo", H100)
    assert not tiny.checked and tiny.fits and "tiny smoke model" in tiny.note
    real = pf.preflight(full("math-qwen2.5"), "grpo", H100)
    # a rehearsal's config: the stand-in on the CPU, checked as the real model on the simulated card
    rehearsal = pf.preflight(full("math-qwen2.5", model="stand-in:Qwen/Qwen2.5-Math-1.5B", policy_device="cpu",
                                  rollout_device="cpu"), "grpo", H100)
    assert rehearsal.checked and rehearsal.peaks == real.peaks and "stands in for" in rehearsal.note
    folder = tmp_path / "stand-in"
    folder.mkdir()
    (folder / stand_in.MARKER).write_text(json.dumps({"stands_in_for": "Qwen/Qwen2.5-Math-1.5B", "seed": 0}))
    assert pf.resolve_shape(str(folder))[0] == cost.COURSE_SHAPES["Qwen/Qwen2.5-Math-1.5B"]
    local = tmp_path / "local"
    Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, head_dim=32, max_position_embeddings=256).save_pretrained(local)
    shape, note = pf.resolve_shape(str(local))
    assert (shape.layers, shape.hidden, shape.heads, shape.intermediate, shape.max_positions) == (2, 64, 2, 128, 256)
    assert pf.preflight(full("gsm8k-qwen3", model=str(local)), "grpo", L4).fits
    unknown, note = pf.resolve_shape("nobody/no-such-model")
    assert unknown is None and "not checked" in note


# ---- the README's table and the 24 GB recipes -----------------------------------------------------------------

def test_the_fit_tables_configs_are_the_config_classes():
    from hw3lib.core.course import get_course
    from hw3lib.core.profile import get_profile

    fields = ("model", "micro_train_batch_size", "sampling_max_tokens", "gpu_memory_utilization", "dtype",
              "gradient_checkpointing", "lora_rank", "engine", "policy_device", "rollout_device")
    for course, kind in pf.FIT_ROWS:
        assert pf.COURSE_MODELS[course] == get_course(course).model_for(get_profile("full"))
        if kind == "eval":
            assert pf.course_config(course, kind).gpu_memory_utilization == get_profile("full").gpu_memory_utilization
            continue
        ours, theirs = pf.course_config(course, kind), full(course, kind)
        assert [getattr(ours, f) for f in fields] == [getattr(theirs, f) for f in fields], (course, kind)
        assert getattr(theirs, "monitor_kl", False) is False


def test_fit_table_by_hand_and_its_changes_fit():
    rows = pf.fit_table()
    assert len(rows) == len(pf.FIT_ROWS) * 4
    assert all(row["fits"] for row in rows if row["card_gib"] == 79.2)  # an 80 GB card runs every default
    cell = {(row["course"], row["kind"], row["card_gib"]): row for row in rows}
    # gsm8k GRPO on 80 GB: the training phase at the loop's rows of GSM8K's longest prompt (400 tokens), 13 by hand
    qwen3 = cell["nlpdl-hw3", "grpo", 79.2]
    budget = int(0.85 * int(79.2 * GiB))
    assert qwen3["forward_rows"] == 13 and qwen3["prompt_tokens"] == 400
    assert qwen3_training_peak(13, 400) <= budget < qwen3_training_peak(14, 400)
    assert qwen3["peak_gib"] == round(qwen3_training_peak(13, 400) / GiB, 1) == 64.7 and qwen3["share_of_card"] <= 0.85
    assert all(row["share_of_card"] <= 0.85 for row in rows if row["kind"] != "eval" and row["change"] != "does not fit")
    assert cell["cs336-a5", "grpo", 22.5]["change"] == ("lora_rank=16, gradient_checkpointing=True, "
                                                         "gpu_memory_utilization=0.49")
    for row in rows:
        if row["fits"] or row["change"] == "does not fit":
            continue
        cfg = pf.course_config(row["course"], row["kind"], row["dtype"])
        shape = cost.COURSE_SHAPES[row["model"]]
        (changes,) = pf.suggest(cfg, row["kind"], shape, int(row["card_gib"] * GiB), limit=1)
        assert pf.describe_changes(cfg, changes) == row["change"]
        assert pf.plan_for(cfg.replace(**changes), row["kind"], shape, int(row["card_gib"] * GiB)).fits
    t4 = pf.fit_table(("T4-16GB",))
    assert {row["dtype"] for row in t4} == {"float32"}


@pytest.mark.parametrize("course", ["gsm8k-qwen3", "math-qwen2.5"])
def test_the_24gb_recipe_constructs_and_passes_with_room(course):
    cfg = GRPOConfig.for_profile("full", course=course, **pf.recipe_24gb(course))
    assert cfg.gradient_checkpointing
    for card in (L4, pf.simulated_device("A10G-24GB"), pf.simulated_device("RTX4090-24GB"), pf.nominal_device(24)):
        report = pf.preflight(cfg, "grpo", card)
        assert report.fits and max(report.peaks.values()) <= 0.85 * card.total_bytes, report.summary()
    with pytest.raises(ValueError, match="unknown course"):
        pf.recipe_24gb("nope")
