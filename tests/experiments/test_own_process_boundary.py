"""The process boundary on a GPU with vLLM (issue 58, item 3): every run that builds a colocated sleep-mode engine
trains in a process of its own -- notebook 05's grids (and the seed replicas, through the same runner), its SFT and
EI variants, notebook 04's `train(cfg)` and its `train(cfg, resume=True)` after a Ctrl-C -- and the caller (the
notebook kernel, a grid worker) builds no engine and loads no policy.

The configs are the full profile's (vLLM on cuda:0); the entry points' real `run_in_own_process` is given a
recording stand-in to run in the fresh process (`own_process_standin.record_run`: the child's pid per run), after
checking that the real call's arguments (the config, the divergence check) would cross."""

from __future__ import annotations

import json
import os

import pytest

import hw3lib.core.lifecycle as lifecycle
from hw3lib.core import own_process
from hw3lib.core.io import runs_dir
from hw3lib.core.lifecycle import RunResult


@pytest.fixture
def children(monkeypatch, tmp_path):
    """`children()`: the runs started so far, `{"pid", "entry", "run", "resume"}` each, as their processes wrote."""
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    log = tmp_path / "children.jsonl"
    import hw3lib.generation as generation
    import hw3lib.models.load as load

    def refuse(*args, **kwargs):
        raise AssertionError("an engine or a policy was built in the caller's process")

    monkeypatch.setattr(generation, "training_engine", refuse)
    monkeypatch.setattr(load, "load_training_policy", refuse)

    def spawn(fn, cfg, *args, **kwargs):
        own_process.check_picklable(fn, (cfg, *args), kwargs)  # the real call would cross the boundary
        entry = f"{fn.__module__}.{fn.__qualname__}"
        from tests.experiments.own_process_standin import record_run

        own_process.run_in_own_process(record_run, str(log), entry, cfg.name, bool(args[0]))
        evals = [{"eval/answer_reward": 0.5 + 0.01 * cfg.seed, "eval/n": 8, cfg.COUNTER: cfg.total_steps}]
        return RunResult(runs_dir() / cfg.name, cfg, evals, cfg.total_steps, 0, 0, 0.0, None)

    monkeypatch.setattr(lifecycle, "run_in_own_process", spawn)
    return lambda: [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []


def one_process_each(started: list[dict]) -> bool:
    pids = [row["pid"] for row in started]
    return len(set(pids)) == len(pids) and os.getpid() not in pids


def test_each_config_of_a_grid_and_each_seed_replica_trains_in_its_own_process(children):
    from hw3lib.experiments.grids import build_grid, run_grid
    from hw3lib.experiments.seeds import measure_seed_band

    result = run_grid(build_grid("std_normalization", "full"))
    assert [row["run"] for row in children()] == ["std_normalization/std_on", "std_normalization/std_off"]
    assert set(result.records) == {"std_on", "std_off"}
    measure_seed_band("full")  # the seed replicas: the same runner, three runs
    started = children()
    assert len(started) == 5 and one_process_each(started)
    assert {row["entry"] for row in started} == {"hw3lib.grpo.loop.train"}


def test_sft_and_ei_variants_train_in_their_own_processes(children):
    from hw3lib.sft.config import EIConfig, SFTConfig
    from hw3lib.sft.experiments import ei_variant_configs, run_all, sft_size_configs
    from hw3lib.sft.expert_iteration import expert_iteration
    from hw3lib.sft.loop import train_sft

    run_all(train_sft, sft_size_configs(SFTConfig(name="sft"), sizes=(None,)))
    run_all(expert_iteration, ei_variant_configs(EIConfig(name="ei"), {"Db512": {}, "G4": {"group_size": 4}}))
    started = children()
    assert [(row["entry"].rsplit(".", 1)[1], row["run"]) for row in started] == [
        ("train_sft", "sft_all"), ("train_sft", "sft_filtered"),
        ("expert_iteration", "ei_Db512"), ("expert_iteration", "ei_G4")]
    assert one_process_each(started)


def test_notebook_04s_run_and_its_resume_after_ctrl_c_each_get_a_fresh_process(children):
    from hw3lib.grpo.config import GRPOConfig
    from hw3lib.grpo.loop import train

    cfg = GRPOConfig.for_profile("full").replace(name="grpo_interrupted")
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C: the child checkpoints, the kernel sees KeyboardInterrupt
        train(cfg)
    train(cfg, resume=True)  # notebook 04's cell: a new process, never a second engine in the first
    started = children()
    assert [(row["run"], row["resume"]) for row in started] == [("grpo_interrupted", False),
                                                                 ("grpo_interrupted", True)]
    assert one_process_each(started)
