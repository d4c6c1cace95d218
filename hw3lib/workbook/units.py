"""Notebook 03's result for the writeup: the worked examples of the GRPO building blocks, as numbers.

The notebook computes each example with hw3lib.maths' functions and asserts the hand-worked values;
`grpo_units_result` only gathers them into the `grpo_units` result (hw3lib.core.writeup_keys).
"""

from __future__ import annotations


def grpo_units_result(mean_rows, const_rows, mean_grad, const_grad, clip_loss, clip_fraction, before, after) -> dict:
    """The length-normalization example (per-sequence values and per-token gradients of `masked_mean` and of
    the constant 7), the clip example (per-token loss and clipped fraction) and the tiny REINFORCE run's
    response log-likelihoods before and after."""
    return {
        "length_normalization_example": {"masked_mean": mean_rows.tolist(), "constant_7": const_rows.tolist(),
                                         "grad_masked_mean": mean_grad[:, 0].tolist(),
                                         "grad_constant": const_grad[:, 0].tolist()},
        "clip_example": {"loss": clip_loss.tolist(), "clip_fraction": float(clip_fraction)},
        "tiny_reinforce": {"before": before.tolist(), "after": after.tolist()},
    }
