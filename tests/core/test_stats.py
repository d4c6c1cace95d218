"""hw3lib.core.stats: every interval and test behind the verdicts, with numbers worked by hand."""

from __future__ import annotations

import math

import pytest

from hw3lib.core.stats import (Noise, Verdict, accuracy_interval, compare_outcomes, correlation, mcnemar_p,
                               noise_words, paired, question_outcomes, seed_band, spread_band, t_multiplier, unpaired_band,
                               wilson)


def test_wilson_interval_by_hand():
    # 5 of 10 at z = 2: scale 1 + 4/10 = 1.4, centre (0.5 + 4/20) / 1.4 = 0.5, half 2 sqrt(0.025 + 4/400) / 1.4
    # = 2 sqrt(0.035) / 1.4 = 0.267261.
    half = wilson(5, 10)
    assert (half.estimate, half.low, half.high) == pytest.approx((0.5, 0.232739, 0.767261), abs=1e-6)
    # 0 of 8: scale 1.5, centre (4/16) / 1.5 = 1/6, half 2 sqrt(4/256) / 1.5 = 1/6: [0, 1/3], not empty at 0%.
    zero = wilson(0, 8)
    assert (zero.low, zero.high) == pytest.approx((0.0, 1 / 3))
    assert zero.half_width == pytest.approx(1 / 3)
    assert accuracy_interval(0.5, 10) == half
    with pytest.raises(ValueError, match="successes <= n"):
        wilson(11, 10)


def test_unpaired_band_is_agresti_caffo():
    # 49 of 98 on each side: (50/100)(50/100)/100 twice, 2 sqrt(0.005) = 0.1414214.
    assert unpaired_band(49 / 98, 98, 49 / 98, 98) == pytest.approx(0.1414214, rel=1e-6)
    # 0% vs 0% on 8 each still has a band: (1/10)(9/10)/10 twice -> 2 sqrt(0.018).
    assert unpaired_band(0.0, 8, 0.0, 8) == pytest.approx(2 * math.sqrt(0.018))


def test_exact_mcnemar_p_value_by_hand():
    # 1 vs 5 discordant questions: P(X <= 1) for X ~ Bin(6, 1/2) = (1 + 6) / 64, two-sided 14/64.
    assert mcnemar_p(1, 5) == pytest.approx(14 / 64)
    assert mcnemar_p(0, 6) == pytest.approx(2 / 64)
    # 3 vs 3: 2 (1 + 6 + 15 + 20) / 64 > 1, capped at 1; no discordant question: 1.
    assert mcnemar_p(3, 3) == 1.0 and mcnemar_p(0, 0) == 1.0


def test_paired_comparison_counts_only_discordant_questions():
    a = [1, 1, 1, 1, 1, 1, 0, 0, 0, 0]
    b = [1, 1, 0, 0, 0, 0, 0, 0, 0, 1]
    found = paired(a, b)
    # Only a: questions 3-6 (4), only b: question 10 (1); diff (4 - 1)/10 = 0.3; var(d) = 5/10 - 0.09 = 0.41,
    # band 2 sqrt(0.41 / 10) = 0.404969; McNemar: Bin(5, 1/2), 2 (1 + 5)/32 = 0.375.
    assert (found.n, found.only_a, found.only_b) == (10, 4, 1)
    assert found.diff == pytest.approx(0.3)
    assert found.band == pytest.approx(0.404969, abs=1e-6)
    assert found.p_value == pytest.approx(0.375)
    # The same accuracies with every question shared but one: the paired band is far narrower than the unpaired.
    same = paired([1] * 50 + [0] * 50, [1] * 49 + [0] * 51)
    assert same.band == pytest.approx(2 * math.sqrt((0.01 - 0.0001) / 100))
    assert same.band < unpaired_band(0.5, 100, 0.49, 100) / 5
    with pytest.raises(ValueError, match="same questions"):
        paired([1, 0], [1])
    with pytest.raises(ValueError, match="0/1"):
        paired([0.5], [1])


def test_seed_band_and_spread_band_by_hand():
    band = seed_band([0.4, 0.5, 0.6])
    # sd = sqrt((0.01 + 0 + 0.01) / 2) = 0.1, estimated from 3 runs: 2 degrees of freedom, whose t quantile at 2
    # s.e.'s coverage (Phi(2) = 0.97725) is 4.526537 (tables: t_0.975,2 = 4.303, t_0.98,2 = 4.849). Two single
    # runs differ by chance up to 4.526537 x 0.1 x sqrt 2 = 0.640149.
    assert band.multiplier == pytest.approx(4.526537, abs=1e-6)
    assert (band.mean, band.sd, band.band) == pytest.approx((0.5, 0.1, 0.640149), abs=1e-6)
    assert band.for_means(3, 3) == pytest.approx(0.369590, abs=1e-6)  # 4.526537 x 0.1 x sqrt(2/3)
    # A rise from a start every seed shares varies only at its end: 4.526537 x 0.1 (one run), / sqrt 3 (three).
    assert (band.for_rise(), band.for_rise(3)) == pytest.approx((0.452654, 0.261340), abs=1e-6)
    assert band.to_dict()["values"] == [0.4, 0.5, 0.6]
    assert t_multiplier(1) == pytest.approx(13.967730, abs=1e-6)  # two runs: the sd is barely known
    assert 2.0 < t_multiplier(1000) < 2.01  # many runs: the z band
    assert seed_band([0.4, 0.6]).band == pytest.approx(13.967730 * math.sqrt(0.02) * math.sqrt(2), abs=1e-6)
    assert seed_band([0.4]) is None
    # Two repeats each: Welch s.e. sqrt(0.02/2 + 0/2) = 0.1; Welch-Satterthwaite df = 0.01^2 / (0.01^2 / 1) = 1, so
    # t(1) = 13.967730 and the band is 1.396773 (z would have said 0.2).
    assert spread_band([0.4, 0.6], [0.5, 0.5]) == pytest.approx(1.396773, abs=1e-6)
    # 1..5 (variance 2.5, 5 values: 0.5) against 2, 4, 6 (variance 4, 3 values: 4/3): s.e.^2 = 11/6; df =
    # (11/6)^2 / (0.5^2 / 4 + (4/3)^2 / 2) = 3.361111 / 0.951389 = 3.532847; t at 97.725% with 3.53 df = 3.031646;
    # band = 3.031646 sqrt(11/6) = 4.104868.
    assert spread_band([1, 2, 3, 4, 5], [2, 4, 6]) == pytest.approx(4.104868, abs=1e-6)
    assert spread_band([0.5, 0.5], [0.3, 0.3]) == 0.0  # nothing varies: no band (not a division by zero)
    assert spread_band([0.4], [0.5, 0.5]) is None


def test_correlation_with_its_fisher_interval():
    # x 1..5, y 2,4,5,4,5: sum dx dy = 6, sxx = 10, syy = 6, r = 6 / sqrt(60) = 0.774597; atanh r = 1.031719,
    # half-width 2 / sqrt(5 - 3) = 1.414214: tanh(-0.382495) = -0.364872, tanh(2.445932) = 0.985097.
    found = correlation([1, 2, 3, 4, 5], [2, 4, 5, 4, 5])
    assert (found.r, found.n, found.low, found.high) == pytest.approx((0.774597, 5, -0.364872, 0.985097), abs=1e-6)
    three = correlation([0, 1, 2], [0, 1, 3])  # three pairs: r, but too few for an interval
    assert three.low is None and three.r == pytest.approx(0.981981, abs=1e-6)
    assert correlation([1, 2, 3], [5, 5, 5]) is None and correlation([1, 2], [1, 2]) is None


def test_verdict_needs_both_the_question_band_and_the_seed_band():
    assert Noise(0.10, 0.08).verdict is Verdict.BEYOND
    assert Noise(-0.10, 0.08).beyond
    assert Noise(0.10, 0.08, seed_band=0.15).verdict is Verdict.WITHIN  # run-to-run variation is larger
    assert Noise(0.10, 0.12).verdict is Verdict.WITHIN
    assert Noise(0.08, 0.08).verdict is Verdict.WITHIN  # equal to the band is not beyond it
    assert Noise(0.1, 0.08, seed_band=0.09).to_dict() == {"diff": 0.1, "band": 0.08, "paired": False,
                                                          "seed_band": 0.09, "p_value": None,
                                                          "verdict": "beyond noise"}


def test_one_wording_for_every_verdict():
    assert noise_words(Noise(0.2, 0.1331)) == "beyond noise, band ±13.3 points"
    assert noise_words(Noise(0.3, 0.404969, paired=True, p_value=0.375)) == \
        "within noise, paired band ±40.5 points (McNemar p = 0.38)"
    assert noise_words(Noise(0.2, 0.1, seed_band=0.282843)) == \
        "within noise, band ±10.0 points, seed band ±28.3 points"
    assert noise_words(Noise(2.0, 0.816), unit="") == "beyond noise, band ±0.816"


def test_compare_outcomes_pairs_when_both_runs_kept_their_questions():
    a, b = [1, 1, 1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0, 0, 1]
    both = compare_outcomes(a, b, 0.6, 10, 0.3, 10, seed=0.05)
    assert both.paired and both.band == pytest.approx(0.404969, abs=1e-6) and both.seed_band == 0.05
    one = compare_outcomes(a, None, 0.6, 10, 0.3, 10)
    assert not one.paired and one.band == pytest.approx(unpaired_band(0.6, 10, 0.3, 10)) and one.p_value is None


def test_question_outcomes_only_when_every_question_was_saved():
    saved = [{"answer_reward": 1.0}, {"answer_reward": 0.0}, {"answer_reward": 1}]
    assert question_outcomes(saved, 3) == [1, 0, 1]
    assert question_outcomes(saved[:2], 3) is None  # a run saves only a few rollouts by default
    assert question_outcomes([{"answer_reward": 0.5}], 1) is None and question_outcomes([{}], 1) is None
