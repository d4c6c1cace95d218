"""hw3lib.adapters: the argument names and order of the courses' adapter stubs, exactly."""

from __future__ import annotations

import inspect

from hw3lib import adapters

# Written from the courses' public tests/adapters.py stubs (positional-or-keyword parameters, in order).
STUB_PARAMETERS = {
    "run_tokenize_prompt_and_output": ["prompt_strs", "output_strs", "tokenizer"],
    "run_compute_entropy": ["logits"],
    "run_get_response_log_probs": ["model", "input_ids", "labels", "return_token_entropy"],
    "run_masked_normalize": ["tensor", "mask", "dim", "normalize_constant"],
    "run_masked_mean": ["tensor", "mask", "dim"],
    "run_sft_microbatch_train_step": ["policy_log_probs", "response_mask", "gradient_accumulation_steps",
                                      "normalize_constant"],
    "run_compute_group_normalized_rewards": ["reward_fn", "rollout_responses", "repeated_ground_truths",
                                             "group_size", "advantage_eps", "normalize_by_std"],
    "run_compute_naive_policy_gradient_loss": ["raw_rewards_or_advantages", "policy_log_probs"],
    "run_compute_grpo_clip_loss": ["advantages", "policy_log_probs", "old_log_probs", "cliprange"],
    "run_compute_policy_gradient_loss": ["policy_log_probs", "loss_type", "raw_rewards", "advantages",
                                         "old_log_probs", "cliprange"],
    "run_grpo_microbatch_train_step": ["policy_log_probs", "response_mask", "gradient_accumulation_steps",
                                       "loss_type", "raw_rewards", "advantages", "old_log_probs", "cliprange"],
    "run_parse_gsm8k_response": ["model_output"],
}
# Defaults the stubs give (a call that leaves them out must behave the same).
STUB_DEFAULTS = {
    "run_masked_normalize": {"dim": None, "normalize_constant": 1.0},
    "run_masked_mean": {"dim": None},
    "run_sft_microbatch_train_step": {"normalize_constant": 1.0},
    "run_grpo_microbatch_train_step": {"raw_rewards": None, "advantages": None, "old_log_probs": None,
                                       "cliprange": None},
}


def test_adapters_take_the_stubs_arguments_in_order():
    for name, expected in STUB_PARAMETERS.items():
        parameters = inspect.signature(getattr(adapters, name)).parameters.values()
        positional = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
        assert positional == expected, name
        # anything extra (the other spellings of a constant) is keyword-only and optional
        assert all(p.default is None for p in parameters if p.kind is p.KEYWORD_ONLY), name
        defaults = {p.name: p.default for p in parameters if p.default is not p.empty and p.name in expected}
        assert defaults == STUB_DEFAULTS.get(name, {}), name


def test_a_one_line_adapters_file_serves_a_course_style_test_package(tmp_path):
    """A course repository's layout: tests/ is a package whose test files import `run_*` from `.adapters`."""
    import subprocess
    import sys

    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "__init__.py").write_text("")
    (tests / "adapters.py").write_text("from hw3lib.adapters import *  # noqa: F401,F403\n")
    (tests / "test_course_style.py").write_text(
        "import torch\n"
        "from .adapters import run_masked_mean as masked_mean, run_parse_gsm8k_response\n\n"
        "def test_masked_mean_dim1():\n"
        "    out = masked_mean(torch.tensor([[1.0, 2.0, 9.0]]), torch.tensor([[1, 1, 0]]).bool(), dim=1)\n"
        "    assert out.tolist() == [1.5]\n\n"
        "def test_parse_gsm8k_response():\n"
        "    assert run_parse_gsm8k_response(model_output='48+24 = 72 clips') == '72'\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "tests/test_course_style.py::test_masked_mean_dim1", "tests/test_course_style.py"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
