"""hw3lib.config: one place chooses the profile (argument, then HW3_PROFILE, then the hardware)."""

import dataclasses

import pytest

from hw3lib.config import get_profile


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
