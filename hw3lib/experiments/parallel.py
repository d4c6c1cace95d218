"""Run many experiment grids at once: a small scheduler that keeps each worker slot busy with one grid.

Where the grids run (`grid_workers`, one environment per slot):

- **full** (GPU): one grid per visible GPU, each worker process with `CUDA_VISIBLE_DEVICES` set to its one GPU. A
  training run holds a colocated vLLM engine at `gpu_memory_utilization` 0.5 beside its float32 trainer, so a
  second grid on the same GPU would find too little memory free and its engine would refuse to start.
- **smoke** (CPU): `workers` grids side by side (default 2), `OMP_NUM_THREADS` set to each one's share of the
  cores. On a small CPU one GRPO run does not use two cores well (the tiny model's matrices are small), so two runs
  side by side, one thread each, finish sooner than the same two runs one after the other on two threads.

`run_grids_parallel` starts `python -m hw3lib.experiments.parallel --grid NAME` in a free slot for the next grid in
`ORDER` whose prerequisites (`GRIDS[name].needs`) have finished, as soon as a slot frees up; each grid runs with
`hw3lib.experiments.seeds.sweep` (`run_sweep`, the seed band measured first where the grid picks winners; finished
runs only read back). Configs that two grids share are trained
once: `run_grid` holds a per-settings lock, so the second grid waits and then reuses the first's run --
which is why the order starts with the grids that train the common base. Afterwards the parent reads
every grid back (no training) and returns the `GridResult`s. Each grid's output goes to
`runs/sweep_logs/<grid>.log`; a failed grid stops the others and raises `SweepWorkerError` with the
tail of its log. `grids_to_run(sections)` picks the grids of the workbook sections a notebook runs
(`hw3lib.core.course.sections_to_run`).

An interrupted call loses nothing: run it again and finished runs are reused, interrupted ones resumed. On a GPU a
worker holds no engine itself: each of its runs trains in a process of its own (hw3lib.core.own_process), which the
worker's SIGTERM reaches as one SIGINT, so the run checkpoints before the worker exits.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Sequence

from hw3lib.core.course import SECTIONS
from hw3lib.core.devices import cpu_threads
from hw3lib.experiments.grids import GRIDS, GridResult, run_sweep
from hw3lib.experiments.seeds import sweep  # a worker's grid: the seed band first where it picks winners
from hw3lib.core.io import runs_dir, shown_path

# Every grid, in the order they are started: the common base first (std_normalization trains it while
# off_policy trains the schedules it does not share), long grids early, the dependent ones last.
ORDER = ("std_normalization", "off_policy", "learning_rate", "baselines", "length_normalization", "prompt",
         "kl_drift", "off_policy_focused", "sync_strategy", "clip_ablation", "leaderboard", "algorithms")
# The workbook section (hw3lib.core.course.SECTIONS) each grid belongs to; None: beyond every handout, run only with
# the extras. sync_strategy stays with the ablations: which handouts ask for it is not settled, and a grid a handout
# asks for must not become opt-in.
GRID_SECTIONS: dict[str, str | None] = {**dict.fromkeys(ORDER, "ablations"), "kl_drift": "kl_drift",
                                        "leaderboard": "leaderboard", "algorithms": None}
SMOKE_WORKERS = 2  # CPU: two grids side by side, one core each (see the module docstring)


class SweepWorkerError(RuntimeError):
    """A grid run by `run_grids_parallel` failed; the message ends with the tail of its log."""


def grids_to_run(sections: Collection[str]) -> tuple[str, ...]:
    """The grids of `sections` (as `sections_to_run` returns them), in `ORDER`; a grid beyond every handout
    (`algorithms`) only when every section runs, i.e. with the extras."""
    every = set(SECTIONS) <= set(sections)
    return tuple(name for name in ORDER
                 if (GRID_SECTIONS[name] in sections if GRID_SECTIONS[name] is not None else every))


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as a child's `CUDA_VISIBLE_DEVICES` names them: the entries of ours if it is
    set (empty or -1: none), else torch's device indices, else (no GPU) the simulated cards of $HW3_SIMULATE_GPU."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is not None:
        entries = [entry.strip() for entry in value.split(",") if entry.strip()]
        return [] if entries[:1] == ["-1"] else entries
    import torch

    if torch.cuda.is_available():
        return [str(index) for index in range(torch.cuda.device_count())]
    from hw3lib.core.preflight import detect_device

    simulated = detect_device()  # the rehearsal's $HW3_SIMULATE_GPU cards: the same scheduling as on that node
    return [str(index) for index in range(simulated.count)] if simulated.simulated else []


def grid_workers(profile: str, gpus: Sequence[str] = (), workers: int | None = None,
                 cpus: int | None = None) -> list[dict[str, str]]:
    """One environment (variables to set) per worker slot: in the full profile one slot per GPU of `gpus`, with
    `CUDA_VISIBLE_DEVICES` set to that GPU (at most `workers` of them; one slot without it if there is no GPU),
    elsewhere `workers` slots (default `SMOKE_WORKERS`); each slot's `OMP_NUM_THREADS` its share of `cpus`
    (default: this process's, `hw3lib.core.devices.cpu_threads`)."""
    if profile == "full":
        slots = [{"CUDA_VISIBLE_DEVICES": gpu} for gpu in gpus][:workers or None] or [{}]
    else:
        slots = [{} for _ in range(workers or SMOKE_WORKERS)]
    threads = str(max(1, (cpus or cpu_threads()) // len(slots)))
    return [{**slot, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads} for slot in slots]


def check_grids_fit(grids: Sequence[str], profile: str, steps: int | None) -> None:
    """The preflight (hw3lib.core.preflight) of every grid before any worker starts: each config of the grids
    that need no earlier results, and the base of those that do (their configs change the loss or the schedule,
    not the memory, beyond what the off-policy grid already checks). A config that does not fit the card stops
    here with the settings that would, not in a worker's log hours later."""
    from hw3lib.core.preflight import expected_prompt_tokens, preflight
    from hw3lib.experiments.grids import build_grid, grid_base

    for name in grids:
        configs = [grid_base(name, profile, steps)] if GRIDS[name].needs else build_grid(name, profile, steps).configs.values()
        for cfg in configs:  # at the data's longest prompt as the tables estimate it (each run measures its own)
            preflight(cfg.replace(prompt_tokens=expected_prompt_tokens(cfg)), "grpo")


def run_grids_parallel(profile: str | None = None, steps: int | None = None, grids: Sequence[str] = ORDER,
                       workers: int | None = None, poll_s: float = 2.0) -> dict[str, GridResult]:
    """Run `grids` (in this order, prerequisites first), one per worker slot (`grid_workers`: full, one per
    visible GPU; smoke, `workers` side by side); `{grid: GridResult}`. See the module docstring."""
    from tqdm.auto import tqdm

    from hw3lib.core.profile import default_profile_name

    for name in grids:
        if name not in GRIDS:
            raise ValueError(f"unknown grid {name!r}: choose from {', '.join(GRIDS)}")
    profile = profile or default_profile_name()  # the workers run the profile chosen here, not their own guess
    check_grids_fit(grids, profile, steps)
    slots = grid_workers(profile, visible_gpus() if profile == "full" else (), workers)
    logs = runs_dir() / "sweep_logs"
    logs.mkdir(parents=True, exist_ok=True)
    pending, running, finished, free = list(grids), {}, set(), list(range(len(slots)))
    where = "one per GPU" if "CUDA_VISIBLE_DEVICES" in slots[0] else "at a time"
    bar = tqdm(total=len(grids), desc=f"grids ({len(slots)} {where}, logs in {shown_path(logs)})", unit="grid")
    try:
        while pending or running:
            for name in _reap(running, logs, free):
                finished.add(name)
                bar.update(1)
            while free:
                ready = next((n for n in pending if all(d in finished or d not in grids for d in GRIDS[n].needs)), None)
                if ready is None:
                    break
                pending.remove(ready)
                slot = free.pop(0)
                running[ready] = (*_start(ready, profile, steps, logs, slots[slot]), slot)
            time.sleep(poll_s if running else 0)
    finally:
        for process, log, _slot in running.values():  # interrupted, or another grid failed: stop these too
            process.terminate()
            process.wait()
            log.close()
        bar.close()
    # Reading back prints each reused run's settings and a bar per grid: not needed here (errors still raise).
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return {name: run_sweep(name, profile, steps) for name in grids}


def _reap(running: dict, logs, free: list[int]) -> list[str]:
    """The grids of `running` that have exited successfully (removed, their slots back in `free`); a grid that
    failed raises SweepWorkerError with the tail of its log."""
    done = []
    for name, (process, log, slot) in list(running.items()):
        if process.poll() is None:
            continue
        log.close()
        del running[name]
        free.append(slot)
        if process.returncode != 0:
            tail = "\n".join((logs / f"{name}.log").read_text().splitlines()[-40:])
            raise SweepWorkerError(f"grid {name} exited with status {process.returncode}; the end of "
                                   f"{logs / (name + '.log')}:\n{tail}\nFix the cause and run again: "
                                   "finished runs are reused.")
        done.append(name)
    return done


def _start(name: str, profile: str | None, steps: int | None, logs, slot: dict[str, str]
           ) -> tuple[subprocess.Popen, object]:
    command = [sys.executable, "-m", "hw3lib.experiments.parallel", "--grid", name]
    command += ["--profile", profile] if profile else []
    command += ["--steps", str(steps)] if steps else []
    log = open(logs / f"{name}.log", "a")
    shown = " ".join(f"{key}={value}" for key, value in slot.items())
    log.write(f"\n# {shown} {' '.join(command)}\n")
    log.flush()
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **slot}), log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one grid for hw3lib.experiments.parallel (started by it).")
    parser.add_argument("--grid", required=True, choices=sorted(GRIDS))
    parser.add_argument("--profile", default=None)
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args(argv)
    # The scheduler stops a grid with SIGTERM (another grid failed, or the user interrupted it): handled as
    # a Ctrl-C, so the training loop checkpoints its last finished step and the next call resumes there.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        sweep(args.grid, args.profile, args.steps)
    except KeyboardInterrupt:
        print(f"grid {args.grid} stopped; its runs resume from their checkpoints next time", flush=True)
        return 130
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
