"""A fresh clone ships report.md and orbit_search.json: the commands that would replace them refuse in one
line that names the flag (and what it costs), before running anything."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hw3lib.kissing import orbit_search

STORED = Path(__file__).resolve().parents[2] / "data" / "kissing_number"


def test_report_on_a_fresh_clone_names_the_flag_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from hw3lib.cli import app

    folder = tmp_path / "kissing_number"
    folder.mkdir()
    for name in ("program.py", "report.md"):
        shutil.copy(STORED / name, folder / name)
    before = (folder / "report.md").read_bytes()
    result = CliRunner().invoke(app, ["kissing", "report", "--folder", str(folder)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "hw3 kissing report --overwrite" in lines[0] and "Traceback" not in result.output
    assert (folder / "report.md").read_bytes() == before


def test_orbit_search_store_on_a_fresh_clone_says_what_it_holds_and_what_replacing_costs(tmp_path):
    stored = tmp_path / "orbit_search.json"
    shutil.copy(STORED / "orbit_search.json", stored)
    log = tmp_path / "runs" / "orbit_search.json"
    with pytest.raises(SystemExit) as caught:
        orbit_search.main(["--log", str(log), "--store", str(stored)])
    message = str(caught.value.code)
    assert "\n" not in message and "--replace-stored" in message and "hw3 kissing report --overwrite" in message
    assert "best 582" in message or "best 5" in message
    assert "does not exist yet" in message and "3 CPU-hours" in message
    assert not log.exists()  # nothing ran
