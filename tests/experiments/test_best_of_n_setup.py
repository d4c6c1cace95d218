"""Notebook 02's setup per course (hw3lib.experiments.best_of_n_setup): in smoke each course samples its own GRPO
smoke task with at least that task's token budget, into its own runs; in full the course's questions and model."""

from __future__ import annotations

import pytest

import hw3lib.models.load as load
from hw3lib.core.course import get_course
from hw3lib.core.profile import get_profile
from hw3lib.experiments.best_of_n_setup import best_of_n_setup


@pytest.fixture
def no_warm_start(monkeypatch):
    """The warm start's training is tested elsewhere: here only which config it is asked for."""
    asked = []
    monkeypatch.setattr(load, "initial_policy_source", lambda cfg: asked.append(cfg) or f"warm:{cfg.dataset}")
    return asked


def test_smoke_math_course_samples_the_math_format_task_with_its_own_budget(no_warm_start, monkeypatch):
    monkeypatch.delenv("HW3_NOTEBOOK_SHORT", raising=False)
    prof = get_profile("smoke")
    setup = best_of_n_setup(prof, get_course("math-qwen2.5"))
    # The profile's 48 tokens would cut most ~55-token worked answers: the task's 96 win.
    assert prof.eval_max_tokens == 48 and setup.max_tokens == 96
    assert setup.task == "generated MATH-format (boxed answers)"
    assert setup.model == "warm:math-synthetic" and no_warm_start[0].dataset == "math-synthetic"
    assert setup.run_dir.name == "best_of_n_smoke_math-synthetic"
    assert setup.zero_shot_dir.name == "best_of_n_smoke_math-synthetic_n1"
    assert len(setup.examples) == prof.best_of_n_examples == 32
    assert all("\\boxed" not in ex["question"] and ex["gold"] for ex in setup.examples)


def test_smoke_gsm8k_course_keeps_the_arithmetic_task_runs_and_budget(no_warm_start, monkeypatch):
    monkeypatch.delenv("HW3_NOTEBOOK_SHORT", raising=False)
    setup = best_of_n_setup(get_profile("smoke"), get_course("gsm8k-qwen3"))
    # arithmetic's own budget is 32 tokens, below the profile's 48: the larger one is kept (the stored runs').
    assert setup.max_tokens == 48
    assert setup.task == "arithmetic (operands 0-4)" and setup.model == "warm:arithmetic"
    assert setup.run_dir.name == "best_of_n_smoke_arithmetic"
    assert setup.zero_shot_dir.name == "best_of_n_smoke_arithmetic_n1"


def test_full_profile_reads_the_courses_questions_and_notebook_01s_run(no_warm_start, shared_data_dir):
    prof = get_profile("full")
    setup = best_of_n_setup(prof, get_course("gsm8k-qwen3"))
    assert setup.model == setup.model_label == prof.model and setup.task == "GSM8K test"
    assert len(setup.examples) == 1319 and setup.max_tokens == prof.eval_max_tokens == 1024
    assert setup.zero_shot_dir.name == "zero_shot_full" and setup.run_dir.name == "best_of_n_full"
    assert no_warm_start == []
