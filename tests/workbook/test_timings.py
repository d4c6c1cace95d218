"""hw3lib.workbook.timings: the README's command times come from running the commands, and stay current."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hw3lib.workbook import timings

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_timing_a_command_records_its_wall_time_and_a_failure_records_nothing(tmp_path):
    record = tmp_path / "times.json"
    assert timings.time_command("make-test", [sys.executable, "-c", "import time; time.sleep(1.5)"], path=record) == 0
    entry = json.loads(record.read_text())["make-test"]
    assert 1.5 <= entry["seconds"] < 10 and entry["minutes"] == round(entry["seconds"] / 60, 1)
    assert entry["machine"].endswith("CPU cores") and entry["commit"]
    assert timings.time_command("make-workbook", [sys.executable, "-c", "raise SystemExit(3)"], path=record) == 3
    assert set(json.loads(record.read_text())) == {"make-test"}


def test_the_table_shows_minutes_parts_and_what_is_not_measured():
    table = timings.readme_table({"make-workbook": {"minutes": 69.6, "date": "2026-11-27", "commit": "abc1234",
                                                    "machine": "2 CPU cores", "parts": {"04": 22.5, "05": 46.2}}})
    lines = table.splitlines()
    assert lines[2] == ("| `make test` (what CI runs) | not measured yet | `python -m hw3lib.workbook.timings --help` |")
    assert lines[3] == ("| `make workbook` (smoke, the informative length) | 69.6 min (04 22.5, 05 46.2) | "
                        "2026-11-27, commit abc1234, 2 CPU cores |")


def test_the_workbooks_timings_file_is_recorded_per_notebook(tmp_path, monkeypatch):
    monkeypatch.setattr(timings, "project_root", lambda: tmp_path)
    run = tmp_path / "timings.json"
    run.write_text(json.dumps({"profile": "smoke", "course": "nlpdl-hw3", "extras": False,
                               "notebooks": {"01": 30.0, "04": 600.0}, "total_s": 630.0}))
    assert timings.main(["--workbook", str(run)]) == 0
    entry = json.loads((tmp_path / timings.RECORD).read_text())["make-workbook"]
    assert entry["minutes"] == 10.5 and entry["parts"] == {"01": 0.5, "04": 10.0}
    assert (entry["course"], entry["extras"]) == ("nlpdl-hw3", False)


def test_a_notebook_states_its_measured_time_only_for_the_setting_measured():
    times = {"make-workbook": {"minutes": 30.0, "date": "2026-11-28", "commit": "abc1234", "machine": "2 CPU cores",
                               "parts": {"04": 4.5, "05": 21.0}, "course": "nlpdl-hw3", "extras": False}}
    assert timings.expected_words("05", "nlpdl-hw3", False, times) == (
        "Expected time: about 21 min on 2 CPU cores (`make workbook`, 2026-11-28, commit abc1234); a finished run "
        "is read back in seconds.")
    assert timings.expected_words("05", "nlpdl-hw3", True, times) == ""  # every section takes longer
    assert timings.expected_words("05", "cs336-a5", False, times) == ""  # another course, other runs
    assert timings.expected_words("06", "nlpdl-hw3", False, times) == ""  # not measured
    assert timings.expected_words("05", "nlpdl-hw3", False, {}) == ""


def test_the_readme_table_is_rendered_from_the_record():
    readme = (REPO_ROOT / "README.md").read_text()
    block = readme.split(timings.BEGIN, 1)[1].split(timings.END, 1)[0].strip()
    assert block == timings.readme_table(timings.load(REPO_ROOT / timings.RECORD)), (
        "README's command times are stale: run `python -m hw3lib.workbook.timings --write-readme`")


def test_another_courses_workbook_is_recorded_beside_the_default_one_and_states_its_own_times(tmp_path, monkeypatch):
    """Issue 46: `make store-outputs COURSE=cse599o-a3` (every section) must not replace `make workbook`'s entry."""
    monkeypatch.setattr(timings, "project_root", lambda: tmp_path)
    for course, extras, seconds in (("nlpdl-hw3", False, 600.0), ("cse599o-a3", True, 3000.0)):
        run = tmp_path / f"{course}.json"
        run.write_text(json.dumps({"profile": "smoke", "course": course, "extras": extras,
                                   "notebooks": {"04": seconds}, "total_s": seconds}))
        assert timings.main(["--workbook", str(run)]) == 0
    times = json.loads((tmp_path / timings.RECORD).read_text())
    assert set(times) == {"make-workbook", "make-workbook:cse599o-a3+extras"}
    assert times["make-workbook"]["minutes"] == 10.0 and times["make-workbook:cse599o-a3+extras"]["minutes"] == 50.0
    assert "about 50 min" in timings.expected_words("04", "cse599o-a3", True, times)
    assert timings.expected_words("04", "cse599o-a3", False, times) == ""  # its handout alone: not measured
    assert "about 10 min" in timings.expected_words("04", "nlpdl-hw3", False, times)
    row = timings.readme_table(times).splitlines()[-1]
    assert row.startswith("| `HW3_COURSE=cse599o-a3 HW3_EXTRAS=1 make workbook` (smoke, every section) | 50 min (04 50) |")
