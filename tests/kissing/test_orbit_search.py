"""The orbit search's driver: a resumable log, refusals, the verified summary and its section of report.md."""

import json

import pytest

from hw3lib.kissing import orbit_search
from hw3lib.kissing.deliverables import ORBIT_SEARCH_FILE, _orbit_search_lines, stored_orbit_search
from hw3lib.kissing.groups import monomial


@pytest.fixture
def small(monkeypatch):
    """Two groups on the integer pool only: PGL(2, 9) and S5 on the 10 pairs, each with -I."""
    specs = [monomial("pgl2_9", "-I"), monomial("s5_pairs", "-I")]
    monkeypatch.setattr(orbit_search, "POOLS", (("integers", 1, None),))
    monkeypatch.setattr(orbit_search, "families", lambda random_groups, seed: specs)
    return specs


def test_a_run_logs_every_group_and_resumes_without_redoing_any(small, tmp_path):
    path = tmp_path / "log.json"
    lines = []
    log = orbit_search.run_orbit_search(path, deadline_s=10, progress=lines.append)
    assert [e["group"] for e in log["entries"]] == [s.name for s in small] and len(lines) == 2
    assert json.loads(path.read_text()) == json.loads(json.dumps(log))
    pgl = log["entries"][0]
    # PGL(2, 9) x {+-I}: the 500-point equator (20 axes and a Steiner system S(3,4,10)), nothing in the tropics
    assert (pgl["size"], pgl["equator"], pgl["tropic"], pgl["optimal"], pgl["order"]) == (502, 500, 0, True, 1440)
    assert log["entries"][1]["order"] == 240  # S5 x {+-I}
    assert log["complete"] and log["planned"] == 2 and log["config"]["groups"] == 2
    again = []
    resumed = orbit_search.run_orbit_search(path, deadline_s=10, progress=again.append)
    assert again == [] and resumed["entries"] == log["entries"]


def test_other_settings_are_refused_unless_overwriting(small, tmp_path):
    path = tmp_path / "log.json"
    orbit_search.run_orbit_search(path, deadline_s=10, progress=lambda _: None)
    before = path.read_text()
    with pytest.raises(ValueError, match="other settings"):
        orbit_search.run_orbit_search(path, deadline_s=11, progress=lambda _: None)
    assert path.read_text() == before
    fresh = orbit_search.run_orbit_search(path, deadline_s=11, overwrite=True, progress=lambda _: None)
    assert fresh["config"]["deadline_s"] == 11 and len(fresh["entries"]) == 2


def test_a_budget_stops_resumably(small, tmp_path):
    path = tmp_path / "log.json"
    lines = []
    log = orbit_search.run_orbit_search(path, deadline_s=10, budget_s=0.0, progress=lines.append)
    assert log["entries"] == [] and "resume" in lines[-1] and not log["complete"]
    assert not orbit_search.summary(log)["complete"]
    resumed = orbit_search.run_orbit_search(path, deadline_s=10, progress=lambda _: None)
    assert [e["group"] for e in resumed["entries"]] == [s.name for s in small] and resumed["complete"]


def test_the_command_refuses_to_replace_a_stored_log_before_running(small, tmp_path, capsys):
    stored = tmp_path / "stored.json"
    stored.write_text("{}")
    with pytest.raises(SystemExit, match="--replace-stored"):
        orbit_search.main(["--log", str(tmp_path / "log.json"), "--store", str(stored)])
    assert stored.read_text() == "{}" and not (tmp_path / "log.json").exists()  # nothing ran
    assert orbit_search.main(["--log", str(tmp_path / "log.json"), "--store", str(stored), "--replace-stored",
                              "--deadline", "10"]) == 0
    assert json.loads(stored.read_text())["complete"]


def test_the_summary_checks_the_best_set_and_the_report_section_says_what_it_found(small, tmp_path):
    path = tmp_path / ORBIT_SEARCH_FILE
    log = orbit_search.run_orbit_search(path, deadline_s=10, progress=lambda _: None)
    summary = stored_orbit_search(tmp_path)
    assert summary["best_size"] == 502 and not summary["beats_base"] and summary["skipped"] == 0
    assert summary["complete"] and summary["integer_best"] == 502 and summary["families"] == {"monomial": 2}
    assert summary["rows"] == [{"family": "monomial", "pool": "integers", "groups": 2, "searched": 2, "optimal": 2,
                                "best": 502, "best_group": small[0].name, }]
    text = "\n".join(_orbit_search_lines(summary))
    assert "Best: **502** points" in text and "not above the classical 582" in text
    assert "2 of the 2 planned (group, pool) pairs searched." in text and "the integer pool the best union has 502" in text
    assert "| monomial | integers | 2 | 2 | 2 | 502 |" in text
    broken = dict(log, best=dict(log["best"], points=log["best"]["points"][:-1] + [log["best"]["points"][0]]))
    path.write_text(json.dumps(broken))
    with pytest.raises(ValueError, match="does not verify"):
        stored_orbit_search(tmp_path)
    assert "Not run yet" in _orbit_search_lines(None)[0]
