"""Every `hw3` command given bad input ends in one line, `error: <message>`, and a non-zero exit, no traceback.

The project's refusals (a broken data file, a missing one, a config value, a run folder that holds another run,
a profile without its GPU) are one line (hw3lib.cli.OneLineErrors); real bugs keep their traceback, and so do the
project's errors under `hw3 --debug` or HW3_DEBUG=1. Most cases run in-process through typer's CliRunner (the
same group object the `hw3` script runs); a few run the installed `hw3` script itself, to see exactly what a
shell shows. `hw3 eval` takes the profile's settings and $HW3_ENGINE (`eval_settings`), and a second `hw3 train`
with a run's name says in one line how to resume, extend or name a new run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from hw3lib.cli import app, is_project_error, one_line

REPO = Path(__file__).resolve().parents[1]


def run(*args: str, **env: str):
    """`hw3 ARGS` in-process (extra environment variables as keywords)."""
    return CliRunner().invoke(app, list(args), env=env or None, prog_name="hw3")


def assert_one_line_error(result, *needles: str, code: int = 1) -> str:
    """Exactly one line of output in all (stdout and stderr), `error: ...` on stderr, the exit code, no traceback;
    the line holds every needle. Returns the line."""
    lines = result.output.splitlines()
    assert len(lines) == 1, f"{len(lines)} lines:\n{result.output}"
    assert result.stdout == "" and result.stderr.startswith("error: "), result.output
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output and "╭" not in result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture
def broken_math(tmp_path) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"problem": "What is $1+1$?", "solution": "$\\boxed{2}$"}) + "\n"
                    + '{"problem": "What is $2+2$?", "solution": \n')
    return path


@pytest.fixture
def runs(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "runs"
    monkeypatch.setenv("HW3_RUNS_DIR", str(folder))
    monkeypatch.delenv("HW3_COURSE", raising=False)
    return folder


# ---- hw3 eval --------------------------------------------------------------------------------------------------

def test_eval_broken_json_line_names_the_file_and_line(broken_math, tmp_path):
    line = assert_one_line_error(run("eval", "--dataset", "math", "--math-path", str(broken_math),
                                     "--out", str(tmp_path / "o")), f"{broken_math}:2", "not valid JSON",
                                 "fix or remove this line")
    assert not (tmp_path / "o").exists() and line.startswith("error: ")


def test_eval_missing_file_and_missing_source(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere.jsonl"
    assert_one_line_error(run("eval", "--dataset", "math", "--math-path", str(missing), "--out", str(tmp_path / "o")),
                          str(missing), "file not found")
    monkeypatch.delenv("HW3_MATH_DATA", raising=False)
    assert_one_line_error(run("eval", "--dataset", "math", "--out", str(tmp_path / "o")), "--math-path",
                          "HW3_MATH_DATA", "hw3 eval --help", code=2)  # a usage error: exit status 2
    assert_one_line_error(run("eval", "--split", "nosuch", "--out", str(tmp_path / "o"), "--model", "tiny"),
                          "split='nosuch'", "GSM8K has splits")


def test_eval_bad_profile_and_full_profile_without_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert_one_line_error(run("eval", "--profile", "huge", "--out", str(tmp_path / "o")), "--profile",
                          "unknown profile 'huge'", "smoke, full")
    assert_one_line_error(run("eval", "--out", str(tmp_path / "o"), HW3_PROFILE="full"), "HW3_PROFILE=full",
                          "none is visible", "--profile smoke", "--device cpu")
    assert_one_line_error(run("eval", "--profile", "full", "--out", str(tmp_path / "o"), HW3_SIMULATE_GPU="x"),
                          "$HW3_SIMULATE_GPU='x' names no card")


def test_eval_missing_course_grader(tmp_path):
    assert_one_line_error(run("eval", "--model", "tiny", "--limit", "1", "--out", str(tmp_path / "o"),
                              HW3_COURSE_GRADER=str(tmp_path / "drgrpo_grader.py")), "HW3_COURSE_GRADER",
                          "drgrpo_grader.py")


def test_eval_bad_option_values_are_one_line(tmp_path):
    assert_one_line_error(run("eval", "--n", "0", "--out", str(tmp_path)), "--n", "hw3 eval --help", code=2)
    assert_one_line_error(run("eval", "--engine", "tgi", "--out", str(tmp_path)), "--engine", "tgi", code=2)
    assert_one_line_error(run("eval"), "--out", code=2)


# ---- hw3 eval follows the profile and HW3_ENGINE ------------------------------------------------------------------

def test_eval_settings_follow_the_smoke_profile_and_hw3_engine(monkeypatch):
    from hw3lib.core.profile import get_profile
    from hw3lib.evaluation.cli import Dataset, eval_settings

    for name in ("HW3_ENGINE", "HW3_MODEL", "HW3_MATH_MODEL", "HW3_REHEARSAL", "HW3_COURSE"):
        monkeypatch.delenv(name, raising=False)
    smoke = get_profile("smoke")
    settings = eval_settings("smoke")
    assert (settings.profile, settings.model, settings.engine, settings.device, settings.dtype) == (
        "smoke", smoke.model, "transformers", "cpu", "float32")
    assert (settings.max_tokens, settings.limit, settings.gpu_memory_utilization) == (
        smoke.eval_max_tokens, smoke.eval_examples, smoke.gpu_memory_utilization)
    assert eval_settings("smoke", Dataset.math).model == smoke.math_model
    monkeypatch.setenv("HW3_ENGINE", "vllm")  # the profile's engine comes from $HW3_ENGINE
    assert eval_settings("smoke").engine == "vllm"
    monkeypatch.setenv("HW3_PROFILE", "smoke")  # no --profile: $HW3_PROFILE
    assert eval_settings(None).engine == "vllm" and "HW3_PROFILE=smoke" in eval_settings(None).reason
    given = eval_settings("smoke", model="tiny", engine="transformers", max_tokens=6, limit=3, dtype="bfloat16")
    assert (given.model, given.engine, given.max_tokens, given.limit, given.dtype) == ("tiny", "transformers", 6, 3,
                                                                                       "bfloat16")


def test_eval_settings_of_the_full_profile_on_a_gpu_and_off_one(monkeypatch):
    import hw3lib.core.profile
    import hw3lib.evaluation.cli as eval_cli
    from hw3lib.core.cli_options import CommandError

    for name in ("HW3_ENGINE", "HW3_MODEL", "HW3_MATH_MODEL", "HW3_REHEARSAL", "HW3_COURSE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(hw3lib.core.profile, "full_profile_dtype", lambda: ("bfloat16", "an sm_90 card"))
    monkeypatch.setattr(eval_cli, "_cuda_available", lambda: True)
    full = eval_cli.eval_settings("full")
    assert (full.model, full.engine, full.device, full.dtype, full.gpu_memory_utilization) == (
        "Qwen/Qwen3-0.6B", "vllm", "cuda", "bfloat16", 0.85)
    assert (full.max_tokens, full.limit) == (1024, None)  # the course's budget, every question
    assert eval_cli.eval_settings("full", eval_cli.Dataset.math).model == "Qwen/Qwen2.5-Math-1.5B"
    monkeypatch.setenv("HW3_COURSE", "cs336-a5-2026")  # a course with its own full-profile model
    assert eval_cli.eval_settings("full").model == "allenai/OLMo-2-0425-1B"
    monkeypatch.delenv("HW3_COURSE")
    monkeypatch.setenv("HW3_ENGINE", "transformers")
    assert eval_cli.eval_settings("full").engine == "transformers"
    cpu = eval_cli.eval_settings("full", device="cpu")  # another device: that device's dtype and share
    assert (cpu.device, cpu.dtype, cpu.gpu_memory_utilization) == ("cpu", "float32", 0.2)

    monkeypatch.setattr(eval_cli, "_cuda_available", lambda: False)
    with pytest.raises(CommandError, match="none is visible"):
        eval_cli.eval_settings("full")
    monkeypatch.setenv("HW3_REHEARSAL", "1")  # the full profile at rehearsal scale: the CPU and its stand-ins
    rehearsal = eval_cli.eval_settings("full")
    assert (rehearsal.device, rehearsal.dtype, rehearsal.model) == ("cpu", "bfloat16", "stand-in:Qwen/Qwen3-0.6B")


def test_hw3_eval_builds_the_engine_the_settings_name(tmp_path, monkeypatch):
    """The command passes eval_settings' choices to make_engine (stopped there: no model is loaded)."""
    import hw3lib.generation

    captured = {}

    class Stop(Exception):
        pass

    def fake_make_engine(kind, model, **kwargs):
        captured.update(kind=kind, model=model, **kwargs)
        raise Stop

    monkeypatch.setattr(hw3lib.generation, "make_engine", fake_make_engine)
    monkeypatch.setenv("HW3_ENGINE", "vllm")
    result = run("eval", "--profile", "smoke", "--limit", "2", "--out", str(tmp_path / "o"))
    assert isinstance(result.exception, Stop)  # not a project error: it propagates, as a bug's would
    assert (captured["kind"], captured["model"], captured["device"], captured["dtype"]) == (
        "vllm", hw3lib.core.profile.get_profile("smoke").model, "cpu", "float32")
    assert "smoke profile (--profile smoke)" in result.stdout and "vllm engine" in result.stdout


# ---- hw3 train / sft / expert-iteration / keyword: settings ------------------------------------------------------

@pytest.mark.parametrize("command", [["train"], ["sft"], ["expert-iteration"]])
def test_training_commands_refuse_bad_settings_in_one_line(command, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # $HW3_SIMULATE_GPU counts on a CPU machine
    assert_one_line_error(run(*command, "--profile", "smoke", "--set", "learning_rate=-1"), "learning_rate=-1",
                          "must be > 0")
    assert_one_line_error(run(*command, "--profile", "smoke", "--set", "no_such_field=1"), "no_such_field")
    assert_one_line_error(run(*command, "--profile", "smoke", "--set", 'learning_rate="fast"'), "wrong type",
                          'learning_rate="fast"')
    assert_one_line_error(run(*command, "--profile", "smoke", "--set", "learning_rate"), "KEY=VALUE", code=2)
    assert_one_line_error(run(*command, "--profile", "gpu"), "unknown profile 'gpu'")
    assert_one_line_error(run(*command, "--profile", "smoke", "--steps", "0"), "--steps", code=2)
    line = assert_one_line_error(run(*command, "--profile", "full", HW3_SIMULATE_GPU="bogus"),  # a PreflightError
                                 "$HW3_SIMULATE_GPU='bogus' names no card", "T4-16GB")
    assert "--set" not in line


def test_train_with_a_missing_dataset_file(runs, tmp_path):
    result = run("train", "--profile", "smoke", "--steps", "1", "--dataset", str(tmp_path / "missing.jsonl"))
    error = [line for line in result.stderr.splitlines()]
    assert result.exit_code == 1 and len(error) == 1 and error[0].startswith("error: "), result.output
    assert str(tmp_path / "missing.jsonl") in error[0] and "Traceback" not in result.output


def test_keyword_commands(tmp_path):
    assert_one_line_error(run("keyword", "train", "--reward", "gate", "--profile", "smoke"), "reward='gate'",
                          "choose inclusion")
    assert_one_line_error(run("keyword", "data", "--out", str(tmp_path), "--n", "3"), "--n", code=2)


# ---- a second hw3 train with a run's name ------------------------------------------------------------------------

def write_run(cfg, steps_done: int, validated: bool = True) -> Path:
    """A run folder as the training loops leave it (hw3lib.core.runs.save_checkpoint writes the checkpoint),
    with `steps_done` steps and, when `validated`, the validation at that step logged."""
    from hw3lib.core.io import atomic_write_json
    from hw3lib.core.lifecycle import run_folder
    from hw3lib.core.runs import METRICS_FILE, rng_state, save_checkpoint

    class Saved:
        def save_pretrained(self, path, **_):
            Path(path).mkdir(parents=True, exist_ok=True)

    run_dir = run_folder(cfg)
    run_dir.mkdir(parents=True)
    atomic_write_json(run_dir / "config.json", cfg.to_dict())
    rows = [{cfg.COUNTER: step, "train/loss": 0.1} for step in range(1, steps_done + 1)]
    rows += [{cfg.COUNTER: steps_done, "eval/answer_reward": 0.5}] if validated else []
    (run_dir / METRICS_FILE).write_text("".join(json.dumps(row) + "\n" for row in rows))
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))])
    save_checkpoint(run_dir, Saved(), Saved(), optimizer, {cfg.COUNTER: steps_done}, rng_state(), step=steps_done)
    return run_dir


@pytest.fixture
def no_training(monkeypatch):
    """The training functions, replaced: they record their calls (a command that refuses never calls them)."""
    import hw3lib.grpo.loop
    import hw3lib.sft.loop

    calls = []

    def fake(cfg, resume=False, overwrite=False):
        from types import SimpleNamespace

        calls.append((cfg.name, cfg.total_steps, resume, overwrite))
        return SimpleNamespace(eval_rows=[{"eval/answer_reward": 0.5}], grpo_steps=cfg.total_steps,
                               steps=cfg.total_steps, optimizer_steps=1, skipped_steps=0, elapsed_s=0.0, run_dir=Path("runs") / cfg.name)

    monkeypatch.setattr(hw3lib.grpo.loop, "train", fake)
    monkeypatch.setattr(hw3lib.sft.loop, "train_sft", fake)
    return calls


def test_second_train_after_the_workbook_says_how_to_go_on(runs, no_training):
    """`make workbook` left runs/grpo_smoke finished at its last step; `hw3 train --profile smoke --steps 10`."""
    from hw3lib.core.lifecycle import open_run
    from hw3lib.grpo.config import GRPOConfig

    workbook = GRPOConfig.for_profile("smoke")
    run_dir = write_run(workbook, workbook.n_grpo_steps)
    assert open_run(run_dir, workbook, False, False)[1] is not None  # the same command is reused, not refused
    done = workbook.n_grpo_steps

    line = assert_one_line_error(run("train", "--profile", "smoke", "--steps", "10"), "grpo_smoke",
                                 f"GRPO step {done} of {done}", "--steps 10 is fewer",
                                 f"--resume --steps N with N > {done} extends it", "--name grpo_smoke_2",
                                 "--overwrite deletes")
    assert "--resume continues" not in line  # a plain --resume cannot work here: not offered
    assert_one_line_error(run("train", "--profile", "smoke", "--steps", "10", "--resume"),
                          f"N > {done}")  # what open_run refuses as "past n_grpo_steps"
    line = assert_one_line_error(run("train", "--profile", "smoke", "--steps", str(done + 20)),
                                 f"--resume continues it to GRPO step {done + 20}")
    assert no_training == []  # every refusal came before training

    # Following the advice works: extend, a new name, start over.
    for args in (["--resume", "--steps", str(done + 20)], ["--steps", "10", "--name", "grpo_smoke_2"],
                 ["--steps", "10", "--overwrite"]):
        result = run("train", "--profile", "smoke", *args)
        assert result.exit_code == 0, result.output
    assert [call[1:] for call in no_training] == [(done + 20, True, False), (10, False, False), (10, False, True)]
    assert_one_line_error(run("train", "--profile", "smoke", "--resume", "--overwrite"), "contradict")


def test_second_train_with_other_settings_or_no_checkpoint(runs, no_training):
    from hw3lib.grpo.config import GRPOConfig
    from hw3lib.core.lifecycle import run_folder

    cfg = GRPOConfig.for_profile("smoke", name="lr_run", n_grpo_steps=6)
    write_run(cfg, 3, validated=False)
    assert_one_line_error(run("train", "--profile", "smoke", "--name", "lr_run", "--steps", "6", "--set",
                              "learning_rate=0.5"), "made with other settings", "learning_rate: saved",
                          "vs now 0.5", "--name lr_run_2", "--overwrite")
    assert_one_line_error(run("train", "--profile", "smoke", "--name", "lr_run", "--steps", "6", "--resume",
                              "--set", "learning_rate=0.5"), "made with other settings")
    assert_one_line_error(run("train", "--profile", "smoke", "--name", "lr_run", "--steps", "6"),
                          "GRPO step 3 of 6", "--resume continues it to GRPO step 6")

    unvalidated = GRPOConfig.for_profile("smoke", name="cut", n_grpo_steps=4)  # Ctrl-C in its last validation
    write_run(unvalidated, 4, validated=False)
    assert_one_line_error(run("train", "--profile", "smoke", "--name", "cut", "--steps", "4"),
                          "GRPO step 4 of 4 without its last validation: --resume finishes it")

    early = run_folder(cfg.replace(name="early"))
    early.mkdir(parents=True)
    (early / "metrics.jsonl").write_text('{"grpo_step": 1, "train/loss": 0.3}\n')
    line = assert_one_line_error(run("train", "--profile", "smoke", "--name", "early"), "before its first checkpoint",
                                 "--name early_2", "--overwrite")
    assert "--resume" not in line and no_training == []


def test_second_sft_says_how_to_go_on(runs, no_training):
    from hw3lib.sft.config import SFTConfig

    cfg = SFTConfig.for_profile("smoke", name="sft_cli", n_sft_steps=4)
    write_run(cfg, 4)
    # SFT's length is part of its settings (its schedule decays over n_sft_steps): no extending, other settings
    assert_one_line_error(run("sft", "--profile", "smoke", "--name", "sft_cli", "--steps", "2"), "step 4 of 4",
                          "n_sft_steps: saved 4 vs now 2", "--name sft_cli_2", "--overwrite")
    assert_one_line_error(run("expert-iteration", "--profile", "smoke", "--name", "sft_cli"),  # another command's run
                          "holds a run of another command (its checkpoint counts steps)", "--name sft_cli_2")
    assert no_training == []
    assert run("sft", "--profile", "smoke", "--name", "sft_cli", "--steps", "4").exit_code == 0  # reused


# ---- sweep, kissing, doctor, the top level -----------------------------------------------------------------------

def test_sweep_kissing_doctor_and_top_level(tmp_path):
    assert_one_line_error(run("sweep", "no_such_grid"), "unknown grid 'no_such_grid'", "all", code=2)
    assert_one_line_error(run("sweep", "all", "--seed", "1"), "--seed", code=2)
    assert_one_line_error(run("kissing", "verify", str(tmp_path / "p.json")), "no such points file", code=2)
    (tmp_path / "p.json").write_text("[[1, 2,")
    assert_one_line_error(run("kissing", "verify", str(tmp_path / "p.json")), "not valid JSON", code=2)
    assert_one_line_error(run("kissing", "evaluate", str(tmp_path / "x.py")), "no such program file", code=2)
    assert_one_line_error(run("kissing", "discover", "--loop", "greedy", "--out", str(tmp_path / "d")),
                          "choose one of", code=2)
    assert_one_line_error(run("doctor", "--no-such-flag"), "No such option", code=2)
    assert_one_line_error(run("--bogus"), "No such option: --bogus", code=2)
    assert_one_line_error(run("evaluate"), "No such command", code=2)
    assert run("--help").exit_code == 0 and "--debug" in run("--help").output
    assert "Usage" in run("kissing").output  # a group without a command still shows its help


# ---- bugs keep their traceback; --debug / HW3_DEBUG show the project's too ---------------------------------------

def test_debug_flag_and_variable_keep_the_exception(broken_math, tmp_path):
    from hw3lib.core.io import DataFileError

    args = ["eval", "--dataset", "math", "--math-path", str(broken_math), "--out", str(tmp_path / "o")]
    assert isinstance(run("--debug", *args).exception, DataFileError)
    assert isinstance(run(*args, HW3_DEBUG="1").exception, DataFileError)
    assert run(*args, HW3_DEBUG="0").stderr.startswith("error: ")


def test_real_bugs_keep_their_traceback(tmp_path, monkeypatch):
    import hw3lib.tasks.data

    def broken_loader(*args, **kwargs):
        return {}["problem"]  # a KeyError: a bug, not a refusal

    monkeypatch.setattr(hw3lib.tasks.data, "load_math", broken_loader)
    result = run("eval", "--dataset", "math", "--math-path", "x.jsonl", "--out", str(tmp_path / "o"))
    assert isinstance(result.exception, KeyError) and "error:" not in result.output

    def library_value_error(*args, **kwargs):
        return json.loads("{")  # a ValueError raised inside a library: a bug too

    monkeypatch.setattr(hw3lib.tasks.data, "load_math", library_value_error)
    result = run("eval", "--dataset", "math", "--math-path", "x.jsonl", "--out", str(tmp_path / "o"))
    assert isinstance(result.exception, json.JSONDecodeError) and "error:" not in result.output


def test_which_exceptions_are_the_projects():
    from hw3lib.core.runs import RunExistsError
    from hw3lib.evaluation.evaluate import RunMismatchError
    from hw3lib.tasks.course_grader import grader_agreement
    from hw3lib.tasks.data import load_gsm8k

    with pytest.raises(ValueError) as checked:  # hw3lib's own `raise ValueError(...)`: a refusal
        load_gsm8k("nosuch")
    assert is_project_error(checked.value)
    with pytest.raises(ValueError) as builtin:  # float("x") on a line of hw3lib that is no `raise`: a bug
        grader_agreement([("text", "1")], ours=lambda r, t: {"reward": "x"}, theirs=lambda r, t: {"reward": 0.0})
    assert not is_project_error(builtin.value)
    assert is_project_error(RunMismatchError("differs")) and is_project_error(RunExistsError("there"))
    assert not is_project_error(ValueError("made here, in a test"))  # never raised: no traceback to check
    assert not is_project_error(KeyError("x")) and not is_project_error(RuntimeError("x"))
    assert one_line("a\nb\n\nc") == "a b c"
    long = "\n".join(["grid x exited with status 1; the end of x.log:"] + ["log " * 40] * 40 + ["Fix the cause."])
    assert one_line(long).startswith("grid x exited") and one_line(long).endswith("Fix the cause.")
    assert "40 lines" in one_line(long) and "\n" not in one_line(long)


# ---- the installed `hw3` script, as a shell runs it --------------------------------------------------------------

def hw3(*args: str, **env: str) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("hw3")
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "hw3lib.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, **env})


def test_the_hw3_script_prints_one_line_and_debug_the_traceback(broken_math, tmp_path):
    args = ("eval", "--dataset", "math", "--math-path", str(broken_math), "--out", str(tmp_path / "o"))
    plain = hw3(*args)
    assert plain.returncode == 1 and plain.stdout == "", plain
    assert plain.stderr.splitlines() == [plain.stderr.strip()] and plain.stderr.startswith(f"error: {broken_math}:2:")
    for debug in (hw3("--debug", *args), hw3(*args, HW3_DEBUG="1")):
        assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
        assert debug.stderr.strip().splitlines()[-1].startswith("hw3lib.core.io.DataFileError: ")
        assert "╭" not in debug.stderr  # Python's own traceback, not typer's boxed one


def test_the_hw3_script_shows_a_bugs_traceback(tmp_path):
    program = ("import sys, hw3lib.tasks.data as data\n"
               "data.load_math = lambda *a, **k: {}['problem']\n"
               "from hw3lib.cli import app\n"
               "sys.argv[0] = 'hw3'\n"
               "app()\n")
    bug = subprocess.run([sys.executable, "-c", program, "eval", "--dataset", "math", "--math-path", "x.jsonl",
                          "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert bug.returncode == 1 and "Traceback (most recent call last)" in bug.stderr
    assert bug.stderr.strip().splitlines()[-1] == "KeyError: 'problem'" and "error:" not in bug.stderr
