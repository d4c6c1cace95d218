"""The preflight runs where the issue asks: at every run start, evaluation engine and grid, before any GPU work.

Each test sets a simulated card ($HW3_SIMULATE_GPU) too small for the course model and checks that the entry
point stops with PreflightError naming settings that fit -- before it loads a model (the hub ids cannot be
downloaded here, so reaching the load would fail differently), starts vLLM or starts a grid worker.
"""

from __future__ import annotations

import pytest

from hw3lib.core.preflight import PreflightError

MATH_MODEL = "Qwen/Qwen2.5-Math-1.5B"


@pytest.fixture
def small_card(monkeypatch, tmp_path):
    monkeypatch.setenv("HW3_SIMULATE_GPU", "L4-24GB")
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("HW3_MATH_DATA", str(tmp_path / "math"))
    for variable in ("HW3_REHEARSAL", "HW3_MODEL", "HW3_MATH_MODEL"):
        monkeypatch.delenv(variable, raising=False)


def _no_load(*args, **kwargs):
    raise AssertionError("a model was loaded before the preflight refused the run")


@pytest.mark.parametrize("kind", ["grpo", "sft", "ei"])
def test_a_training_run_that_does_not_fit_stops_before_loading_a_model(small_card, monkeypatch, tmp_path, kind):
    import hw3lib.models.load as load
    from hw3lib.grpo.config import GRPOConfig
    from hw3lib.sft.config import EIConfig, SFTConfig

    monkeypatch.setattr(load, "load_model_and_tokenizer", _no_load)
    monkeypatch.setattr(load, "load_training_policy", _no_load)
    config_class, entry = {"grpo": (GRPOConfig, "hw3lib.grpo.loop:train"),
                           "sft": (SFTConfig, "hw3lib.sft.loop:train_sft"),
                           "ei": (EIConfig, "hw3lib.sft.expert_iteration:expert_iteration")}[kind]
    module, function = entry.split(":")
    cfg = config_class.for_profile("full", course="math-qwen2.5", name=f"too_big_{kind}", policy_device="cuda:0",
                                   rollout_device="cuda:0")
    assert cfg.model == MATH_MODEL
    with pytest.raises(PreflightError, match="lora_rank=16") as refused:
        getattr(__import__(module, fromlist=[function]), function)(cfg)
    assert "L4" in str(refused.value) and "does not fit" in str(refused.value)
    assert not (tmp_path / "runs" / f"too_big_{kind}").exists()  # nothing written: the run can start again


def test_an_evaluation_engine_whose_share_cannot_hold_the_model_never_starts_vllm(small_card, monkeypatch):
    import hw3lib.generation.vllm_engine as vllm_engine
    from hw3lib.generation import make_engine

    monkeypatch.setattr(vllm_engine, "VLLMEngine", _no_load)
    with pytest.raises(PreflightError, match="gpu_memory_utilization"):
        make_engine("vllm", MATH_MODEL, device="cuda", dtype="bfloat16", gpu_memory_utilization=0.1)


def test_a_grid_that_does_not_fit_stops_before_any_worker_starts(small_card, monkeypatch):
    import hw3lib.experiments.parallel as parallel

    monkeypatch.setenv("HW3_COURSE", "math-qwen2.5")
    monkeypatch.setattr(parallel, "_start", _no_load)
    with pytest.raises(PreflightError, match="Settings that fit"):
        parallel.run_grids_parallel("full", grids=["learning_rate"], poll_s=0)


def test_async_on_one_small_card_is_refused_unless_both_engines_fit(small_card, monkeypatch):
    from hw3lib.grpo.async_loop import AsyncConfig, train_async
    from hw3lib.grpo.async_report import schedule_comparison

    monkeypatch.setenv("HW3_COURSE", "gsm8k-qwen3")
    cfg, _ = schedule_comparison("full")
    cfg = cfg.replace(policy_device="cuda:0", rollout_device="cuda:0")
    with pytest.raises(PreflightError, match="async of Qwen/Qwen3-0.6B"):
        train_async(cfg, AsyncConfig(mode="one_behind", max_staleness=1))
    monkeypatch.setenv("HW3_SIMULATE_GPU", "H100-80GB")  # the notebook's share fits one 80 GB card
    from hw3lib.core.preflight import preflight

    assert preflight(cfg, "async").fits
