"""How long the README's commands take on this machine: measured by running them, recorded, shown in the README.

    python -m hw3lib.workbook.timings --time make-test -- make test      # run it, record its wall time
    python -m hw3lib.workbook.timings --workbook runs/notebooks/timings.json   # what `make workbook` measured
    python -m hw3lib.workbook.timings --write-readme                    # the README's table from the record

The record is `bench/results/command_times.json` (one entry per command: minutes, date, commit, machine, and
per-notebook minutes for the workbook, which `hw3lib.workbook.run` writes to `timings.json` beside the executed
notebooks on every run; one workbook entry per course and sections measured, named by `workbook_key`). The README's table between its markers is rendered from it, and a test checks that it
is current, so every time the README states was produced by running the command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from hw3lib.core.command_times import RECORD, expected_words, load, workbook_key  # noqa: F401 (read there)
from hw3lib.core.io import atomic_write_json, project_root

BEGIN = "<!-- command times: python -m hw3lib.workbook.timings --write-readme -->"
END = "<!-- end of command times -->"
COMMANDS = {"make-test": "`make test` (what CI runs)", "make-workbook": "`make workbook` (smoke, the informative length)"}


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=project_root(), check=False)
    return done.stdout.strip() or "unknown"


def machine() -> str:
    return f"{os.cpu_count()} CPU cores"


def record(name: str, seconds: float, parts: dict[str, float] | None = None, path: Path | None = None,
           **setting) -> dict:
    """Store `name`'s wall time (and its parts, e.g. per notebook; `setting`: what it ran, e.g. course and extras)
    in the record; returns the entry."""
    path = path or project_root() / RECORD
    entry = {"minutes": round(seconds / 60, 1), "seconds": round(seconds, 1), "date": dt.date.today().isoformat(),
             "commit": _commit(), "machine": machine(), **setting}
    if parts:
        entry["parts"] = {key: round(value / 60, 1) for key, value in parts.items()}
    atomic_write_json(path, {**load(path), name: entry})
    return entry


def time_command(name: str, command: list[str], path: Path | None = None) -> int:
    """Run `command`, and record its wall time under `name` only if it succeeded."""
    start = time.perf_counter()
    status = subprocess.call(command)
    if status == 0:
        entry = record(name, time.perf_counter() - start, path=path)
        print(f"{name}: {entry['minutes']} min recorded in {path or RECORD}")
    else:
        print(f"{name}: exit status {status}, nothing recorded", file=sys.stderr)
    return status


def course_command(name: str) -> str:
    """How the README names another course's workbook entry (`make-workbook:cse599o-a3+extras`)."""
    course, _, extras = name.split(":", 1)[1].partition("+")
    return (f"`HW3_COURSE={course}{' HW3_EXTRAS=1' if extras else ''} make workbook` (smoke"
            f"{', every section' if extras else ''})")


def readme_table(times: dict) -> str:
    rows = ["| command | time here | measured |", "|---|---|---|"]
    others = {name: course_command(name) for name in sorted(times) if name.startswith("make-workbook:")}
    for name, words in {**COMMANDS, **others}.items():
        entry = times.get(name)
        if entry is None:
            rows.append(f"| {words} | not measured yet | `python -m hw3lib.workbook.timings --help` |")
            continue
        parts = entry.get("parts", {})
        detail = f" ({', '.join(f'{k} {v:g}' for k, v in parts.items())})" if parts else ""
        rows.append(f"| {words} | {entry['minutes']:g} min{detail} | {entry['date']}, commit {entry['commit']}, "
                    f"{entry['machine']} |")
    return "\n".join(rows)


def write_readme(readme: Path | None = None) -> None:
    readme = readme or project_root() / "README.md"
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{readme}: the markers {BEGIN!r} and {END!r} are missing: put them where the table goes")
    head, rest = text.split(BEGIN, 1)
    body = f"{BEGIN}\n{readme_table(load())}\n{END}"
    tmp = readme.with_suffix(".md.tmp")
    tmp.write_text(head + body + rest.split(END, 1)[1])
    tmp.replace(readme)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time", metavar="NAME", choices=sorted(COMMANDS), help="run the command after -- and record it")
    parser.add_argument("--workbook", type=Path, help="record a `make workbook` run's timings.json")
    parser.add_argument("--write-readme", action="store_true", help="render the README's table from the record")
    args = parser.parse_args(argv)
    if args.time:
        if not command:
            parser.error("--time NAME needs the command after --, e.g. -- make test")
        return time_command(args.time, command)
    if args.workbook:
        if not args.workbook.is_file():
            parser.error(f"{args.workbook}: no such file; `make workbook` writes it beside the executed notebooks")
        run = json.loads(args.workbook.read_text())
        name = workbook_key(run.get("course", "nlpdl-hw3"), run.get("extras", False))
        entry = record(name, run["total_s"], run["notebooks"],
                       **{key: run[key] for key in ("course", "extras") if key in run})
        print(f"{name}: {entry['minutes']} min recorded")
    if args.write_readme:
        write_readme()
    if not (args.time or args.workbook or args.write_readme):
        parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
