"""Tests never touch the user's work (issue 23): what `make test` runs -- pytest over tests/ and nbval over the
notebooks under `python -m hw3lib.workbook.isolated` -- sends runs, figures and the writeup to a temporary
folder, and an existing workbook's runs/, figures/ and writeup/ stay byte-identical."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from hw3lib.core.io import figures_dir, isolated_output_env, output_root, project_root, runs_dir
from hw3lib.workbook.isolated import run_isolated

REPO_ROOT = Path(__file__).resolve().parents[2]

# What a notebook does with its outputs (hw3lib's own writers: a run's files, a plot, a result JSON), then
# `make writeup` (build_writeup's defaults); it prints where everything went.
NOTEBOOK_LIKE = '''
import json
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from hw3lib.core.io import append_jsonl, atomic_write_json, figures_dir, output_root, project_root, runs_dir
from hw3lib.core.io import save_figure
from hw3lib.workbook.writeup import build_writeup

run = runs_dir() / "leaderboard" / "best"
atomic_write_json(run / "config.json", {"loss_type": "grpo_clip", "n_grpo_steps": 3})
append_jsonl(run / "metrics.jsonl", {"step": 1, "train/loss": 0.5})
fig = plt.figure()
plt.plot([0, 1], [0, 1])
written = save_figure(fig, "zero_shot_counts")
atomic_write_json(figures_dir() / "numbers.json", {"accuracy": 0.0, "profile": "smoke", "steps": 3})
pdf = build_writeup()
outputs = sorted(str(p.relative_to(output_root())) for p in output_root().rglob("*") if p.is_file())
print(json.dumps({"project": str(project_root()), "output": str(output_root()), "runs": str(runs_dir()),
                  "figures": [str(p) for p in written], "pdf": str(pdf), "outputs": outputs}))
'''


def _snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under `root` (relative path -> digest): equal snapshots, byte-identical trees."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _workbook_with_results(tmp_path: Path) -> Path:
    """A checkout after `make workbook`: runs/, figures/ and writeup/ (with its PDF) hold the user's results."""
    project = tmp_path / "project"
    (project / "hw3lib").mkdir(parents=True)  # what project_root() looks for (hw3lib itself is imported from
    (project / "pyproject.toml").write_text("[project]\nname = 'hw3lib'\n")  # the real checkout: PYTHONPATH)
    shutil.copytree(REPO_ROOT / "writeup", project / "writeup", ignore=shutil.ignore_patterns("*.pdf", "results.json"))
    files = {"runs/leaderboard/best/config.json": json.dumps({"loss_type": "no_baseline", "n_grpo_steps": 200}),
             "runs/leaderboard/best/metrics.jsonl": '{"step": 1, "train/loss": 0.25}\n' * 200,
             "runs/notebooks/05_ablations.ipynb": "{}",
             "figures/numbers.json": json.dumps({"accuracy": 0.31, "profile": "full", "steps": 200}),
             "figures/zero_shot_counts.png": "the user's plot",
             "writeup/writeup.pdf": "%PDF- the user's writeup, built from hours of runs",
             "writeup/results.json": "{}"}
    for name, text in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    return project


def _notebook_like_run(project: Path, tmp_path: Path, isolated: bool) -> dict:
    """NOTEBOOK_LIKE run from `project` (its project_root()), under run_isolated or (negative control) not."""
    script = tmp_path / "script" / "notebook_like.py"  # outside the project: its folder is what lands on sys.path
    script.parent.mkdir(exist_ok=True)
    script.write_text(NOTEBOOK_LIKE)
    env = {key: value for key, value in os.environ.items() if key not in isolated_output_env(tmp_path)}
    env.update(PYTHONPATH=str(REPO_ROOT), MPLBACKEND="Agg", OMP_NUM_THREADS="1")
    log = tmp_path / "script" / "stdout.txt"
    command = [sys.executable, str(script)]
    with open(log, "w") as out:
        status = (run_isolated(command, cwd=project, env=env, stdout=out) if isolated
                  else subprocess.call(command, cwd=project, env=env, stdout=out))
    assert status == 0, log.read_text()
    return json.loads(log.read_text().splitlines()[-1])


def test_a_test_style_run_leaves_an_existing_workbook_byte_identical(tmp_path):
    project = _workbook_with_results(tmp_path)
    before = _snapshot(project)
    report = _notebook_like_run(project, tmp_path, isolated=True)
    assert report["project"] == str(project)  # it did run against this workbook
    output = Path(report["output"])
    assert output != project and not output.is_relative_to(project)
    assert Path(report["runs"]) == output / "runs" and Path(report["pdf"]) == output / "writeup" / "writeup.pdf"
    # It wrote a run, a plot, a result, and a writeup built from them -- all in the temporary folder,
    assert {"runs/leaderboard/best/config.json", "figures/zero_shot_counts.png", "figures/numbers.json",
            "writeup/writeup.pdf", "writeup/results.json", "writeup/writeup.typ"} <= set(report["outputs"])
    assert not output.exists()  # which is removed afterwards,
    assert _snapshot(project) == before  # and the workbook's runs/, figures/ and writeup/ are untouched.

    # Negative control: the same run without the isolation rewrites the user's results (what the check catches).
    report = _notebook_like_run(project, tmp_path, isolated=False)
    assert report["output"] == str(project)
    after = _snapshot(project)
    changed = {name for name in before if after.get(name) != before[name]}
    assert {"runs/leaderboard/best/config.json", "figures/numbers.json", "figures/zero_shot_counts.png",
            "writeup/writeup.pdf"} <= changed


def test_pytest_itself_writes_outside_the_checkout():
    """tests/conftest.py points every output at a temporary folder for the whole session."""
    for folder in (output_root(), runs_dir(), figures_dir()):
        assert not folder.resolve().is_relative_to(project_root().resolve()), folder
    assert os.environ["HW3_RUNS_DIR"] == str(output_root() / "runs")


def test_output_settings_are_read_in_one_place(tmp_path, monkeypatch):
    import hw3lib.core.io as io

    checkout = tmp_path / "checkout"  # runs_dir() and figures_dir() create their folder: not in the real one
    monkeypatch.setattr(io, "project_root", lambda: checkout)
    for key in isolated_output_env(tmp_path):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv("HW3_COURSE", raising=False)
    # `make workbook`: the checkout's runs/, figures/, writeup/
    assert (output_root(), runs_dir(), figures_dir()) == (checkout, checkout / "runs", checkout / "figures")
    for key, value in isolated_output_env(tmp_path / "out").items():
        monkeypatch.setenv(key, value)
    out = (tmp_path / "out").resolve()
    assert (output_root(), runs_dir(), figures_dir()) == (out, out / "runs", out / "figures")
    monkeypatch.setenv("HW3_COURSE", "math-qwen2.5")  # the other course's runs, figures and PDF keep their own folders
    assert runs_dir() == out / "runs" / "math-qwen2.5"
    assert figures_dir() == out / "courses" / "cs336-a5" / "figures"
    monkeypatch.delenv("HW3_RUNS_DIR")
    monkeypatch.delenv("HW3_COURSE")
    assert runs_dir() == out / "runs"  # HW3_OUTPUT_DIR alone moves the runs too


def _recipe(makefile: str, target: str) -> list[str]:
    """The commands of `target` in a Makefile, continuation lines joined."""
    text = makefile.replace("\\\n", " ")
    match = re.search(rf"^{target}:[^\n]*\n((?:\t[^\n]*\n)*)", text, flags=re.M)
    assert match, f"no `{target}` target"
    return [" ".join(line.split()) for line in match.group(1).splitlines() if not line.strip().startswith("#")]


def test_make_test_runs_every_presets_notebooks_in_a_temporary_output_folder():
    makefile = (REPO_ROOT / "Makefile").read_text()
    commands = _recipe(makefile, "test")
    # pytest (isolated by tests/conftest.py) and the four walks, all five at once
    assert any(re.search(r"-m pytest .*tests/", c) for c in _recipe(makefile, "unit-tests"))
    jobs = re.search(r"\$\(SHARED_CORES\) \$\(MAKE\) .*-j5 .*", " ".join(commands)).group(0).split()
    assert {"unit-tests", "walk-gsm8k", "walk-math", "rehearse-gsm8k", "rehearse-math",
            "REHEARSE_EXTRAS=0"} <= set(jobs)
    # the five jobs share the cores: one torch thread each, vLLM's CPU threads unpinned
    assert re.search(r"^SHARED_CORES := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 VLLM_CPU_OMP_THREADS_BIND=nobind$",
                     makefile, flags=re.M)
    gsm8k, math = _recipe(makefile, "walk-gsm8k"), _recipe(makefile, "walk-math")
    assert len(gsm8k) == len(math) == 1 and all("$(SMOKE_SHORT) $(PY) -m hw3lib.workbook.isolated" in c
                                                for c in gsm8k + math)
    assert re.search(r"SMOKE_SHORT := HW3_PROFILE=smoke HW3_NOTEBOOK_SHORT=1$", makefile, flags=re.M)
    # NLPDL under nbval, then CS336 2026; CSE 599-O with every section, then CS336 2025: each with its writeup
    assert re.search(r"--nbval-lax .*notebooks/ .*writeup --check .*HW3_COURSE=cs336-a5-2026 HW3_EXTRAS=0 "
                     r"\$\(PY\) -m hw3lib\.workbook\.run'$", gsm8k[0]), gsm8k
    assert re.search(r"HW3_COURSE=cse599o-a3 HW3_EXTRAS=1 .*workbook\.run .*HW3_COURSE=cs336-a5 HW3_EXTRAS=0 "
                     r"\$\(PY\) -m hw3lib\.workbook\.run'$", math[0]), math
    rehearsals = _recipe(makefile, "rehearse-gsm8k") + _recipe(makefile, "rehearse-math")
    assert [re.search(r"--course (\S+)", c).group(1) for c in rehearsals] == ["nlpdl-hw3,cs336-a5-2026",
                                                                             "cse599o-a3,cs336-a5"]
    assert all("-m hw3lib.workbook.isolated" in c for c in rehearsals)
    # every preset is walked in both profiles
    from hw3lib.core.course import COURSE_NAMES

    walked = " ".join(gsm8k + math + rehearsals)
    assert all(name in walked for name in COURSE_NAMES) and "nbval" in walked
    assert re.search(r"^make test$", (REPO_ROOT / ".ci" / "run").read_text(), flags=re.M)  # what CI runs


def test_make_test_and_make_workbook_share_no_outputs(tmp_path, monkeypatch):
    """`make workbook` writes to the checkout's folders and `make test` to a fresh one each time, so either
    order works: the tests' 3-step runs never meet the workbook's runs."""
    project = tmp_path / "project"  # a checkout to run from (were the isolation gone, it, not ours, gets runs/)
    (project / "hw3lib").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    for key in isolated_output_env(tmp_path):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    seen = tmp_path / "seen.txt"
    command = [sys.executable, "-P", "-c", f"from hw3lib.core.io import runs_dir; open({str(seen)!r}, 'a').write("
               "str(runs_dir()) + '\\n')"]
    assert run_isolated(command, cwd=project) == 0 and run_isolated(command, cwd=project) == 0
    first, second = (Path(line) for line in seen.read_text().splitlines())
    assert len({first, second, project / "runs"}) == 3 and not first.exists() and not second.exists()
    assert sorted(p.name for p in project.iterdir()) == ["hw3lib", "pyproject.toml"]
