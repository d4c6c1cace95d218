"""hw3lib.experiments.plan: what each notebook runs in the full profile and its estimated GPU-hours, only the
sections the course asks for unless the extras are asked for; one line in smoke; and the notebooks print it before
their GPU work (issue 41)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch

from hw3lib.core import cost
from hw3lib.core.course import get_course
from hw3lib.experiments.plan import (PROMPT_TOKENS, grid_configs, notebook_plan, plan_accelerator, profile_line,
                                     shape_for, skipped_note)

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.fixture(autouse=True)
def _plain_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    for variable in ("HW3_EXTRAS", "HW3_MODEL", "HW3_MATH_MODEL", "HW3_COURSE", "HW3_REHEARSAL", "HW3_SIMULATE_GPU"):
        monkeypatch.delenv(variable, raising=False)
    if torch.cuda.is_available():  # a real GPU wins over $HW3_SIMULATE_GPU and would change every estimate
        pytest.skip("these plans are for a machine without a GPU")


def grid_rows(plan) -> dict[str, tuple]:
    return {item.what.split("`")[1]: item.hours for item in plan.items if item.what.startswith("grid `")}


def test_the_gsm8k_courses_notebook_05_plans_only_its_handouts_grids():
    """Run-All on a GPU started every grid, extras included (~37 H100-hours), and said nothing of the cost."""
    plan = notebook_plan("05", "full", "gsm8k-qwen3")
    grids = grid_rows(plan)
    assert {"learning_rate", "baselines", "off_policy", "clip_ablation", "prompt"} <= set(grids)
    assert not {"leaderboard", "kl_drift", "algorithms"} & set(grids)
    assert not any(item.section in ("sft", "expert_iteration") for item in plan.items)
    shape = shape_for("Qwen/Qwen3-0.6B", get_course("gsm8k-qwen3"))
    expected = sum(cost.run_gpu_hours(c, shape, PROMPT_TOKENS, c.sampling_max_tokens)
                   for c in grid_configs("learning_rate", get_course("gsm8k-qwen3")))
    assert grids["learning_rate"][0] == pytest.approx(expected) and grids["learning_rate"][1] < expected
    # the grids, and the base recipe's two more seeds for the seed band (hw3lib.experiments.seeds): two base runs
    seeds = next(item for item in plan.items if item.what.startswith("seed band"))
    assert seeds.what == "seed band: the base recipe with 3 seeds, 2 more run(s) x 200 steps"
    assert seeds.hours[0] == pytest.approx(2 * grids["learning_rate"][0] / 5)  # 5 runs of the base's length there
    assert plan.total[0] == pytest.approx(sum(hours[0] for hours in grids.values()) + seeds.hours[0])
    text = plan.text()
    assert "estimated on an H100" in text and "total" in text and f"{plan.total[0]:.1f} / " in text
    assert "`leaderboard` grid" in text and "`algorithms` grid" in text and "extras = True" in text
    everything = notebook_plan("05", "full", "gsm8k-qwen3", extras=True)
    assert set(grid_rows(everything)) == set(grids) | {"leaderboard", "kl_drift", "algorithms"}
    assert everything.total[0] > plan.total[0] + 5 and not everything.skipped
    # the leaderboard follows the course: one run of the GSM8K base, costed as Qwen3-0.6B
    assert grid_rows(everything)["leaderboard"] == pytest.approx(grid_rows(everything)["off_policy_focused"])


def test_each_math_courses_notebook_05_runs_its_own_handouts_grids():
    cs336 = notebook_plan("05", "full", "cs336-a5")
    assert "leaderboard" in grid_rows(cs336) and not {"kl_drift", "algorithms"} & set(grid_rows(cs336))
    assert {item.section for item in cs336.items} >= {"sft", "expert_iteration", "leaderboard"}
    assert cs336.skipped == ("the `kl_drift` grid (KL to the initial policy)", "the `algorithms` grid (beyond the handouts)")
    cse = notebook_plan("05", "full", "cse599o-a3")
    assert "kl_drift" in grid_rows(cse) and not {"leaderboard", "algorithms"} & set(grid_rows(cse))
    assert not {"sft", "expert_iteration"} & {item.section for item in cse.items}


def test_the_other_notebooks_plans():
    assert [item.section for item in notebook_plan("01", "full", "math-qwen2.5").items] == ["zero_shot"]
    assert "5000 test questions" in notebook_plan("01", "full", "math-qwen2.5").items[0].what
    best_of_n = notebook_plan("02", "full", "gsm8k-qwen3")
    assert best_of_n.items[0].what.startswith("Best-of-N, 1319 test questions x 16") and not best_of_n.skipped
    skipped = notebook_plan("02", "full", "math-qwen2.5")  # not in the MATH handout
    assert skipped.items == () and skipped.total == (0, 0) and "Best-of-N" in skipped.skipped[0]
    gsm8k = notebook_plan("04", "full", "gsm8k-qwen3")
    assert [item.section for item in gsm8k.items] == ["grpo_loop"] and len(gsm8k.skipped) == 2
    math = notebook_plan("04", "full", "cse599o-a3")
    assert [item.section for item in math.items] == ["grpo_loop", "keyword", "async_grpo"]
    assert math.items[1].hours is None and "minutes" in math.text()
    assert [item.section for item in notebook_plan("04", "full", "cs336-a5").items] == ["grpo_loop"]
    with pytest.raises(ValueError, match="no plan for notebook '03'"):
        notebook_plan("03", "full", "gsm8k-qwen3")


def test_smoke_says_in_one_line_that_nothing_runs_on_a_gpu(monkeypatch):
    from hw3lib.core import command_times as timings

    monkeypatch.delenv("HW3_NOTEBOOK_SHORT", raising=False)
    monkeypatch.setattr(timings, "load", lambda path=None: {})  # no time measured for this setting
    assert notebook_plan("05", "smoke", "gsm8k-qwen3", extras=True).text() == "smoke profile: CPU only, no GPU work."
    lines = notebook_plan("04", "smoke", "gsm8k-qwen3", extras=False).text().splitlines()
    assert lines[0] == "smoke profile: CPU only, no GPU work." and "keyword inclusion" in lines[1] and len(lines) == 2
    measured = {"make-workbook": {"minutes": 9.0, "date": "2026-11-28", "commit": "abc1234", "machine": "2 CPU cores",
                                  "parts": {"04": 4.5}, "course": "nlpdl-hw3", "extras": False}}
    monkeypatch.setattr(timings, "load", lambda path=None: measured)
    first = notebook_plan("04", "smoke", "gsm8k-qwen3", extras=False).text().splitlines()[0]
    assert first == ("smoke profile: CPU only, no GPU work. Expected time: about 4.5 min on 2 CPU cores (`make "
                     "workbook`, 2026-11-28, commit abc1234); a finished run is read back in seconds.")
    monkeypatch.setenv("HW3_NOTEBOOK_SHORT", "1")  # CI's short setting takes another time: none stated
    assert notebook_plan("04", "smoke", "gsm8k-qwen3", extras=False).text().splitlines()[0].endswith("no GPU work.")


def test_the_full_profiles_cpu_rehearsal_runs_the_same_plan_logic_at_its_own_size(monkeypatch):
    course = notebook_plan("05", "full", "gsm8k-qwen3")
    monkeypatch.setenv("HW3_REHEARSAL", "1")  # what `make test` walks the notebooks in: a student's Run-All, shrunk
    monkeypatch.setenv("HW3_SIMULATE_GPU", "H100-80GB")
    plan = notebook_plan("05", "full", "gsm8k-qwen3")
    assert [item.what.split(",")[0] for item in plan.items] == [item.what.split(",")[0] for item in course.items]
    assert "x 2 steps" in plan.items[0].what and "x 200 steps" in course.items[0].what  # the same runs, shrunk
    assert "rehearsal" in plan.text() and "simulated" in plan.text()
    assert 0 < plan.total[0] < course.total[0] / 100  # 2 short steps per run, not 200


def test_the_estimates_use_the_detected_card_when_the_device_check_exists(monkeypatch):
    from hw3lib.core import preflight

    assert plan_accelerator() == (cost.H100, "estimated on an H100 (no GPU detected)")
    fast = notebook_plan("01", "full", "gsm8k-qwen3")
    card = cost.Accelerator("Test GPU", 100e12, 1e12)
    detected = preflight.DeviceInfo(kind="cuda", name="Test GPU", total_bytes=80 * 2**30, capability=(9, 0), count=1)
    monkeypatch.setattr(preflight, "detect_device", lambda: detected)
    monkeypatch.setattr(preflight, "accelerator_for", lambda info: card)
    assert plan_accelerator() == (card, "estimated on the detected Test GPU")
    assert plan_accelerator(types.SimpleNamespace(kind="cpu", name="", simulated=False))[0] == cost.H100
    simulated = types.SimpleNamespace(kind="cuda", name="Test GPU", simulated=True)  # $HW3_SIMULATE_GPU (CI)
    assert plan_accelerator(simulated) == (card, "estimated on the simulated Test GPU")
    slow = notebook_plan("01", "full", "gsm8k-qwen3")
    assert "estimated on the detected Test GPU" in slow.text()
    assert slow.total[0] > fast.total[0]  # a tenth of the H100's bandwidth: slower


def test_skip_notes_and_the_profile_line():
    note = skipped_note("keyword", "gsm8k-qwen3")
    assert "keyword inclusion" in note and "NLPDL HW3 handout" in note and "extras = True" in note and "HW3_EXTRAS=1" in note
    assert "`algorithms` grid" in skipped_note(None, get_course("math-qwen2.5"))
    prof = types.SimpleNamespace(name="full", reason="a CUDA GPU is visible (NVIDIA H100, capability 9.0)")
    assert profile_line(prof) == "profile full: a CUDA GPU is visible (NVIDIA H100, capability 9.0)"
    assert profile_line(types.SimpleNamespace(name="smoke")) == "profile smoke"  # a Profile without a reason yet


def test_a_skipped_grid_shows_one_line_instead_of_failing(capsys):
    from hw3lib.experiments.notebook import show_grid_if_run

    assert show_grid_if_run({}, "leaderboard", "gsm8k-qwen3") is None
    assert "`leaderboard` grid is an extra for the NLPDL HW3 handout" in capsys.readouterr().out


# ---- the notebooks ---------------------------------------------------------------------------------------------

GPU_WORK = ("make_engine(", "train(", "run_grids_parallel(", "run_all(", "run_schedules(")


@pytest.mark.parametrize("name, sections", [("01_zero_shot", ()), ("02_best_of_n", ("best_of_n",)),
                                            ("04_train_loop", ("keyword", "async_grpo")),
                                            ("05_ablations", ("sft", "expert_iteration"))])
def test_notebooks_print_the_profile_and_the_plan_before_any_gpu_work(name, sections):
    import nbformat

    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(notebook)
    code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    parameters = next(cell.source for cell in notebook.cells if "parameters" in cell.metadata.get("tags", []))
    assert ("extras = None" in parameters) == bool(sections)
    first_gpu = next(i for i, source in enumerate(code) if any(call in source for call in GPU_WORK))
    planned = next(i for i, source in enumerate(code) if f'notebook_plan("{name[:2]}"' in source)
    assert planned < first_gpu and any("profile_line(prof)" in source for source in code[:planned + 1])
    for section in sections:  # each optional section's cells are guarded by the same decision
        assert any(f'"{section}" in to_run' in source or "run_sft_ei" in source for source in code), section


def test_the_device_check_names_a_simulated_card(monkeypatch):
    monkeypatch.setenv("HW3_SIMULATE_GPU", "L4-24GB")
    plan = notebook_plan("05", "full", "gsm8k-qwen3")
    assert "estimated on the simulated NVIDIA L4" in plan.text()
    monkeypatch.delenv("HW3_SIMULATE_GPU")
    assert "estimated on an H100 (no GPU detected)" in notebook_plan("01", "full", "gsm8k-qwen3").text()
    assert plan.total[0] > 3 * notebook_plan("05", "full", "gsm8k-qwen3").total[0]  # an L4 is far slower
