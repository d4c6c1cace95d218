"""Rollout groups and the staleness-bounded replay buffer of asynchronous GRPO (hw3lib.grpo.async_loop).

The unit of replay is a *group*: one question's `group_size` rollouts with their rewards and
group-normalized advantages (normalized once, when scored), tagged with the policy version that
sampled them. The buffer enforces two limits and counts everything it does:

- **staleness**: a group sampled by version v is only trained on while the learner's version u
  satisfies `u - v <= max_staleness`; one past that is removed unused and counted as `expired`
  (never silently);
- **uses**: a group is trained on at most `max_uses` times, then leaves the buffer.

`take(n, learner_version, rng)` first takes the groups at their last allowed version (so nothing
expires that could still be used), then draws the rest uniformly at random.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from hw3lib.grpo.loop import RolloutBatch


@dataclass
class Group:
    """One question's rollouts, as a one-question `RolloutBatch`, plus its replay bookkeeping."""

    batch: RolloutBatch
    uid: int  # unique per run: generation index * n_prompts + question index
    uses: int = 0

    @property
    def version(self) -> int:
        return self.batch.policy_version


def split_groups(batch: RolloutBatch, group_size: int, first_uid: int) -> list[Group]:
    """A rollout batch as its per-question groups (uids `first_uid`, `first_uid + 1`, ...)."""
    groups = []
    for i, prompt in enumerate(batch.prompts):
        rows = slice(i * group_size, (i + 1) * group_size)
        part = RolloutBatch(batch.grpo_step, batch.policy_version, [prompt], batch.truths[rows],
                            batch.rollouts[rows], batch.advantages[rows], batch.raw_rewards[rows],
                            reward_stats_of(batch.raw_rewards[rows], batch.scores[rows], group_size),
                            batch.scores[rows], generation_s=0.0, scoring_s=0.0)
        groups.append(Group(part, first_uid + i))
    return groups


def merge_groups(groups: list[Group], grpo_step: int, group_size: int) -> RolloutBatch:
    """Groups (possibly of different policy versions) as one rollout batch for the learner.

    Its `policy_version` is the oldest of them: the learner then uses the behaviour (engine)
    log-probs for every group whenever any is stale.
    """
    parts = [g.batch for g in groups]
    raw_rewards = torch.cat([p.raw_rewards for p in parts])  # [N]
    scores = [s for p in parts for s in p.scores]
    return RolloutBatch(grpo_step, min(p.policy_version for p in parts), [p.prompts[0] for p in parts],
                        [t for p in parts for t in p.truths], [r for p in parts for r in p.rollouts],
                        torch.cat([p.advantages for p in parts]), raw_rewards,
                        reward_stats_of(raw_rewards, scores, group_size), scores, generation_s=0.0, scoring_s=0.0)


def reward_stats_of(raw_rewards: torch.Tensor, scores: list[dict], group_size: int) -> dict:
    """The statistics `compute_group_normalized_rewards` reports, for a set of whole groups."""
    grouped = raw_rewards.view(-1, group_size)  # [G, group_size]
    stats = {"reward_mean": raw_rewards.mean().item(),
             "reward_std": raw_rewards.std().item() if raw_rewards.numel() > 1 else 0.0,
             "reward_min": raw_rewards.min().item(), "reward_max": raw_rewards.max().item(),
             "frac_groups_zero_std": (grouped == grouped[:, :1]).all(dim=1).float().mean().item()}
    for key in ("format_reward", "answer_reward"):
        if scores and all(key in s for s in scores):
            stats[f"{key}_mean"] = sum(float(s[key]) for s in scores) / len(scores)
    return stats


@dataclass
class ReplayBuffer:
    """Groups waiting to be trained on, bounded in size, staleness and uses (see the module docstring)."""

    capacity: int  # groups
    max_staleness: int
    max_uses: int = 1
    groups: list[Group] = field(default_factory=list)
    added: int = 0
    expired: int = 0
    retired: int = 0  # groups that reached max_uses
    use_log: list[tuple[int, int, int]] = field(default_factory=list)  # (uid, group version, learner version)

    def __post_init__(self) -> None:
        if self.capacity < 1 or self.max_staleness < 0 or self.max_uses < 1:
            raise ValueError(f"ReplayBuffer(capacity={self.capacity}, max_staleness={self.max_staleness}, "
                             f"max_uses={self.max_uses}): need capacity >= 1, max_staleness >= 0, max_uses >= 1")

    def __len__(self) -> int:
        return len(self.groups)

    def room(self) -> int:
        return self.capacity - len(self.groups)

    def add(self, groups: list[Group]) -> None:
        if len(groups) > self.room():
            raise RuntimeError(f"replay buffer overflow: {len(groups)} groups for {self.room()} free slots "
                               "(the driver must not generate past the capacity)")
        self.groups.extend(groups)
        self.added += len(groups)

    def expire(self, learner_version: int) -> int:
        """Remove the groups too stale for `learner_version`; returns how many."""
        keep = [g for g in self.groups if learner_version - g.version <= self.max_staleness]
        gone = len(self.groups) - len(keep)
        self.groups, self.expired = keep, self.expired + gone
        return gone

    def available(self, learner_version: int) -> int:
        return sum(learner_version - g.version <= self.max_staleness for g in self.groups)

    def take(self, n: int, learner_version: int, rng: np.random.Generator) -> list[Group]:
        """`n` groups to train on at `learner_version`: last-chance groups first, then at random."""
        self.expire(learner_version)
        if n > len(self.groups):
            raise RuntimeError(f"asked for {n} groups, the buffer holds {len(self.groups)}")
        last_chance = [g for g in self.groups if learner_version - g.version == self.max_staleness]
        others = [g for g in self.groups if learner_version - g.version < self.max_staleness]
        rng.shuffle(last_chance)
        chosen = last_chance[:n]
        if len(chosen) < n:
            chosen += [others[i] for i in rng.permutation(len(others))[:n - len(chosen)]]
        for group in chosen:
            group.uses += 1
            self.use_log.append((group.uid, group.version, learner_version))
        done = {id(g) for g in chosen if g.uses >= self.max_uses}
        self.retired += len(done)
        self.groups = [g for g in self.groups if id(g) not in done]
        return chosen
