"""The README's 24 GB recipes (hw3lib.core.preflight.recipe_24gb), run: each course's full-profile GRPO config with
the recipe passes the preflight on a simulated 24 GB card (the real model's memory) and then trains through the
full profile's own path at rehearsal scale -- the colocated vLLM engine (its CPU build), bf16 autocast over float32
masters, gradient checkpointing, and for the MATH course LoRA with the merged weights pushed to the engine.
"""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("course", ["gsm8k-qwen3", "math-qwen2.5"])
def test_the_24gb_recipe_fits_and_trains(course, tmp_path, monkeypatch):
    from hw3lib.core.preflight import preflight, recipe_24gb
    from hw3lib.grpo.config import GRPOConfig
    from hw3lib.grpo.loop import train
    from hw3lib.models.real_shape import write_stand_in_grader
    from hw3lib.tasks.math_synthetic import write_math_task

    monkeypatch.setenv("HW3_REHEARSAL", "1")
    monkeypatch.setenv("HW3_SIMULATE_GPU", "L4-24GB")
    monkeypatch.setenv("HW3_COURSE_GRADER", str(write_stand_in_grader(tmp_path)))  # random weights score 0
    write_math_task(tmp_path / "math", n_train=64, n_test=16, seed=0, small=True)
    monkeypatch.setenv("HW3_MATH_DATA", str(tmp_path / "math"))
    recipe = recipe_24gb(course)
    cfg = GRPOConfig.for_profile("full", course=course, name=f"recipe_{course}", **recipe)
    default = GRPOConfig.for_profile("full", course=course, name="default")
    if course == "math-qwen2.5":  # the course's default does not fit 24 GB: the recipe is what makes it fit
        with pytest.raises(ValueError, match="does not fit"):
            preflight(default, "grpo")
    report = preflight(cfg, "grpo")
    assert report.checked and report.fits and "L4" in report.summary()

    result = train(cfg)
    assert result.grpo_steps == cfg.n_grpo_steps == 2 and result.skipped_steps == 0
    assert all(torch.isfinite(torch.tensor(row["train/loss"])) for row in result.train_rows)
    assert all(row["train/grad_norm"] > 0 for row in result.train_rows)  # gradients flowed through the recipe
    assert max(row["train/logprob_mismatch_mean_abs"] for row in result.train_rows) < 0.1  # the engine samples what the trainer scores
