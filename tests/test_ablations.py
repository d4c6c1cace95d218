"""The ablation variants (hw3lib.ablations): one change each, derived from the base config, and a
tiny end-to-end run of two of them that is then reused (not retrained) on a second call."""

from __future__ import annotations

import pytest

from hw3lib.ablations import ABLATIONS, ablation_base, ablation_configs, run_ablations, summarize
from hw3lib.train_config import GRPOConfig


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))


def changed_fields(base: GRPOConfig, cfg: GRPOConfig) -> dict:
    """The init fields (not derived, not the name) in which `cfg` differs from `base`."""
    derived = {"micro_train_batch_size", "n_prompts_per_rollout_batch", "n_microbatches_per_rollout_batch",
               "optimizer_steps_per_rollout_batch", "off_policy"}
    before, after = base.to_dict(), cfg.to_dict()
    return {k: after[k] for k in after if k not in derived | {"name"} and after[k] != before[k]}


def test_each_ablation_changes_one_thing_of_the_course_config():
    base = GRPOConfig(name="abl")  # rollout 256, train batch 256, 128 microbatches of 2, on-policy
    configs = ablation_configs(base)
    assert list(configs) == list(ABLATIONS)
    assert {name: cfg.name for name, cfg in configs.items()} == {name: f"abl_{name}" for name in ABLATIONS}
    assert changed_fields(base, configs["baseline"]) == {}
    assert changed_fields(base, configs["no_baseline"]) == {"loss_type": "no_baseline"}
    assert changed_fields(base, configs["no_std_normalization"]) == {"use_std_normalization": False}
    assert changed_fields(base, configs["constant_length_normalization"]) == {"length_normalization": "constant"}
    # Off-policy: 2 epochs x (256 / 128) = 4 optimizer steps per rollout batch, microbatch size kept at 2.
    for name, loss in (("grpo_clip_off_policy", "grpo_clip"), ("grpo_no_clip_off_policy", "grpo_no_clip")):
        cfg = configs[name]
        assert changed_fields(base, cfg) == {"loss_type": loss, "epochs_per_rollout_batch": 2,
                                             "train_batch_size": 128, "gradient_accumulation_steps": 64}
        assert (cfg.micro_train_batch_size, cfg.optimizer_steps_per_rollout_batch) == (2, 2)
        assert cfg.off_policy and cfg.needs_old_log_probs


def test_off_policy_ablation_keeps_a_large_microbatch_valid():
    """A base whose microbatch is the whole optimizer batch (accumulation 1) still gives a valid config."""
    base = GRPOConfig(rollout_batch_size=16, group_size=4, train_batch_size=16, gradient_accumulation_steps=1)
    cfg = ablation_configs(base, ["grpo_clip_off_policy"])["grpo_clip_off_policy"]
    assert (cfg.train_batch_size, cfg.gradient_accumulation_steps, cfg.micro_train_batch_size) == (8, 1, 8)


def test_unknown_ablation_is_named():
    with pytest.raises(ValueError, match="no_such_thing"):
        ablation_configs(GRPOConfig(), ["baseline", "no_such_thing"])


def test_two_ablations_run_summarize_and_are_reused():
    base = ablation_base("smoke", name="abl_tiny", n_grpo_steps=2, rollout_batch_size=16, group_size=4,
                         train_batch_size=16, gradient_accumulation_steps=2, n_eval_examples=8,
                         eval_every=1, checkpoint_every=1, n_train_examples=256)
    results = run_ablations(base, ["baseline", "no_baseline"])
    rows = summarize(results)
    assert [row["ablation"] for row in rows] == ["baseline", "no_baseline"]
    for row, result in zip(rows, results.values()):
        rewards = [r["eval/answer_reward"] for r in result.eval_rows]
        assert len(rewards) == 3  # before step 1, after step 1, after step 2
        assert (row["eval_answer_start"], row["eval_answer_end"], row["eval_answer_best"]) == (
            rewards[0], rewards[-1], max(rewards))
        assert row["gain_points"] == pytest.approx(100 * (rewards[-1] - rewards[0]))
        assert row["optimizer_steps"] == 2
    # Same initial policy and seed: the first validation is identical; the losses differ (raw rewards vs advantages).
    baseline, no_baseline = results["baseline"], results["no_baseline"]
    assert baseline.eval_rows[0]["eval/answer_reward"] == no_baseline.eval_rows[0]["eval/answer_reward"]
    assert baseline.train_rows[0]["train/loss"] != no_baseline.train_rows[0]["train/loss"]

    metrics_file = baseline.run_dir / "metrics.jsonl"
    stamp = metrics_file.stat().st_mtime_ns
    again = run_ablations(base, ["baseline"])["baseline"]  # finished: reused, nothing retrained
    assert metrics_file.stat().st_mtime_ns == stamp
    assert again.metrics == baseline.metrics


def test_ablation_base_is_the_on_policy_course_baseline():
    assert ablation_base("full") == GRPOConfig.for_profile("full")  # the course's defaults already are
    smoke = GRPOConfig.for_profile("smoke")  # grpo_clip, 2 epochs of 4 optimizer steps of 64 per rollout batch
    base = ablation_base("smoke", n_grpo_steps=3)
    assert changed_fields(smoke, base) == {"loss_type": "reinforce_with_baseline", "train_batch_size": 256,
                                           "epochs_per_rollout_batch": 1, "gradient_accumulation_steps": 4,
                                           "n_grpo_steps": 3}
    assert base.micro_train_batch_size == smoke.micro_train_batch_size == 64
    assert not base.off_policy
