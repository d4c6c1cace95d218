"""The LLM loops from a stored configuration: loading every record form, the core-and-remainder split, the
prompt's scaffold, and a replayed run (offline) whose programs build on START."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hw3lib.kissing import evaluate_program
from hw3lib.kissing.core_remainder import reproduce_582
from hw3lib.kissing.llm import ScriptedResponder
from hw3lib.kissing.loops import agentic_refinement, best_of_n, load_prompts, task_prompt
from hw3lib.kissing.records import records_folder
from hw3lib.kissing.scaffold import PREAMBLE_MARK, core_split, load_start, scaffold_text, start_preamble

ROOT = Path(__file__).resolve().parents[2]
REPLAY = Path(__file__).with_name("fixtures") / "scaffold_replay.json"
PROGRAM = ROOT / "data" / "kissing_number" / "program.py"


@pytest.fixture(scope="module")
def station600():
    return load_start(records_folder() / "station600.json")  # the angle form: converted by equalize_norms


def test_core_split_of_station600_matches_its_published_recipe(station600):
    split = station600.split
    assert station600.num_points == 600 and split.scale == 50001
    assert len(split.core) == 496 and len(split.remainder) == 104
    assert len(split.axes) == 8 and sorted(set(split.supports.values())) == [8, 16]
    assert 2 * len(split.axes) + sum(split.supports.values()) == 496
    aeform = json.loads((records_folder() / "station600_aeform_k50001.json").read_text())
    assert station600.points == aeform  # the min-distance copy the loop starts from


def test_the_582_recipe_is_all_core_and_the_constant_weight_code_is_found():
    start = load_start(reproduce_582().tolist())
    assert start.num_points == 582 and len(start.split.core) == 582 and start.split.remainder == []
    assert len(start.split.supports) == 35 and set(start.split.supports.values()) == {16}
    supports = list(start.split.supports)
    assert all(len(set(a) & set(b)) <= 2 for i, a in enumerate(supports) for b in supports[i + 1:])
    assert "no remainder" in scaffold_text(start)


def test_our_program_is_our_core_and_its_remainder():
    # program.py holds the core search's best: 8 axes x 2 + 22 full x 16 + 16 halves x 8 = 496 core rows, 102 more
    start = load_start(PROGRAM)
    assert start.num_points == 598 and len(start.split.core) == 496 and len(start.split.remainder) == 102
    assert sorted(start.split.supports.values()) == [8] * 16 + [16] * 22


def test_hand_worked_split_and_every_record_form():
    points = [[2, 0, 0], [0, -2, 0], [1, 1, 1], [0, 0, 3]]  # two axis rows, one odd row, one 3 e_3 (not 2k e_i)
    split = core_split(points)
    assert split.scale == 1 and split.core == [0, 1] and split.remainder == [2, 3] and split.axes == [0, 1]
    assert load_start(records_folder() / "ae593.json").num_points == 593  # integers: no core found, all remainder
    with pytest.raises(ValueError, match="no integer copy"):
        load_start(records_folder() / "station604_zsqrt2.json")
    with pytest.raises(ValueError, match="not a valid configuration"):
        load_start([[1, 0] + [0] * 9, [1, 1] + [0] * 9])


def test_the_prompt_describes_the_scaffold(station600):
    text = task_prompt(load_prompts(), dimension=11, timeout_s=60, start=station600)
    assert "600 points" in text and "496 rows" in text and "104 rows" in text and "START" in text
    assert "Chebyshev linear program" in text and "denominator 100000" in text
    assert "8 axis coordinates" in text and "22 supports with all 16 sign patterns, 16 with half" in text


def test_a_preambled_program_is_complete_and_scores_the_start(station600, tmp_path):
    program = tmp_path / "program.py"
    program.write_text(start_preamble(station600) + "def run_code():\n    return START, 11\n")
    metrics = evaluate_program(program, timeout_s=60)
    assert metrics["validity"] == 1.0 and metrics["combined_score"] == 600.0


def test_replayed_run_from_a_record_builds_on_start(station600, tmp_path):
    responder = ScriptedResponder(REPLAY)
    run = agentic_refinement(responder, tmp_path / "run", 3, timeout_s=60, start=station600)
    assert run.scores == [600.0, 0.0, 599.0] and run.best_score == 600.0
    task = responder.requests[0][1]["content"]
    assert "Starting configuration: station600.json, 600 points" in task and "496 rows" in task
    log = json.loads((run.run_dir / "conversation_log.json").read_text())
    assert log["settings"]["start"]["num_points"] == 600 and log["settings"]["start"]["remainder"] == 104
    assert log["source"] == "replay"
    best = (run.run_dir / "best_program.py").read_text()
    assert best.startswith(PREAMBLE_MARK) and best.rstrip().endswith("return [list(p) for p in START], 11")
    assert "too close" in log["steps"][1]["evaluation"]["message"] or log["steps"][1]["score"] == 0.0
    # the stored best program runs on its own, as the course's evaluator runs it
    assert evaluate_program(run.run_dir / "best_program.py", timeout_s=60)["combined_score"] == 600.0
    # the model's own code (quoted back in later prompts) carries no 600-row preamble
    assert PREAMBLE_MARK not in log["steps"][0]["code"]


def test_best_of_n_and_the_cli_take_a_start(tmp_path):
    start = load_start(PROGRAM)
    run = best_of_n(ScriptedResponder(REPLAY), tmp_path / "bon", 3, timeout_s=60, start=start)
    assert run.scores == [598.0, 0.0, 597.0]  # the stored program's 598, a failed reply, one row dropped
    from typer.testing import CliRunner

    from hw3lib.cli import app

    out = CliRunner().invoke(app, ["kissing", "discover", "--loop", "agentic", "--iterations", "1", "--out",
                                   str(tmp_path / "cli"), "--replay", str(REPLAY), "--start",
                                   str(records_folder() / "station604_zsqrt2.json")])
    assert out.exit_code == 2 and "no integer copy" in out.output
    out = CliRunner().invoke(app, ["kissing", "discover", "--loop", "agentic", "--iterations", "1", "--out",
                                   str(tmp_path / "cli"), "--replay", str(REPLAY), "--start", str(PROGRAM)])
    assert out.exit_code == 0 and "best score 598" in out.output, out.output
