"""hw3lib.experiments.seeds: the base recipe's seed replicas and the seed band stored with them."""

from __future__ import annotations

import pytest

from hw3lib.core.lifecycle import RunResult
from hw3lib.experiments.grids import GridResult, build_grid, config_key
from hw3lib.experiments.seeds import SEED_BAND_FILE, band_of, measure_seed_band, read_seed_band, seed_grid


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))


def test_the_seed_grid_repeats_the_base_recipe_with_three_seeds_in_smoke():
    grid = seed_grid("smoke")
    assert grid.groups == {"base": ["base", "base_seed1_shared_start", "base_seed2_shared_start"]}
    assert [cfg.seed for cfg in grid.configs.values()] == [0, 1, 2]
    # every replica trains from the base's warm start (seed 0's): only the training luck differs
    assert grid.changes == {"base": {}, "base_seed1_shared_start": {"seed": 1, "warm_start_seed": 0},
                            "base_seed2_shared_start": {"seed": 2, "warm_start_seed": 0}}
    # The first replica is the base recipe itself: the same settings as learning_rate's reference, so one run.
    reference = build_grid("learning_rate", "smoke")
    assert config_key(grid.configs["base"].to_dict()) == config_key(reference.configs[reference.reference].to_dict())
    assert seed_grid("smoke", seeds=[5, 6]).groups == {"base": ["base", "base_seed6_shared_start"]}


def _finished(grid, finals: list[float]) -> GridResult:
    results = {label: RunResult(None, cfg, [{"step": 0, "grpo_step": 0, "eval/answer_reward": 0.3, "eval/n": 256},
                                            {"step": 2, "grpo_step": 2, "eval/answer_reward": end, "eval/n": 256}],
                                2, 2, 0, 1.0, None)
               for (label, cfg), end in zip(grid.configs.items(), finals)}
    records = {label: {"run": cfg.name, "status": "finished", "wall_clock_s": 1.0}
               for label, cfg in grid.configs.items()}
    return GridResult(grid, results, records)


def test_band_of_the_replicas_and_read_back_per_profile(monkeypatch):
    grid = seed_grid("smoke")
    stored = band_of(_finished(grid, [0.352, 0.457, 0.40]))
    # mean 0.403; deviations -0.051, 0.054, -0.003: variance 0.005526 / 2 = 0.002763, sd 0.052564;
    # band t(2 df at 2 s.e.'s coverage) 4.526537 x 0.052564 x sqrt 2 = 0.336489.
    assert stored["seeds"] == [0, 1, 2] and stored["n_eval"] == 256 and stored["profile"] == "smoke"
    assert (stored["mean"], stored["sd"], stored["band"]) == pytest.approx((0.403, 0.052564, 0.336489), abs=1e-6)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        band_of(_finished(seed_grid("smoke", seeds=[0]), [0.4]))
    # measure_seed_band stores what band_of finds (the runs themselves are reused or trained by run_grid).
    import hw3lib.experiments.seeds as seeds

    monkeypatch.setattr(seeds, "run_grid", lambda g: _finished(g, [0.352, 0.457, 0.40]))
    assert measure_seed_band("smoke") == stored
    found = read_seed_band("smoke")
    assert found.values == (0.352, 0.457, 0.40) and found.band == pytest.approx(0.336489, abs=1e-6)
    assert read_seed_band("full") is None


def test_no_band_before_it_is_measured(tmp_path):
    assert read_seed_band("smoke") is None
    assert not (tmp_path / "runs" / "seed_replicas" / SEED_BAND_FILE).exists()


def test_the_notebook_says_which_run_to_run_variation_the_verdicts_count():
    from hw3lib.experiments.notebook import seed_line

    assert seed_line({"seed_source": "repeats", "seed_band": None}).endswith("each config's seed repeats.")
    assert "±14.9 points" in seed_line({"seed_source": "base replicas", "seed_band": 0.1487})
    assert "not counted" in seed_line({"seed_source": None, "seed_band": None})


def test_replicas_train_from_the_base_warm_start_its_data_included():
    from hw3lib.models.load import warm_start_records, warm_start_seed

    grid = seed_grid("smoke")
    base, replica = grid.configs["base"], grid.configs["base_seed2_shared_start"]
    assert (warm_start_seed(base), warm_start_seed(replica)) == (0, 0)
    assert warm_start_records(replica) == warm_start_records(base)
    own = replica.replace(warm_start_seed=None)  # before: each seed its own warm start, on other problems
    assert warm_start_seed(own) == 2 and warm_start_records(own) != warm_start_records(base)
