"""hw3lib.core.devices.cpu_threads: the thread budget every CPU-parallel piece (grid workers, the synchronous
schedule of the async comparison) divides, so two concurrent walks of `make test` do not oversubscribe 2 cores."""

import os

import pytest

from hw3lib.core.devices import cpu_threads
from hw3lib.experiments.parallel import grid_workers


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def test_the_budget_is_the_cores_this_process_may_use_when_omp_is_unset(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cpu_threads() == _cores()


@pytest.mark.parametrize("value, expected", [("1", 1), ("999", None), ("0", 1), ("4,2", None), ("", None)])
def test_omp_num_threads_caps_the_budget_and_odd_values_fall_back_to_the_cores(monkeypatch, value, expected):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert cpu_threads() == (expected if expected is not None else _cores())


def test_grid_workers_share_the_budget_of_a_one_thread_walk(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # what make test sets in each of its two concurrent walks
    assert grid_workers("smoke") == [{"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}] * 2


def test_the_synchronous_schedule_gets_the_async_actors_threads_within_the_budget(monkeypatch):
    from hw3lib.grpo import async_report

    seen = []

    def fake_train(cfg, resume=True):
        import torch

        seen.append(torch.get_num_threads())
        return cfg.name

    monkeypatch.setattr(async_report, "train", fake_train)
    cfg = async_report.GRPOConfig.for_profile("smoke", name="threads")
    for omp, expected in (("1", 1), ("64", min(2, _cores()))):
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
        assert async_report.run_schedules(cfg, {"sync": None}) == {"sync": "threads_sync"}
        assert seen[-1] == expected
