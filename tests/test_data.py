"""Data loaders, boxed-answer helpers, prompt templates and the synthetic arithmetic task."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hw3lib import data
from hw3lib.data import (
    arithmetic_sft_target,
    boxed_content,
    extract_boxed_answer,
    extract_gsm8k_gold,
    format_prompt,
    last_boxed_expression,
    load_gsm8k,
    load_math,
    load_prompt,
    make_arithmetic_problems,
    write_gsm8k_split,
)
from hw3lib.io import DataFileError, project_root
from hw3lib.rewards import r1_zero_reward_fn

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

R1_ZERO = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant solves it. The "
    "Assistant first thinks about the reasoning process in the mind and then provides the User with the answer. "
    "The reasoning process is enclosed within <think> </think> and answer is enclosed within <answer> </answer> "
    "tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.\n"
    "User: {question}\nAssistant: <think>"
)


@pytest.fixture(autouse=True)
def _shared_data(monkeypatch):
    monkeypatch.setenv("HW3_DATA_DIR", str(SHARED_DATA))


def write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def gsm8k_line(question="Q?", answer="1 + 1 = 2\n#### 2") -> str:
    return json.dumps({"question": question, "answer": answer})


# ---- GSM8K from the shared data ---------------------------------------------------------------

def test_gsm8k_counts_and_first_gold():
    test = load_gsm8k("test")
    assert len(test) == 1319
    assert len(load_gsm8k("train")) == 7473
    assert test[0]["gold"] == "18"
    assert test[0]["question"].startswith("Janet\u2019s ducks lay 16 eggs per day.")
    assert test[0]["answer"].endswith("#### 18")


def test_gsm8k_gold_drops_thousands_separators():
    record = load_gsm8k("test")[146]  # test.jsonl line 147 ends in "#### 2,125"
    assert record["answer"].endswith("#### 2,125")
    assert record["gold"] == "2125"


def test_gsm8k_limit_keeps_file_order():
    assert load_gsm8k("test", limit=3) == load_gsm8k("test")[:3]
    assert load_gsm8k("test", limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        load_gsm8k("test", limit=-1)
    with pytest.raises(ValueError, match="split"):
        load_gsm8k("validation")


def test_gsm8k_data_dir_resolution(tmp_path, monkeypatch):
    write_lines(tmp_path / "gsm8k" / "test.jsonl", [gsm8k_line("From the argument?")])
    assert load_gsm8k("test", data_dir=tmp_path)[0]["question"] == "From the argument?"
    monkeypatch.setenv("HW3_DATA_DIR", str(tmp_path))
    assert load_gsm8k("test")[0]["question"] == "From the argument?"
    monkeypatch.delenv("HW3_DATA_DIR")
    assert data.gsm8k_path("train") == project_root() / "data" / "gsm8k" / "train.jsonl"


@pytest.mark.parametrize("answer, gold", [("x\n#### 18", "18"), ("#### 1,600", "1600"), ("#### -3 ", "-3"),
                                          ("a #### b\n#### 1,234,567", "1234567"), ("no marker", None)])
def test_extract_gsm8k_gold(answer, gold):
    assert extract_gsm8k_gold(answer) == gold


# ---- GSM8K bad input --------------------------------------------------------------------------

def test_malformed_jsonl_names_file_and_line(tmp_path):
    torn = '{"question": "Q?", "answer": '
    path = write_lines(tmp_path / "gsm8k" / "test.jsonl", [gsm8k_line(), "", torn, gsm8k_line()])
    with pytest.raises(DataFileError, match=rf"{re.escape(str(path))}:3: not valid JSON"):
        load_gsm8k("test", data_dir=tmp_path)


def test_record_missing_field_names_file_and_line(tmp_path):
    path = write_lines(tmp_path / "gsm8k" / "test.jsonl", [gsm8k_line(), "", json.dumps({"question": "Q?"})])
    with pytest.raises(DataFileError, match=rf"{re.escape(str(path))}:3: missing string field 'answer'"):
        load_gsm8k("test", data_dir=tmp_path)


def test_answer_without_marker_names_file_and_line(tmp_path):
    path = write_lines(tmp_path / "gsm8k" / "test.jsonl", [gsm8k_line(), gsm8k_line(answer="It is 4.")])
    with pytest.raises(DataFileError, match=rf"{re.escape(str(path))}:2: .*'#### <number>'"):
        load_gsm8k("test", data_dir=tmp_path)


def test_missing_file_names_path_and_how_to_get_it(tmp_path):
    with pytest.raises(DataFileError) as caught:
        load_gsm8k("test", data_dir=tmp_path, download=False)
    message = str(caught.value)
    assert str(tmp_path / "gsm8k" / "test.jsonl") in message
    assert "HW3_DATA_DIR" in message and "train.jsonl and test.jsonl" in message


def test_failed_download_names_path_cause_and_how_to(tmp_path, monkeypatch):
    def offline():
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub")

    monkeypatch.setattr(data, "_fetch_gsm8k_from_hub", offline)
    with pytest.raises(DataFileError) as caught:
        load_gsm8k("train", data_dir=tmp_path)
    message = str(caught.value)
    assert str(tmp_path / "gsm8k" / "train.jsonl") in message
    assert "ConnectionError" in message and "HW3_DATA_DIR" in message
    assert not (tmp_path / "gsm8k" / "train.jsonl").exists()


# ---- GSM8K download (the hub replaced by an in-memory dataset) --------------------------------

FAKE_HUB = {
    "train": [{"question": "Train q?", "answer": "2 * 3 = <<2*3=6>>6\n#### 6"}],
    "test": [{"question": "Test q1?", "answer": "#### 1,500"}, {"question": "Test q2?", "answer": "#### 7"}],
}


def test_download_writes_jsonl_once_and_loads_it(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(data, "_fetch_gsm8k_from_hub", lambda: calls.append(1) or FAKE_HUB)
    records = load_gsm8k("test", data_dir=tmp_path)
    assert [r["gold"] for r in records] == ["1500", "7"]
    assert load_gsm8k("train", data_dir=tmp_path)[0]["gold"] == "6"
    assert calls == [1]  # the train split came from the files written by the first call
    lines = (tmp_path / "gsm8k" / "test.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == FAKE_HUB["test"]
    assert sorted(p.name for p in (tmp_path / "gsm8k").iterdir()) == ["test.jsonl", "train.jsonl"]  # no temp files


def test_write_gsm8k_split_keeps_only_question_and_answer(tmp_path):
    path = write_gsm8k_split([{"question": "Q?", "answer": "#### 3", "extra": 1}], tmp_path / "x.jsonl")
    assert json.loads(path.read_text(encoding="utf-8")) == {"question": "Q?", "answer": "#### 3"}
    with pytest.raises(DataFileError, match="row 1"):
        write_gsm8k_split([{"question": "Q?", "answer": "#### 3"}, {"question": "Q?"}], tmp_path / "y.jsonl")
    assert not (tmp_path / "y.jsonl").exists()


# ---- boxed answers and MATH-style data --------------------------------------------------------

@pytest.mark.parametrize("text, boxed, content", [
    ("so \\boxed{18}.", "\\boxed{18}", "18"),
    ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}"),
    ("first \\boxed{1} then \\fbox{2}", "\\fbox{2}", "2"),
    ("\\fbox{2} then \\boxed{ x^{2} }", "\\boxed{ x^{2} }", "x^{2}"),
    ("\\boxed{\\{1, 2\\}}", "\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
    ("$\\boxed 5$", "\\boxed 5", "5"),
    ("\\boxed {7}", "\\boxed {7}", "7"),
    ("\\boxed{18", None, None),
    ("\\boxed{a}\\boxed{b", None, None),
    ("\\boxedtext", None, None),
    ("no box", None, None),
])
def test_boxed_helpers(text, boxed, content):
    assert last_boxed_expression(text) == boxed
    assert extract_boxed_answer(text) == content
    if boxed is not None:
        assert boxed_content(boxed) == content


def math_rows():
    return [
        {"problem": "Simplify $\\frac{2}{4}$.", "solution": "It is $\\boxed{\\frac{1}{2}}$.", "level": "Level 1"},
        {"problem": "Find $x$.", "solution": "First $\\boxed{3}$, no: $\\boxed{\\sqrt{\\frac{a}{b}}}$."},
        {"problem": "Which set?", "solution": "\\fbox{\\{1,2\\}}"},
        {"problem": "Given answer", "solution": "No box here.", "answer": "42"},
    ]


def test_load_math_from_jsonl(tmp_path):
    path = write_lines(tmp_path / "math.jsonl", [json.dumps(row) for row in math_rows()])
    records = load_math(path)
    assert [r["answer"] for r in records] == ["\\frac{1}{2}", "\\sqrt{\\frac{a}{b}}", "\\{1,2\\}", "42"]
    assert records[0]["level"] == "Level 1" and records[0]["problem"] == "Simplify $\\frac{2}{4}$."
    assert load_math(str(path), limit=2) == records[:2]


def test_load_math_from_a_folder_with_splits(tmp_path):
    write_lines(tmp_path / "test.jsonl", [json.dumps(math_rows()[0])])
    write_lines(tmp_path / "train.jsonl", [json.dumps(math_rows()[1])])
    assert load_math(tmp_path)[0]["answer"] == "\\frac{1}{2}"
    assert load_math(tmp_path, split="train")[0]["answer"] == "\\sqrt{\\frac{a}{b}}"


def test_load_math_bad_input(tmp_path):
    with pytest.raises(DataFileError, match="missing.jsonl: file not found"):
        load_math(tmp_path / "missing.jsonl")
    no_box = {"problem": "P", "solution": "S"}
    path = write_lines(tmp_path / "nobox.jsonl", [json.dumps(math_rows()[0]), json.dumps(no_box)])
    with pytest.raises(DataFileError, match=rf"{re.escape(str(path))}:2: .*boxed"):
        load_math(path)
    path = write_lines(tmp_path / "nofield.jsonl", [json.dumps({"problem": "P"})])
    with pytest.raises(DataFileError, match=rf"{re.escape(str(path))}:1: missing string field 'solution'"):
        load_math(path)


# ---- prompts ----------------------------------------------------------------------------------

def test_r1_zero_prompt_text_is_exact():
    assert load_prompt("r1_zero") == R1_ZERO
    assert load_prompt("r1_zero.prompt").endswith("Assistant: <think>")
    assert load_prompt("question_only") == "{question}"


def test_unknown_prompt_lists_available_names():
    with pytest.raises(ValueError, match="available: question_only, r1_zero"):
        load_prompt("r2_zero")
    with pytest.raises(ValueError, match="unknown prompt"):
        load_prompt("../data")


def test_format_prompt_is_brace_safe():
    question = "If $f(x) = {x}^2$ and {question} is a set {1, 2}, what is f(3)?"
    assert format_prompt("r1_zero", question) == R1_ZERO.replace("{question}", question)
    assert format_prompt("question_only", question) == question
    assert format_prompt("Q: {question}\nA:", "What is {0}?") == "Q: What is {0}?\nA:"


# ---- synthetic arithmetic ---------------------------------------------------------------------

def test_arithmetic_problems_are_deterministic_and_correct():
    records = make_arithmetic_problems(200, seed=3, max_operand=20)
    assert records == make_arithmetic_problems(200, seed=3, max_operand=20)
    assert records != make_arithmetic_problems(200, seed=4, max_operand=20)
    ops = set()
    for record in records:
        working, gold = record["answer"].split("\n#### ")
        a, op, b, equals, result = working.split()
        ops.add(op)
        assert equals == "=" and gold == result == record["gold"]
        assert int(result) == (int(a) + int(b) if op == "+" else int(a) - int(b))
        assert 0 <= int(a) <= 20 and 0 <= int(b) <= 20 and int(result) >= 0
        assert a in record["question"] and b in record["question"]
        assert record["gold"] == extract_gsm8k_gold(record["answer"])
    assert ops == {"+", "-"}
    assert len({r["question"].split(" ", 1)[1][:12] for r in records}) > 4  # several templates in use


def test_arithmetic_sft_target_is_graded_correct():
    record = {"question": "Tom has 23 apples and buys 45 more. How many apples does Tom have now?",
              "answer": "23 + 45 = 68\n#### 68", "gold": "68"}
    assert arithmetic_sft_target(record) == " 23 + 45 = 68 </think> <answer> 68 </answer>"
    for record in make_arithmetic_problems(50, seed=1):
        target = arithmetic_sft_target(record)
        assert r1_zero_reward_fn(target, record["gold"])["reward"] == 1.0
        assert r1_zero_reward_fn(format_prompt("r1_zero", record["question"]) + target, record["gold"])["reward"] == 1.0
        wrong = str(int(record["gold"]) + 1)
        assert r1_zero_reward_fn(target, wrong)["reward"] == 0.0


def test_arithmetic_bad_arguments():
    assert make_arithmetic_problems(0) == []
    with pytest.raises(ValueError, match="n="):
        make_arithmetic_problems(-1)
    with pytest.raises(ValueError, match="max_operand"):
        make_arithmetic_problems(3, max_operand=0)
