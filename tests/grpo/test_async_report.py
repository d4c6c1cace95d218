"""The async comparison's reading (hw3lib.grpo.async_report): hand-worked numbers in, the sentences that answer
the course's questions out. The schedules themselves run in tests/grpo/test_async_loop.py."""

from __future__ import annotations

import math

import pytest

from hw3lib.core.stats import unpaired_band
from hw3lib.grpo.async_report import overlap_ceiling, schedule_findings, schedule_reading, validation_noise


def _row(schedule: str, **values) -> dict:
    row = {"schedule": schedule, "steps_per_minute": 60.0, "step_s": 1.0, "generation_s": 0.5, "training_s": 0.5,
           "weight_sync_s": 0.0, "generator_idle_s": 0.0, "learner_idle_s": 0.0, "eval_start": 0.4, "eval_end": 0.5,
           "n_eval": 512, "grpo_steps": 200, "mean_staleness": 0.0, "uses_per_group": 1.0, "grad_norm_mean": 0.5,
           "grad_norm_max": 1.0, "clip_fraction_mean": 0.0, "skipped_steps": 0}
    return {**row, **values}


def test_validation_noise_pairs_when_the_rows_kept_every_question():
    # Rates only: the unpaired band; 0.5 vs 0.5 on 98 each: 2 sqrt(2 x 0.25 / 100) = 0.1414.
    a, b = _row("a", eval_end=49 / 98, n_eval=98), _row("b", eval_end=49 / 98, n_eval=98)
    assert validation_noise(a, b).band == pytest.approx(0.14142, abs=1e-5) and not validation_noise(a, b).paired
    # Outcomes on 4 shared questions: one question only a got right: diff 0.25, var(d) = 1/4 - 1/16,
    # band 2 sqrt(0.1875 / 4) = 0.4330.
    a = _row("a", eval_end=0.5, n_eval=4, outcomes_end=[1, 1, 0, 0])
    b = _row("b", eval_end=0.25, n_eval=4, outcomes_end=[1, 0, 0, 0])
    found = validation_noise(a, b)
    assert found.paired and found.diff == 0.25 and found.band == pytest.approx(0.43301, abs=1e-5)


def test_overlap_ceiling_is_syncs_step_over_the_slower_actor():
    # sync 1.2 s per step; actors busy 0.9 s (generator) and 0.8 s (learner): the step cannot beat 0.9 s -> 1.33x.
    assert overlap_ceiling(1.2, 0.9, 0.8) == pytest.approx(1.2 / 0.9) == pytest.approx(1.3333, abs=1e-4)
    # the bench passes run totals: the same ratio (200 steps of each).
    assert overlap_ceiling(240.0, 160.0, 180.0) == pytest.approx(1.2 / 0.9)
    # an actor slower than the whole synchronous step: overlap is a slow-down.
    assert overlap_ceiling(1.0, 0.4, 1.25) == pytest.approx(0.8)


def test_reading_states_syncs_gain_the_speed_up_and_one_behinds_ceiling():
    table = [
        # sync: 0.7 s generating + 0.5 s training on both cores = 1.2 s per step (50 steps/min).
        _row("sync", steps_per_minute=50.0, step_s=1.2, generation_s=0.7, training_s=0.5, eval_start=0.43,
             eval_end=0.545, eval_curve=[[0, 0.43], [50, 0.416], [100, 0.438], [150, 0.529], [200, 0.545]]),
        # one-behind: 0.9 s generating, 0.8 s training on one core each; overlap could reach 1.2 / 0.9 = 1.33x.
        _row("one_behind", steps_per_minute=62.5, step_s=0.96, generation_s=0.9, training_s=0.8, eval_end=0.555,
             mean_staleness=1.0, generator_idle_s=0.06, learner_idle_s=0.16),
        _row("replay_lag2", steps_per_minute=70.0, step_s=0.86, generation_s=0.45, training_s=0.8, eval_end=0.457,
             mean_staleness=1.4, uses_per_group=2.0, generator_idle_s=0.41, learner_idle_s=0.06),
    ]
    text = schedule_reading(table)
    found = schedule_findings(table)
    # +11.5 points; the rows keep rates only, so the unpaired band of 0.43 and 0.545 on 512 questions (Agresti-Caffo:
    # 280.04/514 and 221.16/514): 2 sqrt((0.54483 x 0.45517 + 0.43027 x 0.56973) / 514) = 0.0619.
    assert found["sync_rise"]["diff"] == pytest.approx(0.115) and found["sync_rise"]["verdict"] == "beyond noise"
    assert found["sync_rise"]["band"] == pytest.approx(unpaired_band(0.545, 512, 0.43, 512)) == \
        pytest.approx(0.0619, abs=1e-4)
    assert found["replay_lag2"]["verdict"] == "beyond noise" and found["one_behind"]["verdict"] == "within noise"
    assert "43.0% -> 54.5% (+11.5 points over 200 GRPO steps; beyond noise, band ±6.2 points)" in text
    assert "**one_behind**: 1.25x the synchronous loop's GRPO steps per minute (62.5 vs 50.0)" in text
    assert "each rollout group trained on 2.00 times on average" in text
    assert "a perfect overlap would reach 1.33x here (measured 1.25x" in text
    # replay_lag2 ends 8.8 points below sync, outside its band: the stability answer says so.
    assert "(-8.8 points, beyond noise, band ±6.2 points)" in text
    assert "Here it shows: a validation difference beyond noise" in text
    # replay_lag2 used each group twice: 200 steps hold 100 steps' worth of fresh rollouts; sync at step 100 had
    # 43.8%, so +1.9 points; unpaired band of 0.457 and 0.438 on 512: 0.0618.
    assert ("replay_lag2 (100 steps' worth of fresh rollouts) 45.7% vs sync at step 100 43.8% (+1.9 points, within "
            "noise, band ±6.2 points)") in text
    # ordered by staleness: sync, one_behind, replay_lag2
    assert text.index("sync 0.00 versions") < text.index("one_behind 1.00 versions") < text.index(
        "replay_lag2 1.40 versions")
