"""`hw3 runs prune-optimizer` (hw3lib.experiments.prune, issue 58 item 6): it lists, and deletes only with --yes, the
AdamW state of finished runs, never that of a run a grid extends or one named with --keep."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from hw3lib.cli import app
from hw3lib.core.disk import PRUNED_FILE
from hw3lib.experiments.prune import extended_runs, prunable_runs


def make_run(root: Path, name: str, steps: int, total: int, size: int = 1000) -> Path:
    """A finished (steps == total) or unfinished GRPO run folder as hw3lib.core.runs.save_checkpoint leaves it."""
    checkpoint = root / name / "checkpoints" / f"step_{steps:06d}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "optimizer.pt").write_bytes(b"\0" * size)
    (checkpoint / "state.json").write_text(json.dumps({"grpo_step": steps}))
    (checkpoint / "config.json").write_text(json.dumps({"n_grpo_steps": total}))
    (checkpoint.parent / "latest").write_text(checkpoint.name + "\n")
    return checkpoint / "optimizer.pt"


def grid_runs(root: Path) -> dict[str, Path]:
    """Smoke grids' runs (the learning_rate grid's runs have 50 GRPO steps in smoke: grids.grid_base)."""
    runs = {"learning_rate/2e-04": make_run(root, "learning_rate/2e-04", 50, 50, 3_000_000),
            # made by `hw3 sweep learning_rate --steps 20`: finished at 20, the grid now runs it to 50
            "learning_rate/6e-04": make_run(root, "learning_rate/6e-04", 20, 20),
            # notebook 04's run, which grid.json says the baselines grid shares at 4x the steps (smoke's scaling)
            "grpo_smoke": make_run(root, "grpo_smoke", 50, 50, 2_000_000),
            "kept_by_hand": make_run(root, "kept_by_hand", 10, 10)}
    manifest = {"grid": "baselines", "configs": {"reinforce_with_baseline": {
        "run": "grpo_smoke", "n_grpo_steps": 50, "changes": {"n_grpo_steps": 200}}}}
    (root / "baselines").mkdir()
    (root / "baselines" / "grid.json").write_text(json.dumps(manifest))
    return runs


def test_runs_a_grid_extends_keep_their_optimizer_state(tmp_path):
    runs = grid_runs(tmp_path)
    assert extended_runs(tmp_path, "smoke") == {"learning_rate/6e-04", "grpo_smoke"}
    assert [e.run for e in prunable_runs(tmp_path, keep={"kept_by_hand"})] == ["learning_rate/2e-04"]
    assert runs["learning_rate/2e-04"].is_file()  # listing deletes nothing


def test_the_command_lists_without_yes_and_deletes_with_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path))
    monkeypatch.setenv("HW3_PROFILE", "smoke")
    runs = grid_runs(tmp_path)
    listed = CliRunner().invoke(app, ["runs", "prune-optimizer", "--keep", "kept_by_hand"], prog_name="hw3")
    assert listed.exit_code == 0, listed.output
    assert "learning_rate/2e-04" in listed.output and "3 MB" in listed.output and "grpo_smoke" not in listed.output
    assert "nothing deleted" in listed.output and runs["learning_rate/2e-04"].is_file()
    deleted = CliRunner().invoke(app, ["runs", "prune-optimizer", "--yes", "--keep", "kept_by_hand"], prog_name="hw3")
    assert deleted.exit_code == 0, deleted.output
    assert "deleted 3 MB of optimizer state from 1 finished run(s)" in deleted.output
    assert not runs["learning_rate/2e-04"].exists() and (runs["learning_rate/2e-04"].parent / PRUNED_FILE).is_file()
    assert all(runs[name].is_file() for name in ("learning_rate/6e-04", "grpo_smoke", "kept_by_hand"))
    again = CliRunner().invoke(app, ["runs", "prune-optimizer", "--keep", "kept_by_hand"], prog_name="hw3")
    assert "nothing to prune" in again.output
