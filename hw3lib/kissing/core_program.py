"""`program.py` from the core search: writing it, recognizing it, and the data `report.md` states about it.

`program.py` is the project's deliverable (data/kissing_number/). It holds the set of whichever search produced
the largest verified set; `deliverables.report_data` must find the search that wrote it. For the core search
(`core_search`) that check is exact, as for the other two kinds: `program_text(search_folder)` is what
`write_program` stores (the best verified set of core_search.json, through `search.program_source`), and
`is_core_program(folder)` is true only when the stored `program.py` equals it byte for byte.

`deliverables.core_search_report(folder)` turns such a program into the data `report.md` states (this module
does not import `deliverables`, which imports it).

`python -m hw3lib.kissing.core_program --write` writes data/kissing_number/program.py from
data/kissing_number/core_search/ (refusing unless it beats the stored program).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hw3lib.core.io import atomic_write_text, project_root

SEARCH_FOLDER = "core_search"  # beside program.py
WRITTEN_BY = "`python -m hw3lib.kissing.core_program --write`"


def search_log(search_folder: Path) -> dict:
    from hw3lib.kissing.core_search import LOG_NAME

    return json.loads((Path(search_folder) / LOG_NAME).read_text(encoding="utf-8"))


def program_text(search_folder: str | Path) -> str:
    """The program that prints the core search's best verified set (deterministic: the same log, the same text)."""
    import numpy as np

    from hw3lib.kissing.search import program_source

    log = search_log(Path(search_folder))
    best = log["best"]
    entry = next(e for e in log["pool"] if e["index"] == best["index"])
    rows = entry["composition"]["rows"]
    method = (f"our own core search (hw3lib.kissing.core_search): core `{entry['spec']}` ({rows} rows, frame "
              f"{entry['frame']}), then {best['num_points'] - rows} remainder rows grown by "
              f"hw3lib.kissing.core_remainder ({best['growth_log']})")
    return program_source(np.asarray(best["points"], dtype=np.int64), method, written_by=WRITTEN_BY)


def is_core_program(folder: str | Path) -> bool:
    """Whether folder/program.py is exactly what `write_program` writes from folder/core_search/."""
    folder = Path(folder)
    program, search = folder / "program.py", folder / SEARCH_FOLDER
    if not program.is_file() or not (search / "core_search.json").is_file():
        return False
    if WRITTEN_BY not in program.read_text(encoding="utf-8"):  # cheap: most programs are not ours
        return False
    return program.read_text(encoding="utf-8") == program_text(search)


def write_program(folder: str | Path | None = None) -> Path:
    """Store folder/program.py from folder/core_search/ when its best beats the stored program."""
    from hw3lib.kissing.evaluator import evaluate_program

    folder = Path(folder) if folder is not None else project_root() / "data" / "kissing_number"
    best = search_log(folder / SEARCH_FOLDER)["best"]
    stored = folder / "program.py"
    stored_score = evaluate_program(stored, timeout_s=60)["combined_score"] if stored.is_file() else 0.0
    if not best["valid"] or best["num_points"] <= stored_score:
        raise ValueError(f"the core search's best ({best['num_points']}) does not beat the stored program's "
                         f"{stored_score:g}; nothing written")
    return atomic_write_text(stored, program_text(folder / SEARCH_FOLDER))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hw3lib.kissing.core_program", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write program.py from the core search's best set")
    parser.add_argument("--folder", default=None, help="data/kissing_number by default")
    args = parser.parse_args(argv)
    if args.write:
        print(write_program(args.folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
