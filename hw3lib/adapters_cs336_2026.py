"""CS336 Spring 2026 (Assignment 5, handout v26): the course's `tests/adapters.py`, filled in.

The 2026 API differs from the 2025 one that `hw3lib.adapters` serves (rewards, advantages, loss and
aggregation are separate switches; a whole train step is one call), so it lives beside it. A student's
`tests/adapters.py` is one line:

    from hw3lib.adapters_cs336_2026 import *  # noqa: F401,F403

Every function has the stub's name, argument names, order and defaults. The maths is
`hw3lib.maths.grpo_2026` (rewards, advantages, the five importance-reweighting methods, aggregation,
the DPO loss) and `hw3lib.maths.sft` (tokenization, per-token log-probs); what is here is glue, plus
the supplement's data helpers (packing, batching, MMLU parsing), which are not tensor maths.
`run_grpo_train_step` is the one function with a loop: read it top to bottom.

Where the handout leaves a case open, the choice is documented in the function (empty responses,
GSPO without a mask, how "constant" normalization adds up over microbatches). `cispo` is accepted
beside the stub's four importance-reweighting methods.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import re
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch.utils.data import DataLoader, Dataset

from hw3lib.maths import grpo_2026, sft
from hw3lib.tasks.rewards import parse_gsm8k_response

__all__ = [
    "run_tokenize_prompt_and_output", "run_get_response_log_probs", "run_compute_rollout_rewards",
    "run_compute_group_normalized_rewards", "run_compute_policy_gradient_loss",
    "run_aggregate_loss_across_microbatch", "run_grpo_train_step", "get_packed_sft_dataset", "run_iterate_batches",
    "run_parse_mmlu_response", "run_parse_gsm8k_response", "run_compute_per_instance_dpo_loss",
]

Method = Literal["none", "noclip", "grpo", "gspo", "cispo"]

# The course's instruction-tuning template (CS336 2024's `alpaca_sft.prompt`), used for SFT packing and DPO.
ALPACA_TEMPLATE = ("Below is an instruction that describes a task. Write a response that appropriately completes "
                   "the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n{response}")


# --- GRPO (handout section 4) ------------------------------------------------------------------------

def run_tokenize_prompt_and_output(prompt_strs: list[str], output_strs: list[str],
                                   tokenizer) -> dict[str, torch.Tensor]:
    """`input_ids`, `labels`, `response_mask`, each `[batch, max_len - 1]` (no special tokens added)."""
    return sft.tokenize_prompt_and_output(prompt_strs, output_strs, tokenizer)


def run_get_response_log_probs(model: torch.nn.Module, input_ids: torch.Tensor, labels: torch.Tensor,
                               return_token_entropy: bool) -> dict[str, torch.Tensor]:
    """`{"log_probs": [B, T]}` plus `"token_entropy"` when asked."""
    return sft.get_response_log_probs(model, input_ids, labels, return_token_entropy=return_token_entropy)


def run_compute_rollout_rewards(reward_fn: Callable[[str, str], dict[str, float]], rollout_responses: list[str],
                                repeated_ground_truths: list[str]) -> tuple[torch.Tensor, dict[str, float]]:
    """Raw rewards `[N]` and their stats (mean total, format and answer rewards among them)."""
    return grpo_2026.rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths)


def run_compute_group_normalized_rewards(raw_rewards: torch.Tensor, group_size: int,
                                         baseline: Literal["mean", "none"] = "mean", advantage_eps: float = 1e-6,
                                         advantage_normalizer: Literal["std", "none", "mean"] = "std",
                                         ) -> tuple[torch.Tensor, dict[str, float]]:
    """Advantages `[N]`: per group, minus the mean (or not), divided by std + eps, nothing, or mean + eps (MaxRL)."""
    return grpo_2026.group_normalized_advantages(raw_rewards, group_size, baseline, advantage_eps,
                                                 advantage_normalizer)


def run_compute_policy_gradient_loss(raw_rewards_or_advantages: torch.Tensor, policy_log_probs: torch.Tensor,
                                     importance_reweighting_method: Method = "none",
                                     old_log_probs: torch.Tensor | None = None, cliprange: float | None = None,
                                     response_mask: torch.Tensor | None = None,
                                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss `[B, T]` and detached stats (clip fractions, ratio mean, approx KL).

    GSPO without `response_mask` averages its log-ratio over every position.
    """
    return grpo_2026.policy_gradient_loss(raw_rewards_or_advantages, policy_log_probs, importance_reweighting_method,
                                          old_log_probs, cliprange, response_mask)


def run_aggregate_loss_across_microbatch(per_token_policy_gradient_loss: torch.Tensor, mask: torch.Tensor,
                                         loss_normalization: Literal["sequence", "constant"] = "sequence",
                                         normalization_constant: int | None = None) -> torch.Tensor:
    """Scalar loss: mean over sequences of each one's masked mean, or the masked sum / constant."""
    return grpo_2026.aggregate_loss(per_token_policy_gradient_loss, mask, loss_normalization, normalization_constant)


def _check_train_step_options(gradient_accumulation_steps, rows, baseline, advantage_normalizer, method,
                              old_log_probs, cliprange, loss_normalization, normalization_constant) -> None:
    """Every argument checked before the first forward pass, so a bad one never leaves half-accumulated gradients."""
    grpo_2026.check_option("baseline", baseline, grpo_2026.BASELINES)
    grpo_2026.check_option("advantage_normalizer", advantage_normalizer, grpo_2026.ADVANTAGE_NORMALIZERS)
    grpo_2026.check_option("importance_reweighting_method", method, grpo_2026.IMPORTANCE_METHODS)
    grpo_2026.check_option("loss_normalization", loss_normalization, grpo_2026.LOSS_NORMALIZATIONS)
    if method in grpo_2026.NEEDS_OLD_LOG_PROBS and old_log_probs is None:
        raise ValueError(f"importance_reweighting_method={method!r} needs old_log_probs (the sampling policy's)")
    if method in grpo_2026.NEEDS_CLIPRANGE and (cliprange is None or cliprange < 0):
        raise ValueError(f"importance_reweighting_method={method!r} needs cliprange >= 0, got {cliprange!r}")
    if loss_normalization == "constant" and (normalization_constant is None or not normalization_constant > 0):
        raise ValueError("loss_normalization='constant' needs normalization_constant > 0, "
                         f"got {normalization_constant!r}")
    if not isinstance(gradient_accumulation_steps, int) or not 1 <= gradient_accumulation_steps <= rows:
        raise ValueError(f"gradient_accumulation_steps={gradient_accumulation_steps!r}: pass an int from 1 to the "
                         f"number of rollouts ({rows})")


def _accumulate_microbatches(model, batch, advantages, old_log_probs, method, cliprange, loss_normalization,
                             normalization_constant, gradient_accumulation_steps) -> tuple[torch.Tensor, dict]:
    """Forward and backward over consecutive, near-equal microbatches of `batch`; gradients accumulate.

    Each microbatch's aggregated loss is scaled so the microbatches add up to the whole batch's
    aggregate (see `run_grpo_train_step`). Returns (the batch loss, detached; token-weighted sums of
    entropy and clip statistics, and the response-token count).
    """
    rows = batch["labels"].shape[0]
    device = next(model.parameters()).device
    loss_total = torch.zeros((), device=device)
    sums = {"entropy": 0.0, "clipped": 0.0, "clipped_low": 0.0, "clipped_high": 0.0, "kl": 0.0, "tokens": 0.0}
    for idx in torch.arange(rows).tensor_split(gradient_accumulation_steps):
        mask = batch["response_mask"][idx].to(device)  # [b, T]
        scored = sft.get_response_log_probs(model, batch["input_ids"][idx].to(device), batch["labels"][idx].to(device),
                                            return_token_entropy=True)  # [b, T] each
        per_token, stats = grpo_2026.policy_gradient_loss(
            advantages[idx].to(device), scored["log_probs"], method,
            None if old_log_probs is None else old_log_probs[idx].to(device), cliprange, mask)  # [b, T]
        microbatch = grpo_2026.aggregate_loss(per_token, mask, loss_normalization, normalization_constant)  # []
        share = len(idx) / rows if loss_normalization == "sequence" else 1.0
        loss = microbatch * share  # []
        loss.backward()
        loss_total += loss.detach()
        tokens = float(mask.sum())
        sums["tokens"] += tokens
        sums["entropy"] += float(torch.where(mask, scored["token_entropy"], 0.0).sum())
        for key, flag in (("clipped", "clip_fraction"), ("clipped_low", "clip_fraction_low"),
                          ("clipped_high", "clip_fraction_high"), ("kl", "approx_kl")):
            sums[key] += float(stats.get(flag, 0.0)) * tokens  # token-weighted across microbatches
    return loss_total, sums


def run_grpo_train_step(
    model: torch.nn.Module,
    tokenizer,
    optimizer: torch.optim.Optimizer,
    gradient_accumulation_steps: int,
    max_grad_norm: float | None,
    reward_fn: Callable[[str, str], dict[str, float]],
    repeated_prompts: list[str],
    rollout_responses: list[str],
    repeated_ground_truths: list[str],
    group_size: int,
    baseline: Literal["mean", "none"] = "mean",
    advantage_eps: float = 1e-6,
    advantage_normalizer: Literal["std", "none", "mean"] = "std",
    importance_reweighting_method: Method = "none",
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    loss_normalization: Literal["sequence", "constant"] = "sequence",
    normalization_constant: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor | float]]:
    """One GRPO optimizer step on a rollout batch: rewards -> advantages -> microbatches -> clip -> step.

    The batch is tokenized once (so `old_log_probs` `[N, L - 1]` lines up with its labels) and cut
    into `gradient_accumulation_steps` consecutive microbatches. Each microbatch's aggregated loss is
    scaled so that the microbatches add up to the aggregate of the whole batch, whatever the split:
    "sequence" scales by its share of the sequences (1 / gradient_accumulation_steps for equal
    microbatches); "constant" adds the microbatch sums / constant unscaled, so the step divides the
    batch's total token loss by the constant, as the handout says ("fixed for all of training").
    The gradient norm is clipped to `max_grad_norm` (when given), the optimizer steps, and the
    gradients are set to None.

    Returns (the batch loss, detached; metadata): reward and advantage stats, `grad_norm` (before
    clipping), `token_entropy` and the clip statistics over the response tokens, `response_tokens`.
    """
    rows = len(repeated_prompts)
    if not rows == len(rollout_responses) == len(repeated_ground_truths):
        raise ValueError(f"{rows} prompts, {len(rollout_responses)} responses and {len(repeated_ground_truths)} "
                         "ground truths: pass one of each per rollout")
    method = importance_reweighting_method
    _check_train_step_options(gradient_accumulation_steps, rows, baseline, advantage_normalizer, method,
                              old_log_probs, cliprange, loss_normalization, normalization_constant)

    raw_rewards, reward_stats = grpo_2026.rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths)
    advantages, advantage_stats = grpo_2026.group_normalized_advantages(
        raw_rewards, group_size, baseline, advantage_eps, advantage_normalizer)  # [N]
    batch = sft.tokenize_prompt_and_output(repeated_prompts, rollout_responses, tokenizer)  # [N, L-1] each
    off_policy = method in grpo_2026.NEEDS_OLD_LOG_PROBS
    if off_policy and old_log_probs.shape != batch["labels"].shape:
        raise ValueError(f"old_log_probs has shape {tuple(old_log_probs.shape)} but the tokenized batch has "
                         f"{tuple(batch['labels'].shape)}: score the rollouts with the same tokenization")

    optimizer.zero_grad(set_to_none=True)
    loss_total, sums = _accumulate_microbatches(model, batch, advantages, old_log_probs if off_policy else None,
                                                method, cliprange, loss_normalization, normalization_constant,
                                                gradient_accumulation_steps)
    params = [p for p in model.parameters() if p.grad is not None]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm is not None else math.inf)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

    per_token = max(sums["tokens"], 1.0)
    metadata: dict[str, torch.Tensor | float] = {
        **reward_stats, **advantage_stats,
        "loss": float(loss_total), "grad_norm": float(grad_norm), "response_tokens": sums["tokens"],
        "token_entropy": sums["entropy"] / per_token, "clip_fraction": sums["clipped"] / per_token,
        "clip_fraction_low": sums["clipped_low"] / per_token, "clip_fraction_high": sums["clipped_high"] / per_token,
    }
    if off_policy:
        metadata["approx_kl"] = sums["kl"] / per_token
    return loss_total, metadata


# --- The optional RLHF / safety supplement ------------------------------------------------------------

class PackedSFTDataset(Dataset):
    """Instruction-tuning documents in the course template, each ending in EOS, concatenated and cut
    into examples of `seq_length` tokens: `input_ids` = tokens [i L, (i+1) L), `labels` the same
    window shifted by one. The tail that does not fill an example (plus its one label) is dropped."""

    def __init__(self, token_ids: list[int], seq_length: int):
        count = (len(token_ids) - 1) // seq_length
        ids = torch.tensor(token_ids[:count * seq_length + 1], dtype=torch.long)  # [count*L + 1]
        self.input_ids = ids[:-1].reshape(count, seq_length)  # [count, L]
        self.labels = ids[1:].reshape(count, seq_length)  # [count, L]

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids[index], "labels": self.labels[index]}


def _read_jsonl(path: str | os.PathLike) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def get_packed_sft_dataset(tokenizer, dataset_path: str | os.PathLike, seq_length: int, shuffle: bool) -> Dataset:
    """The packed language-modelling dataset of a JSONL file of {"prompt", "response"} records.

    Each record becomes `ALPACA_TEMPLATE` filled with its prompt and response, tokenized as the
    tokenizer does by default (Llama 3's adds its begin-of-text token), followed by the EOS token;
    `shuffle` shuffles the documents (with Python's `random`) before they are concatenated.
    """
    if not isinstance(seq_length, int) or seq_length < 1:
        raise ValueError(f"seq_length={seq_length!r}: pass a positive int")
    records = _read_jsonl(dataset_path)
    if shuffle:
        random.shuffle(records)
    texts = [ALPACA_TEMPLATE.format(instruction=r["prompt"], response=r["response"]) for r in records]
    token_ids: list[int] = []
    for ids in tokenizer(texts)["input_ids"] if texts else []:
        token_ids.extend([*ids, tokenizer.eos_token_id])
    return PackedSFTDataset(token_ids, seq_length)


def run_iterate_batches(dataset: Dataset, batch_size: int, shuffle: bool):
    """One epoch of `dataset` in batches of `batch_size` (the last may be smaller): a DataLoader."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)


# "The answer is B", "Answer: (C)", "answer is option D"; else "(B)"; else a reply that starts with the letter.
_MMLU_PATTERNS = (
    re.compile(r"(?i:answer)(?:\s*(?:(?i:is)|:))*\s*(?:(?i:option)\s*)?[(\[]?([ABCD])(?![A-Za-z0-9])"),
    re.compile(r"\(([ABCD])\)"),
    re.compile(r"^\s*([ABCD])(?:[.):]|\s*$)"),
)


def run_parse_mmlu_response(mmlu_example: dict[str, Any], model_output: str) -> str | None:
    """The option letter the output names ("The correct answer is B." -> "B"), or None when it names none."""
    del mmlu_example  # the letter is read from the output alone; the options' texts are not matched
    for pattern in _MMLU_PATTERNS:
        found = pattern.search(model_output)
        if found:
            return found.group(1)
    return None


def run_parse_gsm8k_response(model_output: str) -> str | None:
    """The last number in `model_output` (thousands commas removed), or None."""
    return parse_gsm8k_response(model_output)


def _sequence_log_prob(model: torch.nn.Module, token_ids: list[int]) -> torch.Tensor:
    """log p(token_ids[1:] | token_ids[0]) under `model`, summed: `[]`."""
    ids = torch.tensor([token_ids], dtype=torch.long, device=next(model.parameters()).device)  # [1, n]
    return sft.get_response_log_probs(model, ids[:, :-1], ids[:, 1:])["log_probs"].sum()  # []


def run_compute_per_instance_dpo_loss(lm: torch.nn.Module, lm_ref: torch.nn.Module, tokenizer, beta: float,
                                      prompt: str, response_chosen: str, response_rejected: str) -> torch.Tensor:
    """DPO loss of one preference pair; gradients reach `lm` only.

    Each response is written into `ALPACA_TEMPLATE` after the prompt, tokenized as the tokenizer does
    by default, and followed by EOS; its log-prob is that of the whole sequence (the prompt's terms
    cancel between the two responses).
    """
    sequences = [tokenizer.encode(ALPACA_TEMPLATE.format(instruction=prompt, response=response))
                 + [tokenizer.eos_token_id] for response in (response_chosen, response_rejected)]
    chosen, rejected = (_sequence_log_prob(lm, ids) for ids in sequences)
    with torch.no_grad():
        ref_chosen, ref_rejected = (_sequence_log_prob(lm_ref, ids).to(chosen.device) for ids in sequences)
    return grpo_2026.dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta)
