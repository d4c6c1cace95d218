"""Benchmark: the extra time per evaluation that bubblewrap isolation costs, against the process fallback.

Run: `python bench/bench_sandbox.py [--repeats 10]` (from the repository root). Evaluates the
22-point starter program and the stored program (data/kissing_number/program.py) `repeats` times in each mode,
alternating modes so machine load hits both alike, and prints the median and min `eval_time`
per mode and the difference (bwrap - process); the bwrap runs include everything an evaluation
does there (launcher, fresh keyring, cgroup, user namespace for a non-root host uid, seccomp filter,
killing the sandbox's init). Without bubblewrap it says so and times the
fallback alone.
"""

from __future__ import annotations

import argparse
import statistics
import warnings
from pathlib import Path

from hw3lib.kissing import evaluate_program
from hw3lib.kissing.sandbox import SandboxWarning, bwrap_problem, containment

STARTER = ("import numpy as np\n"
           "def run_code():\n    e = 2 * np.eye(11, dtype=np.int64)\n    return np.vstack([e, -e]), 11\n")
STORED = Path(__file__).resolve().parents[1] / "data" / "kissing_number" / "program.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    warnings.simplefilter("ignore", SandboxWarning)
    problem = bwrap_problem()
    modes = ["process"] + ([] if problem else ["bwrap"])
    if problem:
        print(f"bubblewrap unavailable ({problem}): timing the fallback only")
    else:  # what each bubblewrap run includes: seccomp filter, cgroup, the host uid the program runs as
        print(f"bubblewrap runs bounded by: {containment()}")
    programs = {"starter (22 points)": STARTER}
    if STORED.is_file():
        programs["stored program"] = STORED
    print(f"{'program':22s} {'mode':8s} {'median':>9s} {'min':>9s}   (eval_time over {args.repeats} runs)")
    for name, program in programs.items():
        times = {mode: [] for mode in modes}
        for _ in range(args.repeats):
            for mode in modes:
                metrics = evaluate_program(program, timeout_s=60, sandbox=mode)
                assert metrics["validity"] == 1.0, metrics["message"]
                times[mode].append(metrics["eval_time"])
        for mode in modes:
            print(f"{name:22s} {mode:8s} {statistics.median(times[mode]) * 1e3:7.0f}ms {min(times[mode]) * 1e3:7.0f}ms")
        if "bwrap" in times:
            extra = statistics.median(times["bwrap"]) - statistics.median(times["process"])
            extra_min = min(times["bwrap"]) - min(times["process"])
            print(f"{name:22s} {'extra':8s} {extra * 1e3:7.0f}ms {extra_min * 1e3:7.0f}ms   per evaluation for bubblewrap")


if __name__ == "__main__":
    main()
