"""Build `writeup/writeup.pdf` from the user's own runs.

The notebooks export their plots (PNG/PDF) and a small JSON of their key numbers to `figures/`.
This module gathers every `figures/*.json` into `writeup/results.json` and compiles
`writeup/writeup.typ` with Typst (the `typst` PyPI package, fully offline). The Typst source reads
the numbers from that JSON, so no figure in the writeup is typed by hand; sections whose notebook
has not been run say so instead of failing.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

from hw3lib.io import DataFileError, atomic_write_bytes, atomic_write_json, figures_dir, project_root


def collect_results(figures: Path | None = None) -> dict:
    """Every figures/<stem>.json as results[stem], plus which figure images exist."""
    figures = figures or figures_dir()
    results: dict = {}
    for path in sorted(figures.glob("*.json")):
        try:
            results[path.stem] = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise DataFileError(f"{path}: not valid JSON ({exc}); re-run the notebook that writes it") from None
    return {
        "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _git_commit(),
        "figures": sorted(p.name for p in figures.glob("*.png")),
        "results": results,
    }


def build_writeup(root: Path | None = None) -> Path:
    """Compile writeup/writeup.typ to writeup/writeup.pdf (written atomically); returns the PDF path."""
    import typst

    root = root or project_root()
    source = root / "writeup" / "writeup.typ"
    if not source.is_file():
        raise FileNotFoundError(f"{source} is missing: restore it from the repository (git checkout writeup/)")
    atomic_write_json(root / "writeup" / "results.json", collect_results(root / "figures"))
    pdf_bytes = typst.compile(str(source), root=str(root))
    return atomic_write_bytes(root / "writeup" / "writeup.pdf", pdf_bytes)


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=project_root(), timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


if __name__ == "__main__":
    print(build_writeup())
    sys.exit(0)
