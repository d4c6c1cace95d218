"""Running an experiment grid: each config trained in turn, shared runs reused, divergence recorded.

`run_grid(grid)` trains each config into `runs/<grid>/<config>/` (finished runs are reused, interrupted ones
resumed from their checkpoint; a config identical to a run of another grid is trained once and read from there,
`shared_run_name`); `runs/<grid>/grid.json` names where each config's run lives. A run killed before its first
checkpoint (a dead kernel: Ctrl-C writes one) has nothing to resume from; its folder is moved, whole, to
`runs/.interrupted/` and the config trained afresh (`set_aside_unstarted`). Each run is watched by a
`DivergenceCheck`: a non-finite loss or gradient norm, or a collapsed training reward, stops it early; it is
recorded as `diverged` (reason and step) in grid.json and the run's `stopped.json` and never retrained.
On a GPU with vLLM each run trains in a fresh process of its own (`train` itself sees to it:
hw3lib.core.own_process), so the runs of a grid, its seed replicas and the leaderboard never put a second sleep-mode
engine in one process; on CPU they train in this process, as ever. The grids themselves (which configs, which
questions) are `hw3lib.experiments.grids`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from hw3lib.core.config import PLAN_FIELDS
from hw3lib.core.io import atomic_write_json, runs_dir
from hw3lib.core.lifecycle import RunResult, read_result
from hw3lib.core.runs import has_outputs, latest_checkpoint, metrics_rows
from hw3lib.grpo.config import GRPOConfig
from hw3lib.grpo.loop import STOPPED_FILE

# Config fields that do not change what a run computes: ignored when looking for a shared run.
# The memory plan (`forward_rows`, `prompt_tokens`: hw3lib.grpo.memory_plan) follows from the settings and the card, and
# a run records its own: a config that leaves it to be chosen matches a run that recorded its choice.
NOT_COMPUTED = ("name", "checkpoint_every", "wandb_project", *PLAN_FIELDS)
GRID_FILE = "grid.json"
INTERRUPTED_DIR = ".interrupted"  # under runs/: one level down, so no run lookup (`shared_run_name`) finds them
GRID_NAMES: set[str] = set()
"""The grids' names (`hw3lib.experiments.grids` adds them: it imports this module, not the other way round):
folders under runs/ whose runs `shared_run_name` may share, with or without their grid.json yet."""


@dataclass(frozen=True)
class Grid:
    """One experiment: configs named `<grid>/<label>`, each `base` changed by `changes[label]`."""

    name: str
    profile: str
    base: GRPOConfig
    configs: dict[str, GRPOConfig]
    changes: dict[str, dict]
    """label -> the settings that config changes from `base` (empty: the base itself)."""
    reference: str
    """The label the others are compared with."""
    question: str
    """What the grid asks, in one sentence (for tables and the writeup)."""
    groups: dict[str, list[str]] = field(default_factory=dict)
    """label -> the labels of its seed repeats (itself first); filled by `build_grid`."""
    rationale: str = ""
    """Why the grid's ranges, in words computed from its configs (`off_policy_rationale`); empty for most grids."""

    @property
    def steps_per_run(self) -> int:
        """GRPO steps of each run: the base's, unless the grid changes them (`baselines` in smoke)."""
        return max(cfg.n_grpo_steps for cfg in self.configs.values())


# ---- divergence ---------------------------------------------------------------------------------------

@dataclass
class DivergenceCheck:
    """`train(..., stop_when=DivergenceCheck())`: the reason to stop a diverged run, else None.

    Diverged: a non-finite loss or gradient norm in any optimizer step, or a collapsed reward -- the
    mean training reward of the last `window` GRPO steps below `collapse_fraction` of the mean of
    the first `window` (when that start is at least `min_start_reward`, so a run that never had
    reward is not called collapsed).
    """

    window: int = 5
    collapse_fraction: float = 0.25
    min_start_reward: float = 0.05
    rewards: list[float] = field(default_factory=list)
    """Training reward per GRPO step seen so far (`seed` fills it from a resumed run's metrics)."""

    def seed(self, rows: Sequence[dict], up_to_step: int) -> None:
        """Take the per-step rewards of a run's logged rows up to GRPO step `up_to_step` (a resume point)."""
        per_step = {row["grpo_step"]: row["train/reward"] for row in rows
                    if "train/loss" in row and row["grpo_step"] <= up_to_step}
        self.rewards = [per_step[k] for k in sorted(per_step)]

    def __call__(self, rows: Sequence[dict]) -> str | None:
        for row in rows:
            for key in ("train/loss", "train/grad_norm"):
                if not math.isfinite(row[key]):
                    return f"{key} = {row[key]} at optimizer step {row['step']} (GRPO step {row['grpo_step']})"
        self.rewards.append(rows[0]["train/reward"])
        if len(self.rewards) < 2 * self.window:
            return None
        start = sum(self.rewards[:self.window]) / self.window
        recent = sum(self.rewards[-self.window:]) / self.window
        if start >= self.min_start_reward and recent < self.collapse_fraction * start:
            return (f"training reward collapsed: {recent:.3f} over the last {self.window} GRPO steps vs "
                    f"{start:.3f} over the first {self.window} (below {self.collapse_fraction:g} x)")
        return None


# ---- the runner ---------------------------------------------------------------------------------------

@dataclass
class GridResult:
    """A grid's runs: `results[label]` (RunResult) and `records[label]` (status, run folder, reason)."""

    grid: Grid
    results: dict[str, RunResult]
    records: dict[str, dict]

    def diverged(self, label: str) -> bool:
        return self.records[label]["status"] == "diverged"


def config_key(config: dict) -> str:
    """The settings that determine what a run computes (JSON, name and bookkeeping fields dropped)."""
    config = json.loads(json.dumps(config))  # tuples -> lists, as saved in config.json
    return json.dumps({k: v for k, v in config.items() if k not in NOT_COMPUTED}, sort_keys=True)


def shared_run_name(cfg: GRPOConfig) -> str:
    """Where `cfg` runs: its own folder if that holds a run, else another grid's run with the same
    settings (the first in sorted order), else a run of its own outside the grids with the same settings
    (notebook 04's `runs/grpo_smoke`, the smoke base recipe), else its own folder."""
    root = runs_dir()
    if (root / cfg.name / "config.json").is_file():
        return cfg.name
    key = config_key(cfg.to_dict())
    # a setting hw3lib added after a run was made counts as its default there (as on resume: config_differences)
    defaults = {f.name: f.default for f in dataclasses.fields(cfg) if f.default is not dataclasses.MISSING}
    in_grids = [path for path in sorted(root.glob("*/*/config.json"))
                if path.parent.parent.name in GRID_NAMES or (path.parent.parent / GRID_FILE).is_file()]
    for path in in_grids + sorted(root.glob("*/config.json")):
        try:
            if config_key({**defaults, **json.loads(path.read_text())}) == key:
                return path.parent.relative_to(root).as_posix()
        except (OSError, json.JSONDecodeError):
            continue  # a half-written folder of another run is not a match
    return cfg.name


def read_stopped(run_dir) -> dict | None:
    """The run's `stopped.json` if it describes the run's latest checkpoint (a run resumed by hand past
    its stop has moved on: the file is then stale and ignored)."""
    path, checkpoint = run_dir / STOPPED_FILE, latest_checkpoint(run_dir)
    if not path.is_file() or checkpoint is None:
        return None
    stopped = json.loads(path.read_text())
    return stopped if stopped["grpo_step"] == json.loads((checkpoint / "state.json").read_text())["grpo_step"] else None


def set_aside_unstarted(run_dir: Path) -> Path:
    """Move a run folder that holds outputs but no checkpoint to `runs/.interrupted/<name>-<time>/` and say so:
    kept (the user's outputs are never deleted implicitly), and out of the way of a fresh run of its config."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    name = run_dir.relative_to(runs_dir()).as_posix().replace("/", "__")
    target = runs_dir() / INTERRUPTED_DIR / f"{name}-{stamp}"
    suffix = 1
    while target.exists():
        suffix += 1
        target = target.with_name(f"{name}-{stamp}-{suffix}")
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(run_dir, target)
    print(f"{run_dir} stopped before its first checkpoint (nothing to resume from): its outputs were moved to "
          f"{target}; training it afresh", flush=True)
    return target


def run_config(cfg: GRPOConfig, check: DivergenceCheck | None = None,
               callback: Callable[[dict], None] | None = None) -> tuple[RunResult, dict]:
    """Train (or reuse, or resume) one run, watched by `check`: `(result, record)`."""
    from hw3lib.grpo.loop import train

    run_dir = runs_dir() / cfg.name
    stopped = read_stopped(run_dir)
    if stopped is not None:  # diverged before: read it back, never train it again
        checkpoint = latest_checkpoint(run_dir)
        state = json.loads((checkpoint / "state.json").read_text())
        result = read_result(run_dir, cfg, state)
    else:
        check = check if check is not None else DivergenceCheck()
        checkpoint = latest_checkpoint(run_dir)
        if checkpoint is None and has_outputs(run_dir):  # killed before its first checkpoint
            set_aside_unstarted(run_dir)
        if checkpoint is not None:  # a resumed run: the rewards before its checkpoint count
            check.seed(metrics_rows(run_dir), json.loads((checkpoint / "state.json").read_text())["grpo_step"])
        result = train(cfg, resume=True, callback=callback, stop_when=check)
        stopped = read_stopped(run_dir)
    record = {"run": cfg.name, "status": "diverged" if stopped else "finished", "grpo_steps": result.grpo_steps,
              "n_grpo_steps": cfg.n_grpo_steps, "wall_clock_s": result.elapsed_s}
    if stopped:
        record.update(reason=stopped["reason"], stopped_at=stopped["grpo_step"])
    return result, record


@contextmanager
def config_lock(cfg: GRPOConfig) -> Iterator[None]:
    """Held while one config's run is found and trained: two sweeps running at once (hw3lib.experiments.parallel)
    never train the same settings twice -- the second waits for the lock, then finds the first's run and
    reuses it. One lock file per set of settings under `runs/.locks/` (flock: released if a process dies)."""
    import fcntl

    locks = runs_dir() / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    path = locks / f"{hashlib.sha1(config_key(cfg.to_dict()).encode()).hexdigest()[:16]}.lock"
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_grid(grid: Grid, check: Callable[[], DivergenceCheck] = DivergenceCheck,
             callback: Callable[[dict], None] | None = None) -> GridResult:
    """Run every config of `grid` in turn (see the module docstring); `runs/<grid>/grid.json` records
    each config's run folder and status after each run, so an interrupted sweep keeps what it did."""
    from tqdm.auto import tqdm

    from hw3lib.experiments.disk_check import check_disk_for

    check_disk_for(grid.configs.values(), f"grid `{grid.name}`")  # its checkpoints fit the disk, before any run
    manifest_path = runs_dir() / grid.name / GRID_FILE
    manifest = {"grid": grid.name, "profile": grid.profile, "question": grid.question, "reference": grid.reference,
                "configs": {}}
    results, records = {}, {}
    for label, cfg in tqdm(grid.configs.items(), desc=f"grid {grid.name}", unit="run"):
        with config_lock(cfg):
            where = shared_run_name(cfg)
            if where != cfg.name:
                print(f"=== {grid.name}/{label}: same settings as {where}; using that run", flush=True)
            else:
                print(f"=== {grid.name}/{label}", flush=True)
            results[label], record = run_config(cfg.replace(name=where), check(), callback)
        records[label] = {**record, "shared": where != cfg.name, "changes": grid.changes[label]}
        manifest["configs"][label] = records[label]
        atomic_write_json(manifest_path, manifest)
    return GridResult(grid, results, records)
