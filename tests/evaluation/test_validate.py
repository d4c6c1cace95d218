"""What a validation keeps: a few rollouts in full and every question's outcome, read back for paired tests."""

import json

from hw3lib.evaluation.validate import Outcomes, questions_digest, read_outcomes, save_validation


def _examples(rewards, prefix="q"):
    return [{"question": f"{prefix}{i}", "gold": "1", "response": "r", "answer_reward": r, "format_reward": 1.0}
            for i, r in enumerate(rewards)]


def test_save_keeps_a_few_rollouts_and_every_outcome(tmp_path):
    save_validation(tmp_path, "step_0010", _examples([1.0, 0.0, 0.0, 1.0, 1.0]), n_saved=2)
    saved = [json.loads(line) for line in (tmp_path / "samples" / "step_0010.jsonl").read_text().splitlines()]
    assert [row["question"] for row in saved] == ["q0", "q1"]
    stored = json.loads((tmp_path / "samples" / "step_0010.outcomes.json").read_text())
    assert stored["answer_reward"] == "10011" and stored["n"] == 5  # one character per question, in order
    assert read_outcomes(tmp_path, "step_0010", 5) == Outcomes((1, 0, 0, 1, 1), questions_digest(
        ["q0", "q1", "q2", "q3", "q4"]))
    assert read_outcomes(tmp_path, "step_0010", 6) is None  # another validation size: not these questions


def test_the_digest_tells_other_questions_and_another_order():
    assert questions_digest(["a", "b"]) == questions_digest(["a", "b"])
    assert questions_digest(["a", "b"]) != questions_digest(["b", "a"])
    assert questions_digest(["ab"]) != questions_digest(["a", "b"])


def test_older_runs_read_from_rollouts_only_when_every_question_was_saved(tmp_path):
    folder = tmp_path / "samples"
    folder.mkdir()
    rows = _examples([0.0, 1.0, 1.0])
    (folder / "step_0004.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert read_outcomes(tmp_path, "step_0004", 3).answer_rewards == (0, 1, 1)
    assert read_outcomes(tmp_path, "step_0004", 8) is None  # a run made before outcomes: only 3 of 8 saved
    assert read_outcomes(tmp_path, "step_0008", 3) is None  # no such validation


def test_a_graded_reward_other_than_0_or_1_keeps_no_outcomes(tmp_path):
    save_validation(tmp_path, "step_0000", _examples([0.5, 1.0]), n_saved=4)
    assert not (tmp_path / "samples" / "step_0000.outcomes.json").exists()
    assert read_outcomes(tmp_path, "step_0000", 2) is None
