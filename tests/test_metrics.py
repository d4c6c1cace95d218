"""The course's tests/test_metrics.py, GSM8K part: parsing the last number of a free-form response."""

from __future__ import annotations

import pytest

from hw3lib import adapters


def test_parse_gsm8k_response():
    model_output = ("Natalia sold 48/2 = 24 clips in May. "
                    "Natalia sold 48+24 = 72 clips altogether in April and May.")
    assert adapters.run_parse_gsm8k_response(model_output=model_output) == "72"


def test_parse_gsm8k_response_unknown():
    model_output = ("Natalia sold twenty-four clips in May. "
                    "Thus, Natalia sold seventy-two clips altogether in April and May.")
    assert not adapters.run_parse_gsm8k_response(model_output=model_output)


@pytest.mark.parametrize("text, number", [
    ("It costs $1,234.50 in total, then", "1234.50"),  # thousands commas removed, decimals kept
    ("The answer is -7.", "-7"),  # a sentence's period is not a decimal point
    ("5-3 leaves 2", "2"),  # the last number wins
    ("48/2", "2"),  # a fraction is two numbers
    ("a 10-year-old", "10"),
    ("", None),
])
def test_parse_gsm8k_response_hand_worked(text, number):
    assert adapters.run_parse_gsm8k_response(text) == number


def test_adapters_module_exports_every_name_the_courses_import():
    names = {"run_tokenize_prompt_and_output", "run_compute_entropy", "run_get_response_log_probs",
             "run_masked_normalize", "run_masked_mean", "run_sft_microbatch_train_step",
             "run_compute_group_normalized_rewards", "run_compute_naive_policy_gradient_loss",
             "run_compute_grpo_clip_loss", "run_compute_policy_gradient_loss", "run_grpo_microbatch_train_step",
             "run_parse_gsm8k_response"}
    assert set(adapters.__all__) == names
    namespace: dict = {}
    exec("from hw3lib.adapters import *", namespace)  # the student's one-line tests/adapters.py
    assert names <= set(namespace)
