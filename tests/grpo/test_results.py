"""hw3lib.grpo.results: a run's rise from its first to its last validation, with its noise verdict (paired over the
same questions when both validations kept every outcome), as the writeup's GRPO training section states it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hw3lib.core.stats import noise_words
from hw3lib.evaluation.validate import save_validation
from hw3lib.grpo.results import rise_noise

FIRST = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]  # 40%
LAST = [1, 1, 1, 0, 1, 1, 1, 1, 1, 0]  # 80%: 5 questions gained (indices 4-8), 1 lost (index 3)


def fake_run(tmp_path, first, last, keep_outcomes=True):
    """A run folder with two validations (GRPO steps 0 and 2) of the same questions."""
    n = len(first)
    for step, outcomes in ((0, first), (2, last)):
        examples = [{"question": f"q{i}", "answer_reward": float(r)} for i, r in enumerate(outcomes)]
        save_validation(tmp_path, f"step_{step:04d}", examples, n_saved=2 if not keep_outcomes else n)
        if not keep_outcomes:
            (tmp_path / "samples" / f"step_{step:04d}.outcomes.json").unlink()
    rows = [{"grpo_step": s, "eval/answer_reward": sum(o) / n, "eval/n": n} for s, o in ((0, first), (2, last))]
    config = SimpleNamespace(n_eval_examples=n, eval_temperature=0.0, sampling_max_tokens=32)
    return SimpleNamespace(run_dir=tmp_path, eval_rows=rows, config=config, grpo_steps=2, optimizer_steps=8)


def test_the_rise_is_paired_over_the_same_questions_by_hand(tmp_path):
    # d_i = last - first: five +1, one -1; diff 0.4; var(d) = 6/10 - 0.4^2 = 0.44; band 2 sqrt(0.044) = 0.419524;
    # McNemar: 2 P(X <= 1 | n=6) = 2 * 7/64 = 0.21875. +40 points on 10 questions is within noise.
    noise = rise_noise(fake_run(tmp_path, FIRST, LAST))
    assert noise.paired and noise.diff == pytest.approx(0.4)
    assert noise.band == pytest.approx(0.419524, abs=1e-6) and noise.p_value == pytest.approx(0.21875)
    assert not noise.beyond and noise.seed_band is None


def test_twice_the_questions_puts_the_same_rise_beyond_noise(tmp_path):
    # n = 20: var(d) = 12/20 - 0.16 = 0.44; band 2 sqrt(0.022) = 0.296648; p = 2 (1 + 12 + 66) / 4096 = 0.038574
    noise = rise_noise(fake_run(tmp_path, FIRST * 2, LAST * 2))
    assert noise.band == pytest.approx(0.296648, abs=1e-6) and noise.p_value == pytest.approx(158 / 4096)
    assert noise.beyond
    assert noise_words(noise) == "beyond noise, paired band ±29.7 points (McNemar p = 0.039)"  # the writeup's words


def test_without_the_outcomes_the_rise_falls_back_to_the_unpaired_band(tmp_path):
    # Agresti-Caffo: (8+1)/12 = 0.75 and (4+1)/12 = 5/12; 2 sqrt(0.75*0.25/12 + 35/1728) = 2 sqrt(0.0358796) = 0.378838
    noise = rise_noise(fake_run(tmp_path, FIRST, LAST, keep_outcomes=False))
    assert not noise.paired and noise.p_value is None and noise.band == pytest.approx(0.378838, abs=1e-6)


def test_one_validation_has_no_rise(tmp_path):
    run = fake_run(tmp_path, FIRST, LAST)
    run.eval_rows = run.eval_rows[:1]
    assert rise_noise(run) is None


def test_notebook_04s_headline_states_the_rise_with_its_verdict(tmp_path):
    from hw3lib.grpo.results import learning_sentence

    run = fake_run(tmp_path, FIRST * 2, LAST * 2)
    noise = rise_noise(run)
    summary = {"eval_answer_reward_start": 0.4, "eval_answer_reward_end": 0.8, "eval_answer_reward_rise": 0.4,
               "eval_answer_reward_rise_words": noise_words(noise), "wall_clock_s": 90.0}
    assert learning_sentence(summary, run) == (
        "Validation answer reward went from **40.0%** to **80.0%** (+40.0 points: beyond noise, paired band ±29.7 "
        "points (McNemar p = 0.039)) in 1.5 minutes of training (2 GRPO steps, 8 optimizer steps, 2 validations on "
        "20 held-out questions, greedy, 32 tokens).")
    # One validation: no verdict to state, only the numbers.
    assert learning_sentence({**summary, "eval_answer_reward_rise_words": None}, run).startswith(
        "Validation answer reward went from **40.0%** to **80.0%** (+40.0 points) in 1.5 minutes")
