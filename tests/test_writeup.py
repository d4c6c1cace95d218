"""hw3lib.writeup: the PDF is built from the exported JSON and figures, nothing typed by hand."""

import json
import shutil

import pytest

from hw3lib.io import DataFileError, project_root
from hw3lib.writeup import build_writeup, collect_results


def _workbook_copy(tmp_path):
    root = tmp_path / "wb"
    (root / "figures").mkdir(parents=True)
    shutil.copytree(project_root() / "writeup", root / "writeup",
                    ignore=shutil.ignore_patterns("*.pdf", "results.json"))
    return root


def test_writeup_builds_with_no_results_yet(tmp_path):
    root = _workbook_copy(tmp_path)
    pdf = build_writeup(root)
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert json.loads((root / "writeup" / "results.json").read_text())["results"] == {}


def test_writeup_reads_exported_numbers(tmp_path):
    root = _workbook_copy(tmp_path)
    summary = {"profile": "smoke", "model": "tiny", "num_examples": 32, "n": 1, "num_samples": 32,
               "accuracy": 0.125, "format_rate": 0.5, "mean_response_tokens": 40.0, "truncation_rate": 0.25,
               "count_correct": 4, "count_wrong_answer": 12, "count_unformatted": 16, "temperature": 1.0,
               "max_tokens": 48}  # the keys notebook 01 exports
    (root / "figures" / "zero_shot.json").write_text(json.dumps(summary))
    collected = collect_results(root / "figures")
    assert collected["results"]["zero_shot"] == summary
    assert build_writeup(root).stat().st_size > 1000


def test_bad_result_file_is_named(tmp_path):
    root = _workbook_copy(tmp_path)
    (root / "figures" / "broken.json").write_text("{not json")
    with pytest.raises(DataFileError, match="broken.json: not valid JSON"):
        build_writeup(root)
