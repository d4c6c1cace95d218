"""The published kissing configurations in dimension 11, verified by our own exact verifier.

Four files, copied (with their attribution, see data/kissing_number/records/README.md) from the
reference data; each is verified in the form it was published in (`hw3lib.kissing.verify.verify_form`):

| file | points | form |
|---|---|---|
| ae593.json | 593 | integers up to 13 digits, the course's min-distance form (squares ~1e26: Python ints) |
| station600.json | 600 | integers with mixed norms (4 and ~1e10): the angle form, cos <= 1/2 |
| station600_aeform_k50001.json | 600 | the same, core rows times 50001 (`equalize_norms`): min-distance form |
| station604_zsqrt2.json | 604 | Z[sqrt2] coordinates (interleaved rational / sqrt2 parts), min-distance form |

`verify_records()` times each verification (load excluded, as a separate column); `records_markdown()` is
the table that notebook 06 and data/kissing_number/report.md show. The folder is
data/kissing_number/records/ when it holds the files, else $HW3_DATA_DIR/kissing_records.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from hw3lib.core.io import project_root
from hw3lib.kissing.verify import FormResult, verify_form


@dataclass(frozen=True)
class Record:
    """One published configuration: its file, the form it is verified in, and where it comes from."""

    file: str
    form: str
    source: str
    licence: str


RECORDS = (
    Record("ae593.json", "integer", "AlphaEvolve, Google DeepMind 2025 (alphaevolve_results @4226acbf, B.11)",
           "Apache-2.0 / CC-BY-4.0"),
    Record("station600.json", "angle", "Station (dualverse-ai/station @7dad811a, news/2026-06-08-kissing)",
           "Apache-2.0"),
    Record("station600_aeform_k50001.json", "integer", "station600 with its 496 core rows times 50001",
           "Apache-2.0"),
    Record("station604_zsqrt2.json", "zsqrt2", "Station (dualverse-ai/station @88f052eb, news/2026-06-14-kissing)",
           "Apache-2.0"),
)
# Records whose files carry no licence: cited by count only, never stored.
CITED = (("Ganzhinov 2022 (group orbits)", 592), ("EinsteinArena 2026 (arXiv 2606.10402)", 594),
         ("EinsteinArena 2026 (arXiv 2606.10402), another construction", 604))


FORM_LABELS = {"integer": "integers, min-distance", "rational": "rationals, min-distance",
               "angle": "integers, angle (cos <= 1/2)", "zsqrt2": "Z[sqrt2], min-distance"}


def records_folder(folder: str | Path | None = None) -> Path:
    """`folder`, else data/kissing_number/records when it holds every file, else $HW3_DATA_DIR/kissing_records."""
    if folder is not None:
        return Path(folder)
    ours = project_root() / "data" / "kissing_number" / "records"
    if all((ours / r.file).is_file() for r in RECORDS):
        return ours
    shared = Path(os.environ.get("HW3_DATA_DIR", project_root() / "data")) / "kissing_records"
    if shared.is_dir():
        return shared
    raise FileNotFoundError(f"no record files in {ours} or {shared}: set HW3_DATA_DIR to the folder holding "
                            "kissing_records/, or restore data/kissing_number/records/")


def load_record(path: str | Path):
    """A record file's JSON, decimals read as exact Decimals (never floats)."""
    return json.loads(Path(path).read_text(encoding="utf-8"), parse_float=Decimal)


def verify_record(path: str | Path, form: str = "auto") -> tuple[FormResult, float, float]:
    """(verdict, load seconds, verification seconds) for one file."""
    start = time.perf_counter()
    data = load_record(path)
    loaded = time.perf_counter()
    result = verify_form(data, form)
    return result, loaded - start, time.perf_counter() - loaded


def verify_records(folder: str | Path | None = None) -> list[dict]:
    """Verify every record in RECORDS (missing files are rows with valid None); one dict per record."""
    base = records_folder(folder)
    rows = []
    for record in RECORDS:
        path = base / record.file
        row = {"file": record.file, "form": record.form, "source": record.source, "licence": record.licence}
        if not path.is_file():
            rows.append({**row, "valid": None, "points": None, "message": f"{path}: missing"})
            continue
        result, load_s, verify_s = verify_record(path, record.form)
        rows.append({**row, "valid": result.valid, "points": result.num_points, "criterion": result.criterion,
                     "tight_pairs": result.tight_pairs, "max_cos": result.max_cos, "load_s": load_s,
                     "verify_s": verify_s, "message": result.message})
    return rows


def records_markdown(rows: list[dict]) -> list[str]:
    """The records table (markdown lines) from `verify_records` rows, plus the cited-only records."""
    lines = ["| record | points | form verified | verdict | pairs at the bound | verify (s) | source | licence |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "missing" if r["valid"] is None else ("**valid**" if r["valid"] else "INVALID")
        form = FORM_LABELS.get(r["form"], r["form"])
        tight = "-" if r.get("tight_pairs") is None else str(r["tight_pairs"])
        seconds = "-" if r.get("verify_s") is None else f"{r['verify_s']:.3f}"
        lines.append(f"| `{r['file']}` | {r['points'] or '-'} | {form} | {verdict} | {tight} | {seconds} | "
                     f"{r['source']} | {r['licence']} |")
    lines += ["", "Cited by count only (no licence on their files, so not stored): "
              + "; ".join(f"{name}: {count}" for name, count in CITED) + "."]
    return lines
