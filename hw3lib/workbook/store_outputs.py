"""Copy a workbook run's outputs into the committed notebooks, so a reader sees a real run's results on GitHub.

`python -m hw3lib.workbook.store_outputs [runs/notebooks]` takes the executed copies `make workbook` wrote
(`hw3lib.workbook.run`: papermill, one per notebook) and puts each code cell's outputs and execution count into
the notebook of the same name under `notebooks/`. Papermill's injected `parameters` cell is left out; every
other cell must have the same source in both, else that notebook is refused (it was edited after the run:
run the workbook again). Notebooks are written through a temporary file and a rename. Nothing else changes:
the committed notebooks keep their own cells, metadata and ids.

Outputs that name a path outside the project (a temporary folder, a home directory) are refused too: the
stored outputs are read by everyone, and hw3lib prints paths relative to the project (`shown_path`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from hw3lib.core.io import project_root, runs_dir

ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:tmp|home|root|Users|work)/[\w.-]+")


def code_cells(notebook: dict, skip_injected: bool) -> list[dict]:
    return [cell for cell in notebook["cells"] if cell["cell_type"] == "code"
            and not (skip_injected and "injected-parameters" in cell.get("metadata", {}).get("tags", []))]


def source_of(cell: dict) -> str:
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)


def merged(committed: dict, executed: dict, name: str) -> dict:
    """`committed` with the outputs of `executed` (same code cells, papermill's injected one aside)."""
    targets, sources = code_cells(committed, False), code_cells(executed, True)
    if len(targets) != len(sources) or any(source_of(a) != source_of(b) for a, b in zip(targets, sources)):
        raise ValueError(f"{name}: its code cells differ from the executed copy's (edited after the run?): run "
                         "`make workbook` again before storing its outputs")
    leaked = sorted({match for cell in sources for match in ABSOLUTE_PATH.findall(json.dumps(cell["outputs"]))})
    if leaked:
        raise ValueError(f"{name}: outputs name paths outside the project ({', '.join(leaked[:3])}): print them "
                         "with hw3lib.core.io.shown_path, run the notebook again, then store")
    for target, source in zip(targets, sources):
        target["outputs"], target["execution_count"] = source["outputs"], source.get("execution_count")
    return committed


def store(executed_dir: Path, notebooks_dir: Path) -> list[Path]:
    """Store every executed notebook's outputs; returns the notebooks written. Checks all before writing any."""
    pairs = [(path, notebooks_dir / path.name) for path in sorted(executed_dir.glob("[0-9][0-9]_*.ipynb"))]
    if not pairs:
        raise ValueError(f"{executed_dir}: no executed notebooks: run `make workbook` first")
    results = []
    for executed, committed in pairs:
        if not committed.exists():
            raise ValueError(f"{executed}: there is no {committed} to store its outputs in")
        results.append((committed, merged(json.loads(committed.read_text()), json.loads(executed.read_text()),
                                          committed.name)))
    for committed, notebook in results:
        tmp = committed.with_suffix(".ipynb.tmp")
        tmp.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
        tmp.replace(committed)
    return [committed for committed, _ in results]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("executed", nargs="?", type=Path, default=None, help="folder of executed notebooks "
                        "(default: runs/notebooks)")
    parser.add_argument("--notebooks", type=Path, default=None, help="the committed notebooks (default: notebooks/)")
    args = parser.parse_args(argv)
    try:
        written = store(args.executed or runs_dir() / "notebooks", args.notebooks or project_root() / "notebooks")
    except ValueError as exc:
        print(f"store_outputs: {exc}", file=sys.stderr)
        return 1
    print("stored the outputs of " + ", ".join(path.name for path in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
