"""Best-of-N metrics against hand-worked numbers and brute force."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest

from hw3lib.evaluation.best_of_n import (
    SampleResults,
    best_at_n,
    best_of_n_metrics,
    flatten_metrics,
    majority_at_n,
    majority_choice,
    normalize_answer,
    pass_at_k_unbiased,
    pass_at_n_first,
    plot_best_of_n,
    results_from_rows,
    best_of_n_result,
)

# Two prompts x four samples, worked by hand below.
# Prompt A: correct [0,1,0,1], answers 17, 18, 17.0, $18, logprobs -0.5 -0.4 -0.2 -0.2 (tie at 2, 3).
# Prompt B: correct [0,1,1,0], answers None, 1,000, 1000.00, 999, logprobs NaN -3 -1 -0.5.
CORRECT = np.array([[0, 1, 0, 1], [0, 1, 1, 0]], dtype=bool)
LOGPROB = np.array([[-0.5, -0.4, -0.2, -0.2], [np.nan, -3.0, -1.0, -0.5]])
ANSWERS = [["17", "18", "17.0", "$18"], [None, "1,000", "1000.00", "999"]]


def test_pass_at_n_first_by_hand():
    # N=1: neither first sample is correct; N>=2: both prompts have a correct one among the first two.
    assert [pass_at_n_first(CORRECT, n) for n in (1, 2, 3, 4)] == [0.0, 1.0, 1.0, 1.0]


def test_pass_at_k_unbiased_by_hand():
    # n=4, c=2: k=1 -> 1 - C(2,1)/C(4,1) = 1/2; k=2 -> 1 - C(2,2)/C(4,2) = 5/6; k=3 -> n-c < k -> 1.
    assert pass_at_k_unbiased(4, 2, 1) == pytest.approx(0.5)
    assert pass_at_k_unbiased(4, 2, 2) == pytest.approx(5 / 6)
    assert pass_at_k_unbiased(4, 2, 3) == 1.0
    assert pass_at_k_unbiased(4, 0, 4) == 0.0
    assert pass_at_k_unbiased(16, 1, 1) == pytest.approx(1 / 16)


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_unbiased_equals_brute_force_over_subsets(n):
    for c in range(n + 1):
        samples = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(samples, k))
            brute = sum(any(subset) for subset in subsets) / len(subsets)
            assert pass_at_k_unbiased(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)


def test_pass_at_k_unbiased_is_stable_for_large_n():
    # C(1000, 100) is ~1e139: the product form must match exact integer arithmetic.
    exact = 1 - Fraction(math.comb(990, 100), math.comb(1000, 100))
    assert pass_at_k_unbiased(1000, 10, 100) == pytest.approx(float(exact), rel=1e-12)


def test_pass_at_k_unbiased_rejects_bad_arguments():
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k_unbiased(4, 1, 5)
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k_unbiased(4, 5, 1)


def test_unbiased_at_k_equals_n_is_the_course_pass_at_n():
    rng = np.random.default_rng(0)
    correct = rng.random((50, 8)) < 0.2
    metrics = best_of_n_metrics(SampleResults(correct, rng.normal(size=(50, 8)), [[None] * 8] * 50), ns=(8,))
    assert metrics["pass_at_k_unbiased"][0] == pytest.approx(metrics["pass_at_n_first"][0])


def test_best_at_n_by_hand_with_ties_and_nan():
    # A: N=1 -> s0 (wrong); N=2 -> s1 (-0.4 > -0.5, right); N=3,4 -> s2 (tie with s3 goes to the lower index, wrong).
    # B: N=1 -> s0 (only one, wrong); N=2 -> s1 (NaN ranks last, right); N=3 -> s2 (right); N=4 -> s3 (-0.5, wrong).
    assert [best_at_n(CORRECT, LOGPROB, n) for n in (1, 2, 3, 4)] == [0.0, 1.0, 0.5, 0.0]


def test_best_at_one_equals_pass_at_one():
    rng = np.random.default_rng(1)
    correct = rng.random((40, 16)) < 0.3
    logprob = rng.normal(size=(40, 16))
    assert best_at_n(correct, logprob, 1) == pass_at_n_first(correct, 1)


def test_normalize_answer_merges_equal_numbers():
    for text in ("18", "18.0", "$18", " 18.00 ", "\\boxed{18}", "18.", "\\$18", "18 dollars", "$18$"):
        assert normalize_answer(text) == "18", text
    assert normalize_answer("1,800") == normalize_answer("1800") == "1800"
    assert normalize_answer("0.5") == normalize_answer("1/2") == normalize_answer("\\frac{1}{2}") == "1/2"
    assert normalize_answer("-\\dfrac{3}{6}") == "-1/2"
    assert normalize_answer("  X +  1 ") == "X + 1"
    assert normalize_answer("") is None and normalize_answer(None) is None and normalize_answer("$") is None


RESPONSES = [
    "reasoning </think> <answer> 18 </answer>",
    "r </think> <answer>\\boxed{$18.0$}</answer>",
    "r </think> <answer> \\boxed{18 </answer>",  # unclosed box: formatted, no answer
    "r </think> <answer>  </answer>",  # formatted but empty
    "r </think><answer> 18 </answer>",  # no space: unformatted
    "r </think> <answer> 17 </answer> then <answer> 18",  # last <answer> wins
    "the answer is 1,800 dollars",
    "so \\boxed{18} or maybe 3",
    "no number here",
]


@pytest.mark.parametrize("prompt, reward_fn_name", [("r1_zero", "r1_zero_reward_fn"),
                                                    ("question_only", "question_only_reward_fn")])
def test_extractors_agree_with_the_reward_functions(prompt, reward_fn_name):
    from hw3lib.tasks import rewards
    from hw3lib.evaluation.best_of_n import ANSWER_EXTRACTORS

    reward_fn, extract = getattr(rewards, reward_fn_name), ANSWER_EXTRACTORS[prompt]
    for response in RESPONSES:
        for gold in ("18", "1800", "17"):
            scores, answer = reward_fn(response, gold), extract(response)
            if scores["format_reward"] == 0:
                assert answer is None, response
            if answer is None:
                assert scores["answer_reward"] == 0, response
            else:
                assert float(rewards.answers_equivalent(answer, gold)) == scores["answer_reward"], (response, gold)


def test_extracted_answers_by_hand():
    from hw3lib.tasks.rewards import extract_question_only_answer, extract_r1_zero_answer

    assert [extract_r1_zero_answer(r) for r in RESPONSES[:6]] == ["18", "$18.0$", None, None, None, "18"]
    assert [extract_question_only_answer(r) for r in RESPONSES[6:]] == ["1,800", "18", None]


def test_majority_choice_tie_breaks_and_abstentions():
    assert majority_choice(["17", "18", "17.0", "$18"]) == 0  # 2-2 tie: the group that appears first
    assert majority_choice(["18", "17", "17.0", "$18", "17"]) == 1  # 17 has three votes
    assert majority_choice([None, None]) is None
    assert majority_choice([None, "5", None]) == 1


def test_majority_at_n_by_hand():
    # A: N=1 "17" wrong; N=2 tie 17/18 -> 17 wrong; N=3 17 x2 wrong; N=4 tie -> 17 wrong.
    # B: N=1 no vote -> wrong; N=2 "1000" right; N=3 1000 x2 right; N=4 1000 x2 vs 999 right.
    assert [majority_at_n(CORRECT, ANSWERS, n) for n in (1, 2, 3, 4)] == [0.0, 0.5, 0.5, 0.5]


def test_best_of_n_metrics_collects_everything_by_hand():
    metrics = best_of_n_metrics(SampleResults(CORRECT, LOGPROB, ANSWERS), ns=(1, 2, 4))
    assert metrics == {
        "num_prompts": 2,
        "n_samples": 4,
        "N": [1, 2, 4],
        "pass_at_n_first": [0.0, 1.0, 1.0],
        "pass_at_k_unbiased": [pytest.approx(0.5), pytest.approx(5 / 6), 1.0],
        "best_at_n": [0.0, 1.0, 0.0],
        "maj_at_n": [0.0, 0.5, 0.5],
        # N=1: both first samples wrong and alone -> 2 solving misses; N=2: both picks right;
        # N=4: picks A[2] (tie -> lowest index) and B[3], both wrong, both prompts had a correct one.
        "misses": [{"recognize": 0, "solve": 2}, {"recognize": 0, "solve": 0}, {"recognize": 2, "solve": 0}],
    }
    flat = flatten_metrics(metrics)
    assert flat["pass_at_2_first"] == 1.0 and flat["pass_at_2_unbiased"] == pytest.approx(5 / 6)
    assert flat["best_at_4"] == 0.0 and flat["maj_at_4"] == 0.5 and flat["num_prompts"] == 2 and len(flat) == 14
    with pytest.raises(ValueError, match="N=8"):
        best_of_n_metrics(SampleResults(CORRECT, LOGPROB, ANSWERS), ns=(8,))


def _row(index, generations):
    return {"index": index, "generations": [
        {"text": f"<answer>{answer}</answer>", "answer_reward": float(ok), "mean_logprob": lp}
        for ok, answer, lp in generations]}


def test_results_from_rows_reads_generation_rows():
    rows = [_row(0, [(1, "18", -0.1), (0, "17", None)]), _row(1, [(0, "x", -2.0), (0, "y", -1.0)])]
    extract = lambda text: text.removeprefix("<answer>").removesuffix("</answer>")  # noqa: E731
    results = results_from_rows(rows, extract)
    assert results.correct.tolist() == [[True, False], [False, False]]
    assert np.isnan(results.mean_logprob[0, 1]) and results.mean_logprob[1, 1] == -1.0
    assert results.answers == [["18", "17"], ["x", "y"]]
    with pytest.raises(ValueError, match="row 1 .*1 generations"):
        results_from_rows([rows[0], _row(1, [(0, "x", -2.0)])], extract)
    with pytest.raises(ValueError, match="no rows"):
        results_from_rows([], extract)
    by_name = results_from_rows([_row(0, [(1, "18", -0.1)])], "r1_zero")  # "<answer>18</answer>" lacks "</think> "
    assert by_name.answers == [[None]]
    with pytest.raises(ValueError, match="no answer extractor for prompt 'nope'"):
        results_from_rows(rows, "nope")


def test_plot_and_json_are_written(tmp_path):
    import matplotlib.pyplot as plt

    metrics = best_of_n_metrics(SampleResults(CORRECT, LOGPROB, ANSWERS), ns=(1, 2, 4))
    fig = plot_best_of_n(metrics, tmp_path / "figs" / "best_of_n")
    plt.close(fig)
    assert (tmp_path / "figs" / "best_of_n.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "figs" / "best_of_n.pdf").read_bytes()[:5] == b"%PDF-"
    from hw3lib.core.writeup_keys import write_result
    from hw3lib.generation import SamplingConfig

    result = best_of_n_result(metrics, "smoke", "tiny", "arithmetic", SamplingConfig(n=4, max_tokens=32))
    saved = json.loads(write_result("best_of_n", result, folder=tmp_path).read_text())
    assert saved["best_at_n"] == [0.0, 1.0, 0.0] and saved["best_at_4"] == 0.0
    assert saved["gap_pass_first_minus_best"] == metrics["pass_at_n_first"][2] - 0.0  # at the largest N, 4
    assert saved["max_tokens"] == 32 and saved["model"] == "tiny"
    assert saved["misses"][2] == {"recognize": 2, "solve": 0}
    assert saved["solving_or_recognizing"] == (
        "Best@4 missed 2 of 2 questions: on 2 of them a correct response was among the 4 samples (a recognizing "
        "failure), on 0 none was (a solving failure), so the bottleneck here is mostly recognizing: the model often "
        "produced a correct response and then preferred a wrong one.")


def test_solving_or_recognizing_counts_unsolved_prompts():
    from hw3lib.evaluation.best_of_n import best_at_n_misses, solving_or_recognizing

    correct = np.array([[0, 0, 0], [1, 0, 0], [0, 0, 1]], dtype=bool)
    logprob = np.array([[-1.0, -2.0, -3.0], [-1.0, -2.0, -3.0], [-1.0, -2.0, -3.0]])  # always picks sample 0
    # Prompt 0: no correct sample (solve); prompt 1: pick right; prompt 2: correct sample 2 not picked (recognize).
    assert best_at_n_misses(correct, logprob, 3) == {"recognize": 1, "solve": 1}
    assert best_at_n_misses(correct, logprob, 1) == {"recognize": 0, "solve": 2}
    metrics = best_of_n_metrics(SampleResults(correct, logprob, [[None] * 3] * 3), ns=(1, 3))
    assert solving_or_recognizing(metrics).endswith("half recognizing, half solving.")
    everything = best_of_n_metrics(SampleResults(np.ones((2, 3), bool), logprob[:2], [[None] * 3] * 2), ns=(3,))
    assert solving_or_recognizing(everything) == "Best@3 was right on all 2 questions: nothing to recognize or solve better."


def test_pass_at_1_check_hand_worked():
    from hw3lib.evaluation.best_of_n import pass_at_1_check

    metrics = {"pass_at_k_unbiased": [0.55, 0.9], "num_prompts": 10, "n_samples": 16}
    check = pass_at_1_check({"accuracy": 0.5, "num_samples": 100}, metrics)
    # unpaired (Agresti-Caffo): 89/162 and 51/102; 2 sqrt((89/162)(73/162)/162 + (51/102)(51/102)/102) = 0.12616
    assert check["best_of_n_samples"] == 160 and check["zero_shot_samples"] == 100
    assert check["band"] == pytest.approx(0.12616, abs=1e-5)
    assert check["difference"] == pytest.approx(0.05) and check["within_noise"]
    assert check["verdict"] == "within noise" and check["text"] == "within noise, band ±12.6 points"
    far = pass_at_1_check({"accuracy": 0.2, "num_samples": 100}, {**metrics, "pass_at_k_unbiased": [0.8]})
    assert not far["within_noise"] and far["difference"] == pytest.approx(0.6)
