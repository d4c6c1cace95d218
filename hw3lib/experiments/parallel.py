"""Run many experiment grids at once: a small scheduler that keeps every core busy with one grid each.

On a small CPU one GRPO run does not use two cores well (the tiny model's matrices are small), so two
runs side by side, one thread each, finish sooner than the same two runs one after the other on two
threads. `run_grids_parallel` keeps `workers` grids running (each `python -m hw3lib.experiments.parallel
--grid NAME` with `OMP_NUM_THREADS` set to its share of the cores), starting the next one in `ORDER`
whose prerequisites (`GRIDS[name][3]`) have finished as soon as a slot frees up; each grid runs with
`hw3lib.experiments.grids.run_sweep` (finished runs only read back). Configs that two grids share are trained
once: `run_grid` holds a per-settings lock, so the second grid waits and then reuses the first's run --
which is why the order starts with the grids that train the common base. Afterwards the parent reads
every grid back (no training) and returns the `GridResult`s. Each grid's output goes to
`runs/sweep_logs/<grid>.log`; a failed grid stops the others and raises `SweepWorkerError` with the
tail of its log.

An interrupted call loses nothing: run it again and finished runs are reused, interrupted ones resumed.
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
from collections.abc import Sequence

from hw3lib.experiments.grids import GRIDS, GridResult, run_sweep
from hw3lib.core.io import runs_dir, shown_path

# Every grid, in the order they are started: the common base first (std_normalization trains it while
# off_policy trains the schedules it does not share), long grids early, the dependent ones last.
ORDER = ("std_normalization", "off_policy", "learning_rate", "baselines", "length_normalization", "prompt",
         "kl_drift", "off_policy_focused", "sync_strategy", "clip_ablation", "leaderboard", "algorithms")


class SweepWorkerError(RuntimeError):
    """A grid run by `run_grids_parallel` failed; the message ends with the tail of its log."""


def run_grids_parallel(profile: str | None = None, steps: int | None = None, grids: Sequence[str] = ORDER,
                       workers: int = 2, poll_s: float = 2.0) -> dict[str, GridResult]:
    """Run `grids` (in this order, prerequisites first), `workers` at a time; `{grid: GridResult}`.
    See the module docstring."""
    from tqdm.auto import tqdm

    for name in grids:
        if name not in GRIDS:
            raise ValueError(f"unknown grid {name!r}: choose from {', '.join(GRIDS)}")
    logs = runs_dir() / "sweep_logs"
    logs.mkdir(parents=True, exist_ok=True)
    threads = max(1, (os.cpu_count() or 1) // max(1, workers))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    pending, running, finished = list(grids), {}, set()
    bar = tqdm(total=len(grids), desc=f"grids ({workers} at a time, logs in {shown_path(logs)})", unit="grid")
    try:
        while pending or running:
            for name, (process, log) in list(running.items()):
                if process.poll() is None:
                    continue
                log.close()
                del running[name]
                if process.returncode != 0:
                    tail = "\n".join((logs / f"{name}.log").read_text().splitlines()[-40:])
                    raise SweepWorkerError(f"grid {name} exited with status {process.returncode}; the end of "
                                           f"{logs / (name + '.log')}:\n{tail}\nFix the cause and run again: "
                                           "finished runs are reused.")
                finished.add(name)
                bar.update(1)
            while len(running) < workers:
                ready = next((n for n in pending if all(d in finished or d not in grids for d in GRIDS[n][3])), None)
                if ready is None:
                    break
                pending.remove(ready)
                running[ready] = _start(ready, profile, steps, logs, env)
            time.sleep(poll_s if running else 0)
    finally:
        for process, log in running.values():  # interrupted, or another grid failed: stop these too
            process.terminate()
            process.wait()
            log.close()
        bar.close()
    # Reading back prints each reused run's settings and a bar per grid: not needed here (errors still raise).
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return {name: run_sweep(name, profile, steps) for name in grids}


def _start(name: str, profile: str | None, steps: int | None, logs, env) -> tuple[subprocess.Popen, object]:
    command = [sys.executable, "-m", "hw3lib.experiments.parallel", "--grid", name]
    command += ["--profile", profile] if profile else []
    command += ["--steps", str(steps)] if steps else []
    log = open(logs / f"{name}.log", "a")
    log.write(f"\n# {' '.join(command)}\n")
    log.flush()
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), log


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
        run_sweep(args.grid, args.profile, args.steps)
    except KeyboardInterrupt:
        print(f"grid {args.grid} stopped; its runs resume from their checkpoints next time", flush=True)
        return 130
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
