"""One optimizer step of the GRPO loop: its microbatches, gradient clipping, the update and its log row.

The loss of a microbatch is assembled here from the course's per-token losses
(`hw3lib.maths.grpo.compute_policy_gradient_loss`) and normalizers (`hw3lib.maths.sft.masked_normalize`):

    per-token loss [b, T]  (x truncated importance weights, when `tis_cap` is set;
                            x the MIS keep mask, when `mis` is set)
    -> per sequence: summed over its response tokens, / its length (`masked_mean`) or / a constant
    -> summed over the microbatch, / train_batch_size (the optimizer step's sequences)
    -> backward

or, with `length_normalization="token_mean"` (DAPO), the microbatch's summed token losses / the
response tokens of the whole optimizer step: one count, taken from the step's rows before its
first microbatch, so 1, 2 or 8 microbatches give the same update.

which is the course's `grpo_microbatch_train_step` with two guards the loop needs and the course
function (rightly) does not have: a response with no tokens contributes 0 with zero gradient
instead of 0/0 = NaN, and no host synchronisation happens inside the microbatch loop.

**Truncated importance sampling (TIS, optional, `tis_cap`).** The rollout engine samples with its
own kernels and, in mixed precision, bf16 weights; the trainer's float32-master policy assigns
the same tokens slightly different probabilities, so "on-policy" updates are in fact off-policy
by that mismatch (Yao et al., 2025, "Your efficient RL framework secretly brings you off-policy
RL training"). TIS multiplies each token's loss by w = min(pi_trainer(y) / pi_engine(y), cap),
with pi_trainer the policy at sampling time (the old log-probs), detached: an unbiased correction
up to the truncation, whose cap bounds the variance. Off by default (`tis_cap=None`).

**Masked importance sampling (MIS, optional, `mis`).** Where TIS re-weights, MIS drops: tokens
(`mis="token"`) or whole responses (`mis="sequence"`, by the product of their token ratios) whose
ratio pi_trainer / pi_engine leaves `[mis_low, mis_high]` contribute nothing to the loss (the
normalizers are unchanged, so dropping never up-weights the rest). A large ratio there is no
learning signal but a token the two sides disagree on (a kernel bug, a precision cliff), and
such tokens dominate the gradient's variance; both can be on together. Off by default; turn it on
when the logged mismatch KL (`train/mismatch_kl`) grows or spikes, typically with bf16 rollouts,
long responses or MoE models. The fraction dropped is logged (`train/mis_dropped_fraction`).

**The mismatch KL** KL(pi_engine || pi_trainer) over the sampled tokens (k3 estimator, which is
never negative; k1 beside it) is measured at the sampling weights and logged every step
(`train/mismatch_kl`, `train/mismatch_kl_k1`): its growth is the early warning that the engine and
the trainer have drifted apart (the loop warns above a threshold: hw3lib.grpo.health).

**Metrics** are means over the response tokens of the whole optimizer step (not means of
per-microbatch means, never over padding): token sums are accumulated on the device and moved to
the host once per optimizer step, together with the gradient norm.
"""

from __future__ import annotations

import math

import torch

from hw3lib.maths.grpo import (CLIP_LOSSES, LOSS_INPUTS, compute_policy_gradient_loss, mismatch_keep_mask,
                               token_mean_loss)
from hw3lib.maths.logprobs import autocast_for, kl_token_sums, response_log_probs
from hw3lib.maths.sft import masked_normalize

# The step's statistics, summed over its microbatches on the device (token sums unless named otherwise).
_SUMS = ("loss", "tokens", "entropy", "clipped", "ratio", "kl_k1", "kl_k3", "tis_weight", "mis_dropped",
         "mismatch_abs", "mismatch_tokens", "mismatch_kl_k1", "mismatch_kl_k3")


def logprob_mismatch(trainer_log_probs: torch.Tensor, engine_log_probs: torch.Tensor,
                     mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Engine/trainer disagreement on the sampled tokens:
    `[B, T] x 3 -> (sum |diff|, token count, max ratio, KL k1 sum, KL k3 sum)`.

    max ratio = the largest exp(|log pi_trainer - log pi_engine|) over the tokens: the factor by
    which one side's probability of a sampled token exceeds the other's (1 = perfect agreement).
    The KL sums estimate KL(pi_engine || pi_trainer) on the engine's own samples (the tokens were
    drawn from the engine): k1 = log pi_engine - log pi_trainer, k3 = r - 1 - log r with
    r = pi_trainer / pi_engine (never negative; hw3lib.maths.logprobs.kl_token_sums).
    """
    keep = mask.bool()
    diff = torch.where(keep, trainer_log_probs - engine_log_probs, 0.0)  # [B, T]
    k1, k3 = kl_token_sums(engine_log_probs, trainer_log_probs, keep)
    return diff.abs().sum(), keep.sum(), diff.abs().max().exp(), k1, k3


def loss_inputs(cfg, mask: torch.Tensor, *, raw_rewards: torch.Tensor, advantages: torch.Tensor,
                old_log_probs: torch.Tensor | None) -> dict:
    """The inputs of `compute_policy_gradient_loss` that the loss table names for `cfg.loss_type`."""
    clip_low, clip_high = cfg.clip_bounds
    available = {"raw_rewards": raw_rewards, "advantages": advantages, "old_log_probs": old_log_probs,
                 "cliprange": cfg.cliprange, "clip_low": clip_low, "clip_high": clip_high, "response_mask": mask}
    return {name: available[name] for name in LOSS_INPUTS[cfg.loss_type]}


def microbatch_loss(log_probs: torch.Tensor, mask: torch.Tensor, cfg, *, raw_rewards: torch.Tensor,
                    advantages: torch.Tensor, old_log_probs: torch.Tensor | None,
                    tis_weights: torch.Tensor | None, step_tokens: torch.Tensor | None = None) -> torch.Tensor:
    """The microbatch's share of the optimizer step's loss (see the module docstring): `[b, T] x ... -> []`.

    Sequences are divided by `cfg.train_batch_size`, so summing the microbatches of a step gives
    the mean over the step's sequences whatever the microbatch sizes. `tis_weights` `[b, T]`:
    constant per-token weights (TIS, times the MIS keep mask). `step_tokens` `[]`: the response
    tokens of the whole optimizer step, which `token_mean` divides by (required there).
    """
    inputs = loss_inputs(cfg, mask, raw_rewards=raw_rewards, advantages=advantages, old_log_probs=old_log_probs)
    per_token, _ = compute_policy_gradient_loss(log_probs, cfg.loss_type, **inputs)  # [b, T]
    if tis_weights is not None:
        per_token = per_token * tis_weights  # [b, T]
    if cfg.length_normalization == "token_mean":
        if step_tokens is None:
            raise ValueError("length_normalization='token_mean' needs step_tokens, the response tokens of the "
                             "whole optimizer step (optimizer_step counts them once, before its microbatches)")
        return token_mean_loss(per_token, mask, torch.as_tensor(step_tokens).clamp(min=1))  # []: no tokens, no 0/0
    summed = masked_normalize(per_token, mask, dim=-1, normalize_constant=1.0)  # [b]
    if cfg.length_normalization == "masked_mean":
        per_sequence = summed / mask.sum(dim=-1).clamp(min=1)  # [b]: an empty response counts 0, not 0/0
    else:
        # Dr. GRPO's constant: length_normalization_constant, by default the generation budget.
        per_sequence = summed / float(cfg.length_normalization_constant or cfg.sampling_max_tokens)  # [b]
    return per_sequence.sum() / cfg.train_batch_size  # []


def mismatch_weights(cfg, behaviour: torch.Tensor, engine: torch.Tensor, mask: torch.Tensor,
                     sums: dict[str, torch.Tensor]) -> torch.Tensor | None:
    """The constant per-token weights against the engine/trainer mismatch, `[b, T]` (None: neither is on):
    TIS's truncated ratio times MIS's keep mask. Adds their statistics to the step's `sums`."""
    weights = None
    if cfg.tis_cap is not None:
        weights = torch.exp(behaviour - engine).clamp(max=cfg.tis_cap)  # [b, T]
        sums["tis_weight"] += masked_normalize(weights, mask)
    if cfg.mis is not None:
        keep = mismatch_keep_mask(behaviour, engine, mask, cfg.mis, *cfg.mis_bounds)  # [b, T] bool
        sums["mis_dropped"] += masked_normalize((mask.bool() & ~keep).float(), mask)
        weights = keep.float() if weights is None else weights * keep  # [b, T]
    return weights


def optimizer_step(policy, optimizer, params, cfg, batch: dict[str, torch.Tensor], rows: torch.Tensor, *,
                   raw_rewards: torch.Tensor, advantages: torch.Tensor, old_log_probs: torch.Tensor | None,
                   ref_log_probs: torch.Tensor | None, engine_log_probs: torch.Tensor, shared_prefix: int,
                   learning_rate: float, measure_mismatch: bool, before_update=None, working=None,
                   forward_rows: int | None = None) -> dict:
    """Accumulate the gradients of `rows` (`[train_batch_size]` CPU indices into `batch`) in microbatches,
    clip, update (unless the loss or gradient norm is not finite), and return the step's statistics.

    `batch`: `input_ids`, `labels`, `response_mask` on the policy's device, `lengths` and
    `response_start` on the CPU (hw3lib.maths.sft.pack_prompt_and_output_ids).

    `old_log_probs` `[N, L-1]`: the policy's log-probs at sampling time when they were computed
    (off-policy ratio losses, TIS); None means the current policy sampled the batch, so its own
    detached log-probs serve. `measure_mismatch`: the current weights are the sampling weights,
    so the engine/trainer mismatch can be measured on these rows. `before_update(policy)` runs
    after the gradients are accumulated and before clipping (the loop's callback). `working`: the policy's
    `hw3lib.core.precision.MasterWeights`, whose copy the microbatches run through (None: `policy` itself).
    `forward_rows`: sequences per forward (None: `micro_train_batch_size`); the update does not depend on it.

    Returns floats: `loss`, `grad_norm`, `entropy`, `clip_fraction`, `ratio_mean`, `kl_k1`,
    `kl_k3`, `tis_weight_mean`, `mis_dropped_fraction`, `mismatch_abs`/`mismatch_tokens`/
    `mismatch_kl_k1`/`mismatch_kl_k3` (raw sums) and `mismatch_max_ratio` (only when measured), and
    `updated` (False when the step was skipped).
    """
    device = batch["labels"].device  # the policy's
    sums = {name: torch.zeros((), dtype=torch.float32, device=device) for name in _SUMS}
    mismatch_max = torch.ones((), dtype=torch.float32, device=device)
    micro = forward_rows or cfg.micro_train_batch_size
    model = working.model if working is not None else policy
    step_tokens = None
    if cfg.length_normalization == "token_mean":  # one count for the whole step (DAPO), on the device
        step_tokens = batch["response_mask"][rows.to(device)].sum().float()  # []
    for start in range(0, cfg.train_batch_size, micro):
        rows_cpu = rows[start:start + micro]  # [b]
        idx = rows_cpu.to(device, non_blocking=True)  # [b]
        # Label columns from the earliest response token to the longest row's end (bounds from the
        # CPU copies of the batch's lengths: no host synchronisation).
        cols = slice(int(batch["response_start"][rows_cpu].min()), int(batch["lengths"][rows_cpu].max()))
        mask = batch["response_mask"][idx, cols]  # [b, T]
        with autocast_for(cfg.dtype, device):
            out = response_log_probs(model, batch["input_ids"][idx, :cols.stop], batch["labels"][idx, cols],
                                     return_token_entropy=True, shared_prefix=shared_prefix,
                                     temperature=cfg.sampling_temperature)
        log_probs = out["log_probs"]  # [b, T] float32
        behaviour = old_log_probs[idx, cols] if old_log_probs is not None else log_probs.detach()  # [b, T]
        engine = engine_log_probs[idx, cols]  # [b, T]
        weights = mismatch_weights(cfg, behaviour, engine, mask, sums)  # [b, T] constants, or None
        loss = microbatch_loss(log_probs, mask, cfg, raw_rewards=raw_rewards[idx], advantages=advantages[idx],
                               old_log_probs=behaviour, tis_weights=weights, step_tokens=step_tokens)
        loss.backward()

        detached = log_probs.detach()  # [b, T]
        sums["loss"] += loss.detach()
        sums["tokens"] += mask.sum()
        sums["entropy"] += masked_normalize(out["token_entropy"], mask)
        ratio = torch.exp(detached - behaviour)  # [b, T]
        sums["ratio"] += masked_normalize(ratio, mask)
        if cfg.loss_type in CLIP_LOSSES:  # which tokens the loss clipped, by the loss's own definition
            _, loss_stats = compute_policy_gradient_loss(detached, cfg.loss_type, **loss_inputs(
                cfg, mask, raw_rewards=raw_rewards[idx], advantages=advantages[idx], old_log_probs=behaviour))
            sums["clipped"] += masked_normalize(loss_stats["clipped"].float(), mask)
        if ref_log_probs is not None:
            k1, k3 = kl_token_sums(detached, ref_log_probs[idx, cols], mask)
            sums["kl_k1"] += k1
            sums["kl_k3"] += k3
        if measure_mismatch:
            abs_sum, count, max_ratio, mismatch_k1, mismatch_k3 = logprob_mismatch(detached, engine, mask)
            sums["mismatch_abs"] += abs_sum
            sums["mismatch_tokens"] += count
            sums["mismatch_kl_k1"] += mismatch_k1
            sums["mismatch_kl_k3"] += mismatch_k3
            mismatch_max = torch.maximum(mismatch_max, max_ratio)

    if before_update is not None:
        before_update(policy)
    stats = apply_update(optimizer, params, cfg.max_grad_norm, learning_rate, sums, mismatch_max)
    if working is not None:
        working.refresh()  # the one cast of the step (also after a skipped step: the callback may edit masters)
    return stats


def apply_update(optimizer, params, max_grad_norm: float, learning_rate: float, sums: dict[str, torch.Tensor],
                 mismatch_max: torch.Tensor) -> dict:
    """Clip the accumulated gradients, update (unless the loss or gradient norm is not finite), and turn
    the step's summed statistics into `optimizer_step`'s floats."""
    device = sums["loss"].device
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)  # []
    # The one host transfer of the step: every statistic and the gradient norm together.
    values = torch.stack([*(sums[name] for name in _SUMS), mismatch_max, grad_norm.float().to(device)]).tolist()
    stats = dict(zip(_SUMS, values))
    stats["mismatch_max_ratio"], stats["grad_norm"] = values[-2], values[-1]
    for param_group in optimizer.param_groups:
        param_group["lr"] = learning_rate
    stats["updated"] = math.isfinite(stats["loss"]) and math.isfinite(stats["grad_norm"])
    if stats["updated"]:
        optimizer.step()
    # else: a NaN/inf would poison the weights and Adam's moments: skip the update entirely
    optimizer.zero_grad(set_to_none=True)
    tokens = max(stats["tokens"], 1.0)
    return {
        "loss": stats["loss"], "grad_norm": stats["grad_norm"], "updated": stats["updated"],
        "entropy": stats["entropy"] / tokens, "clip_fraction": stats["clipped"] / tokens,
        "ratio_mean": stats["ratio"] / tokens, "kl_k1": stats["kl_k1"] / tokens, "kl_k3": stats["kl_k3"] / tokens,
        "tis_weight_mean": stats["tis_weight"] / tokens, "mis_dropped_fraction": stats["mis_dropped"] / tokens,
        "mismatch_abs": stats["mismatch_abs"], "mismatch_tokens": stats["mismatch_tokens"],
        "mismatch_max_ratio": stats["mismatch_max_ratio"],
        "mismatch_kl_k1": stats["mismatch_kl_k1"], "mismatch_kl_k3": stats["mismatch_kl_k3"],
    }
