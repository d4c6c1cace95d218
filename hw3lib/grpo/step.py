"""One optimizer step of the GRPO loop: its microbatches, gradient clipping, the update and its log row.

The loss of a microbatch is assembled here from the course's per-token losses
(`hw3lib.maths.grpo.compute_policy_gradient_loss`) and normalizers (`hw3lib.maths.sft.masked_normalize`):

    per-token loss [b, T]  (x truncated importance weights, when `tis_cap` is set)
    -> per sequence: summed over its response tokens, / its length (`masked_mean`) or / a constant
    -> summed over the microbatch, / train_batch_size (the optimizer step's sequences)
    -> backward

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

**Metrics** are means over the response tokens of the whole optimizer step (not means of
per-microbatch means, never over padding): token sums are accumulated on the device and moved to
the host once per optimizer step, together with the gradient norm.
"""

from __future__ import annotations

import math

import torch

from hw3lib.maths.grpo import LOSS_INPUTS, compute_policy_gradient_loss
from hw3lib.maths.logprobs import autocast_for, kl_token_sums, response_log_probs
from hw3lib.maths.sft import masked_normalize

# The step's statistics, summed over its microbatches on the device (token sums unless named otherwise).
_SUMS = ("loss", "tokens", "entropy", "clipped", "ratio", "kl_k1", "kl_k3", "tis_weight",
         "mismatch_abs", "mismatch_tokens")


def logprob_mismatch(trainer_log_probs: torch.Tensor, engine_log_probs: torch.Tensor,
                     mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Engine/trainer disagreement on the sampled tokens: `[B, T] x 3 -> (sum |diff|, token count, max ratio)`.

    max ratio = the largest exp(|log pi_trainer - log pi_engine|) over the tokens: the factor by
    which one side's probability of a sampled token exceeds the other's (1 = perfect agreement).
    """
    keep = mask.bool()
    diff = torch.where(keep, trainer_log_probs - engine_log_probs, 0.0)  # [B, T]
    return diff.abs().sum(), keep.sum(), diff.abs().max().exp()


def microbatch_loss(log_probs: torch.Tensor, mask: torch.Tensor, cfg, *, raw_rewards: torch.Tensor,
                    advantages: torch.Tensor, old_log_probs: torch.Tensor | None,
                    tis_weights: torch.Tensor | None) -> torch.Tensor:
    """The microbatch's share of the optimizer step's loss (see the module docstring): `[b, T] x ... -> []`.

    Sequences are divided by `cfg.train_batch_size`, so summing the microbatches of a step gives
    the mean over the step's sequences whatever the microbatch sizes.
    """
    available = {"raw_rewards": raw_rewards, "advantages": advantages, "old_log_probs": old_log_probs,
                 "cliprange": cfg.cliprange}
    inputs = {name: available[name] for name in LOSS_INPUTS[cfg.loss_type]}  # what the loss table says it needs
    per_token, _ = compute_policy_gradient_loss(log_probs, cfg.loss_type, **inputs)  # [b, T]
    if tis_weights is not None:
        per_token = per_token * tis_weights  # [b, T]
    summed = masked_normalize(per_token, mask, dim=-1, normalize_constant=1.0)  # [b]
    if cfg.length_normalization == "masked_mean":
        per_sequence = summed / mask.sum(dim=-1).clamp(min=1)  # [b]: an empty response counts 0, not 0/0
    else:
        # Dr. GRPO's constant: length_normalization_constant, by default the generation budget.
        per_sequence = summed / float(cfg.length_normalization_constant or cfg.sampling_max_tokens)  # [b]
    return per_sequence.sum() / cfg.train_batch_size  # []


def optimizer_step(policy, optimizer, params, cfg, batch: dict[str, torch.Tensor], rows: torch.Tensor, *,
                   raw_rewards: torch.Tensor, advantages: torch.Tensor, old_log_probs: torch.Tensor | None,
                   ref_log_probs: torch.Tensor | None, engine_log_probs: torch.Tensor, shared_prefix: int,
                   learning_rate: float, measure_mismatch: bool, before_update=None) -> dict:
    """Accumulate the gradients of `rows` (`[train_batch_size]` CPU indices into `batch`) in microbatches,
    clip, update (unless the loss or gradient norm is not finite), and return the step's statistics.

    `batch`: `input_ids`, `labels`, `response_mask` on the policy's device, `lengths` and
    `response_start` on the CPU (hw3lib.maths.sft.pack_prompt_and_output_ids).

    `old_log_probs` `[N, L-1]`: the policy's log-probs at sampling time when they were computed
    (off-policy ratio losses, TIS); None means the current policy sampled the batch, so its own
    detached log-probs serve. `measure_mismatch`: the current weights are the sampling weights,
    so the engine/trainer mismatch can be measured on these rows. `before_update(policy)` runs
    after the gradients are accumulated and before clipping (the loop's callback).

    Returns floats: `loss`, `grad_norm`, `entropy`, `clip_fraction`, `ratio_mean`, `kl_k1`,
    `kl_k3`, `tis_weight_mean`, `mismatch_abs`/`mismatch_tokens`/`mismatch_max_ratio` (raw sums, only
    when measured), and `updated` (False when the step was skipped).
    """
    device = batch["labels"].device  # the policy's
    sums = {name: torch.zeros((), dtype=torch.float32, device=device) for name in _SUMS}
    mismatch_max = torch.ones((), dtype=torch.float32, device=device)
    micro = cfg.micro_train_batch_size
    for start in range(0, cfg.train_batch_size, micro):
        rows_cpu = rows[start:start + micro]  # [b]
        idx = rows_cpu.to(device, non_blocking=True)  # [b]
        # Label columns from the earliest response token to the longest row's end (bounds from the
        # CPU copies of the batch's lengths: no host synchronisation).
        cols = slice(int(batch["response_start"][rows_cpu].min()), int(batch["lengths"][rows_cpu].max()))
        mask = batch["response_mask"][idx, cols]  # [b, T]
        with autocast_for(cfg.dtype, device):
            out = response_log_probs(policy, batch["input_ids"][idx, :cols.stop], batch["labels"][idx, cols],
                                     return_token_entropy=True, shared_prefix=shared_prefix,
                                     temperature=cfg.sampling_temperature)
        log_probs = out["log_probs"]  # [b, T] float32
        behaviour = old_log_probs[idx, cols] if old_log_probs is not None else log_probs.detach()  # [b, T]
        engine = engine_log_probs[idx, cols]  # [b, T]
        tis = None
        if cfg.tis_cap is not None:
            tis = torch.exp(behaviour - engine).clamp(max=cfg.tis_cap)  # [b, T], a constant
            sums["tis_weight"] += masked_normalize(tis, mask)
        loss = microbatch_loss(log_probs, mask, cfg, raw_rewards=raw_rewards[idx], advantages=advantages[idx],
                               old_log_probs=behaviour,
                               tis_weights=tis)
        loss.backward()

        detached = log_probs.detach()  # [b, T]
        sums["loss"] += loss.detach()
        sums["tokens"] += mask.sum()
        sums["entropy"] += masked_normalize(out["token_entropy"], mask)
        ratio = torch.exp(detached - behaviour)  # [b, T]
        sums["ratio"] += masked_normalize(ratio, mask)
        if "cliprange" in LOSS_INPUTS[cfg.loss_type]:
            adv = advantages[idx]  # [b, 1]
            clipped = ratio.clamp(1 - cfg.cliprange, 1 + cfg.cliprange) * adv < ratio * adv  # [b, T]
            sums["clipped"] += masked_normalize(clipped.float(), mask)
        if ref_log_probs is not None:
            k1, k3 = kl_token_sums(detached, ref_log_probs[idx, cols], mask)
            sums["kl_k1"] += k1
            sums["kl_k3"] += k3
        if measure_mismatch:
            abs_sum, count, max_ratio = logprob_mismatch(detached, engine, mask)
            sums["mismatch_abs"] += abs_sum
            sums["mismatch_tokens"] += count
            mismatch_max = torch.maximum(mismatch_max, max_ratio)

    if before_update is not None:
        before_update(policy)
    return apply_update(optimizer, params, cfg.max_grad_norm, learning_rate, sums, mismatch_max)


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
        "tis_weight_mean": stats["tis_weight"] / tokens,
        "mismatch_abs": stats["mismatch_abs"], "mismatch_tokens": stats["mismatch_tokens"],
        "mismatch_max_ratio": stats["mismatch_max_ratio"],
    }
