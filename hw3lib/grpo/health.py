"""Early warnings for a GRPO run that has silently stopped learning (beyond the handouts).

Three metrics of every optimizer step's row (all logged every step to `metrics.jsonl`) announce the
commonest silent failures of RL post-training; the loop prints a warning, with the fix, the first
time each crosses its threshold (once per run, so a notebook or a log is not flooded):

- `train/truncation_rate`, the fraction of rollouts that hit `sampling_max_tokens`: a truncated
  response has no final answer, so a budget too short zeroes the reward of every rollout.
- `train/zero_variance_group_fraction`, the fraction of groups whose rewards are all equal: their
  advantages are exactly 0, so they carry no gradient (all questions too easy, or all too hard).
- `train/mismatch_kl`, KL(pi_engine || pi_trainer) on the sampled tokens (hw3lib.grpo.step): the
  rollout engine and the trainer disagree about the policy, so "on-policy" updates are off-policy;
  runs that collapse usually show this KL growing first.

The thresholds are rules of thumb, not laws: a warning is a reason to look at the curves.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HealthCheck:
    metric: str
    """The metric row key that is checked."""
    threshold: float
    """Warn when the metric exceeds this."""
    message: str
    """What it means and the fix (formatted with `value` and `threshold`)."""


HEALTH_CHECKS: tuple[HealthCheck, ...] = (
    HealthCheck("train/truncation_rate", 0.5,
                "{value:.0%} of the rollouts hit the generation budget (sampling_max_tokens) -- a truncated "
                "response has no final answer, so its reward is 0 and the run may stop learning. Fix: raise "
                "sampling_max_tokens, or use a prompt that asks for shorter answers."),
    HealthCheck("train/zero_variance_group_fraction", 0.8,
                "{value:.0%} of the groups have all-equal rewards -- their advantages are exactly 0, so they "
                "give no gradient. Fix: pick questions of the right difficulty (if all are right, harder ones; "
                "if all are wrong, easier ones or an SFT warm start), raise group_size or sampling_temperature."),
    HealthCheck("train/mismatch_kl", 1e-2,
                "the rollout engine and the trainer disagree: KL(pi_engine || pi_trainer) = {value:.3g} per "
                "token (> {threshold:g}), so the updates are off-policy by that much. Fix: check that the "
                "engine receives the new weights (and the same sampling temperature), sample in higher "
                "precision, or correct for it with tis_cap=2 and/or mis='token'."),
)


def health_warnings(row: dict, warned: set[str], checks: tuple[HealthCheck, ...] = HEALTH_CHECKS) -> list[str]:
    """The warnings of `row`'s metrics above their thresholds that `warned` does not hold yet; adds their
    metrics to `warned` (so each warns once per run). A metric missing from the row is not checked."""
    messages = []
    for check in checks:
        value = row.get(check.metric)
        if check.metric in warned or value is None or not value > check.threshold:  # (NaN is never above)
            continue
        warned.add(check.metric)
        messages.append(f"WARNING ({check.metric} = {value:.3g} > {check.threshold:g}): "
                        + check.message.format(value=value, threshold=check.threshold))
    return messages
