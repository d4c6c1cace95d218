"""The record of how long the README's commands took here (`bench/results/command_times.json`), read back.

hw3lib.workbook.timings measures and writes the record (and renders the README's table from it); this module
only reads it, so that any layer can state a measured time -- a smoke notebook's plan line says how long
`make workbook` took for that notebook (`expected_words`), when it was measured for the same course and sections.
"""

from __future__ import annotations

import json
from pathlib import Path

from hw3lib.core.io import project_root

RECORD = Path("bench") / "results" / "command_times.json"
DEFAULT_WORKBOOK = ("nlpdl-hw3", False)  # what plain `make workbook` runs: the default course, its handout's sections


def workbook_key(course: str, extras: bool) -> str:
    """The record's name for a workbook run of `course` (`extras`: every section): `make-workbook` for what plain
    `make workbook` runs, else `make-workbook:<course>` (+ `+extras`), so another course's run (`make store-outputs
    COURSE=...` runs one with every section) is kept beside it instead of replacing it."""
    if (course, bool(extras)) == DEFAULT_WORKBOOK:
        return "make-workbook"
    return f"make-workbook:{course}" + ("+extras" if extras else "")


def load(path: Path | None = None) -> dict:
    """The record (`{command: entry}`), or {} where nothing was measured yet."""
    path = path or project_root() / RECORD
    return json.loads(path.read_text()) if path.is_file() else {}


def expected_words(notebook: str, course: str, extras: bool, times: dict | None = None) -> str:
    """The sentence a smoke notebook prints about its own time: what `make workbook` measured for `notebook`
    ("04") the last time it ran `course` with these sections (`extras`: every section, else the handout's), or ""
    where the record has no such run (another course or sections take another time)."""
    entry = (load() if times is None else times).get(workbook_key(course, extras))
    minutes = (entry or {}).get("parts", {}).get(notebook)  # the key names the course and the sections
    if minutes is None:
        return ""
    return (f"Expected time: about {minutes:g} min on {entry['machine']} (`make workbook`, {entry['date']}, commit "
            f"{entry['commit']}); a finished run is read back in seconds.")
