"""Walk the workbook in the full profile at rehearsal scale, on a CPU: what `make test` (CI) and `make rehearse` run.

The full profile is what students run on their GPU, and a branch that only the full profile takes must never
again be written without being executed. `python -m hw3lib.workbook.rehearse --course NAME[,NAME...] [--only 01,04]`
executes the notebooks (hw3lib.workbook.run, papermill) of each course in turn (presets of one setting share their
runs, hw3lib.core.course.Course.runs_folder: the second MATH course reads back the runs the first one trained) with

- `HW3_PROFILE=full` and `HW3_REHEARSAL=1`: the full profile's configs, engine (vLLM's CPU build), precision
  and control flow, with small random-weight stand-ins of the course's models (hw3lib.models.stand_in) and the
  counts cut (hw3lib.core.profile._rehearsal, the configs' `_REHEARSAL` settings);
- `HW3_SIMULATE_GPU` (default two H100s): the preflight and the cost printouts see that card, and check the
  real models' memory on it; notebook 05's scheduler starts one grid worker per simulated GPU;
- vLLM engines without torch.compile (`enforce_eager`, hw3lib.generation.vllm_engine): the compile warm-up was
  5.5 of 7.4 s per engine start on this CPU, and a walk starts about 70 engines;
- `HW3_COURSE_GRADER`: a stand-in grader (random weights never answer right; hw3lib.models.real_shape);
- `HW3_MATH_DATA`: the MATH course's data as generated MATH-format records (no MATH data here);

then builds the writeup and checks it. Outputs go where $HW3_OUTPUT_DIR / $HW3_RUNS_DIR say: run it under
`python -m hw3lib.workbook.isolated` (as the Makefile does) to keep a workbook's own runs untouched.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

DEFAULT_CARD = "2xH100-80GB"  # two cards: notebook 05 schedules one grid per GPU, two at a time, as on such a node


def rehearsal_env(folder: Path, card: str = DEFAULT_CARD) -> dict[str, str]:
    """The environment variables of a rehearsal whose generated files (grader, MATH data) go to `folder`."""
    from hw3lib.models.real_shape import write_stand_in_grader
    from hw3lib.tasks.math_synthetic import write_math_task

    math_folder = folder / "math"
    write_math_task(math_folder, n_train=256, n_test=64, seed=0, small=True)
    return {"HW3_PROFILE": "full", "HW3_REHEARSAL": "1", "HW3_SIMULATE_GPU": card,
            "HW3_COURSE_GRADER": str(write_stand_in_grader(folder)), "HW3_MATH_DATA": str(math_folder)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--course", default=None,
                        help="the courses whose notebooks are walked, comma-separated (default: $HW3_COURSE)")
    parser.add_argument("--only", default="", help="comma-separated notebook numbers, e.g. 01,04")
    parser.add_argument("--card", default=DEFAULT_CARD, help="the simulated GPU ($HW3_SIMULATE_GPU), e.g. L4-24GB")
    args = parser.parse_args(argv)
    from hw3lib.core.course import get_course
    from hw3lib.workbook.run import main as run_workbook

    courses = [get_course(name.strip()).name for name in (args.course or "").split(",") if name.strip()] or [None]
    with tempfile.TemporaryDirectory(prefix="hw3_rehearsal_") as folder:
        os.environ.update(rehearsal_env(Path(folder), args.card))
        for course in courses:
            if course:
                os.environ["HW3_COURSE"] = course
                print(f"rehearsal of {course}", flush=True)
            status = run_workbook(["--profile", "full"] + (["--only", args.only] if args.only else []))
            if status:
                return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
