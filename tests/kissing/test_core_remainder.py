"""The core-and-remainder search: the 582 recipe, the penalty's gradient, the Chebyshev LP, rounding with the
exact check, and a resumable growth on a core with room (the 22 axis rows)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("scipy", reason="the Chebyshev LP needs scipy (HiGHS)")

from hw3lib.kissing import verify  # noqa: E402
from hw3lib.kissing.core_remainder import (HALF, CoreRemainderConfig, build_core, chebyshev_lp, equilibrate,  # noqa: E402
                                           config_of, grow, max_cosine, penalty, reproduce_582,
                                           round_and_check, saved_settings, summary)


def test_the_35_support_recipe_reproduces_582():
    points = reproduce_582()
    result = verify(points)
    assert result.valid and result.num_points == 582 == 22 + 16 * 35
    cfg = CoreRemainderConfig(drop_axes=(8, 9, 10), drop_supports=(0, 5))
    core, cavity = build_core(cfg)
    assert len(core) == 582 - 6 - 32 and len(cavity) == 38
    assert sorted(map(tuple, np.vstack([core, cavity]).tolist())) == sorted(map(tuple, points.tolist()))
    merged, message = round_and_check(cavity / 2.0, core, 100_000)  # the split, rounded and checked: still valid
    assert merged is not None and len(merged) == 582, message


def test_penalty_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    C = build_core(CoreRemainderConfig(drop_axes=(), supports=3))[0] / 2.0
    R = rng.standard_normal((4, 11))
    R /= np.linalg.norm(R, axis=1, keepdims=True)
    value, grad = penalty(R, C, 0.02, 50.0, 0.1)
    assert value > 0
    for i, j in [(0, 0), (1, 5), (3, 10)]:
        e = np.zeros_like(R)
        e[i, j] = 1e-6
        numeric = (penalty(R + e, C, 0.02, 50.0, 0.1)[0] - penalty(R - e, C, 0.02, 50.0, 0.1)[0]) / 2e-6
        assert math.isclose(grad[i, j], numeric, rel_tol=1e-5, abs_tol=1e-7)


def test_the_lp_turns_contacts_into_strict_slack():
    # core: the 22 axis rows. Remainder: (1,1,1,1,0,...)/2 directions: cos 1/2 with four axis rows (contacts, slack 0)
    C = build_core(CoreRemainderConfig(drop_axes=(), supports=0))[0] / 2.0
    R = np.zeros((2, 11))
    R[0, :4] = 0.5
    R[1, 4:8] = 0.5
    assert math.isclose(max_cosine(R, C), 0.5)
    cfg = CoreRemainderConfig(lp_rounds=8, lp_step=0.01, lp_near=0.05)
    moved, slack = chebyshev_lp(R, C, cfg)
    assert slack > 1e-3 and math.isclose(HALF - max_cosine(moved, C), slack)
    assert np.allclose(np.linalg.norm(moved, axis=1), 1.0)


def test_rounding_keeps_only_what_the_exact_verifier_accepts():
    core = build_core(CoreRemainderConfig(drop_axes=(), supports=0))[0]
    R = np.zeros((1, 11))
    R[0, :4] = 0.5  # cos 1/2 exactly with four axis rows: valid at slack 0 with equal norms
    points, message = round_and_check(R, core, 100_000)
    assert points is not None and verify(points).valid
    R[0, :4] = [0.5 + 1e-4, 0.5 - 1e-4 / 3, 0.5 - 1e-4 / 3, 0.5 - 1e-4 / 3]  # one contact past 1/2
    R /= np.linalg.norm(R)
    points, message = round_and_check(R, core, 100_000)
    assert points is None and "min squared distance" in message


def test_equilibrate_separates_a_crowded_remainder():
    C = build_core(CoreRemainderConfig(drop_axes=(), supports=0))[0] / 2.0
    rng = np.random.default_rng(1)
    R = np.tile(np.full(11, 1 / math.sqrt(11)), (4, 1)) + 0.01 * rng.standard_normal((4, 11))  # four near-duplicates
    assert max_cosine(R / np.linalg.norm(R, axis=1, keepdims=True), C) > 0.99
    out = equilibrate(R, C, CoreRemainderConfig())
    assert max_cosine(out, C) < HALF


def test_growth_is_verified_logged_and_resumable(tmp_path):
    cfg = CoreRemainderConfig(drop_axes=(), supports=0, target=27, seed_candidates=500,
                              stages=((0.02, 40.0, 150), (0.0, 200.0, 150)))
    log = tmp_path / "grow.json"
    first = grow(log, cfg, budget_s=0.0, progress=False)  # stops before its first attempt
    assert first.best_size == 22 and not first.done and first.attempts == []
    state = grow(log, cfg, progress=False)  # resumes from the log
    assert state.done and state.best_size == 27 and verify(state.best_points).valid
    rows = json.loads(log.read_text())["attempts"]
    assert [r["size"] for r in rows if r["valid"]] == [23, 24, 25, 26, 27]
    assert all(r["cpu_s"] >= r["cpu_equilibrate_s"] for r in rows)
    text = log.with_suffix(".log").read_text().splitlines()
    assert text[0].endswith("core 22 + remainder 0 = 22 (verified)") and "reached the target 27" in text[-1]
    with pytest.raises(ValueError, match="other settings"):
        grow(log, CoreRemainderConfig(drop_axes=(), supports=1), progress=False)
    report = summary(json.loads(log.read_text()))  # what data/kissing_number/report.md states about a stored log
    assert (report["best_size"], report["verified"], report["first_size"]) == (27, True, 22)
    assert report["attempts"] == len(rows) and report["cpu_per_attempt_s"] > 0 and "0-support recipe" in report["core"]


STORED = Path(__file__).resolve().parents[2] / "data" / "kissing_number"


@pytest.mark.parametrize("name", ["core_remainder_ours", "core_remainder_ours_cavity", "core_remainder_station_core"])
def test_the_stored_logs_still_resume(name, tmp_path, monkeypatch):
    # they were written before `core_spec` (and, for the station core, `start_empty`) existed: a field a log does not
    # name reads as its default, so resuming with the log's own settings is no difference and adds no attempt
    monkeypatch.chdir(STORED.parents[1])  # the station core's core_file is relative to the repository root
    saved = json.loads((STORED / f"{name}.json").read_text())
    assert "core_spec" not in saved["config"]
    copy = tmp_path / f"{name}.json"
    copy.write_text(json.dumps(saved))
    state = grow(copy, config_of(saved["config"]), progress=False)
    assert state.done and len(state.attempts) == len(saved["attempts"]) and state.best_size == saved["best_size"]
    assert json.loads(copy.read_text())["config"]["core_spec"] == ""  # saved again with every field named
    with pytest.raises(ValueError, match="other settings"):  # a real difference is still refused
        grow(copy, config_of({**saved["config"], "core_spec": "axes 0 1"}), progress=False)


def test_a_missing_field_reads_as_its_default():
    old = {k: v for k, v in saved_settings({}).items() if k not in ("core_spec", "start_empty")}
    assert saved_settings(old) == saved_settings({}) and config_of(old) == CoreRemainderConfig()
    assert config_of({**old, "drop_axes": [8]}).drop_axes == (8,)  # lists back to the config's tuples
