"""Asynchronous GRPO on Ray (hw3lib.grpo.async_loop) and its replay buffer (hw3lib.grpo.replay).

The buffer's bounds are checked without Ray over many random schedules; the Ray runs use the tiny
model with the test_train settings (4 questions x 4 samples per step, float32, deterministic).
One Ray instance (2 CPUs, no dashboard) serves the module, except the first test, which lets
`train_async` start and stop its own to check that no Ray process is left behind.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.grpo.test_loop import policy_weights, tiny_cfg

ray = pytest.importorskip("ray")  # a dependency of the project: missing only in a broken install

from hw3lib.grpo.async_loop import AsyncConfig, AsyncRunError, train_async  # noqa: E402
from hw3lib.grpo.async_report import schedule_comparison, uses_per_group  # noqa: E402
from hw3lib.grpo.replay import Group, ReplayBuffer, merge_groups, split_groups  # noqa: E402
from hw3lib.grpo.loop import RolloutBatch  # noqa: E402


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))


def _ray_processes() -> list[str]:
    """Command names of live Ray daemons and workers on this machine."""
    names = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if any(key in cmd for key in ("raylet", "gcs_server", "ray::", "default_worker.py")):
                names.append(cmd[:80])
    return names


# ---- the replay buffer, without Ray ---------------------------------------------------------------------

def _batch(step: int, version: int, n_questions: int, group: int) -> RolloutBatch:
    n = n_questions * group
    rewards = torch.tensor([float(i % 2) for i in range(n)])
    return RolloutBatch(step, version, [f"q{step}.{i}" for i in range(n_questions)], ["1"] * n, [None] * n,
                        torch.arange(n, dtype=torch.float32), rewards, {}, [{"reward": float(r), "format_reward": 1.0,
                                                                          "answer_reward": float(r)} for r in rewards],
                        0.0, 0.0)


def test_split_and_merge_keep_rows_and_statistics():
    batch = _batch(3, 2, n_questions=3, group=2)
    groups = split_groups(batch, 2, first_uid=30)
    assert [g.uid for g in groups] == [30, 31, 32] and all(g.version == 2 for g in groups)
    merged = merge_groups([groups[2], groups[0]], grpo_step=5, group_size=2)
    assert merged.prompts == ["q3.2", "q3.0"]
    assert merged.advantages.tolist() == [4.0, 5.0, 0.0, 1.0]
    # Rewards 0, 1 in each group: mean 0.5, no group has zero spread.
    assert merged.reward_stats["reward_mean"] == 0.5 and merged.reward_stats["frac_groups_zero_std"] == 0.0
    assert merged.reward_stats["answer_reward_mean"] == 0.5 and merged.grpo_step == 5


@pytest.mark.parametrize("max_staleness,max_uses,capacity", [(0, 1, 4), (1, 1, 8), (2, 2, 8), (1, 3, 12)])
def test_replay_buffer_never_exceeds_its_bounds(max_staleness, max_uses, capacity):
    rng = np.random.default_rng(0)
    buffer = ReplayBuffer(capacity=capacity, max_staleness=max_staleness, max_uses=max_uses)
    made, learner_version, n = [], 0, 4
    for round_ in range(300):  # a random interleaving of generations (at older versions) and learner steps
        if buffer.room() >= 2 and rng.random() < 0.6:
            version = max(0, learner_version - int(rng.integers(0, max_staleness + 2)))
            groups = [Group(_batch(round_, version, 1, 2), uid=len(made) + i) for i in range(2)]
            made += groups
            buffer.add(groups)
        buffer.expire(learner_version)
        if buffer.available(learner_version) >= n:
            buffer.take(n, learner_version, rng)
            learner_version += 1
    uses_per_group: dict[int, int] = {}
    for uid, version, at in buffer.use_log:
        assert 0 <= at - version <= max_staleness
        uses_per_group[uid] = uses_per_group.get(uid, 0) + 1
    assert max(uses_per_group.values()) <= max_uses and learner_version > 20
    # Every group is accounted for: retired after max_uses, expired (counted), or still waiting.
    assert buffer.added == len(made) == buffer.retired + buffer.expired + len(buffer)
    assert sum(uses_per_group.values()) == len(buffer.use_log)
    with pytest.raises(RuntimeError, match="overflow"):
        buffer.add([Group(_batch(0, learner_version, 1, 2), uid=-1)] * (buffer.room() + 1))


def test_replay_buffer_takes_last_chance_groups_first():
    buffer = ReplayBuffer(capacity=8, max_staleness=1, max_uses=1)
    old = [Group(_batch(1, 0, 1, 2), uid=i) for i in range(2)]
    new = [Group(_batch(2, 1, 1, 2), uid=10 + i) for i in range(4)]
    buffer.add(new + old)
    taken = buffer.take(3, learner_version=1, rng=np.random.default_rng(0))
    assert {g.uid for g in taken} >= {0, 1}  # version 0 is at its last allowed learner version
    assert buffer.expired == 0 and len(buffer) == 3


def test_async_config_refuses_uncorrected_off_policy_updates():
    with pytest.raises(ValueError, match="no importance ratio"):
        AsyncConfig(max_staleness=1).check(tiny_cfg("x", loss_type="reinforce_with_baseline"))
    AsyncConfig(max_staleness=0).check(tiny_cfg("x", loss_type="reinforce_with_baseline"))
    with pytest.raises(ValueError, match="choose one of"):
        AsyncConfig(mode="fastest")


# ---- runs on Ray --------------------------------------------------------------------------------------

def test_learner_failure_stops_cleanly_leaves_a_checkpoint_and_no_ray(tmp_path):
    """Runs first, before the module's Ray instance: train_async starts and stops its own."""
    assert not ray.is_initialized()

    def fail_at_step_2(info):
        if info["grpo_step"] == 2:
            raise RuntimeError("injected learner failure")

    cfg = tiny_cfg("async_fail", n_grpo_steps=3, eval_every=3)
    with pytest.raises(AsyncRunError, match="injected learner failure") as error:
        train_async(cfg, AsyncConfig(), callback=fail_at_step_2)
    assert "resume=True" in str(error.value)
    assert not ray.is_initialized() and _ray_processes() == []
    run_dir = Path(os.environ["HW3_RUNS_DIR"]) / "async_fail"
    state = json.loads((run_dir / "checkpoints" / "step_000001" / "state.json").read_text())
    assert state["grpo_step"] == 1  # the last completed GRPO step
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {r["grpo_step"] for r in rows if "train/loss" in r} == {1}


@pytest.fixture(scope="module")
def shared_ray():
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    yield
    ray.shutdown()


def cfg_run_dir(cfg) -> Path:
    return Path(os.environ["HW3_RUNS_DIR"]) / cfg.name


def _train_rows(result) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith(("time/", "async/"))} for row in result.train_rows]


def test_zero_lag_gives_the_synchronous_loops_weights(shared_ray):
    from hw3lib.grpo.loop import train

    torch.set_num_threads(1)  # as in the actors: the same kernels, the same rounding
    try:
        sync = train(tiny_cfg("sync", n_grpo_steps=2))
    finally:
        torch.set_num_threads(2)
    lagless = train_async(tiny_cfg("lagless", n_grpo_steps=2), AsyncConfig(mode="one_behind", max_staleness=0))
    assert [r["async/staleness"] for r in lagless.train_rows] == [0] * len(lagless.train_rows)
    assert _train_rows(sync) == _train_rows(lagless)
    for name, tensor in policy_weights(sync.run_dir).items():
        assert torch.equal(tensor, policy_weights(lagless.run_dir)[name]), name


def test_one_behind_stays_within_one_version_and_fails_cleanly_when_the_generator_dies(shared_ray):
    def kill_generator_after_step_2(info):
        if info["step"] == 2:
            ray.kill(info["generator"])

    cfg = tiny_cfg("behind", n_grpo_steps=4, eval_every=2)
    with pytest.raises(AsyncRunError, match="stopped") as error:
        train_async(cfg, AsyncConfig(mode="one_behind"), on_step=kill_generator_after_step_2)
    assert "checkpoint of the last completed GRPO step" in str(error.value)
    # Batch 3 may have been generated before the kill (then step 3 completed), or not.
    stopped_at = json.loads((cfg_run_dir(cfg) / "checkpoints" / "latest").parent.joinpath(
        (cfg_run_dir(cfg) / "checkpoints" / "latest").read_text().strip(), "state.json").read_text())["grpo_step"]
    assert stopped_at in (2, 3)
    result = train_async(cfg, AsyncConfig(mode="one_behind"), resume=True)  # fresh actors, from the checkpoint
    staleness = {r["grpo_step"]: r["async/staleness"] for r in result.train_rows}
    assert sorted(staleness) == [1, 2, 3, 4] and max(staleness.values()) <= 1
    # The first batch of a run (and of a resumed one) comes from the learner's weights; the next one
    # was sampled while the learner trained, one version behind.
    assert staleness[1] == 0 and staleness[2] == 1 and staleness[stopped_at + 1] == 0
    assert [r["grpo_step"] for r in result.eval_rows] == [0, 2, 4]
    timings = [json.loads(line) for line in (result.run_dir / "async_timings.jsonl").read_text().splitlines()]
    assert [t["grpo_step"] for t in timings] == [1, 2, 3, 4]
    for t in timings:
        assert t["generation_s"] + t["generator_idle_s"] + t["weight_sync_s"] == pytest.approx(t["step_s"], abs=1e-6) \
            or t["generation_s"] + t["weight_sync_s"] > t["step_s"]
    with pytest.raises(ValueError, match="async settings"):
        train_async(tiny_cfg("behind", n_grpo_steps=5, eval_every=2), AsyncConfig(mode="replay"), resume=True)


def test_replay_respects_staleness_and_uses(shared_ray):
    cfg = tiny_cfg("replay", n_grpo_steps=4, eval_every=4)
    acfg = AsyncConfig(mode="replay", max_staleness=2, max_uses=2, buffer_batches=2)
    result = train_async(cfg, acfg)
    summary = json.loads((result.run_dir / "replay.json").read_text())
    n = cfg.n_prompts_per_rollout_batch
    assert len(summary["uses"]) == 4 * n  # every learner step trained on n groups
    per_group: dict[int, int] = {}
    for uid, version, at in summary["uses"]:
        assert 0 <= at - version <= 2
        per_group[uid] = per_group.get(uid, 0) + 1
    assert max(per_group.values()) <= 2
    # The report's reuse figure counts the same uses: each group trained on more than once on average here.
    assert uses_per_group(result) == pytest.approx(len(summary["uses"]) / len(per_group))
    assert uses_per_group(result) > 1
    assert summary["added"] == summary["retired"] + summary["expired"] + summary["left_in_buffer"]
    assert summary["expired"] == 0  # these settings leave time to use every group
    assert all(r["async/staleness"] <= 2 for r in result.train_rows)
    assert all(math.isfinite(r["train/loss"]) for r in result.train_rows)


def test_the_notebooks_comparison_reuses_rollouts_at_three_lags_where_sync_learns(monkeypatch):
    """Notebook 04's schedules (the course's async problem): besides sync and one-behind, replay reuses each
    group (max_uses > 1) at three different staleness bounds; the smoke config is the MATH task at 64 rollouts
    and lr 2e-4 (where the synchronous loop learns, measured in schedule_comparison's docstring), under either
    course, and every schedule's bound is one its ratio loss corrects."""
    for course in ("gsm8k-qwen3", "math-qwen2.5"):
        monkeypatch.setenv("HW3_COURSE", course)
        cfg, schedules = schedule_comparison("smoke")
        assert (cfg.dataset, cfg.rollout_batch_size, cfg.learning_rate, cfg.loss_type) == (
            "math-synthetic", 64, 2e-4, "grpo_clip")
        assert (cfg.n_grpo_steps, cfg.n_eval_examples, cfg.eval_temperature) == (200, 512, 1.0)
        assert cfg.train_batch_size == cfg.rollout_batch_size and cfg.epochs_per_rollout_batch == 1
        assert schedules["sync"] is None and schedules["one_behind"].max_staleness == 1
        replays = [a for a in schedules.values() if a is not None and a.mode == "replay"]
        assert len({a.max_staleness for a in replays}) >= 3 and all(a.max_uses > 1 for a in replays)
        for acfg in schedules.values():
            if acfg is not None:
                acfg.check(cfg)
    assert schedule_comparison("smoke", n_grpo_steps=3)[0].n_grpo_steps == 3  # overrides win


def test_train_async_drops_rays_token_auth_notice_and_leaves_its_mode_alone(monkeypatch, caplog):
    """Issue 46: notebook 04's output carried Ray's "Token authentication is enabled ..." notice."""
    import logging

    from hw3lib.grpo.local_ray import TOKEN_NOTICE

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    seen = {}

    def fake_init(**kwargs):
        seen["mode"] = os.environ.get("RAY_AUTH_MODE")
        logger = logging.getLogger("ray._private.authentication.authentication_token_setup")
        logger.warning(TOKEN_NOTICE + ". Set RAY_AUTH_MODE=disabled to opt out.")  # as Ray words it
        logger.warning("Token authentication is disabled for this Ray cluster.")  # any other line stays
        raise RuntimeError("stop before starting Ray")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    with caplog.at_level("WARNING"), pytest.raises(RuntimeError, match="stop before starting Ray"):
        train_async(tiny_cfg("auth", n_grpo_steps=1), AsyncConfig(mode="one_behind"))
    assert seen["mode"] is None  # Ray chooses its mode itself (its cached mode must agree with its GCS's)
    assert TOKEN_NOTICE not in caplog.text and "Token authentication is disabled" in caplog.text
