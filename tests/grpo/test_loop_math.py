"""GRPO on MATH-style data end to end: `hw3lib.tasks.data.load_task` feeds `hw3lib.grpo.loop.train` the
`{"problem", "solution"}` records that evaluation reads, with the solution's last `\\boxed{}` as the
ground truth; and `hw3 train --dataset/--model` builds the matching config.

The run is the smoke profile shrunk to one GRPO step (2 questions x 4 samples, 8-token responses)
on the profile's math model, without the arithmetic warm start.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from hw3lib.core.profile import get_profile
from hw3lib.grpo.config import GRPOConfig

ANSWERS = ["5", "\\frac{1}{2}", "\\sqrt{\\frac{a}{b}}", "-3", "\\{1,2\\}", "\\dfrac{\\pi}{4}", "x^{2}+1",
           "(2,\\frac{3}{4})", "12", "\\text{(C)}", "0.25", "7\\sqrt{2}"]


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("HW3_MATH_MODEL", raising=False)  # the smoke profile's own (tiny) math model


def write_math_jsonl(path: Path) -> Path:
    """12 MATH-style records; some solutions hold an earlier, wrong box before the final one."""
    lines = []
    for i, answer in enumerate(ANSWERS):
        solution = f"We add. ${i}+{i}={2 * i}$, hence $\\boxed{{{answer}}}$."
        if i % 2:
            solution = f"Not $\\boxed{{{i + 100}}}$ but: " + solution
        lines.append(json.dumps({"problem": f"What is ${i}+{i}$ in $\\{{x\\}}$?", "solution": solution}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_one_grpo_step_on_a_math_jsonl(tmp_path, monkeypatch):
    import hw3lib.grpo.loop as train_module
    from hw3lib.core.io import read_jsonl
    from hw3lib.grpo.loop import train

    path = write_math_jsonl(tmp_path / "math.jsonl")
    cfg = GRPOConfig.for_profile("smoke", name="grpo_math", dataset=str(path), n_grpo_steps=1, rollout_batch_size=8,
                                 group_size=4, train_batch_size=8, gradient_accumulation_steps=2,
                                 epochs_per_rollout_batch=1, n_eval_examples=4, eval_every=1, checkpoint_every=1,
                                 warm_start_steps=0, sampling_max_tokens=8, n_eval_samples_saved=4)
    assert cfg.model == get_profile("smoke").math_model  # a MATH dataset trains the profile's math model

    truths = []  # every ground truth the reward function is given: validation, rollouts, validation
    make_reward_fn = train_module.reward_fn_for

    def recording_reward_fn_for(prompt):
        reward_fn = make_reward_fn(prompt)

        def reward(response, ground_truth):
            truths.append(ground_truth)
            return reward_fn(response, ground_truth)
        return reward

    monkeypatch.setattr(train_module, "reward_fn_for", recording_reward_fn_for)
    result = train(cfg)

    assert result.grpo_steps == 1 and result.optimizer_steps == 1
    assert len(result.train_rows) == 1 and math.isfinite(result.train_rows[0]["train/loss"])
    assert [row["grpo_step"] for row in result.eval_rows] == [0, 1]
    assert all(row["eval/n"] == 4 and math.isfinite(row["eval/answer_reward"]) for row in result.eval_rows)
    # The held-out set is the file's last 4 rows; training draws 2 of the first 8, 4 rollouts each.
    held_out, rollouts = ANSWERS[8:], truths[4:-4]
    assert truths[:4] == truths[-4:] == held_out
    assert len(rollouts) == 8 and set(rollouts) <= set(ANSWERS[:8])
    assert all(len(set(rollouts[i:i + 4])) == 1 for i in range(0, 8, 4))  # one question per group
    saved = read_jsonl(result.run_dir / "samples" / "step_0001.jsonl")  # the validation after step 1
    assert [sample["gold"] for sample in saved] == held_out


def fake_train(captured):
    def train(cfg, resume=False, **options):
        captured.append(cfg)
        return SimpleNamespace(eval_rows=[{"eval/answer_reward": 0.0}], grpo_steps=cfg.n_grpo_steps, optimizer_steps=1,
                               skipped_steps=0, elapsed_s=0.0, run_dir=Path("runs") / cfg.name)
    return train


def test_cli_train_dataset_and_model_options(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import hw3lib.grpo.loop
    from hw3lib.cli import app

    captured = []
    monkeypatch.setattr(hw3lib.grpo.loop, "train", fake_train(captured))  # parsing only: no model, no rollouts
    path = write_math_jsonl(tmp_path / "math.jsonl")
    common = ["train", "--profile", "smoke", "--steps", "1", "--name", "cli_math", "--set", "n_eval_examples=4"]
    result = CliRunner().invoke(app, [*common, "--dataset", str(path)])
    assert result.exit_code == 0, result.output
    cfg = captured[-1]
    assert (cfg.dataset, cfg.model, cfg.n_grpo_steps, cfg.name, cfg.n_eval_examples) == (
        str(path), get_profile("smoke").math_model, 1, "cli_math", 4)
    assert "1 GRPO steps" in result.output

    result = CliRunner().invoke(app, [*common, "--dataset", str(path), "--model", "tiny"])
    assert result.exit_code == 0, result.output
    assert (captured[-1].dataset, captured[-1].model) == (str(path), "tiny")
    result = CliRunner().invoke(app, [*common, "--set", f"dataset={path}"])  # --set counts as --dataset
    assert result.exit_code == 0 and captured[-1].model == get_profile("smoke").math_model

    result = CliRunner().invoke(app, [*common, "--dataset", "math.csv"])
    assert result.exit_code != 0 and "dataset='math.csv'" in result.output
    assert len(captured) == 3


def test_cli_train_overwrite_reaches_train_and_refusals_are_one_line_errors(monkeypatch):
    from typer.testing import CliRunner

    import hw3lib.grpo.loop
    from hw3lib.cli import app
    from hw3lib.core.runs import RunExistsError, refuse_existing

    calls = []

    def recording_train(cfg, resume=False, overwrite=False):
        calls.append((cfg.name, resume, overwrite))
        if not (resume or overwrite):
            raise refuse_existing(Path("runs") / cfg.name, "metrics.jsonl and checkpoints/")
        if resume and overwrite:
            raise ValueError("resume=True and overwrite=True contradict each other: pick one")
        return fake_train([])(cfg)

    monkeypatch.setattr(hw3lib.grpo.loop, "train", recording_train)
    common = ["train", "--profile", "smoke", "--steps", "1", "--name", "taken"]
    result = CliRunner().invoke(app, [*common, "--overwrite"])
    assert result.exit_code == 0, result.output
    assert calls[-1] == ("taken", False, True) and "1 GRPO steps" in result.output
    result = CliRunner().invoke(app, [*common, "--resume"])
    assert result.exit_code == 0 and calls[-1] == ("taken", True, False)

    result = CliRunner().invoke(app, common)  # the folder holds a run: refused, no traceback
    assert calls[-1] == ("taken", False, False)
    assert result.exit_code == 1 and not isinstance(result.exception, RunExistsError)
    assert "Traceback" not in result.output
    assert f"error: {Path('runs') / 'taken'} already holds a run" in result.output and "--overwrite" in result.output
    result = CliRunner().invoke(app, [*common, "--resume", "--overwrite"])  # refused before train is called
    assert result.exit_code == 1 and "error: --resume and --overwrite contradict" in result.output
    assert calls[-1] == ("taken", False, False)


def test_build_config_without_options_is_the_profile():
    from hw3lib.grpo.cli import build_config

    assert build_config("smoke") == GRPOConfig.for_profile("smoke")
    assert build_config("full", ["dataset=math"], n_grpo_steps=None).model == get_profile("full").math_model


def test_hw3_eval_on_math_uses_hw3_math_data_and_the_math_model(tmp_path, monkeypatch):
    """`hw3 eval --dataset math` with neither --math-path nor --model: $HW3_MATH_DATA and the profile's
    math_model; it scores the same questions and boxed answers that training reads."""
    from typer.testing import CliRunner

    from hw3lib.cli import app
    from hw3lib.tasks.data import load_task
    from hw3lib.evaluation.evaluate import load_run

    path = write_math_jsonl(tmp_path / "math.jsonl")
    monkeypatch.setenv("HW3_MATH_DATA", str(path))
    out = tmp_path / "eval_math"
    result = CliRunner().invoke(app, ["eval", "--profile", "smoke", "--dataset", "math", "--limit", "3",
                                      "--max-tokens", "4", "--device", "cpu", "--no-progress", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows, summary = load_run(out)
    assert summary["model"] == get_profile("smoke").math_model
    train_records, _ = load_task(GRPOConfig.for_profile("smoke", dataset="math", n_eval_examples=4))
    assert [(row["question"], row["ground_truth"]) for row in rows] == \
        [(record["question"], record["gold"]) for record in train_records[:3]]
