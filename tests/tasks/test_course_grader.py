"""hw3lib.tasks.course_grader: $HW3_COURSE_GRADER swaps in the course's grader; agreement is counted."""

from __future__ import annotations

import json
import textwrap

import pytest

from hw3lib.tasks.course_grader import CourseGraderError, course_reward_fn, grader_agreement
from hw3lib.tasks.prompt_table import hw3lib_reward_fn_for, reward_fn_for
from hw3lib.tasks.rewards import r1_zero_reward_fn

# A stand-in for the course's drgrpo_grader.py (we do not ship theirs): laxer than ours on purpose --
# it only wants "</answer>" and compares the answer as a string.
LAX_GRADER = textwrap.dedent('''
    def r1_zero_reward_fn(response, ground_truth, fast=True):
        if "</answer>" not in response:
            return {"format_reward": 0.0, "answer_reward": 0.0, "reward": 0.0}
        answer = response.split("<answer>")[-1].replace("</answer>", "").strip()
        correct = float(answer == ground_truth)
        return {"format_reward": 1.0, "answer_reward": correct, "reward": correct}
''')


@pytest.fixture
def lax_grader(tmp_path, monkeypatch):
    path = tmp_path / "drgrpo_grader.py"
    path.write_text(LAX_GRADER)
    monkeypatch.setenv("HW3_COURSE_GRADER", str(path))
    return path


def test_the_environment_variable_swaps_the_reward(lax_grader):
    reward = reward_fn_for("r1_zero")
    assert reward.__name__ == "course:r1_zero_reward_fn"  # never mistaken for ours in a run's fingerprint
    unformatted_but_closed = "I think <answer>4</answer>"  # no "</think> <answer>": ours says format 0
    assert reward(unformatted_but_closed, "4") == {"reward": 1.0, "format_reward": 1.0, "answer_reward": 1.0}
    assert r1_zero_reward_fn(unformatted_but_closed, "4")["reward"] == 0.0
    assert hw3lib_reward_fn_for("r1_zero") is r1_zero_reward_fn
    # the keyword task is ours alone; a prompt the file does not define is refused by name
    assert reward_fn_for("keyword").__name__ == "keyword_inclusion_reward_fn"
    assert reward_fn_for("keyword_sentence").__name__ == "keyword_sentence_reward_fn"
    with pytest.raises(CourseGraderError, match="question_only_reward_fn"):
        reward_fn_for("question_only")


def test_unset_means_ours(monkeypatch):
    monkeypatch.delenv("HW3_COURSE_GRADER", raising=False)
    assert course_reward_fn("r1_zero") is None and reward_fn_for("r1_zero") is r1_zero_reward_fn


def test_a_broken_or_missing_grader_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_COURSE_GRADER", str(tmp_path / "nowhere.py"))
    with pytest.raises(CourseGraderError, match="HW3_COURSE_GRADER=.*nowhere.py: no such file"):
        reward_fn_for("r1_zero")
    broken = tmp_path / "broken.py"
    broken.write_text("import a_module_nobody_has\n")
    monkeypatch.setenv("HW3_COURSE_GRADER", str(broken))
    with pytest.raises(CourseGraderError, match="broken.py failed to import: ModuleNotFoundError"):
        reward_fn_for("r1_zero")


def test_grader_agreement_hand_worked():
    ours = lambda response, truth: {"reward": float(response == truth)}  # noqa: E731
    theirs = lambda response, truth: {"reward": float(response.strip() == truth)}  # noqa: E731
    samples = [("4", "4"), (" 4", "4"), ("5", "4"), ("4 ", "4"), ("x", "y")]
    report = grader_agreement(samples, ours, theirs, max_examples=1)
    assert (report["samples"], report["agree"], report["differ"]) == (5, 3, 2)
    assert (report["ours_only_correct"], report["theirs_only_correct"]) == (0, 2)
    assert report["agreement"] == pytest.approx(0.6)
    assert report["examples"] == [{"response": " 4", "ground_truth": "4", "ours": 0.0, "theirs": 1.0}]


def test_hw3_eval_reports_the_agreement(tmp_path, monkeypatch, tiny_model_dir, shared_data_dir):
    from typer.testing import CliRunner

    from hw3lib.cli import app
    from hw3lib.evaluation.evaluate import load_run

    grader = tmp_path / "drgrpo_grader.py"
    grader.write_text("def r1_zero_reward_fn(response, ground_truth, fast=True):\n"
                      "    return {'format_reward': 1.0, 'answer_reward': 1.0, 'reward': 1.0}\n")  # rewards all
    monkeypatch.setenv("HW3_COURSE_GRADER", str(grader))
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["eval", "--model", "tiny", "--n", "2", "--max-tokens", "6", "--limit", "3",
                                      "--device", "cpu", "--no-progress", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows, summary = load_run(out)
    assert summary["reward_fn"] == "course:r1_zero_reward_fn" and summary["accuracy"] == 1.0
    report = json.loads((out / "grader_agreement.json").read_text())
    ours_correct = sum(r1_zero_reward_fn(g["text"], row["ground_truth"])["reward"]
                       for row in rows for g in row["generations"])
    assert report["samples"] == 6 and report["theirs_only_correct"] == 6 - ours_correct
    assert report["ours_only_correct"] == 0 and f"{report['agree']} of 6 samples scored alike" in result.output
    # a grader file that does not exist: one line naming the variable, no traceback
    monkeypatch.setenv("HW3_COURSE_GRADER", str(tmp_path / "missing.py"))
    result = CliRunner().invoke(app, ["eval", "--model", "tiny", "--limit", "1", "--out", str(tmp_path / "b")])
    assert result.exit_code == 1 and "HW3_COURSE_GRADER" in result.output and "Traceback" not in result.output
