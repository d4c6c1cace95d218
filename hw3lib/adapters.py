"""The courses' test adapters, filled in: `run_*` functions named and shaped as in their `tests/adapters.py`.

The three courses ship public test files (`tests/test_sft.py`, `tests/test_grpo.py`,
`tests/test_metrics.py`) that import `run_*` functions from a `tests/adapters.py` the student
fills in. With hw3lib that file is one line:

    from hw3lib.adapters import *  # noqa: F401,F403

Each adapter has the argument names and order of the courses' stubs and calls the hw3lib function
of the same name (`hw3lib.maths.sft`, `hw3lib.maths.grpo`, `hw3lib.tasks.rewards`); nothing is
re-implemented here. Where the handouts spell an argument two ways, the adapter accepts both
(keyword-only, at the end), so a student's own call sites keep working.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

from hw3lib.maths import grpo, sft
from hw3lib.tasks.rewards import parse_gsm8k_response

__all__ = [
    "run_tokenize_prompt_and_output", "run_compute_entropy", "run_get_response_log_probs", "run_masked_normalize",
    "run_masked_mean", "run_sft_microbatch_train_step", "run_compute_group_normalized_rewards",
    "run_compute_naive_policy_gradient_loss", "run_compute_grpo_clip_loss", "run_compute_policy_gradient_loss",
    "run_grpo_microbatch_train_step", "run_parse_gsm8k_response",
]


def _one_constant(default: float | None, name: str, **aliases: float | None) -> float | None:
    """The constant passed under `name` or under exactly one of its other spellings (else `default`)."""
    given = {key: value for key, value in aliases.items() if value is not None}
    if len(given) > 1 or (given and default not in (None, 1.0)):
        spelled = ", ".join(f"{key}={value}" for key, value in {name: default, **given}.items())
        raise TypeError(f"pass the normalizing constant once ({spelled}): the spellings mean the same")
    return next(iter(given.values())) if given else default


# --- SFT (handout section "SFT helper methods") ------------------------------------------------------

def run_tokenize_prompt_and_output(prompt_strs: list[str], output_strs: list[str], tokenizer) -> dict[str, torch.Tensor]:
    """`input_ids`, `labels`, `response_mask`, each `[batch, max_len - 1]`."""
    return sft.tokenize_prompt_and_output(prompt_strs, output_strs, tokenizer)


def run_compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy over the last dimension of `logits`."""
    return sft.compute_entropy(logits)


def run_get_response_log_probs(model: torch.nn.Module, input_ids: torch.Tensor, labels: torch.Tensor,
                               return_token_entropy: bool) -> dict[str, torch.Tensor]:
    """`{"log_probs": [B, T]}` plus `"token_entropy"` when asked."""
    return sft.get_response_log_probs(model, input_ids, labels, return_token_entropy=return_token_entropy)


def run_masked_normalize(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None,
                         normalize_constant: float = 1.0, *, constant_normalizer: float | None = None
                         ) -> torch.Tensor:
    """Masked sum over `dim` divided by the constant (either spelling)."""
    return sft.masked_normalize(tensor, mask, dim=dim, normalize_constant=normalize_constant,
                                constant_normalizer=constant_normalizer)


def run_masked_mean(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of the masked entries over `dim` (NaN for an empty slice, as the course)."""
    return sft.masked_mean(tensor, mask, dim=dim)


def run_sft_microbatch_train_step(policy_log_probs: torch.Tensor, response_mask: torch.Tensor,
                                  gradient_accumulation_steps: int, normalize_constant: float | None = 1.0, *,
                                  constant_normalizer: float | None = None,
                                  normalization_constant: float | None = None,
                                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One SFT microbatch: loss backpropagated; returns (scaled loss, stats)."""
    constant = _one_constant(normalize_constant, "normalize_constant", constant_normalizer=constant_normalizer,
                             normalization_constant=normalization_constant)
    return sft.sft_microbatch_train_step(policy_log_probs, response_mask, gradient_accumulation_steps,
                                         normalize_constant=1.0 if constant is None else constant)


# --- GRPO (handout sections on group normalization, losses and the train step) -----------------------

def run_compute_group_normalized_rewards(reward_fn: Callable, rollout_responses: list[str],
                                         repeated_ground_truths: list[str], group_size: int, advantage_eps: float,
                                         normalize_by_std: bool) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """(advantages [N], raw rewards [N], stats)."""
    return grpo.compute_group_normalized_rewards(reward_fn, rollout_responses, repeated_ground_truths, group_size,
                                                 advantage_eps, normalize_by_std)


def run_compute_naive_policy_gradient_loss(raw_rewards_or_advantages: torch.Tensor,
                                           policy_log_probs: torch.Tensor) -> torch.Tensor:
    """Per-token `-A * log p`, `[B, T]`."""
    return grpo.compute_naive_policy_gradient_loss(raw_rewards_or_advantages, policy_log_probs)


def run_compute_grpo_clip_loss(advantages: torch.Tensor, policy_log_probs: torch.Tensor, old_log_probs: torch.Tensor,
                               cliprange: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token clipped-ratio loss `[B, T]` and its stats (`clipped` per token)."""
    return grpo.compute_grpo_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange)


def run_compute_policy_gradient_loss(policy_log_probs: torch.Tensor, loss_type: str, raw_rewards: torch.Tensor,
                                     advantages: torch.Tensor, old_log_probs: torch.Tensor, cliprange: float
                                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss `loss_type` names (`no_baseline`, `reinforce_with_baseline`, `grpo_clip`, `grpo_no_clip`)."""
    return grpo.compute_policy_gradient_loss(policy_log_probs, loss_type, raw_rewards, advantages, old_log_probs,
                                             cliprange)


def run_grpo_microbatch_train_step(policy_log_probs: torch.Tensor, response_mask: torch.Tensor,
                                   gradient_accumulation_steps: int,
                                   loss_type: Literal["no_baseline", "reinforce_with_baseline", "grpo_clip"],
                                   raw_rewards: torch.Tensor | None = None, advantages: torch.Tensor | None = None,
                                   old_log_probs: torch.Tensor | None = None, cliprange: float | None = None, *,
                                   constant_normalize_factor: float | None = None,
                                   constant_normalizer: float | None = None,
                                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One GRPO microbatch: loss backpropagated; returns (scaled loss, stats).

    Per sequence a `masked_mean` over the response (the course's default), or, when a constant is
    given (the stub's docstring calls it `constant_normalize_factor`; one handout says
    `constant_normalizer`), the masked sum divided by it (Dr. GRPO).
    """
    constant = _one_constant(None, "constant_normalize_factor", constant_normalize_factor=constant_normalize_factor,
                             constant_normalizer=constant_normalizer)
    return grpo.grpo_microbatch_train_step(
        policy_log_probs, response_mask, gradient_accumulation_steps, loss_type, raw_rewards, advantages,
        old_log_probs, cliprange, length_normalization="masked_mean" if constant is None else "constant",
        normalize_constant=constant)


# --- GSM8K (the course's tests/test_metrics.py) -----------------------------------------------------

def run_parse_gsm8k_response(model_output: str) -> str | None:
    """The last number in `model_output` (thousands commas removed), or None."""
    return parse_gsm8k_response(model_output)
