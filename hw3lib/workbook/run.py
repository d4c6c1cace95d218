"""Run the whole workbook: every notebook in order on one profile, then build the writeup.

`python -m hw3lib.workbook.run [--profile smoke|full] [--only 01,04]` executes each notebook with
papermill (the `profile` parameter injected into the cell tagged `parameters`), writes the executed
copies to `runs/notebooks/` (`runs/<setting>/notebooks/<course>/` for another course than the default; the
committed notebooks are left untouched), and finally compiles
`writeup/writeup.pdf` from the figures and result files the notebooks exported and checks it
(`hw3lib.workbook.writeup.check_writeup`): every section must be in the PDF, and on the smoke profile every
section of the notebooks just run must show its results, not "Not run yet" (the full profile only
lists those, since a GPU session may run some of them only).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hw3lib.core.profile import default_profile_name, rehearsal_requested
from hw3lib.core.io import atomic_write_json, project_root, runs_dir


def notebooks() -> list[Path]:
    return sorted((project_root() / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def run_notebook(path: Path, profile: str, out_dir: Path) -> Path:
    """Execute one notebook with papermill; returns the executed copy's path."""
    import papermill

    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / path.name
    papermill.execute_notebook(
        str(path), str(out), parameters={"profile": profile}, cwd=str(path.parent),
        kernel_name="python3", progress_bar=False, log_output=False,
        kernel_manager_class="hw3lib.workbook.kernel.IPCKernelManager",  # no TCP-encryption warning in the logs
    )
    return out


def executed_notebooks_dir() -> Path:
    """Where the executed copies go: runs/notebooks for the default course, else a folder of the course's own
    inside its runs folder (presets of one setting share their runs, not their notebooks)."""
    from hw3lib.core.course import DEFAULT_COURSE, default_course_name

    name = default_course_name()
    return runs_dir() / "notebooks" if name == DEFAULT_COURSE else runs_dir() / "notebooks" / name


def section_was_run(title: str) -> bool:
    """Whether the notebooks ran the writeup section `title` (hw3lib.workbook.writeup.SECTIONS): those of the
    course's handout, and the extras when asked for (hw3lib.core.course.sections_to_run: $HW3_EXTRAS=1)."""
    from hw3lib.core.course import sections_to_run
    from hw3lib.workbook.writeup import handout_asks

    return handout_asks(title, sections_to_run(None, default_profile_name()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default=None, help="smoke or full (default: full with a GPU, else smoke)")
    parser.add_argument("--only", default="", help="comma-separated notebook numbers, e.g. 01,04")
    args = parser.parse_args(argv)
    profile = args.profile or default_profile_name()
    wanted = {n.strip() for n in args.only.split(",") if n.strip()}
    out_dir = executed_notebooks_dir()
    out_dir.mkdir(parents=True, exist_ok=True)

    selected = [nb for nb in notebooks() if not wanted or nb.name[:2] in wanted]
    seconds: dict[str, float] = {}
    print(f"hw3 workbook: profile={profile}, {len(selected)} notebooks -> {out_dir}", flush=True)
    for nb in selected:
        start = time.perf_counter()
        print(f"  running {nb.name} ...", end=" ", flush=True)
        try:
            run_notebook(nb, profile, out_dir)
        except Exception as exc:  # papermill raises PapermillExecutionError with the cell's traceback
            print("FAILED", flush=True)
            print(f"\n{nb.name} failed: {exc}\nThe partly executed notebook is {out_dir / nb.name}; "
                  "open it to see the failing cell.", file=sys.stderr)
            return 1
        seconds[nb.name[:2]] = time.perf_counter() - start
        print(f"done in {seconds[nb.name[:2]]:.0f} s", flush=True)
    # each notebook's wall time, for `python -m hw3lib.workbook.timings --workbook` (the README's time table)
    from hw3lib.core.course import default_course_name, get_course, sections_to_run

    extras = sections_to_run(None, profile) != set(get_course(None).sections)
    atomic_write_json(out_dir / "timings.json", {"profile": profile, "course": default_course_name(),
                                                 "extras": extras, "notebooks": seconds,
                                                 "total_s": sum(seconds.values())})

    from hw3lib.workbook.writeup import WriteupCheckError, build_writeup, check_writeup, sections_of_notebooks

    pdf = build_writeup()
    print(f"writeup: {pdf}")
    ran = [title for title in sections_of_notebooks(nb.name[:2] for nb in selected) if section_was_run(title)]
    try:
        # The rehearsal runs every section a real GPU session would, so it must show them all, like smoke.
        check = check_writeup(pdf, must_be_run=ran if profile == "smoke" or rehearsal_requested() else ())
    except WriteupCheckError as exc:
        print(exc, file=sys.stderr)
        return 1
    not_run = [title for title in ran if not check["sections"][title]]
    if not_run:  # full profile: reported, not an error
        print("writeup sections still without results: " + "; ".join(not_run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
