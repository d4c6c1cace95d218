"""Data loaders, boxed-answer helpers, prompt templates and the synthetic arithmetic task."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hw3lib.tasks import data
from hw3lib.tasks.data import (
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
from hw3lib.core.io import DataFileError, project_root
from hw3lib.tasks.rewards import r1_zero_reward_fn

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"

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


# ---- one loader for evaluation and training: load_task on MATH sources ------------------------

MATH_ANSWERS = ["5", "\\frac{1}{2}", "\\sqrt{\\frac{a}{b}}", "-3", "\\{1,2\\}", "\\dfrac{\\pi}{4}", "x^{2}+1",
                "(2,\\frac{3}{4})", "12", "\\text{(C)}", "0.25", "7\\sqrt{2}"]


def math_task_rows(answers=MATH_ANSWERS) -> list[dict]:
    """MATH-style records whose solutions end in `\\boxed{<answer>}` (some with an earlier, wrong box)."""
    rows = []
    for i, answer in enumerate(answers):
        solution = f"We work it out. ${i}+{i}={2 * i}$, so the answer is $\\boxed{{{answer}}}$."
        if i % 3 == 1:
            solution = f"A first guess $\\boxed{{{i + 100}}}$ is wrong. " + solution
        rows.append({"problem": f"Problem {i}: what is ${{{i}}}^{{2}}$ in \\LaTeX?", "solution": solution,
                     "level": f"Level {1 + i % 5}"})
    return rows


def write_math(path: Path, rows: list[dict]) -> Path:
    return write_lines(path, [json.dumps(row) for row in rows])


def task_cfg(dataset, **changes):
    """load_task takes the config duck-typed: only these fields are read."""
    from types import SimpleNamespace

    fields = dict(dataset=str(dataset), eval_dataset=None, n_train_examples=None, n_eval_examples=4, seed=0,
                  arithmetic_max_operand=99)
    fields.update(changes)
    return SimpleNamespace(**fields)


def test_load_task_on_a_math_jsonl_uses_the_boxed_answers(tmp_path):
    rows = math_task_rows()
    path = write_math(tmp_path / "math.jsonl", rows)
    train_records, eval_records = data.load_task(task_cfg(path))
    assert [r["gold"] for r in train_records + eval_records] == MATH_ANSWERS  # last box, nested braces whole
    assert [r["question"] for r in train_records + eval_records] == [row["problem"] for row in rows]
    assert len(eval_records) == 4 and len(train_records) == 8  # a single file holds out its last rows
    assert train_records[1]["answer"] == rows[1]["solution"]  # the worked solution rides along
    assert set(train_records[0]) == {"question", "gold", "answer"}
    assert data.load_task(task_cfg(path, n_train_examples=3))[0] == train_records[:3]
    with pytest.raises(ValueError, match="12 records, not enough to hold out n_eval_examples=12"):
        data.load_task(task_cfg(path, n_eval_examples=12))


def test_load_task_on_a_math_folder_and_a_separate_eval_dataset(tmp_path):
    rows = math_task_rows()
    write_math(tmp_path / "math" / "train.jsonl", rows[:9])
    write_math(tmp_path / "math" / "test.jsonl", rows[9:])
    train_records, eval_records = data.load_task(task_cfg(tmp_path / "math", n_eval_examples=2))
    assert [r["gold"] for r in train_records] == MATH_ANSWERS[:9]
    assert [r["gold"] for r in eval_records] == MATH_ANSWERS[9:11]
    # eval_dataset: a folder's test split, or a file of today's {"question", "gold"} records.
    qa = write_lines(tmp_path / "qa.jsonl", [json.dumps({"question": "1+1?", "gold": 2}),
                                              json.dumps({"question": "2+2?", "gold": "4"})])
    train_records, eval_records = data.load_task(task_cfg(tmp_path / "math" / "train.jsonl", eval_dataset=str(qa)))
    assert len(train_records) == 9 and eval_records == [{"question": "1+1?", "gold": "2", "answer": "2"},
                                                        {"question": "2+2?", "gold": "4", "answer": "4"}]
    _, eval_records = data.load_task(task_cfg("gsm8k", n_train_examples=5, eval_dataset=str(tmp_path / "math")))
    assert [r["gold"] for r in eval_records] == MATH_ANSWERS[9:13]
    with pytest.raises(DataFileError, match=r"folder .*empty has no train\.jsonl"):
        (tmp_path / "empty").mkdir()
        data.load_task(task_cfg(tmp_path / "empty"))


def test_load_task_math_errors_name_the_file_and_line(tmp_path):
    rows = math_task_rows()
    rows[6] = {"problem": "No box?", "solution": "The answer is 3."}
    path = write_math(tmp_path / "math.jsonl", rows)
    with pytest.raises(DataFileError, match=rf"{re.escape(str(path))}:7: the solution has no .*boxed.*add an 'answer'"):
        data.load_task(task_cfg(path))
    path = write_lines(tmp_path / "q.jsonl", [json.dumps({"question": "1+1?", "gold": 2}), json.dumps({"prompt": "x"})])
    missing = r"missing string field 'problem' \(or 'question'\)"
    with pytest.raises(DataFileError, match=rf"{re.escape(str(path))}:2: {missing}"):
        data.load_task(task_cfg("arithmetic", eval_dataset=str(path)))
    empty = write_lines(tmp_path / "empty.jsonl", [])
    with pytest.raises(DataFileError, match=rf"{re.escape(str(empty))}: no records"):
        data.load_task(task_cfg(empty))


def test_evaluation_and_training_read_a_math_file_alike(tmp_path):
    path = write_math(tmp_path / "math.jsonl", math_task_rows())
    evaluated = load_math(path)  # what `hw3 eval --dataset math` scores (question_key problem, answer_key answer)
    train_records, eval_records = data.load_task(task_cfg(path))
    assert [(r["problem"], r["answer"]) for r in evaluated] == \
        [(r["question"], r["gold"]) for r in train_records + eval_records]


def test_load_math_accepts_question_records_too(tmp_path):
    path = write_lines(tmp_path / "mixed.jsonl", [
        json.dumps({"question": "1+1?", "gold": 2}),
        json.dumps({"question": "Tom has 3 and 4.", "answer": "3 + 4 = 7\n#### 7"}),  # GSM8K-style
        json.dumps({"problem": "Bare?", "answer": "\\frac{1}{3}"}),
        json.dumps({"problem": "Both?", "solution": "$\\boxed{9}$", "answer": "nine"}),  # the box wins
    ])
    records = load_math(path)
    assert [(r["problem"], r["answer"]) for r in records] == [
        ("1+1?", "2"), ("Tom has 3 and 4.", "7"), ("Bare?", "\\frac{1}{3}"), ("Both?", "9")]
    worked = ["2", "3 + 4 = 7\n#### 7", "\\frac{1}{3}", "$\\boxed{9}$"]  # training's `answer`: the worked solution
    assert [r["answer"] for r in data.load_questions(path)] == worked


def test_math_dataset_name_reads_the_environment(tmp_path, monkeypatch):
    path = write_math(tmp_path / "math.jsonl", math_task_rows())
    monkeypatch.delenv("HW3_MATH_DATA", raising=False)
    with pytest.raises(DataFileError, match=r"'math' means the MATH data named by \$HW3_MATH_DATA, which is not set"):
        data.load_task(task_cfg("math"))
    monkeypatch.setenv("HW3_MATH_DATA", str(path))
    assert data.load_task(task_cfg("math")) == data.load_task(task_cfg(path))
    assert load_math("math") == load_math(path)


def test_load_task_on_a_hub_id_reads_train_and_test_splits(monkeypatch):
    rows = math_task_rows()
    splits = {"train": rows[:10], "test": rows[10:]}
    asked = []

    def fake_hub_rows(dataset_id, split):
        asked.append((dataset_id, split))
        return splits[split]

    monkeypatch.setattr(data, "_hub_rows", fake_hub_rows)
    train_records, eval_records = data.load_task(task_cfg("someone/MATH", n_eval_examples=8))
    assert asked == [("someone/MATH", "train"), ("someone/MATH", "test")]
    assert [r["gold"] for r in train_records] == MATH_ANSWERS[:10]
    assert [r["gold"] for r in eval_records] == MATH_ANSWERS[10:]


def test_load_task_gsm8k_and_arithmetic_are_unchanged():
    train_records, eval_records = data.load_task(task_cfg("gsm8k", n_train_examples=20, n_eval_examples=5))
    assert train_records == load_gsm8k("train", limit=20) and eval_records == load_gsm8k("test", limit=5)
    cfg = task_cfg("arithmetic", n_train_examples=300, n_eval_examples=50, seed=2, arithmetic_max_operand=9)
    train_records, eval_records = data.load_task(cfg)
    assert train_records == make_arithmetic_problems(300, seed=2, max_operand=9)
    seen = {r["question"] for r in train_records}
    assert len(eval_records) == 50 and not {r["question"] for r in eval_records} & seen
    assert eval_records == [r for r in make_arithmetic_problems(200, seed=1_000_005, max_operand=9)
                            if r["question"] not in seen][:50]


# ---- prompts ----------------------------------------------------------------------------------

def test_r1_zero_prompt_text_is_exact():
    assert load_prompt("r1_zero") == R1_ZERO
    assert load_prompt("r1_zero.prompt").endswith("Assistant: <think>")
    assert load_prompt("question_only") == "{question}"


def test_the_keyword_rows_share_one_template_and_stop_and_differ_in_the_reward():
    from hw3lib.tasks.prompt_table import hw3lib_reward_fn_for, stop_strings_for

    assert load_prompt("keyword") == load_prompt("keyword_sentence") == "{question}\n"
    assert format_prompt("keyword_sentence", "Write a sentence that includes the words: red, cup.") == (
        "Write a sentence that includes the words: red, cup.\n")
    assert stop_strings_for("keyword") == stop_strings_for("keyword_sentence") == ("\n",)
    # the handout fixes the keyword reward: `keyword` is the course's inclusion check, the gate an option
    assert hw3lib_reward_fn_for("keyword").__name__ == "keyword_inclusion_reward_fn"
    assert hw3lib_reward_fn_for("keyword_sentence").__name__ == "keyword_sentence_reward_fn"


def test_unknown_prompt_lists_available_names():
    with pytest.raises(ValueError, match="available: keyword, question_only, r1_zero"):
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
