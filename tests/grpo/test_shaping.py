"""hw3lib.grpo.shaping: dynamic sampling and overlong handling -- hand-worked numbers, the sampling
step with a scripted engine, and tiny runs that show each option doing what it says."""

from __future__ import annotations

import pytest

from hw3lib.generation.base import Sample
from hw3lib.grpo.config import GRPOConfig
from hw3lib.grpo.loop import sample_rollout_batch
from hw3lib.grpo.shaping import informative, overlong_penalties, refill_uninformative
from tests.grpo.test_loop import tiny_cfg


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))


def test_overlong_penalties_hand_worked():
    # budget 10, ramp 4: free up to 6 tokens, then -1/4 per token, -1 at the budget
    assert overlong_penalties([5, 6, 7, 8, 10, 12], max_tokens=10, buffer=4) == [0.0, 0.0, -0.25, -0.5, -1.0, -1.0]
    assert overlong_penalties([9], max_tokens=10, buffer=4, penalty=0.5) == [-0.375]
    with pytest.raises(ValueError, match="buffer=11"):
        overlong_penalties([1], max_tokens=10, buffer=11)


def test_refill_replaces_uninformative_groups_in_order_within_the_passes():
    groups = [[1, 1], [0, 1], [0, 0], [1, 1]]  # slots 0, 2 and 3 carry no gradient
    passes_seen = []

    def sample_groups(count, pass_number):
        passes_seen.append((count, pass_number))
        return {1: [[0, 0], [1, 0], [1, 1]], 2: [[0, 1], [1, 1]], 3: [[0, 0]]}[pass_number][:count]

    refilled, passes, replaced = refill_uninformative(groups, lambda g: g, sample_groups, passes=3)
    # pass 1 asks for 3 and yields one informative group (slot 0); pass 2 asks for 2 and yields one (slot 2);
    # pass 3 asks for 1 and yields none: slot 3 stays uninformative, after 1 + 3 generation passes
    assert passes_seen == [(3, 1), (2, 2), (1, 3)]
    assert refilled == [[1, 0], [0, 1], [0, 1], [1, 1]] and (passes, replaced) == (4, 2)
    assert informative([0, 1]) and not informative([1.0, 1.0])
    untouched, passes, replaced = refill_uninformative([[0, 1]], lambda g: g, sample_groups, passes=3)
    assert (untouched, passes, replaced) == ([[0, 1]], 1, 0)


class ScriptedEngine:
    """Answers question `qN` with the group's texts from `script[N]` (a list of G answers)."""

    def __init__(self, script):
        self.script, self.calls = script, 0

    def generate(self, prompts, sampling):
        self.calls += 1
        out = []
        for prompt in prompts:
            number = int(prompt.split("q")[-1].split("?")[0])
            out.append([Sample(f"</think> <answer> {text} </answer>", list(range(length)), [-0.1] * length,
                               "length" if length >= sampling.max_tokens else "stop")
                        for text, length in self.script[number]])
        return out


def r1_exact(response, truth):
    right = float(f"<answer> {truth} </answer>" in response)
    return {"reward": right, "format_reward": 1.0, "answer_reward": right}


def shaping_cfg(**changes) -> GRPOConfig:
    return GRPOConfig.for_profile("smoke", rollout_batch_size=4, group_size=2, train_batch_size=4,
                                  sampling_max_tokens=8, sampling_min_tokens=0, **changes)


RECORDS = [{"question": f"q{i}?", "gold": "1"} for i in range(12)]
# questions 0-5 always right (no signal), 6-11 half right
SCRIPT = {i: [("1", 3), ("1", 3)] if i < 6 else [("1", 3), ("2", 8)] for i in range(12)}


def test_dynamic_sampling_fills_the_batch_with_informative_groups():
    plain = sample_rollout_batch(ScriptedEngine(SCRIPT), shaping_cfg(), RECORDS, r1_exact, grpo_step=0,
                                 policy_version=0)
    engine = ScriptedEngine(SCRIPT)
    shaped = sample_rollout_batch(engine, shaping_cfg(dynamic_sampling_passes=6), RECORDS, r1_exact, grpo_step=0,
                                  policy_version=0)
    assert plain.generation_passes == 1 and plain.groups_replaced == 0
    assert shaped.reward_stats["frac_groups_zero_std"] == 0.0  # every group carries a gradient now
    assert shaped.groups_replaced == round(2 * plain.reward_stats["frac_groups_zero_std"])
    assert shaped.generation_passes == engine.calls >= 1 + (shaped.groups_replaced > 0)
    assert len(shaped.rollouts) == 4 and len(set(shaped.prompts)) == 2  # the batch keeps its size, new questions
    stats = shaped.rollout_stats()
    assert stats["train/generation_passes"] == shaped.generation_passes
    assert stats["train/groups_replaced"] == shaped.groups_replaced


def test_overlong_penalty_changes_rewards_and_advantages():
    batch = sample_rollout_batch(ScriptedEngine(SCRIPT), shaping_cfg(overlong="penalty", overlong_buffer=4,
                                                                     dynamic_sampling_passes=6),
                                 RECORDS, r1_exact, grpo_step=0, policy_version=0)
    # the wrong answers are 8 tokens long (the budget): reward 0 - 1; the right ones 3 tokens: reward 1
    assert sorted(batch.raw_rewards.tolist()) == [-1.0, -1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="overlong='clip'"):
        shaping_cfg(overlong="clip")
    with pytest.raises(ValueError, match="overlong_buffer=9"):
        shaping_cfg(overlong="penalty", overlong_buffer=9)
    with pytest.raises(ValueError, match="dynamic_sampling_passes=-1"):
        shaping_cfg(dynamic_sampling_passes=-1)
    assert shaping_cfg().overlong_ramp == 2 and GRPOConfig().overlong is None  # defaults: off, as the course


def test_overlong_mask_gives_truncated_rollouts_no_gradient():
    """Every rollout truncated (budget 4 = min tokens): masked, the loss has no tokens, so no update."""
    from hw3lib.grpo.loop import train

    masked = train(tiny_cfg("masked", sampling_max_tokens=4, overlong="mask", n_eval_examples=1,
                            use_std_normalization=False))
    plain = train(tiny_cfg("unmasked", sampling_max_tokens=4, n_eval_examples=1, use_std_normalization=False))
    assert all(row["train/truncation_rate"] == 1.0 for row in masked.train_rows + plain.train_rows)
    # unmasked, the truncated rollouts' tokens are in the step (their entropy is measured); masked, none is
    assert all(row["train/entropy"] > 0 for row in plain.train_rows)
    assert all(row["train/entropy"] == 0.0 and row["train/grad_norm"] == 0.0 and row["train/loss"] == 0.0
               for row in masked.train_rows)
