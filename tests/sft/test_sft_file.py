"""The course's SFT file format (`prompt`, `response`/`completion`, `ground_truth` per line) in the SFT runner."""

from __future__ import annotations

import json

import pytest

from hw3lib.sft.config import SFTConfig
from hw3lib.sft.loop import read_sft_file, select_traces, train_sft
from hw3lib.tasks.data import format_prompt
from hw3lib.tasks.rewards import r1_zero_reward_fn


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))


def write_lines(path, rows):
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def course_rows(n: int) -> list[dict]:
    """Course-style lines: half answer right, half wrong (as a teacher model's traces would)."""
    rows = []
    for i in range(n):
        prompt = format_prompt("r1_zero", f"What is {i} + 1?")
        answer = i + 1 if i % 2 == 0 else i + 2
        key = "response" if i % 3 else "completion"  # both spellings occur
        rows.append({"prompt": prompt, key: f" {i} + 1 = {answer} </think> <answer> {answer} </answer>",
                     "ground_truth": str(i + 1)})
    return rows


def test_read_sft_file_takes_both_spellings(tmp_path):
    traces = read_sft_file(write_lines(tmp_path / "sft.jsonl", course_rows(4)))
    assert [t["gold"] for t in traces] == ["1", "2", "3", "4"]
    assert traces[0]["response"] == " 0 + 1 = 1 </think> <answer> 1 </answer>"  # from "completion"
    assert traces[1]["prompt"].endswith("What is 1 + 1?\nAssistant: <think>")


def test_read_sft_file_names_file_and_line(tmp_path):
    bad = write_lines(tmp_path / "bad.jsonl", [course_rows(1)[0], "{not json", ])
    with pytest.raises(ValueError, match=r"bad.jsonl, line 2: not JSON"):
        read_sft_file(bad)
    missing = write_lines(tmp_path / "missing.jsonl", [{"prompt": "p", "ground_truth": "1"}])
    with pytest.raises(ValueError, match=r"missing.jsonl, line 1: .*\"response\""):
        read_sft_file(missing)
    with pytest.raises(FileNotFoundError, match="sft_file="):
        read_sft_file(tmp_path / "nowhere.jsonl")
    with pytest.raises(ValueError, match="sft_file="):
        SFTConfig(sft_file="data.json")


def test_filtering_removes_the_traces_graded_wrong(tmp_path):
    """Real wrong answers, graded: the filter keeps exactly the even lines (the right ones)."""
    traces = read_sft_file(write_lines(tmp_path / "sft.jsonl", course_rows(10)))
    cfg = SFTConfig.for_profile("smoke", filter_correct=True)
    kept, info = select_traces(traces, cfg, r1_zero_reward_fn)
    assert info["n_pool"] == 10 and info["n_after_filter"] == 5 and info["n_noisy"] == 0
    assert sorted(int(t["gold"]) for t in kept) == [1, 3, 5, 7, 9]


def test_train_sft_reads_the_file(tmp_path):
    path = write_lines(tmp_path / "sft.jsonl", course_rows(16))
    cfg = SFTConfig.for_profile("smoke", name="from_file", sft_file=str(path), n_sft_steps=2, train_batch_size=4,
                                gradient_accumulation_steps=1, eval_every=2, n_eval_examples=4,
                                sampling_max_tokens=8, checkpoint_every=2)
    result = train_sft(cfg)
    saved = json.loads((result.run_dir / "traces.json").read_text())
    assert saved["n_pool"] == 16 and saved["examples"][0]["prompt"].startswith("A conversation between User")
    assert any("What is" in example["question"] for example in saved["examples"])
    assert result.steps == 2


def test_the_course_sft_file_comes_from_the_environment(tmp_path, monkeypatch):
    from hw3lib.sft.config import SFT_FILE_ENV, course_sft_file

    monkeypatch.delenv(SFT_FILE_ENV, raising=False)
    assert course_sft_file() is None  # unset: traces are built from the dataset
    data = tmp_path / "sft.jsonl"
    data.write_text('{"prompt": "p <think>", "response": " r </think> <answer> 1 </answer>", "ground_truth": "1"}\n')
    monkeypatch.setenv(SFT_FILE_ENV, str(data))
    assert course_sft_file() == str(data)
    monkeypatch.setenv(SFT_FILE_ENV, str(tmp_path / "missing.jsonl"))
    with pytest.raises(FileNotFoundError, match="HW3_SFT_FILE=.*missing.jsonl: no such .jsonl file"):
        course_sft_file()
