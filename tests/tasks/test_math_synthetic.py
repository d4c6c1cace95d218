"""The generated MATH-format task of the smoke profile: records, splits, the grader's verdicts on
them, the writer, the loaders reading it back, and the tiny tokenizer's view of its text."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from types import SimpleNamespace

import pytest

from hw3lib.core.io import DataFileError
from hw3lib.tasks.data import extract_boxed_answer, load_math, load_task
from hw3lib.tasks.math_synthetic import (
    LEAD_INS,
    PROBLEM_TYPES,
    latex_number,
    linear_expression,
    make_math_problems,
    math_sft_target,
    problem_split,
    simplest_radical,
    write_math_task,
)
from hw3lib.tasks.rewards import answers_equivalent, r1_zero_reward_fn


def _gold(record: dict) -> str:
    return extract_boxed_answer(record["solution"])


def _completion(answer: str) -> str:
    return f" working </think> <answer> \\boxed{{{answer}}} </answer>"


# ---- hand-worked helpers ------------------------------------------------------------------------

@pytest.mark.parametrize("value, text", [(Fraction(5, 6), "\\frac{5}{6}"), (Fraction(-10, 6), "-\\frac{5}{3}"),
                                         (Fraction(4, 2), "2"), (-3, "-3"), (0, "0")])
def test_latex_number(value, text):
    assert latex_number(value) == text


@pytest.mark.parametrize("n, text", [(45, "3\\sqrt{5}"), (25, "5"), (2, "\\sqrt{2}"), (32, "4\\sqrt{2}"),
                                     (72, "6\\sqrt{2}"), (29, "\\sqrt{29}"), (1, "1")])
def test_simplest_radical(n, text):
    assert simplest_radical(n) == text


@pytest.mark.parametrize("a, b, text", [(2, 7, "2x+7"), (1, -3, "x-3"), (-1, 0, "-x"), (0, 4, "4"), (6, 0, "6x")])
def test_linear_expression(a, b, text):
    assert linear_expression(a, b) == text


# ---- records ------------------------------------------------------------------------------------

def test_records_are_deterministic_per_seed_and_differ_across_seeds():
    assert make_math_problems(40, seed=3) == make_math_problems(40, seed=3)
    assert make_math_problems(40, seed=3) != make_math_problems(40, seed=4)
    assert make_math_problems(40, seed=3, split="test") == make_math_problems(40, seed=3, split="test")


def test_records_have_the_math_shape_and_every_type_and_level():
    records = make_math_problems(100, seed=0)
    for record in records:
        assert set(record) == {"problem", "solution", "level", "type"}
        assert record["type"] in PROBLEM_TYPES
        assert record["level"] in ("Level 1", "Level 2")
        assert record["solution"].rstrip(".$").endswith("}") and _gold(record)
    assert {record["type"] for record in records} == set(PROBLEM_TYPES)
    assert {record["level"] for record in records} == {"Level 1", "Level 2"}


def test_worked_examples_of_each_type():
    by_type = {}
    for record in make_math_problems(200, seed=0):
        by_type.setdefault(record["type"], []).append(record)
    for record in by_type["Fractions"]:
        a, b, op, c, d = map(_int_or_op, re.search(r"\\frac\{(\d)\}\{(\d)\}([+-])\\frac\{(\d)\}\{(\d)\}",
                                                  record["problem"]).groups())
        value = Fraction(a, b) + Fraction(c, d) if op == "+" else Fraction(a, b) - Fraction(c, d)
        assert _gold(record) == latex_number(value) and value > 0
    for record in by_type["Radicals"]:
        a, b = map(int, re.findall(r"\$(\d)\$", record["problem"]))
        assert _gold(record) == simplest_radical(a * a + b * b)
    for record in by_type["Linear Equations"]:
        a, b, c = map(int, re.search(r"\$(\d)x([+-]\d)=(-?\d+)\$", record["problem"]).groups())
        assert _gold(record) == latex_number(Fraction(c - b, a))
    for record in by_type["Functions"]:
        f, g = re.search(r"f\(x\)=(.+)\$ and \$g\(x\)=(.+)\$,", record["problem"]).groups()
        a, b, c, d = (*_linear(f), *_linear(g))
        assert _gold(record) == linear_expression(a * c, a * d + b)
    intervals = {_gold(record)[0] + _gold(record)[-1] for record in by_type["Inequalities"]}
    assert intervals == {"(]", "()", "[)", "[]"}  # open and closed ends, unbounded both ways, compound


def _int_or_op(text: str):
    return text if text in "+-" else int(text)


def _linear(text: str) -> tuple[int, int]:
    """`2x+7` -> (2, 7), `x-3` -> (1, -3): the inverse of linear_expression for these problems."""
    coefficient, constant = re.fullmatch(r"(\d*)x([+-]\d+)", text).groups()
    return int(coefficient or 1), int(constant)


def test_splits_share_no_problem_and_both_hold_every_type():
    train, test = make_math_problems(1000, seed=0, split="train"), make_math_problems(300, seed=1, split="test")
    assert not {r["problem"] for r in train} & {r["problem"] for r in test}
    assert {r["type"] for r in train} == {r["type"] for r in test} == set(PROBLEM_TYPES)
    assert all(problem_split(r["problem"]) == "test" for r in test)


def test_the_small_task_is_worded_so_held_out_problems_ask_trained_questions_in_new_words():
    def asked(problem: str) -> str:
        lead_in = max((w for w in LEAD_INS if problem.startswith(w)), key=len)
        return problem[len(lead_in):]

    train = make_math_problems(4096, seed=0, split="train", small=True)
    test = make_math_problems(512, seed=1, split="test", small=True)
    assert not {r["problem"] for r in train} & {r["problem"] for r in test}
    assert {asked(r["problem"]) for r in test} != {r["problem"] for r in test}  # lead-ins are used
    seen = {asked(r["problem"]) for r in train}
    share = sum(asked(r["problem"]) in seen for r in test) / len(test)
    assert share > 0.9, share  # held-out problems ask what the training set asks in other words
    # The standard task keeps one wording per question: no lead-ins.
    assert all(asked(r["problem"]) == r["problem"] for r in make_math_problems(200, seed=0))
    assert make_math_problems(50, seed=3) != make_math_problems(50, seed=3, small=True)


@pytest.mark.parametrize("kwargs", [{"n": -1}, {"n": 2.0}, {"n": 2, "split": "validation"}])
def test_bad_arguments_are_named(kwargs):
    with pytest.raises(ValueError, match="n=|split="):
        make_math_problems(**kwargs)


# ---- what the grader does with these answers ----------------------------------------------------

def test_the_sft_target_of_every_record_is_graded_correct():
    for record in make_math_problems(60, seed=1):
        assert r1_zero_reward_fn(math_sft_target(record), _gold(record))["reward"] == 1.0, record
        assert r1_zero_reward_fn(math_sft_target(record, boxed=False), _gold(record))["reward"] == 1.0, record


def test_equivalent_forms_are_correct_and_perturbed_answers_wrong():
    for record in make_math_problems(60, seed=2):
        gold = _gold(record)
        right, wrong = _equivalent_form(record["type"], gold), _wrong_form(record["type"], gold)
        assert right != gold
        assert r1_zero_reward_fn(_completion(right), gold)["reward"] == 1.0, (right, gold)
        assert r1_zero_reward_fn(_completion(wrong), gold)["reward"] == 0.0, (wrong, gold)


def _equivalent_form(kind: str, gold: str) -> str:
    """Another way to write the same answer, as a student might."""
    if kind in ("Fractions", "Linear Equations"):  # unreduced: \frac{5}{6} -> \frac{10}{12}, 4 -> \frac{8}{2}
        value = _value(gold)
        return f"{'-' if value < 0 else ''}\\frac{{{2 * abs(value.numerator)}}}{{{2 * value.denominator}}}"
    if kind == "Radicals":  # unsimplified: 3\sqrt{5} -> \frac{\sqrt{180}}{2}
        outside, inside = re.fullmatch(r"(\d*)(?:\\sqrt\{(\d+)\})?", gold).groups()
        return f"\\frac{{\\sqrt{{{4 * int(outside or 1) ** 2 * int(inside or 1)}}}}}{{2}}"
    if kind == "Inequalities":  # no space after the comma, \left( \right)
        return "\\left" + gold[0] + gold[1:-1].replace(", ", ",") + "\\right" + gold[-1]
    terms = re.fullmatch(r"(-?\d*x)([+-]\d+)?", gold).groups()  # 2x+7 -> 7+2x
    return f"{terms[1].lstrip('+')}+{terms[0]}".replace("+-", "-") if terms[1] else f"{terms[0]}+0"


def _wrong_form(kind: str, gold: str) -> str:
    """A near miss: one more in the answer's last number, or the interval's ends flipped open/closed."""
    if kind == "Inequalities":
        return {"(": "[", "[": "("}[gold[0]] + gold[1:] if not gold.startswith("(-\\infty") else \
            gold[:-1] + {")": "]", "]": ")"}[gold[-1]]
    last = list(re.finditer(r"\d+", gold))[-1]
    return gold[:last.start()] + str(int(last.group()) + 1) + gold[last.end():]


def _value(latex: str) -> Fraction:
    match = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", latex)
    value = Fraction(int(match[2]), int(match[3])) if match else Fraction(latex)
    return -value if match and match[1] else value


@pytest.mark.parametrize("pred, gold, verdict", [
    ("\\frac{3}{6}", "\\frac{1}{2}", True),  # lowest terms are asked for, not enforced: values are compared
    ("0.5", "\\frac{1}{2}", True),
    ("\\frac{1}{2}+\\frac{1}{3}", "\\frac{5}{6}", False),  # arithmetic left undone (copied question)
    ("0.833", "\\frac{5}{6}", False),  # exact fractions, no rounding
    ("\\sqrt{45}", "3\\sqrt{5}", True),  # simplest radical form is not enforced either
    ("\\sqrt{3^2+6^2}", "3\\sqrt{5}", True),
    ("3\\sqrt{3}", "3\\sqrt{5}", False),
    ("x=-\\frac{5}{3}", "-\\frac{5}{3}", True),
    ("-5/3", "-\\frac{5}{3}", True),
    ("x\\in(4, \\infty)", "(4, \\infty)", True),
    ("[4, \\infty)", "(4, \\infty)", False),  # the bracket matters
    ("(4, \\infty]", "(4, \\infty)", True),  # math-verify ignores the bracket at infinity
    ("x>4", "(4, \\infty)", False),  # an inequality is not accepted for its interval
    ("(-\\infty, 4)", "(4, \\infty)", False),
    ("2(x+3)+1", "2x+7", True),
    ("f(g(x))", "2x+7", False),  # copying the question's f(g(x)) earns nothing
    ("(x+2)(x+3)", "x^2+5x+6", True),  # why "Expand (x+2)(x+3)" is not a problem type: the copy is graded correct
])
def test_the_grader_on_typical_answers(pred, gold, verdict):
    assert answers_equivalent(pred, gold) is verdict
    assert r1_zero_reward_fn(_completion(pred), gold)["reward"] == float(verdict)


# ---- the R1-Zero SFT target ---------------------------------------------------------------------

def test_sft_target_on_a_generated_and_a_real_math_record():
    record = {"problem": "Compute $\\frac{1}{3}+\\frac{1}{2}$.",
              "solution": "$\\frac{1}{3}+\\frac{1}{2}=\\frac{2}{6}+\\frac{3}{6}=\\boxed{\\frac{5}{6}}$."}
    assert math_sft_target(record) == (" $\\frac{1}{3}+\\frac{1}{2}=\\frac{2}{6}+\\frac{3}{6}=\\frac{5}{6}$. "
                                       "</think> <answer> \\boxed{\\frac{5}{6}} </answer>")
    assert math_sft_target(record, boxed=False).endswith("<answer> \\frac{5}{6} </answer>")
    real = {"problem": "What is $1+1$?", "solution": "We add:\n $1+1 = \\boxed{2}$ and $\\boxed{2}$ again.",
            "answer": "2"}
    assert math_sft_target(real) == " We add: $1+1 = \\boxed{2}$ and $2$ again. </think> <answer> \\boxed{2} </answer>"


@pytest.mark.parametrize("record", [{"problem": "p"}, {"problem": "p", "solution": "no box here"},
                                    {"problem": "p", "solution": "\\boxed{1"}])
def test_sft_target_without_a_boxed_solution_is_an_error(record):
    with pytest.raises(DataFileError, match="solution"):
        math_sft_target(record)


# ---- the writer and the loaders -----------------------------------------------------------------

def test_written_task_loads_through_load_math_and_load_task(tmp_path):
    train_path, test_path = write_math_task(tmp_path / "task", n_train=50, n_test=20, seed=7)
    assert (train_path.name, test_path.name) == ("train.jsonl", "test.jsonl")
    expected = make_math_problems(20, seed=8, split="test")
    loaded = load_math(tmp_path / "task", "test")
    assert [r["problem"] for r in loaded] == [r["problem"] for r in expected]
    assert [r["answer"] for r in loaded] == [_gold(r) for r in expected]
    assert [r["type"] for r in loaded] == [r["type"] for r in expected]  # extra fields are kept
    cfg = SimpleNamespace(dataset=str(tmp_path / "task"), eval_dataset=None, n_train_examples=30, n_eval_examples=10,
                          seed=0, arithmetic_max_operand=9)
    train, held_out = load_task(cfg)
    assert len(train) == 30 and len(held_out) == 10
    assert train[0] == {"question": make_math_problems(1, seed=7, split="train")[0]["problem"],
                        "gold": _gold(make_math_problems(1, seed=7, split="train")[0]),
                        "answer": make_math_problems(1, seed=7, split="train")[0]["solution"]}
    assert not {r["question"] for r in train} & {r["question"] for r in held_out}


def test_writer_reuses_identical_files_and_refuses_to_overwrite_others(tmp_path):
    folder = tmp_path / "task"
    paths = write_math_task(folder, n_train=10, n_test=5, seed=0)
    before = {path: path.read_bytes() for path in paths}
    assert write_math_task(folder, n_train=10, n_test=5, seed=0) == paths  # same content: reused
    (folder / "test.jsonl").unlink()
    with pytest.raises(FileExistsError, match=r"train\.jsonl.*refusing to overwrite"):
        write_math_task(folder, n_train=11, n_test=5, seed=0)
    assert not (folder / "test.jsonl").exists()  # checked before anything is written
    assert (folder / "train.jsonl").read_bytes() == before[folder / "train.jsonl"]
    (folder / "test.jsonl").write_text(json.dumps({"problem": "mine", "solution": "\\boxed{1}"}) + "\n")
    with pytest.raises(FileExistsError, match=r"test\.jsonl"):
        write_math_task(folder, n_train=10, n_test=5, seed=0)
    assert load_math(folder, "test")[0]["problem"] == "mine"


@pytest.mark.parametrize("kwargs, match", [({"n_train": 0, "n_test": 5}, "n_train=0"),
                                           ({"n_train": 5, "n_test": -1}, "n_test=-1")])
def test_writer_names_bad_counts(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        write_math_task(tmp_path, **kwargs)


def test_writer_names_a_folder_that_is_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="folder="):
        write_math_task(tmp_path / "file", n_train=2, n_test=2)


# ---- the tiny model's tokenizer -----------------------------------------------------------------

def test_the_tiny_tokenizer_round_trips_the_text_within_the_generation_budget(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for record in make_math_problems(100, seed=0):
        for text in (record["problem"], math_sft_target(record)):
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            assert tokenizer.decode(ids) == text
        # Byte-level BPE trained on GSM8K: LaTeX costs ~1.5 characters a token, still well inside 128.
        assert len(tokenizer(math_sft_target(record), add_special_tokens=False)["input_ids"]) <= 128


def test_the_smoke_warm_starts_targets_fit_the_smoke_generation_budget(tiny_model_dir):
    from transformers import AutoTokenizer

    from hw3lib.grpo.config import GRPOConfig
    from hw3lib.tasks.data import arithmetic_sft_target

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    budget = GRPOConfig.for_profile("smoke", course="math-qwen2.5").sampling_max_tokens
    records = make_math_problems(400, seed=5, small=True)
    for record in records:  # the warm start's target: the working, then the bare answer in the R1-Zero tags
        target = arithmetic_sft_target({"answer": record["solution"], "gold": _gold(record)})
        assert len(tokenizer(target, add_special_tokens=False)["input_ids"]) <= budget
