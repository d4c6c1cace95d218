"""The kissing deliverables: report.md generated from the search that wrote program.py, a live run's
conversation stored beside it, and the replay fixture kept out of both (hw3lib.kissing.deliverables)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from hw3lib.kissing import deliverables
from hw3lib.kissing.deliverables import (HEADINGS, ReplayRefused, promote_run, report_markdown, write_report,
                                         writeup_summary)
from hw3lib.kissing.llm import ChatClient, ScriptedResponder
from hw3lib.kissing.report import REPLAY_LABEL, kissing_result

FIXTURE = Path(__file__).parents[1] / "fixtures" / "kissing_replay.json"
STORED = Path(__file__).parents[2] / "data" / "kissing_number"
ITERATIONS = 200  # a short search: the same construction, the stored program's docstring says 5000
CAP_STARTS = 100


@pytest.fixture(scope="module")
def small_folder(tmp_path_factory):
    """A folder holding a program written by a 200-iteration search, and the report written for it."""
    from hw3lib.kissing.search import main

    folder = tmp_path_factory.mktemp("kissing_number")
    assert main(["--write-program", "--iterations", str(ITERATIONS), "--output", str(folder / "program.py")]) == 0
    path, data = write_report(folder, iterations=ITERATIONS, cap_starts=CAP_STARTS)
    return folder, path, data


def test_report_has_every_section_with_computed_numbers(small_folder):
    folder, path, data = small_folder
    text = path.read_text()
    assert [line[3:] for line in text.splitlines() if line.startswith("## ")] == list(HEADINGS)
    assert data["kind"] == "search" and data["reproduced"] and data["num_points"] == 582
    assert data["metrics"]["validity"] == 1.0 and data["metrics"]["num_points"] == 582
    assert (data["code_blocks"], data["johnson_bound"], data["search_iterations"]) == (35, 35, ITERATIONS)
    assert hashlib.sha256((folder / "program.py").read_bytes()).hexdigest()[:16] in text
    # compute: measured seconds, counted iterations, no LLM
    assert data["compute"]["wall_s"] > 0 and data["compute"]["cpu_s"] > 0
    assert f"{ITERATIONS} local-search iterations over 5302 candidates" in text
    assert "- LLM: 0 calls, 0 tokens" in text
    # score history: the code search's bests (22 + 16 x blocks) and the local search, each with its end row
    points = [r["points"] for r in data["history"]]
    assert points[-1] == 582 and all(p == 22 + 16 * r["blocks"] for p, r in zip(points, data["history"])
                                     if r["blocks"] is not None)
    assert "| local search (end) | 200 |" in text
    # the free cap: an uncovered triple of the code, cos^2 = 1/3 exactly, below 60 degrees
    cap = data["cap"]
    assert cap["exact"] and cap["cos_sq"] == "1/3" and not cap["fits_another"]
    assert abs(cap["angle_deg"] - 54.7356103) < 1e-6 and "**54.7356 degrees**" in text
    # what limited it: the Johnson bound, a saturated shell, the cap
    assert data["shell"]["free"] == 0 and data["shell"]["fewest_conflicts"] == 4 and not data["shell"]["swap_exists"]
    assert "the Johnson bound for this code" in text and "removing at least 4 members" in text
    assert "5.264 degrees short of the 60" in text
    assert REPLAY_LABEL in text and "No live LLM conversation is stored here" in text


def test_report_follows_the_data(small_folder):
    _, _, data = small_folder
    edited = json.loads(json.dumps(data))
    edited["cap"].update(angle_deg=61.0, fits_another=True)
    edited["shell"]["swap_exists"] = True
    text = report_markdown(edited)
    assert "**61.0000 degrees**" in text and "One more sphere fits: **yes**" in text
    assert "A (1,2)-swap (drop one, add two) exists" in text and "the set is a local maximum" not in text


def test_report_refuses_to_overwrite_without_the_flag(small_folder):
    folder, path, _ = small_folder
    before = path.read_text()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_report(folder, iterations=ITERATIONS, cap_starts=CAP_STARTS)
    assert path.read_text() == before


def test_report_refuses_a_program_the_search_did_not_write(small_folder, tmp_path):
    (tmp_path / "program.py").write_bytes((small_folder[0] / "program.py").read_bytes())
    with pytest.raises(ValueError, match="is not what `best_program_search"):
        write_report(tmp_path, iterations=ITERATIONS + 1, cap_starts=CAP_STARTS)
    assert not (tmp_path / "report.md").exists()


def test_writeup_summary_and_kissing_result_label_the_replay(small_folder):
    _, _, data = small_folder
    summary = writeup_summary(data)
    assert summary["cap_cos_sq"] == "1/3" and summary["llm_calls"] == 0 and summary["reproduced"]
    assert summary["history"][-1] == {"phase": "local search (end)", "iteration": ITERATIONS, "points": 582}
    json.dumps(summary)  # JSON-ready
    runs = {"agentic": SimpleNamespace(best_score=438.0), "hybrid": SimpleNamespace(best_score=438.0)}
    search = SimpleNamespace(points=[0] * 30, iterations=10)
    replay = kissing_result("replay", "m", {"starter": 22}, search, 5, runs, None, summary)
    assert replay["llm_label"] == REPLAY_LABEL and replay["agentic_best_score"] is None
    assert replay["hybrid_best_score"] is None and replay["deliverable"] is summary
    live = kissing_result("live", "m", {"starter": 22}, search, 5, runs, None)
    assert live["llm_label"] == "live" and live["agentic_best_score"] == 438.0 and live["deliverable"] is None


def test_the_stored_report_describes_the_stored_program():
    text = (STORED / "report.md").read_text()
    assert [line[3:] for line in text.splitlines() if line.startswith("## ")] == list(HEADINGS)
    assert hashlib.sha256((STORED / "program.py").read_bytes()).hexdigest()[:16] in text
    # a conversation log is stored only from a live run
    log = STORED / "conversation_log.json"
    assert not log.exists() or json.loads(log.read_text())["source"] == "live"


# ---------------------------------------------------------------------------------------------
# Conversations: a replay is refused, a live run that wins is stored


@pytest.fixture(scope="module")
def replay_run(tmp_path_factory):
    from hw3lib.kissing.loops import best_of_n

    run_dir = tmp_path_factory.mktemp("replay_run")
    best_of_n(ScriptedResponder(FIXTURE), run_dir, 5, timeout_s=30)
    return run_dir


def test_a_replayed_run_is_logged_and_reported_as_a_replay(replay_run):
    log = json.loads((replay_run / "conversation_log.json").read_text())
    assert log["source"] == "replay" and log["replay_file"].endswith("kissing_replay.json")
    report = (replay_run / "report.md").read_text()
    assert report.splitlines()[0].endswith(f"({REPLAY_LABEL})") and "**REPLAY:" in report


def test_a_replay_is_never_stored_as_a_conversation(replay_run, small_folder, tmp_path):
    folder = tmp_path / "kissing_number"
    with pytest.raises(ReplayRefused, match="never stored as conversation_log.json"):
        promote_run(replay_run, folder, overwrite=True)
    assert not folder.exists()
    # even copied there by hand, the report generator refuses it
    folder.mkdir()
    (folder / "program.py").write_bytes((small_folder[0] / "program.py").read_bytes())
    (folder / "conversation_log.json").write_bytes((replay_run / "conversation_log.json").read_bytes())
    with pytest.raises(ReplayRefused, match="records a replay"):
        write_report(folder, iterations=ITERATIONS, cap_starts=CAP_STARTS)
    assert not (folder / "report.md").exists()


def _live_client() -> ChatClient:
    """A real ChatClient (source `live`) whose HTTP server is an in-process mock answering with the fixture's replies."""
    replies = iter(json.loads(FIXTURE.read_text())["responses"])

    def handler(request: httpx.Request) -> httpx.Response:
        reply = next(replies)
        return httpx.Response(200, json={"model": "mock-model", "choices": [
            {"message": {"role": "assistant", "content": reply["content"]}, "finish_reason": "stop"}],
            "usage": reply["usage"]})

    return ChatClient("http://llm.test/v1", "mock-model", transport=httpx.MockTransport(handler))


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    from hw3lib.kissing.loops import best_of_n

    run_dir = tmp_path_factory.mktemp("live_run")
    best_of_n(_live_client(), run_dir, 5, timeout_s=30)
    return run_dir


def test_a_live_run_that_loses_is_not_stored(live_run, small_folder, tmp_path):
    folder = tmp_path / "kissing_number"
    folder.mkdir()
    (folder / "program.py").write_bytes((small_folder[0] / "program.py").read_bytes())
    with pytest.raises(ValueError, match="does not beat the stored program's 582"):
        promote_run(live_run, folder, overwrite=True)
    assert sorted(p.name for p in folder.iterdir()) == ["program.py"]


def test_a_live_run_that_wins_is_stored_with_its_log_and_reports(live_run, tmp_path):
    folder = tmp_path / "kissing_number"
    written = promote_run(live_run, folder, cap_starts=CAP_STARTS)
    assert {p.name for p in written} == {"program.py", "conversation_log.json", "conversation_report.md",
                                         "score_vs_iteration.png", "report.md"}
    assert (folder / "program.py").read_text() == (live_run / "best_program.py").read_text()
    assert json.loads((folder / "conversation_log.json").read_text())["source"] == "live"
    report = (folder / "report.md").read_text()
    assert [line[3:] for line in report.splitlines() if line.startswith("## ")] == list(HEADINGS)
    assert "best program of a live LLM best_of_n run (iteration 5)" in report and "438 points" in report
    assert "- LLM: 5 calls" in report and "a live best_of_n run of `mock-model`" in report
    with pytest.raises(ValueError, match="does not beat the stored program's 438"):  # nothing to gain twice
        promote_run(live_run, folder, cap_starts=CAP_STARTS)
    (folder / "program.py").unlink()
    with pytest.raises(FileExistsError, match="conversation_log.json"):  # nothing replaced silently
        promote_run(live_run, folder, cap_starts=CAP_STARTS)


def test_cli_report_refuses_then_overwrites(small_folder, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from hw3lib.cli import app

    monkeypatch.setattr(deliverables, "CAP_STARTS", CAP_STARTS)
    folder = tmp_path / "kissing_number"
    folder.mkdir()
    (folder / "program.py").write_bytes((small_folder[0] / "program.py").read_bytes())
    (folder / "report.md").write_text("mine")
    args = ["kissing", "report", "--folder", str(folder), "--iterations", str(ITERATIONS)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "--overwrite" in result.output and (folder / "report.md").read_text() == "mine"
    result = CliRunner().invoke(app, args + ["--overwrite"])
    assert result.exit_code == 0, result.output
    assert "582 points, largest free cap 54.7356 degrees" in result.output
