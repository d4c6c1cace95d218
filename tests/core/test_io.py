"""hw3lib.core.io: atomic writes and jsonl errors that name the file and line."""

import json
import os

import pytest

from hw3lib.core.io import (DataFileError, append_jsonl, atomic_write_json, atomic_write_jsonl, iter_jsonl_numbered,
                       project_root, read_jsonl, save_figure)


def test_atomic_write_json_round_trip_and_no_temp_left(tmp_path):
    path = atomic_write_json(tmp_path / "sub" / "a.json", {"x": 1, "p": tmp_path})
    assert json.loads(path.read_text()) == {"x": 1, "p": str(tmp_path)}
    assert sorted(os.listdir(path.parent)) == ["a.json"]
    assert oct(path.stat().st_mode & 0o777) != oct(0o600)


def test_failed_write_keeps_old_content(tmp_path):
    path = atomic_write_json(tmp_path / "a.json", {"ok": True})
    with pytest.raises(TypeError):
        atomic_write_json(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"ok": True}
    assert sorted(os.listdir(tmp_path)) == ["a.json"]


def test_read_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2\n')
    with pytest.raises(DataFileError, match=r"d\.jsonl:3: not valid JSON"):
        read_jsonl(path)
    path.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(DataFileError, match=r"d\.jsonl:2: expected a JSON object, got list"):
        read_jsonl(path)
    with pytest.raises(DataFileError, match="file not found"):
        read_jsonl(tmp_path / "missing.jsonl")


def test_torn_tail_is_skipped_only_when_allowed(tmp_path):
    path = tmp_path / "m.jsonl"
    append_jsonl(path, {"step": 1})
    append_jsonl(path, {"step": 2})
    with open(path, "a") as handle:
        handle.write('{"step": 3, "loss"')
    assert [r["step"] for r in read_jsonl(path, allow_torn_tail=True)] == [1, 2]
    with pytest.raises(DataFileError):
        read_jsonl(path)


def test_jsonl_round_trip(tmp_path):
    rows = [{"i": i, "s": "é"} for i in range(3)]
    assert read_jsonl(atomic_write_jsonl(tmp_path / "r.jsonl", rows)) == rows


def test_project_root_finds_the_checkout():
    root = project_root()
    assert (root / "pyproject.toml").is_file() and (root / "hw3lib").is_dir()


def test_numbered_rows_count_blank_lines(tmp_path):
    path = tmp_path / "n.jsonl"
    path.write_text('{"a": 1}\n\n  \n{"a": 2}\n')
    assert list(iter_jsonl_numbered(path)) == [(1, {"a": 1}), (4, {"a": 2})]


def test_save_figure_writes_each_format_whole_and_keeps_dotted_stems(tmp_path):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 2))
    fig.subplots().plot([0, 1], [1, 0])
    paths = save_figure(fig, tmp_path / "plots" / "run.v2", dpi=50)
    assert [p.name for p in paths] == ["run.v2.pdf", "run.v2.png"]
    assert paths[0].read_bytes()[:5] == b"%PDF-" and paths[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(os.listdir(tmp_path / "plots")) == ["run.v2.pdf", "run.v2.png"]  # no temporary files left


def test_shown_path_never_prints_a_machines_absolute_path(tmp_path, monkeypatch):
    from hw3lib.core.io import project_root, shown_path

    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "out" / "runs"))
    monkeypatch.setenv("HW3_CACHE_DIR", str(tmp_path / "cache"))
    assert shown_path(tmp_path / "out" / "runs" / "grpo_smoke") == "runs/grpo_smoke"
    assert shown_path(tmp_path / "cache" / "warmstart" / "ab12") == "$HW3_CACHE_DIR/warmstart/ab12"
    assert shown_path(project_root() / "figures" / "x.png") == "figures/x.png"
    assert shown_path("/somewhere/else/deep/run_a") == ".../deep/run_a"
    assert shown_path("runs/relative") == "runs/relative"


def test_a_run_start_prints_only_what_differs_from_its_recipe(monkeypatch):
    from hw3lib.grpo.config import GRPOConfig

    monkeypatch.delenv("HW3_COURSE", raising=False)
    recipe = GRPOConfig.for_profile("smoke")
    changed = recipe.replace(name="other", learning_rate=recipe.learning_rate * 2, group_size=4)
    lines = changed.describe_changes().splitlines()
    assert lines[0] == "  settings that differ from the smoke profile's GRPOConfig recipe:"
    assert sorted(lines[1:]) == [f"  group_size = 4 (recipe: {recipe.group_size!r})",
                                 f"  learning_rate = {2 * recipe.learning_rate!r} (recipe: {recipe.learning_rate!r})"]
    assert recipe.describe_changes().splitlines()[1:] == ["  (none)"]


def test_a_run_start_prints_a_local_model_folder_relative_to_the_project(monkeypatch):
    from hw3lib.core.io import project_root
    from hw3lib.grpo.config import GRPOConfig

    monkeypatch.delenv("HW3_COURSE", raising=False)
    folder = project_root() / ".cache" / "keyword_sft" / "bf385eb6f4e1"  # where the Makefile's cache puts models
    lines = GRPOConfig.for_profile("smoke").replace(model=str(folder)).describe_changes().splitlines()
    assert "  model = '.cache/keyword_sft/bf385eb6f4e1' (recipe: 'tiny')" in lines
    assert str(project_root()) not in "\n".join(lines)


def test_read_json_reads_says_none_for_a_missing_file_and_names_a_broken_one(tmp_path):
    from hw3lib.core.io import read_json

    assert read_json(tmp_path / "absent.json") is None
    (tmp_path / "good.json").write_text('{"a": [1, 2]}')
    assert read_json(tmp_path / "good.json") == {"a": [1, 2]}
    (tmp_path / "bad.json").write_text('{"a": [1, 2}')
    with pytest.raises(ValueError, match=r"bad.json: not a readable search log .*line 1, column 12"):
        read_json(tmp_path / "bad.json", "search log")


def _slow_counted_build(args):
    """Build `target` with a build that records each call and takes long enough for the other to arrive."""
    import time
    from pathlib import Path

    from hw3lib.core.io import build_folder_once

    target, calls = Path(args[0]), Path(args[1])

    def build(staging):
        with open(calls, "a") as log:
            log.write("built\n")
        time.sleep(1.0)
        (staging / "config.json").write_text("{}")

    return str(build_folder_once(target, build))


def test_build_folder_once_builds_once_when_two_processes_want_it_at_once(tmp_path):
    import multiprocessing

    target, calls = tmp_path / "cache" / "model", tmp_path / "calls.txt"
    spawn = multiprocessing.get_context("spawn")
    builders = [spawn.Process(target=_slow_counted_build, args=((str(target), str(calls)),)) for _ in range(2)]
    for builder in builders:  # both start before either build (1 s) can end
        builder.start()
    for builder in builders:
        builder.join(60)
    assert [builder.exitcode for builder in builders] == [0, 0] and (target / "config.json").is_file()
    assert calls.read_text() == "built\n"  # the second waited for the first's result instead of building again
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".model.") and p.is_dir()]  # no staging left


def test_an_interrupted_build_is_not_reused_and_leaves_the_lock_free(tmp_path):
    from hw3lib.core.io import build_folder_once

    target = tmp_path / "model"

    def failing(staging):
        (staging / "half.bin").write_text("x")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        build_folder_once(target, failing)
    assert not target.exists()
    built = build_folder_once(target, lambda staging: (staging / "config.json").write_text("{}"))
    assert (built / "config.json").is_file() and not (built / "half.bin").exists()
