"""One SFT optimizer step, the only one in hw3lib: the SFT runner, expert iteration, the warm start and the
keyword model's SFT all take it.

`sft_optimizer_step` accumulates the course's `sft_microbatch_train_step` over microbatches so that the
step's loss is the mean over its sequences of each sequence's summed response NLL divided by the
step's mean response length (a per-token scale: the learning rate does not depend on answer
length), then clips the global gradient norm, sets the learning rate and steps AdamW -- unless the
loss or the gradient norm is not finite (a NaN would poison the weights and Adam's moments).
Log-probs come from `response_log_probs`: logits only for the response columns, the shared prompt
prefix run once, under autocast for a bf16 policy with float32 masters -- through the bf16 working copy of
`hw3lib.core.precision.MasterWeights` when the caller passes one (`working`), refreshed after the update.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from hw3lib.maths.logprobs import autocast_for, response_log_probs
from hw3lib.maths.sft import masked_normalize, sft_microbatch_train_step


def response_bounds(response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the first response column and one past the last: `[N, T] -> [N], [N]` (CPU longs)."""
    mask = response_mask.bool().cpu()  # [N, T]
    start = mask.int().argmax(dim=1)  # [N]
    end = mask.shape[1] - mask.flip(1).int().argmax(dim=1)  # [N]
    return start, end


def sft_optimizer_step(policy, optimizer, params, batch: dict[str, torch.Tensor], rows: Sequence[int], *,
                       micro_batch_size: int, dtype: str, max_grad_norm: float, learning_rate: float,
                       shared_prefix: int = 0, working=None) -> dict:
    """One AdamW step of SFT on `rows` of `batch`, accumulated over microbatches of `micro_batch_size`.

    `batch`: `input_ids`, `labels`, `response_mask` on the policy's device and `response_start`,
    `lengths` (CPU). Each trace's summed response NLL is divided by the step's mean response length,
    averaged over the step's traces (`sft_microbatch_train_step` with `normalize_constant` and the
    number of microbatches as accumulation steps). Returns floats `loss` (NLL per response token),
    `grad_norm`, `entropy` (mean token entropy), `tokens`, and `updated` (False: skipped, non-finite).
    `working` (optional): the policy's `MasterWeights`, whose working copy the microbatches run through.
    """
    rows = list(rows)
    n_micro = math.ceil(len(rows) / micro_batch_size)
    tokens = float(batch["response_mask"][rows].sum())
    normalize = max(tokens, 1.0) / len(rows)  # mean response length: a per-token scale
    nll_sum = torch.zeros((), dtype=torch.float32)
    entropy_sum = torch.zeros((), dtype=torch.float32)
    device = batch["labels"].device
    model = working.model if working is not None else policy
    for first in range(0, len(rows), micro_batch_size):
        idx = torch.tensor(rows[first:first + micro_batch_size])  # [b]
        cols = slice(int(batch["response_start"][idx].min()), int(batch["lengths"][idx].max()))
        with autocast_for(dtype, device):
            out = response_log_probs(model, batch["input_ids"][idx.to(device), :cols.stop],
                                     batch["labels"][idx.to(device), cols], return_token_entropy=True,
                                     shared_prefix=shared_prefix)
        mask = batch["response_mask"][idx.to(device), cols]  # [b, T]
        # Scaled so the microbatches of a step add up to the mean over its traces.
        _, stats = sft_microbatch_train_step(out["log_probs"], mask, n_micro,
                                             normalize_constant=normalize * len(idx) * n_micro / len(rows))
        nll_sum += masked_normalize(-out["log_probs"].detach(), mask).float().cpu()
        entropy_sum += masked_normalize(out["token_entropy"], mask).float().cpu()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
    for group in optimizer.param_groups:
        group["lr"] = learning_rate
    loss = float(nll_sum) / max(tokens, 1.0)
    updated = math.isfinite(loss) and math.isfinite(grad_norm)
    if updated:  # a NaN/inf would poison the weights and Adam's moments
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if working is not None:
        working.refresh()  # the one cast of the step
    return {"loss": loss, "grad_norm": grad_norm, "entropy": float(entropy_sum) / max(tokens, 1.0),
            "tokens": tokens, "updated": updated}
