"""hw3lib.models.warmstart: the SFT examples each warm-start prompt format trains on, by hand."""

from __future__ import annotations

import pytest

from hw3lib.models.warmstart import WARM_START_PROMPTS, question_only_target, warm_start_examples
from hw3lib.tasks.data import format_prompt

RECORD = {"question": "Tom has 2 apples and gets 3 more. How many apples does he have?", "gold": "5",
          "answer": "2 + 3 = 5 #### 5"}


def test_question_only_target_shows_the_working_then_stops():
    assert question_only_target(RECORD, True, "<eos>") == " 2 + 3 = 5<eos>"
    assert question_only_target(RECORD, False, "<eos>") == " \\boxed{5}<eos>"
    fraction = {"answer": "$\\frac{1}{2}-\\frac{1}{3}=\\boxed{\\frac{1}{6}}$.", "gold": "\\frac{1}{6}"}
    from hw3lib.tasks.rewards import question_only_reward_fn

    for shown in (True, False):  # graded right with or without the working (a bare \frac{1}{6} would read as 6)
        assert question_only_reward_fn(question_only_target(fraction, shown, ""), "\\frac{1}{6}")["reward"] == 1.0


def test_r1_zero_and_question_only_examples():
    prompts, targets = warm_start_examples([RECORD], "r1_zero", 1.0, seed=0, eos="<eos>")
    assert prompts == [format_prompt("r1_zero", RECORD["question"])]
    assert targets == [" 2 + 3 = 5 </think> <answer> 5 </answer>"]
    prompts, targets = warm_start_examples([RECORD], "question_only", 0.0, seed=0, eos="<eos>")
    assert prompts == [RECORD["question"]] == [format_prompt("question_only", RECORD["question"])]
    assert targets == [" \\boxed{5}<eos>"]


def test_neutral_mixes_both_formats_evenly_and_deterministically():
    records = [dict(RECORD, question=f"{RECORD['question']} ({i})") for i in range(400)]
    prompts, targets = warm_start_examples(records, "neutral", 1.0, seed=3, eos="<eos>")
    r1_zero = [t.endswith("</answer>") for t in targets]
    assert all(t.endswith("<eos>") != r for t, r in zip(targets, r1_zero))
    assert 0.4 < sum(r1_zero) / len(records) < 0.6  # neither format favoured
    for record, prompt, is_r1 in zip(records, prompts, r1_zero):  # each target under its own prompt
        assert prompt == format_prompt("r1_zero" if is_r1 else "question_only", record["question"])
    assert warm_start_examples(records, "neutral", 1.0, seed=3, eos="<eos>") == (prompts, targets)
    assert warm_start_examples(records, "neutral", 1.0, seed=4, eos="<eos>") != (prompts, targets)


def test_unknown_prompt_is_named(tmp_path):
    from hw3lib.models.warmstart import sft_warm_start

    with pytest.raises(ValueError, match="prompt='keyword'.*neutral"):
        sft_warm_start("tiny", [RECORD], steps=1, prompt="keyword", out_dir=tmp_path)
    assert "neutral" in WARM_START_PROMPTS
