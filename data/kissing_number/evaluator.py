"""The kissing problem's evaluator, as the course's handout runs it: `python data/kissing_number/evaluator.py PROGRAM`.

Runs PROGRAM (a Python file defining `run_code()`, `get_centers()` or `points`) in hw3lib's sandbox
(hw3lib.kissing.evaluator.evaluate_program: bubblewrap when available, time and memory limits) and
prints the course's metrics as JSON -- `num_points`, `dimension`, `validity`, `combined_score` (plus
`eval_time`, `status` and the sandbox used) -- then the verifier's verdict. Exit status 0 for a valid
set, 1 for an invalid one, 2 for a usage error. `evaluate(program_path)` returns the same metrics for
search loops that import this file. Same as `hw3 kissing evaluate PROGRAM`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

try:
    from hw3lib.kissing.evaluator import evaluate_program
except ImportError:  # run from a checkout without `pip install -e .`: the package sits two folders up
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from hw3lib.kissing.evaluator import evaluate_program


def evaluate(program_path: str, timeout_s: float = 60.0) -> dict:
    """The course's metrics for the program at `program_path` (sandboxed; see the module docstring)."""
    return evaluate_program(Path(program_path), timeout_s=timeout_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("program", help="Python file defining run_code(), get_centers() or points")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds the program may run (default 60)")
    args = parser.parse_args(argv)
    program = Path(args.program)
    if not program.is_file():
        print(f"error: {program} is not a file: pass the path of a Python program", file=sys.stderr)
        return 2
    metrics = evaluate(str(program), timeout_s=args.timeout)
    message = metrics.pop("message", "")
    print(json.dumps(metrics, indent=2))
    if message:
        print(message)
    return 0 if metrics.get("validity") == 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
