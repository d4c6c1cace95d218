"""Batch shaping beyond the handouts: dynamic sampling and overlong handling (both off by default).

- **Dynamic sampling** (DAPO, Yu et al., 2025). A group whose G rewards are all equal gets
  advantages of exactly 0 and carries no gradient: with a high (or zero) solve rate most groups
  are like that and the step learns from a handful of questions. `refill_uninformative` replaces
  such groups by groups of new questions, generated in up to `passes` extra generation passes;
  what is still uninformative after them stays (the batch keeps its size, so every optimizer step
  is as the config says). The passes and the replaced groups are logged.
- **Overlong handling.** A rollout cut at the token budget has no answer, so it is graded wrong
  whatever its reasoning was: the reward then punishes length, not error. `overlong="mask"` leaves
  truncated rollouts out of the loss (DAPO's overlong filtering); `overlong="penalty"` adds DAPO's
  soft penalty instead, `overlong_penalties`: 0 up to `max_tokens - buffer` tokens, then falling
  linearly to `-penalty` at the budget, so the policy learns to finish before it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

OVERLONG_MODES = ("mask", "penalty")


def overlong_penalties(lengths: Sequence[int], max_tokens: int, buffer: int, penalty: float = 1.0) -> list[float]:
    """DAPO's soft overlong penalty per response: `[N] -> [N]`, in reward units (<= 0).

    0 for length <= max_tokens - buffer; `(max_tokens - buffer - length) / buffer * penalty` inside the
    ramp, reaching `-penalty` at `max_tokens` (and staying there beyond it).
    """
    if not 1 <= buffer <= max_tokens:
        raise ValueError(f"buffer={buffer} must be in [1, max_tokens={max_tokens}]")
    start = max_tokens - buffer
    return [-penalty * min(max(length - start, 0), buffer) / buffer for length in lengths]


def informative(rewards: Sequence[float]) -> bool:
    """Whether a group's rewards differ (only then do its advantages, and its gradient, differ from 0)."""
    return any(reward != rewards[0] for reward in rewards)


def refill_uninformative(groups: list, rewards_of: Callable[[object], Sequence[float]],
                         sample_groups: Callable[[int, int], list], passes: int) -> tuple[list, int, int]:
    """Replace the uninformative groups of `groups` by informative ones from up to `passes` extra passes.

    `sample_groups(count, pass_number)` generates and scores `count` groups of new questions (pass
    numbers start at 1); `rewards_of(group)` gives a group's rewards. Informative new groups fill the
    uninformative slots in order; the rest of a pass is discarded. Returns
    `(groups, generation passes including the first, groups replaced)`.
    """
    groups = list(groups)
    slots = [i for i, group in enumerate(groups) if not informative(rewards_of(group))]
    done_passes, replaced = 1, 0
    for pass_number in range(1, passes + 1):
        if not slots:
            break
        fresh = [group for group in sample_groups(len(slots), pass_number) if informative(rewards_of(group))]
        done_passes += 1
        for slot, group in zip(slots, fresh):
            groups[slot] = group
            replaced += 1
        slots = slots[len(fresh):]
    return groups, done_passes, replaced
