"""The core search: candidates of the wanted composition, a ranked pool, resume, no stored input, LLM proposals."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

import hw3lib.kissing.core_search as core_search
from hw3lib.kissing.core_families import CoreSpec
from hw3lib.kissing.core_search import (CoreSearchConfig, finalist_order, propose, proposed_core, proxy_rank,
                                        ranked_pool, run_search, score_proposal, search_inputs)
from hw3lib.kissing.llm import ScriptedResponder
from hw3lib.kissing.loops import agentic_refinement

TINY = CoreSearchConfig(axes_options=(9,), draws=1, local_iterations=50, scored=2, short_cpu_s=1.0, full_cpu_s=2.0)
REPLAY = Path(__file__).with_name("fixtures") / "core_replay.json"


def test_proposals_are_one_per_invariant_class_verified_and_ranked_by_the_proxy():
    proposals = propose(TINY, progress=False)
    assert len({p["invariants"] for p in proposals}) == len(proposals) and {p["frame"][:2] for p in proposals} == {"a9"}
    assert all(p["core_check"].endswith("(valid)") for p in proposals)
    assert proposals == sorted(proposals, key=proxy_rank) and propose(TINY, progress=False) == proposals  # seeded
    assert all(CoreSpec.from_text(p["spec"]).size == p["composition"]["rows"] for p in proposals)


def test_the_proxy_rank_puts_room_beyond_touching_first():
    touching = {"index": 0, "proxy": {"strict": 0, "estimate": 582}}
    room = {"index": 1, "proxy": {"strict": 148, "estimate": 574}}
    more_room = {"index": 2, "proxy": {"strict": 52, "estimate": 580}}
    assert sorted([touching, room, more_room], key=proxy_rank) == [more_room, room, touching]


def test_the_full_budget_goes_first_to_growths_the_short_budget_cut():
    # the first run of the stored search: a 560-row core saturated at 570, the 496-row core was cut at 529
    pool = [{"index": 76, "score": 570, "growth_done": True, "composition": {"rows": 560}},
            {"index": 56, "score": 529, "growth_done": False, "composition": {"rows": 496}},
            {"index": 96, "score": 436, "growth_done": False, "composition": {"rows": 402}}]
    log = {"pool": pool}
    assert [e["index"] for e in ranked_pool(log)] == [76, 56, 96]  # by score
    assert [e["index"] for e in finalist_order(log)] == [56, 96, 76]  # lower bounds first


def test_the_search_reads_no_stored_configuration_ranks_its_pool_and_resumes(tmp_path, monkeypatch):
    read = []
    original = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: read.append(self) or original(self, *a, **k))
    monkeypatch.setattr("hw3lib.kissing.scaffold.load_start", lambda *a, **k: pytest.fail("read a stored set"))
    log = run_search(tmp_path, TINY, progress=False, sandboxed=False)
    assert search_inputs(TINY)["files_read"] == [] and log["inputs"]["files_read"] == []
    # only its own growth logs (and installed packages' metadata, read by imports)
    assert [p for p in read if tmp_path not in p.parents and "site-packages" not in p.parts] == []
    scores = [e["score"] for e in ranked_pool(log)]
    assert len(log["pool"]) == 2 and scores == sorted(scores, reverse=True)
    assert all(e["score"] >= e["composition"]["rows"] for e in log["pool"])  # the remainder only adds rows
    assert log["best"]["valid"] and log["best"]["num_points"] >= scores[0]
    assert all(isinstance(t, float) for e in log["pool"] for t in e["cpu_per_attempt_s"])
    again = run_search(tmp_path, TINY, progress=False, sandboxed=False)
    assert [e["score"] for e in again["pool"]] == [e["score"] for e in log["pool"]]  # resumed, not redrawn
    with pytest.raises(ValueError, match="other settings"):
        run_search(tmp_path, CoreSearchConfig(scored=3), progress=False, sandboxed=False)
    with pytest.raises(ValueError, match="only --full-cpu-s may grow"):
        run_search(tmp_path, replace(TINY, full_cpu_s=1.0), progress=False, sandboxed=False)
    longer = run_search(tmp_path, replace(TINY, full_cpu_s=4.0), progress=False, sandboxed=False)  # a larger budget
    assert longer["config"]["full_cpu_s"] == 4.0 and longer["budget"]["full_cpu_s_history"] == [2.0, 4.0]
    assert [e["score"] for e in longer["pool"]] == [e["score"] for e in log["pool"]]  # the pool is not rescored


def test_a_proposed_core_is_read_checked_and_scored(tmp_path):
    assert proposed_core("text\n```core\naxes 0 1\nfull 0.1.2.3\n```") == "axes 0 1\nfull 0.1.2.3"
    assert proposed_core("```python\nx = 1\n```") is None
    points, message = score_proposal("full 0.1.2.3\nhalf 0.1.2.4@0+", tmp_path, "bad")
    assert points is None and "full 0.1.2.3 and half 0.1.2.4@0+ share 3 coordinates" in message
    points, message = score_proposal("axes 0 1 2 3 4 5 6 7 8 9 10", tmp_path, "axes", cpu_s=3)
    assert len(points) >= 22 and "22 rows" in message and f"reached {len(points)} verified points" in message


def test_one_round_of_an_llm_core_proposal_replayed(tmp_path):
    responder = ScriptedResponder(REPLAY)
    run = agentic_refinement(responder, tmp_path / "run", 2, timeout_s=30)
    log = json.loads((tmp_path / "run" / "conversation_log.json").read_text())
    first = log["steps"][0]
    assert log["source"] == "replay" and first["evaluation"]["validity"] == 1.0
    # the 35-support code without axes 8, 9, 10: 576 core rows, and the optimizer puts the 6 axis rows back
    assert first["evaluation"]["num_points"] == 582 and "(576 rows" in first["evaluation"]["message"]
    assert "reached 582 verified points" in responder.requests[1][-1]["content"]  # the score went back
    assert run.scores == [582.0, 22.0]


def test_program_py_from_the_core_search_is_recognized_byte_for_byte_and_reported(tmp_path):
    from hw3lib.kissing.core_program import is_core_program, write_program
    from hw3lib.kissing.deliverables import HEADINGS, report_data, report_markdown, writeup_summary

    folder = tmp_path / "kissing_number"
    log = run_search(folder / "core_search", TINY, progress=False, sandboxed=False)
    assert is_core_program(folder) is False  # no program.py yet
    program = write_program(folder)  # nothing stored: any valid set beats 0
    assert program == folder / "program.py" and is_core_program(folder)
    with pytest.raises(ValueError, match="does not beat the stored program"):
        write_program(folder)  # the same set again gains nothing
    data = report_data(folder, cap_starts=20)
    assert data["kind"] == "core_search" and data["num_points"] == log["best"]["num_points"]
    text = report_markdown(data)
    assert [line[3:] for line in text.splitlines() if line.startswith("## ")] == list(HEADINGS)
    assert "found by our own core search" in text and writeup_summary(data)["kind"] == "core_search"
    program.write_text(program.read_text() + "# edited\n")
    assert is_core_program(folder) is False  # an edited file is no longer the search's
