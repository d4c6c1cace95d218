"""hw3lib.grpo.health: the loop's three early warnings -- the truncated-rollout fraction, the
zero-variance-group fraction and the engine/trainer mismatch KL -- each logged every step and warned
once with its fix, each triggered by a tiny run built to fail that way."""

from __future__ import annotations

import dataclasses
import math

import pytest

from hw3lib.grpo.health import HEALTH_CHECKS, health_warnings
from tests.grpo.test_loop import tiny_cfg

HEALTH_METRICS = ("train/truncation_rate", "train/zero_variance_group_fraction", "train/mismatch_kl")


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))


def test_health_warnings_hand_worked():
    assert tuple(check.metric for check in HEALTH_CHECKS) == HEALTH_METRICS
    warned: set[str] = set()
    row = {"train/truncation_rate": 0.75, "train/zero_variance_group_fraction": 0.5, "train/mismatch_kl": math.nan}
    messages = health_warnings(row, warned)
    assert len(messages) == 1 and "train/truncation_rate = 0.75 > 0.5" in messages[0]
    assert "75% of the rollouts" in messages[0] and "raise sampling_max_tokens" in messages[0]
    assert warned == {"train/truncation_rate"}
    assert health_warnings(row, warned) == []  # once per run
    row.update({"train/zero_variance_group_fraction": 0.9, "train/mismatch_kl": 0.02})
    messages = health_warnings(row, warned)
    assert [m.split(" ")[1] for m in messages] == ["(train/zero_variance_group_fraction", "(train/mismatch_kl"]
    assert "tis_cap" in messages[1] and "mis='token'" in messages[1]
    assert health_warnings({}, set()) == []  # metrics a run does not have (a stale batch's mismatch) are skipped
    assert health_warnings({"train/mismatch_kl": 0.01}, set()) == []  # at the threshold: no warning


def warnings_printed(output: str) -> dict[str, int]:
    return {metric: output.count(f"WARNING ({metric} =") for metric in HEALTH_METRICS}


def test_a_budget_too_short_warns_about_truncation_once(capsys):
    """sampling_max_tokens=4 (= sampling_min_tokens): every rollout is truncated, no answer is complete,
    every reward is 0 -- so every group has zero variance too."""
    from hw3lib.grpo.loop import train

    result = train(tiny_cfg("short_budget", sampling_max_tokens=4, n_eval_examples=1))
    rows = result.train_rows
    assert len(rows) == 4 and all(row["train/truncation_rate"] == 1.0 for row in rows)  # logged every step
    assert all(row["train/reward"] == 0.0 and row["train/zero_variance_group_fraction"] == 1.0 for row in rows)
    output = capsys.readouterr().out
    assert warnings_printed(output) == {"train/truncation_rate": 1, "train/zero_variance_group_fraction": 1,
                                        "train/mismatch_kl": 0}
    assert "raise sampling_max_tokens" in output


def test_near_greedy_sampling_warns_about_zero_variance_groups_once(capsys):
    """sampling_temperature=0.05: the group's samples are (almost) the same answer, so the rewards of
    a group are all equal -- no gradient -- while nothing is truncated."""
    from hw3lib.grpo.loop import train

    result = train(tiny_cfg("near_greedy", sampling_temperature=0.05, n_eval_examples=1))
    rows = result.train_rows
    assert all(row["train/truncation_rate"] == 0.0 for row in rows)
    assert rows[0]["train/zero_variance_group_fraction"] == 1.0 and rows[0]["train/grad_norm"] == 0.0
    output = capsys.readouterr().out
    assert warnings_printed(output) == {"train/truncation_rate": 0, "train/zero_variance_group_fraction": 1,
                                        "train/mismatch_kl": 0}
    assert "raise group_size or sampling_temperature" in output


class MiscalibratedEngine:
    """A rollout engine that reports every sampled token's log-prob 0.5 nats too low (as a kernel or
    precision bug would): the trainer's ratio pi_trainer / pi_engine is e^0.5 on every token."""

    def __init__(self, engine):
        self.engine = engine

    def generate(self, prompts, sampling):
        return [[dataclasses.replace(s, logprobs=[lp - 0.5 for lp in s.logprobs]) for s in samples]
                for samples in self.engine.generate(prompts, sampling)]

    def __getattr__(self, name):
        return getattr(self.engine, name)


def test_an_engine_that_disagrees_with_the_trainer_warns_about_the_mismatch_kl_once(capsys, monkeypatch):
    """The mismatch KL, logged on every step, is k3 = e^0.5 - 1 - 0.5 = 0.1487 (k1 = -0.5) per token,
    above the 0.01 threshold: one warning, with the fix."""
    import hw3lib.generation as generation
    from hw3lib.grpo.loop import train

    real = generation.training_engine
    monkeypatch.setattr(generation, "training_engine", lambda *a, **k: MiscalibratedEngine(real(*a, **k)))
    result = train(tiny_cfg("miscalibrated", n_eval_examples=1))
    rows = result.train_rows
    assert len(rows) == 4
    for row in rows:
        assert row["train/mismatch_kl"] == pytest.approx(math.exp(0.5) - 1.5, rel=1e-4)
        assert row["train/mismatch_kl_k1"] == pytest.approx(-0.5, rel=1e-4)
        assert row["train/logprob_mismatch_max_ratio"] == pytest.approx(math.exp(0.5), rel=1e-4)
    output = capsys.readouterr().out
    assert warnings_printed(output)["train/mismatch_kl"] == 1
    assert "tis_cap=2" in output


def test_a_healthy_run_logs_the_mismatch_kl_near_zero_and_does_not_warn_about_it(capsys):
    from hw3lib.grpo.loop import train

    rows = train(tiny_cfg("healthy", n_eval_examples=1)).train_rows
    assert all(abs(row["train/mismatch_kl"]) < 1e-6 for row in rows)  # float32, the engine wraps the policy
    assert warnings_printed(capsys.readouterr().out)["train/mismatch_kl"] == 0
