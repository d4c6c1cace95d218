"""Run-to-run variation: the base recipe repeated with several seeds, its seed band stored with the runs.

Every grid but a seeded one runs each config once, so a difference between two of its runs mixes the change with
the luck of one seed (sampling, initialization of the data order): the same smoke config once ended at 35.2% and,
rerun, at 45.7%. `measure_seed_band(profile)` runs the profile's base recipe (`common_base`: the reference of
learning_rate, length_normalization and std_normalization, so its first seed is shared with those grids) with
`SEED_REPLICAS[profile]` seeds as the grid `seed_replicas` (`runs/seed_replicas/...`; finished runs are reused),
and writes the spread of their final validation answer rewards (`hw3lib.core.stats.seed_band`: mean, sd and the
band a difference of two single runs must exceed) to `runs/seed_replicas/seed_band.json`. `read_seed_band(profile)`
reads it back; `hw3lib.experiments.compare` then holds every one-seed grid's differences to that band as well as the
question-sampling band, and the reading says the band is the base's, measured on its replicas. `sweep(name)` runs a
grid (`run_sweep`) after measuring the band where the grid picks earlier grids' winners by those verdicts.

The replicas start from the base's own warm start (`GRPOConfig.warm_start_seed`; hw3lib.experiments.grids.shared_start),
as every config of a grid does, so the band is training's run-to-run variation, not the warm start's: when each seed
also drew its own warm start (measured 2026-11-29), the smoke replicas began at 34.4%, 42.6% and 22.7%, ended at 51.6%,
60.2% and 31.6%, and the band (±41.4 points) declared every grid difference within noise.

The band is measured on the base recipe; grids whose runs differ in schedule or length (baselines' on-policy
batches, the broad off-policy runs) borrow it, which the reading's "base replicas" states.
"""

from __future__ import annotations

from collections.abc import Sequence

from hw3lib.core.io import atomic_write_json, runs_dir
from hw3lib.core.stats import seed_band
from hw3lib.experiments.compare import SEED_BAND_FILE, SEED_GRID, read_seed_band  # noqa: F401 (read back here too)
from hw3lib.experiments.grids import GRIDS, build_grid, run_sweep
from hw3lib.experiments.runner import GridResult, run_grid
# Seeds of the base recipe per profile: at least 3 in smoke (the spread of fewer is not an estimate); the full
# profile's 3 x 200 GRPO steps fit the handout's budget beside the grids (one more base run than each grid's).
SEED_REPLICAS = {"smoke": 3, "full": 3}


def seed_grid(profile: str | None = None, steps: int | None = None, seeds: Sequence[int] | None = None):
    """The `seed_replicas` grid: the base recipe once per seed (default: the base's seed and the next ones,
    `SEED_REPLICAS[profile]` in all)."""
    first = build_grid(SEED_GRID, profile, steps)
    seeds = list(seeds) if seeds else [first.base.seed + i for i in range(SEED_REPLICAS[first.profile])]
    return build_grid(SEED_GRID, profile, steps, seeds)


def band_of(result: GridResult, metric: str = "eval/answer_reward") -> dict:
    """The seed band of a finished `seed_replicas` grid, as stored: `SeedBand.to_dict` plus profile, seeds, GRPO
    steps per run and validation questions (diverged replicas count: they are what that seed did)."""
    labels = result.grid.groups[result.grid.reference]
    finals = [result.results[label].eval_rows[-1][metric] for label in labels]
    band = seed_band(finals)
    if band is None:
        raise ValueError(f"the seed band needs at least 2 seeds; {SEED_GRID} has {len(labels)}")
    return {"profile": result.grid.profile, "seeds": [result.results[label].config.seed for label in labels],
            "runs": [result.records[label]["run"] for label in labels], "n_grpo_steps": result.grid.steps_per_run,
            "n_eval": result.results[labels[0]].eval_rows[-1]["eval/n"], **band.to_dict()}


def measure_seed_band(profile: str | None = None, steps: int | None = None,
                      seeds: Sequence[int] | None = None) -> dict:
    """Run (or read back) the base recipe's seed replicas and store their band in
    `runs/seed_replicas/seed_band.json`; returns what it stored."""
    stored = band_of(run_grid(seed_grid(profile, steps, seeds)))
    atomic_write_json(runs_dir() / SEED_GRID / SEED_BAND_FILE, stored)
    return stored


def sweep(name: str, profile: str | None = None, steps: int | None = None, seeds: Sequence[int] | None = None
          ) -> GridResult:
    """`run_sweep(name, ...)`, after measuring the seed band when the grid picks winners from one-seed grids (a
    grid with `needs`, no `seeds`): otherwise a first run would pick them by verdicts without the band, and a
    rerun, the band measured by then, differently -- training another config."""
    if name in GRIDS and GRIDS[name].needs and not seeds:
        measure_seed_band(profile, steps)
    return run_sweep(name, profile, steps, seeds)
