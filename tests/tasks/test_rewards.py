"""Reward functions and answer equivalence: hand-worked cases for every rule, garbage, threads, processes."""

from __future__ import annotations

import multiprocessing
import signal
import threading
from fractions import Fraction

import pytest

from hw3lib.tasks import rewards
from hw3lib.tasks.rewards import (
    answers_equivalent,
    keyword_inclusion_reward_fn,
    normalize_answer,
    parse_plain_number,
    question_only_reward_fn,
    r1_zero_reward_fn,
)

PATHOLOGICAL = "2^{2^{2^{2^{2^{99}}}}}"  # sympy tries to evaluate a tower of powers: never finishes


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Each test sees the symbolic stage uncached, so it exercises the path it means to."""
    rewards._symbolic_equivalent.cache_clear()
    yield
    rewards._symbolic_equivalent.cache_clear()


@pytest.fixture
def short_deadline(monkeypatch):
    """A 1 s symbolic deadline (default 5 s) here, in the verifier child, and in spawned workers."""
    monkeypatch.setattr(rewards, "SYMBOLIC_TIMEOUT_S", 1.0)
    monkeypatch.setenv("HW3_SYMBOLIC_TIMEOUT_S", "1")


def scores(reward, fmt, answer):
    return {"reward": reward, "format_reward": fmt, "answer_reward": answer}


# ---- r1_zero_reward_fn: the strict format contract --------------------------------------------

def test_r1_zero_correct_formatted_answer():
    assert r1_zero_reward_fn("16 - 3 - 4 = 9, 9 * 2 = 18 </think> <answer> 18 </answer>", "18") == scores(1.0, 1.0, 1.0)


def test_r1_zero_formatted_but_wrong_gets_format_only():
    assert r1_zero_reward_fn("thinking </think> <answer> 17 </answer>", "18") == scores(0.0, 1.0, 0.0)


@pytest.mark.parametrize("response", [
    "thinking </think><answer> 18 </answer>",  # no space between the tags
    "thinking </think>  <answer> 18 </answer>",  # two spaces
    "thinking </think> <answer> 18",  # no closing tag
    "thinking <answer> 18 </answer>",  # no </think>
    "The answer is 18.",
    "",
])
def test_r1_zero_unformatted_gets_nothing(response):
    assert r1_zero_reward_fn(response, "18") == scores(0.0, 0.0, 0.0)


def test_r1_zero_uses_the_last_answer_tag():
    response = "a </think> <answer> 5 </answer> on second thought <answer> 18 </answer>"
    assert r1_zero_reward_fn(response, "18")["reward"] == 1.0
    assert r1_zero_reward_fn(response, "5")["reward"] == 0.0


def test_r1_zero_keeps_text_after_the_closing_tag_in_the_answer():
    # "</answer>" is removed, not split on: "18 </answer> but maybe 20" -> "18  but maybe 20", not a number.
    assert r1_zero_reward_fn("a </think> <answer> 18 </answer> but maybe 20", "18") == scores(0.0, 1.0, 0.0)


def test_r1_zero_extracts_boxed_answers():
    assert r1_zero_reward_fn("a </think> <answer> so \\boxed{18} </answer>", "18")["reward"] == 1.0
    assert r1_zero_reward_fn("a </think> <answer> \\boxed{\\frac{36}{2}} </answer>", "18")["reward"] == 1.0
    # An unclosed box is formatted but has no answer.
    assert r1_zero_reward_fn("a </think> <answer> \\boxed{18 </answer>", "18") == scores(0.0, 1.0, 0.0)


def test_r1_zero_ground_truth_types_and_lists():
    response = "a </think> <answer> 18 </answer>"
    assert r1_zero_reward_fn(response, 18)["reward"] == 1.0
    assert r1_zero_reward_fn(response, 18.0)["reward"] == 1.0
    assert r1_zero_reward_fn(response, ["17", "18"])["reward"] == 1.0
    assert r1_zero_reward_fn(response, ("17", 19))["reward"] == 0.0
    assert r1_zero_reward_fn(response, [])["reward"] == 0.0


def test_r1_zero_all_values_are_floats():
    result = r1_zero_reward_fn("a </think> <answer> 18 </answer>", "18")
    assert all(type(value) is float for value in result.values())


# ---- equivalence: the exact fast path ---------------------------------------------------------

@pytest.mark.parametrize("pred", ["18", "18.0", "18.00", "$18", "\\$18", "18 dollars", "18%", "\\text{18}",
                                  "\\frac{36}{2}", "\\dfrac{36}{2}", "36/2", "x = 18", "$18$", "18.", "\\boxed{18}",
                                  "18 \\text{ apples}", "1.8e1", "+18"])
def test_plain_number_surface_forms_equal_18(pred):
    assert answers_equivalent(pred, "18")


@pytest.mark.parametrize("pred, gold", [
    ("1,000", "1000"), ("1000", "1,000"), ("1\\,000", "1000"), ("1{,}000", "1000"), ("12,345,678", "12345678"),
    ("\\$1,234.50", "1234.5"), ("0.5", "1/2"), ("\\frac{1}{2}", "0.5"), ("\\frac12", "0.5"), ("-3", "-3"),
    ("-\\frac{1}{2}", "-0.5"), ("\\frac{-1}{2}", "-1/2"), ("−3", "-3"), ("90^\\circ", "90"), ("50\\%", "50"),
])
def test_plain_numbers_equal(pred, gold):
    assert answers_equivalent(pred, gold)


@pytest.mark.parametrize("pred, gold", [("17", "18"), ("-18", "18"), ("3", "-3"), ("1,00", "100"), ("0.333", "1/3"),
                                        ("18.01", "18"), ("180", "18"), ("3x", "3"), ("eighteen", "18"), ("10/0", "1")])
def test_plain_numbers_not_equal(pred, gold):
    assert not answers_equivalent(pred, gold)


def test_parse_plain_number_values():
    assert parse_plain_number("1,234.5") == Fraction(2469, 2)
    assert parse_plain_number("\\frac{7}{-4}") == Fraction(-7, 4)
    assert parse_plain_number("-.25") == Fraction(-1, 4)
    assert parse_plain_number("2.5e2") == 250
    assert parse_plain_number("3/4 cups") == Fraction(3, 4)
    assert parse_plain_number("1,00") is None  # not a valid thousands separator
    assert parse_plain_number("3x") is None  # a single letter is a variable, not a unit
    assert parse_plain_number("\\sqrt{2}") is None


def test_normalize_answer_strips_presentation_only():
    assert normalize_answer("$\\boxed{\\text{18}}$") == "18"
    assert normalize_answer("\\left( 1, 2 \\right)") == "( 1, 2 )"
    assert normalize_answer("k = \\dfrac{1}{2}.") == "\\frac{1}{2}"



# ---- equivalence: answers whose extra words or signs change the claim -------------------------

# Against gold "18" each of these says something other than "18"; several fool math-verify (marked).
OVER_ACCEPTED = [
    "18 or more",  # math-verify accepts
    "18 or 19", "18 or less", "18 or so", "18 \\text{ or more}", "18 dollars or more", "18 or\\ more",
    "18 to 20", "18 to twenty", "between 18 and 20", "18-20", "18 - 20", "18 \\pm 2",
    "at least 18", "at most 18", "more than 18", "less than 18", "over 18", "under 18", "up to 18",
    "18 at most", "18 max", "18 more",
    "about 18", "approximately 18", "around 18", "roughly 18", "~18", "18-ish",
    "\\approx 18", "\\geq 18", "\\ge 18", "\\le 18", ">18", "≥ 18",  # math-verify accepts \approx, \geq, \ge, \le
    "18 and twenty", "18 and 2", "18 dollars and 50 cents", "18 thousand", "18 hundred", "18 dozen", "18 squared",
    "18 + 2", "3 * 6", "18 dollars + 2", "18 \\cdot 1", "18 \\times 1", "18 × 1", "18 ÷ 1", "18 = 3 \\times 6",
    "18 times 1", "18 times more", "not 18",
]

UNIT_WORDS = ["18 dollars", "18 apples", "18 red apples", "$18", "18%", "18 dollars per week", "18 per week",
              "18 km/h", "18 cm^2", "18 minutes", "18 min", "18 years old", "18-year-old", "18 times", "18 in total",
              "18 \\text{ dollars}", "\\$18 dollars.", "18~dollars", "18 percent"]


@pytest.mark.parametrize("pred", OVER_ACCEPTED)
@pytest.mark.parametrize("fast", [True, False])
def test_claim_changing_answers_do_not_equal_18(pred, fast):
    assert not answers_equivalent(pred, "18", fast=fast)
    response = f"16 - 3 - 4 = 9, 9 * 2 = 18 </think> <answer> {pred} </answer>"
    assert r1_zero_reward_fn(response, "18", fast=fast) == scores(0.0, 1.0, 0.0)
    assert r1_zero_reward_fn(f"a </think> <answer> \\boxed{{{pred}}} </answer>", "18", fast=fast)["reward"] == 0.0


@pytest.mark.parametrize("pred", UNIT_WORDS)
@pytest.mark.parametrize("fast", [True, False])
def test_unit_words_after_the_number_still_equal_18(pred, fast):
    assert answers_equivalent(pred, "18", fast=fast)
    response = f"16 - 3 - 4 = 9, 9 * 2 = 18 </think> <answer> {pred} </answer>"
    assert r1_zero_reward_fn(response, "18", fast=fast) == scores(1.0, 1.0, 1.0)


def test_unit_words_compare_only_the_magnitude():
    assert answers_equivalent("5 cm", "5")
    assert not answers_equivalent("5 cm", "18")
    assert not answers_equivalent("17 dollars", "18")
    assert parse_plain_number("18 or more") is None
    assert parse_plain_number("18 thousand") is None
    assert parse_plain_number("18 dollars per week") == 18


def test_claim_checks_leave_signs_fractions_and_finished_equations_alone():
    assert answers_equivalent("-3", "-3") and answers_equivalent("2^{-1}", "0.5")
    assert answers_equivalent("\\sqrt{324}/2", "9") and answers_equivalent("3 \\times 6 = 18", "18")
    # With a symbolic gold answer only claim words the gold itself lacks reject; math-verify decides the rest.
    assert answers_equivalent("x \\ge 2", "x \\geq 2")
    assert answers_equivalent("1 and 2", "1 \\text{ and } 2")
    assert not answers_equivalent("\\sqrt{2} or more", "\\sqrt{2}", fast=False)
    assert answers_equivalent("2 + \\sqrt{3}", "\\sqrt{3} + 2")


def test_claim_changing_answers_with_question_only_prompt():
    assert question_only_reward_fn("so \\boxed{18 \\text{ or more}}", "18") == scores(0.0, 1.0, 0.0)
    assert question_only_reward_fn("so \\boxed{18 \\text{ dollars}}", "18") == scores(1.0, 1.0, 1.0)
    assert question_only_reward_fn("at least 18 or more", "18") == scores(1.0, 1.0, 1.0)  # the last number


# ---- equivalence: the math-verify stage -------------------------------------------------------

@pytest.mark.parametrize("pred, gold", [("\\sqrt{4}", "2"), ("\\sqrt{2}/2", "\\frac{\\sqrt2}{2}"), ("[1,2)", "[1, 2)"),
                                        ("\\{1,2\\}", "\\{2,1\\}"), ("\\frac{\\pi}{2}", "\\pi/2"), ("2^{10}", "1024")])
def test_symbolic_equivalence_via_math_verify(pred, gold):
    assert answers_equivalent(pred, gold)


@pytest.mark.parametrize("pred, gold", [("\\sqrt{5}", "2"), ("[1,2]", "[1, 2)"), ("\\frac{\\pi}{3}", "\\pi/2")])
def test_symbolic_non_equivalence(pred, gold):
    assert not answers_equivalent(pred, gold)


def test_fast_false_also_asks_math_verify_for_unequal_numbers():
    # Exact Fractions say 0.333333 != 1/3; math-verify compares to 6 decimals and accepts it.
    assert not answers_equivalent("0.333333", "\\frac{1}{3}")
    assert answers_equivalent("0.333333", "\\frac{1}{3}", fast=False)
    assert r1_zero_reward_fn("a </think> <answer> 0.333333 </answer>", "\\frac{1}{3}", fast=False)["reward"] == 1.0


# ---- never raise, always bounded --------------------------------------------------------------

@pytest.mark.parametrize("pred", [None, "", "   ", "x" * 1_000_000, "1" * 1_000_000, "\\frac{1}{2", "}}}{{{",
                                  "\udcff", "\udcff18", b"\xff\xfe", object(), float("nan"), float("inf"),
                                  "\\boxed{", "$", "\\", "\x00", ["nested", ["list"]]])
def test_garbage_never_raises(pred):
    assert answers_equivalent(pred, "1") is False
    assert answers_equivalent("1", pred) is False
    response = pred if isinstance(pred, str) else None
    assert r1_zero_reward_fn(response, "1")["reward"] == 0.0
    assert question_only_reward_fn(response, "1")["reward"] == 0.0


def test_huge_formatted_response_is_graded_quickly_as_wrong():
    response = "a </think> <answer> " + "9" * 1_000_000 + " </answer>"
    assert r1_zero_reward_fn(response, "18") == scores(0.0, 1.0, 0.0)


def test_grading_leaves_the_callers_timer_alone():
    """Symbolic checks run in the verifier child, so a caller's pending alarm is neither fired nor reset."""
    outer = signal.signal(signal.SIGALRM, lambda signum, frame: None)
    signal.setitimer(signal.ITIMER_REAL, 50.0)  # a caller's own pending alarm (say, a test timeout)
    try:
        assert answers_equivalent("\\sqrt{4}", "2") is True
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 30 < remaining <= 50.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer)


def test_a_real_pathological_answer_is_bounded_in_the_main_thread(monkeypatch):
    """sympy can hang in one C call on a power tower (a signal cannot stop it): the child is killed."""
    monkeypatch.setattr(rewards, "SYMBOLIC_TIMEOUT_S", 0.5)
    assert answers_equivalent(PATHOLOGICAL, "5") is False  # returns at all: the child was stopped
    assert answers_equivalent("\\sqrt{9}", "3") is True  # math-verify still works afterwards


def test_deadline_setting_from_the_environment(monkeypatch):
    monkeypatch.setenv("HW3_SYMBOLIC_TIMEOUT_S", "2.5")
    assert rewards._timeout_from_env() == 2.5
    for bad in ("soon", "0", "-1", "nan"):
        monkeypatch.setenv("HW3_SYMBOLIC_TIMEOUT_S", bad)
        with pytest.raises(ValueError, match="HW3_SYMBOLIC_TIMEOUT_S"):
            rewards._timeout_from_env()


def _grade_in_threads(cases):
    """Grade (response, truth) pairs from a non-main thread; returns the rewards."""
    results = []
    thread = threading.Thread(target=lambda: results.extend(r1_zero_reward_fn(r, t)["reward"] for r, t in cases))
    thread.start()
    thread.join(120)
    return results


THREAD_CASES = [("a </think> <answer> \\sqrt{4} </answer>", "2"), ("a </think> <answer> \\sqrt{5} </answer>", "2"),
                ("a </think> <answer> 18 </answer>", "18"), ("a </think> <answer> " + PATHOLOGICAL + " </answer>", "5"),
                ("a </think> <answer> \\frac{1}{2", "1"), ("a </think> <answer> \udcff </answer>", "1"),
                ("a </think> <answer> \\sqrt{9} </answer>", "3")]
THREAD_EXPECTED = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]


def test_reward_from_a_thread_uses_the_verifier_process(short_deadline):
    assert _grade_in_threads(THREAD_CASES[:1]) == [1.0]
    child = rewards._VERIFIER._proc.pid  # the child did the symbolic work
    assert _grade_in_threads(THREAD_CASES) == THREAD_EXPECTED
    assert rewards._VERIFIER._proc.pid == child  # its own deadline ended the pathological check: no restart


def test_verifier_process_is_killed_and_restarted_when_it_overruns(short_deadline, monkeypatch):
    # The parent gives up after 1 - 0.8 = 0.2 s while the child works on the pathological answer (its own
    # deadline is 1 s): the child is killed, the answer graded 0, and the next check starts a new child.
    assert _grade_in_threads([("a </think> <answer> \\sqrt{4} </answer>", "2")]) == [1.0]
    first = rewards._VERIFIER._proc.pid
    with monkeypatch.context() as patch:
        patch.setattr(rewards, "_CHILD_MARGIN_S", -0.8)
        assert _grade_in_threads([("a </think> <answer> " + PATHOLOGICAL + " </answer>", "5")]) == [0.0]
    assert rewards._VERIFIER._proc is None
    assert _grade_in_threads([("a </think> <answer> \\sqrt{9} </answer>", "3")]) == [1.0]
    assert rewards._VERIFIER._proc.pid != first


def test_reward_in_spawned_worker_processes(short_deadline):
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        got = pool.starmap(r1_zero_reward_fn, THREAD_CASES)
    assert [g["reward"] for g in got] == THREAD_EXPECTED


def test_reward_in_forked_worker_threads(short_deadline):
    # The parent already runs a verifier child; forked workers must start their own, from a thread.
    assert _grade_in_threads(THREAD_CASES[:1]) == [1.0]
    with multiprocessing.get_context("fork").Pool(1) as pool:
        got = pool.apply(_grade_in_threads, (THREAD_CASES,))
    assert got == THREAD_EXPECTED


# ---- question_only_reward_fn ------------------------------------------------------------------

def test_question_only_prefers_the_last_box():
    assert question_only_reward_fn("3 + 4 = 7, so \\boxed{17}. Check 99.", "17") == scores(1.0, 1.0, 1.0)
    assert question_only_reward_fn("\\boxed{1} then \\boxed{\\frac{1}{2}}", "0.5")["reward"] == 1.0


@pytest.mark.parametrize("response, gold, expected", [
    ("5 - 3 = 2, so she has 2 apples.", "2", scores(1.0, 1.0, 1.0)),
    ("The total is 1,234 dollars", "1234", scores(1.0, 1.0, 1.0)),
    ("It drops to -4 degrees", "-4", scores(1.0, 1.0, 1.0)),
    ("10-3=7", "7", scores(1.0, 1.0, 1.0)),
    ("half is 3/4 of it", "0.75", scores(1.0, 1.0, 1.0)),
    ("It is 12, no wait 13", "12", scores(0.0, 1.0, 0.0)),
    ("no digits at all", "12", scores(0.0, 0.0, 0.0)),
])
def test_question_only_last_number(response, gold, expected):
    assert question_only_reward_fn(response, gold) == expected


# ---- keyword_inclusion_reward_fn --------------------------------------------------------------

def test_keyword_inclusion_whole_words_case_insensitive():
    assert keyword_inclusion_reward_fn("I like Apples and PEARS.", ["apples", "pears"]) == scores(1.0, 1.0, 1.0)
    assert keyword_inclusion_reward_fn("pineapples and pears", ["apples", "pears"]) == scores(0.0, 1.0, 0.0)
    assert keyword_inclusion_reward_fn("apple", "apple")["reward"] == 1.0


def test_keyword_inclusion_escapes_regex_characters():
    assert keyword_inclusion_reward_fn("we write C++ daily", ["c++"])["reward"] == 1.0
    assert keyword_inclusion_reward_fn("a x b", ["a.b"])["reward"] == 0.0
    assert keyword_inclusion_reward_fn("axb", ["a.b"])["reward"] == 0.0
    assert keyword_inclusion_reward_fn("see a.b here", ["a.b"])["reward"] == 1.0


def test_keyword_inclusion_bad_input():
    assert keyword_inclusion_reward_fn(None, ["a"])["reward"] == 0.0
    with pytest.raises(ValueError, match="keywords"):
        keyword_inclusion_reward_fn("text", [])
    with pytest.raises(ValueError, match="keywords"):
        keyword_inclusion_reward_fn("text", ["ok", " "])
