"""hw3lib.core.profile: one place chooses the profile (argument, then HW3_PROFILE, then the hardware)."""

import dataclasses

import pytest

from hw3lib.core.profile import get_profile


def test_smoke_profile_is_small_and_on_cpu():
    prof = get_profile("smoke")
    assert (prof.name, prof.model, prof.device, prof.engine) == ("smoke", "tiny-sft", "cpu", "transformers")
    assert prof.eval_examples == 32 and prof.best_of_n == 16


def test_full_profile_uses_the_course_settings():
    prof = get_profile("full")
    assert prof.model == "Qwen/Qwen3-0.6B" and prof.engine == "vllm" and prof.device == "cuda"
    assert prof.eval_examples is None and prof.eval_max_tokens == 1024


def test_environment_chooses_profile_and_model(monkeypatch):
    monkeypatch.setenv("HW3_PROFILE", "full")
    monkeypatch.setenv("HW3_MODEL", "/models/qwen3")
    prof = get_profile()
    assert prof.name == "full" and prof.model == "/models/qwen3"


def test_without_gpu_default_is_smoke(monkeypatch):
    monkeypatch.delenv("HW3_PROFILE", raising=False)
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert get_profile().name == "smoke"


def test_profile_is_frozen_and_overridable():
    prof = get_profile("smoke", eval_examples=4)
    assert prof.eval_examples == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        prof.eval_examples = 5


def test_unknown_profile_says_what_to_choose():
    with pytest.raises(ValueError, match="unknown profile 'fast': choose one of smoke, full"):
        get_profile("fast")


# ---- GRPOConfig: datasets, and the model a MATH run trains ---------------------------------------

@pytest.mark.parametrize("dataset", ["math", "data/math.jsonl", "/data/math", "HuggingFaceH4/MATH-500"])
def test_for_profile_trains_the_math_model_on_math(dataset, monkeypatch):
    from hw3lib.grpo.config import GRPOConfig

    monkeypatch.setenv("HW3_MATH_MODEL", "/models/qwen-math")
    for profile in ("smoke", "full"):
        cfg = GRPOConfig.for_profile(profile, dataset=dataset)
        assert (cfg.dataset, cfg.model) == (dataset, get_profile(profile).math_model) == (dataset, "/models/qwen-math")
        assert GRPOConfig.for_profile(profile, dataset=dataset, model="tiny").model == "tiny"  # explicit wins


def test_for_profile_keeps_the_profile_model_for_gsm8k_and_arithmetic():
    from hw3lib.grpo.config import GRPOConfig

    assert GRPOConfig.for_profile("smoke").model == "tiny"  # the smoke recipe's own warm-started model
    assert GRPOConfig.for_profile("smoke", dataset="gsm8k").model == "tiny"
    assert GRPOConfig.for_profile("full", dataset="arithmetic").model == get_profile("full").model
    assert GRPOConfig.for_profile("full").model == get_profile("full").model


def test_dataset_accepts_math_sources(tmp_path):
    from hw3lib.grpo.config import GRPOConfig

    (tmp_path / "mathdir").mkdir()
    for dataset in ("gsm8k", "arithmetic", "math", "x.jsonl", str(tmp_path / "mathdir"), "HuggingFaceH4/MATH-500"):
        assert GRPOConfig(dataset=dataset).dataset == dataset


@pytest.mark.parametrize("dataset", ["math.csv", "MATH", "gsm8k_train", ""])
def test_dataset_validation_lists_the_choices(dataset):
    from hw3lib.grpo.config import GRPOConfig

    with pytest.raises(ValueError) as info:
        GRPOConfig(dataset=dataset)
    message = str(info.value)
    assert f"dataset={dataset!r}: choose gsm8k, arithmetic, math" in message
    for words in ("$HW3_MATH_DATA", ".jsonl file", "folder holding train.jsonl and test.jsonl", "hub dataset id"):
        assert words in message


def test_the_full_profile_takes_the_dtype_the_gpu_supports(monkeypatch):
    """Any CUDA GPU used to select bf16, which vLLM refuses below compute capability 8.0 (T4, V100)."""
    from hw3lib.core import preflight
    from hw3lib.core.profile import get_profile

    monkeypatch.delenv("HW3_REHEARSAL", raising=False)
    t4 = preflight.DeviceInfo(kind="cuda", name="Tesla T4", total_bytes=15 * 2**30, capability=(7, 5), count=1)
    monkeypatch.setattr(preflight, "detect_device", lambda: t4)
    prof = get_profile("full")
    assert prof.dtype == "float32" and "8.0" in prof.reason
    h100 = preflight.DeviceInfo(kind="cuda", name="NVIDIA H100", total_bytes=79 * 2**30, capability=(9, 0), count=1)
    monkeypatch.setattr(preflight, "detect_device", lambda: h100)
    assert get_profile("full").dtype == "bfloat16"


def test_the_profile_says_why_it_was_chosen(monkeypatch):
    from hw3lib.core.profile import get_profile

    monkeypatch.setenv("HW3_PROFILE", "smoke")
    assert get_profile().reason.startswith("HW3_PROFILE=smoke")
    monkeypatch.delenv("HW3_PROFILE")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert get_profile().name == "smoke" and "no CUDA GPU is visible" in get_profile().reason
    assert "the notebook's `profile` parameter" in get_profile("smoke").reason
