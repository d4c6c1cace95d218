"""The SFT runner (hw3lib.sft.loop): traces from hand-made records, trace selection, batch order,
exact resume, the run-folder rules, log_generations, and a tiny run that learns."""

from __future__ import annotations

import json

import pytest
import torch

from hw3lib.tasks.rewards import r1_zero_reward_fn
from hw3lib.core.runs import RunExistsError, latest_checkpoint
from hw3lib.sft.config import SFTConfig
from hw3lib.sft.loop import (batch_rows, build_traces, load_generations, reasoning_trace, select_traces,
                              strip_calculator_annotations, trace_summary, train_sft)

GSM8K_RECORD = {
    "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                "How many clips did Natalia sell altogether in April and May?",
    "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
              "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
    "gold": "72",
}


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))


def tiny_cfg(name: str, **overrides) -> SFTConfig:
    settings = dict(name=name, n_examples=64, n_sft_steps=4, train_batch_size=8, gradient_accumulation_steps=2,
                    eval_every=2, n_eval_examples=8, sampling_max_tokens=12, checkpoint_every=2,
                    generation_batch_size=64)
    return SFTConfig.for_profile("smoke", **{**settings, **overrides})


def weights(run_dir) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(latest_checkpoint(run_dir) / "policy" / "model.safetensors"))


def without_timings(rows):
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


# ---- traces ------------------------------------------------------------------------------------------

def test_gsm8k_trace_strips_annotations_and_grades_correct():
    assert strip_calculator_annotations("48/2 = <<48/2=24>>24 clips") == "48/2 = 24 clips"
    trace = reasoning_trace(GSM8K_RECORD)
    assert trace == (" Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April "
                     "and May. </think> <answer> 72 </answer>")
    assert "<<" not in trace and "####" not in trace
    assert r1_zero_reward_fn(trace, "72")["reward"] == 1.0
    [row] = build_traces([GSM8K_RECORD])
    assert row["prompt"].endswith("<think>") and GSM8K_RECORD["question"] in row["prompt"]
    assert (row["prompt"] + row["response"]).endswith("<think> Natalia sold 48/2 = 24 clips in May.\n"
                                                      "Natalia sold 48+24 = 72 clips altogether in April and May. "
                                                      "</think> <answer> 72 </answer>")


def test_math_trace_from_a_problem_solution_jsonl(tmp_path):
    from hw3lib.tasks.data import load_task

    path = tmp_path / "math.jsonl"
    rows = [{"problem": f"What is $1/{k}$ of $2$?", "solution": f"Half of... $2 \\cdot \\frac{{1}}{{{k}}} = "
             f"\\boxed{{\\frac{{2}}{{{k}}}}}$."} for k in (3, 5, 7)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train, held_out = load_task(SFTConfig.for_profile("smoke", dataset=str(path), n_eval_examples=1))
    [trace] = build_traces(train[:1])
    assert trace["gold"] == "\\frac{2}{3}"
    assert trace["response"] == (" Half of... $2 \\cdot \\frac{1}{3} = \\boxed{\\frac{2}{3}}$. "
                                 "</think> <answer> \\frac{2}{3} </answer>")
    assert r1_zero_reward_fn(trace["response"], trace["gold"])["reward"] == 1.0
    assert len(held_out) == 1


def test_arithmetic_trace_is_the_warm_start_target():
    from hw3lib.tasks.data import arithmetic_sft_target, make_arithmetic_problems

    for record in make_arithmetic_problems(5, seed=3):
        assert reasoning_trace(record) == arithmetic_sft_target(record)


def test_noise_filter_and_nested_subsets():
    from hw3lib.tasks.data import make_arithmetic_problems

    traces = build_traces(make_arithmetic_problems(200, seed=1))
    cfg = SFTConfig.for_profile("smoke", trace_noise=0.25, filter_correct=True)
    kept, info = select_traces(traces, cfg, r1_zero_reward_fn)
    assert info["n_pool"] == 200 and 20 < info["n_noisy"] < 80  # a seeded quarter
    assert info["n_after_filter"] == 200 - info["n_noisy"] == info["n_used"] == len(kept)
    assert not any(t["noisy"] for t in kept)  # the filter removed exactly the corrupted answers
    unfiltered, info = select_traces(traces, cfg.replace(filter_correct=False), r1_zero_reward_fn)
    assert info["n_used"] == 200 and sum(t["noisy"] for t in unfiltered) == info["n_noisy"]
    small, _ = select_traces(traces, cfg.replace(n_examples=16), r1_zero_reward_fn)
    large, _ = select_traces(traces, cfg.replace(n_examples=64), r1_zero_reward_fn)
    assert large[:16] == small  # sizes are nested
    with pytest.raises(ValueError, match="n_examples=500 but only"):
        select_traces(traces, cfg.replace(n_examples=500), r1_zero_reward_fn)


def test_batches_cover_every_trace_once_per_epoch():
    rows = [r for step in range(1, 6) for r in batch_rows(seed=0, step=step, n_traces=10, batch_size=4)]
    assert sorted(rows[:10]) == list(range(10)) and sorted(rows[10:20]) == list(range(10))
    assert batch_rows(0, 3, 10, 4) == rows[8:12]  # a pure function of the step: what a resume relies on


def test_config_checks_name_the_values():
    with pytest.raises(ValueError, match="train_batch_size=10 must be divisible by gradient_accumulation_steps=4"):
        SFTConfig(train_batch_size=10, gradient_accumulation_steps=4)
    with pytest.raises(ValueError, match="prompt='question_only'"):
        SFTConfig(prompt="question_only")
    with pytest.raises(ValueError, match="unknown settings"):
        SFTConfig.for_profile("smoke", n_steps=3)
    cfg = SFTConfig.for_profile("smoke")
    assert SFTConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert (cfg.model, cfg.dataset, cfg.dtype) == ("tiny", "arithmetic", "float32")


# ---- runs ----------------------------------------------------------------------------------------------

def test_resume_after_ctrl_c_gives_the_straight_run_bit_for_bit():
    straight = train_sft(tiny_cfg("straight"))

    def interrupt(info):
        if info["step"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_sft(tiny_cfg("split"), callback=interrupt)
    split = train_sft(tiny_cfg("split"), resume=True)
    a, b = weights(straight.run_dir), weights(split.run_dir)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert without_timings(split.metrics) == without_timings(straight.metrics)
    assert [row["step"] for row in split.eval_rows] == [0, 2, 4]


def test_a_finished_run_is_reused_and_another_refused():
    first = train_sft(tiny_cfg("reuse", n_sft_steps=2))
    again = train_sft(tiny_cfg("reuse", n_sft_steps=2))  # finished, same settings: read back
    assert again.metrics == first.metrics and again.steps == 2
    with pytest.raises(RunExistsError, match="learning_rate"):
        train_sft(tiny_cfg("reuse", n_sft_steps=2, learning_rate=1e-4))
    assert (first.run_dir / "metrics.jsonl").exists()  # nothing deleted


def test_log_generations_records_every_validation_response():
    result = train_sft(tiny_cfg("generations", n_sft_steps=2))
    rows = load_generations(result.run_dir, "step_0002")
    assert len(rows) == 8
    assert set(rows[0]) >= {"prompt", "response", "ground_truth", "reward", "format_reward", "answer_reward",
                            "mean_token_entropy", "response_length"}
    assert all(r["mean_token_entropy"] > 0 and r["response_length"] > 0 for r in rows)
    final = result.eval_rows[-1]
    assert final["eval/entropy"] == pytest.approx(sum(r["mean_token_entropy"] for r in rows) / 8, rel=1e-6)
    incorrect = [r["response_length"] for r in rows if r["reward"] != 1.0]
    assert final["eval/response_length_incorrect"] == pytest.approx(sum(incorrect) / len(incorrect))
    assert trace_summary(result.run_dir)["n_used"] == 64


def test_a_short_sft_run_learns_the_format_and_some_answers():
    """From the untrained tiny model: the loss falls and held-out format and answer rewards rise."""
    result = train_sft(tiny_cfg("learns", n_examples=None, n_sft_steps=40, train_batch_size=32,
                                gradient_accumulation_steps=1, eval_every=40, n_eval_examples=64,
                                sampling_max_tokens=24, checkpoint_every=0))
    losses = [row["train/loss"] for row in result.train_rows]
    assert losses[-1] < 0.25 * losses[0]
    start, end = result.eval_rows[0], result.eval_rows[-1]
    assert start["eval/format_reward"] == 0.0 and end["eval/format_reward"] >= 0.8
    assert end["eval/answer_reward"] > start["eval/answer_reward"]


def test_cli_sft_two_steps():
    from typer.testing import CliRunner

    from hw3lib.cli import app

    out = CliRunner().invoke(app, ["sft", "--profile", "smoke", "--steps", "2", "--examples", "16", "--name", "cli",
                                   "--set", "n_eval_examples=4", "--set", "sampling_max_tokens=8"])
    assert out.exit_code == 0, out.output
    assert '"eval/answer_reward"' in out.output and "2 SFT steps" in out.output
    again = CliRunner().invoke(app, ["sft", "--profile", "smoke", "--steps", "2", "--examples", "32", "--name", "cli",
                                     "--set", "n_eval_examples=4", "--set", "sampling_max_tokens=8"])
    assert again.exit_code == 1 and "n_examples" in again.output


# ---- notebook 05's reading (hw3lib.sft.experiments) ------------------------------------------------------

def test_versus_pairs_two_runs_over_the_generations_they_wrote(tmp_path):
    from hw3lib.core.lifecycle import RunResult
    from hw3lib.core.stats import unpaired_band
    from hw3lib.sft.experiments import validation_outcomes, versus
    from hw3lib.sft.loop import GENERATIONS_DIR

    def run(label, outcomes):
        folder = tmp_path / label / GENERATIONS_DIR
        folder.mkdir(parents=True)
        for step, answers in ((0, [0] * len(outcomes)), (10, outcomes)):
            (folder / f"step_{step:04d}.jsonl").write_text("".join(
                json.dumps({"prompt": f"{label}q{i}" if label == "c" else f"q{i}", "answer_reward": a}) + "\n"
                for i, a in enumerate(answers)))
        evals = [{"step": s, "eval/answer_reward": sum(a) / len(a), "eval/n": len(a)}
                 for s, a in ((0, [0] * len(outcomes)), (10, outcomes))]
        return RunResult(tmp_path / label, SFTConfig.for_profile("smoke"), evals, 10, 10, 0, 1.0, None)

    a, b = run("a", [1, 1, 1, 0]), run("b", [1, 1, 0, 0])
    assert validation_outcomes(a) == [1, 1, 1, 0] and validation_outcomes(a, 0) == [0, 0, 0, 0]
    # One question only a got right: diff 0.25, var(d) = 1/4 - 1/16 = 0.1875, band 2 sqrt(0.1875 / 4) = 0.4330.
    gap = versus(a, b)
    assert gap.paired and gap.diff == 0.25 and gap.band == pytest.approx(0.43301, abs=1e-5) and gap.p_value == 1.0
    rise = versus(a, a, -1, 0)  # a run against its own start: 3 of 4 questions gained, none lost
    assert rise.paired and rise.diff == 0.75 and rise.p_value == pytest.approx(0.25)
    other = versus(a, run("c", [1, 1, 0, 0]))  # validated on other prompts: not paired
    assert not other.paired and other.band == pytest.approx(unpaired_band(0.75, 4, 0.5, 4))


def test_sft_ei_reading_computes_its_verdicts_from_the_runs(tmp_path):
    from hw3lib.sft.config import EIConfig
    from hw3lib.sft.experiments import sft_ei_reading
    from hw3lib.core.lifecycle import RunResult
    from hw3lib.sft.loop import TRACES_FILE

    def sft_run(label, used, end, nll, loss):
        run_dir = tmp_path / label
        run_dir.mkdir()
        (run_dir / TRACES_FILE).write_text(json.dumps({"n_used": used, "n_noisy_used": 0}))
        evals = [{"step": s, "eval/answer_reward": a, "eval/trace_nll": 1.0 if s == 0 else nll, "eval/entropy": 0.1,
                  "eval/n": 200} for s, a in ((0, 0.0), (10, end))]
        return RunResult(run_dir, SFTConfig.for_profile("smoke", n_sft_steps=10), [*evals, {"train/loss": loss}], 10, 10,
                         0, 6.0, None)

    sft = {"128": sft_run("128", 128, 0.40, 0.30, 0.01), "all": sft_run("all", 4096, 0.60, 0.05, 0.10),
           "filtered": sft_run("filtered", 3000, 0.62, 0.04, 0.05)}
    rounds = [{"round": r, "step": 5 * r, "rollouts": 64 * r, "ei/kept": 10, "ei/kept_fraction": f,
               "train/reward": f, "train/entropy": 0.3} for r, f in ((1, 0.2), (2, 0.5))]
    evals = [{"round": r, "step": 5 * r, "rollouts": 64 * r, "eval/answer_reward": a, "eval/n": 200}
             for r, a in ((0, 0.3), (2, 0.32))]
    ei = {"G8": RunResult(tmp_path, EIConfig.for_profile("smoke", questions_per_round=64), rounds + evals, 2, 10, 0, 6.0,
                          None)}
    sft_text, ei_text, summary = sft_ei_reading(sft, ei, section_seconds=12.0)
    # The fake runs wrote no generations: every band is unpaired (Agresti-Caffo). 128 -> all: 0.6 vs 0.4 on 200
    # each, 2 sqrt((121/202)(81/202)/202 + (81/202)(121/202)/202) = 0.0975: +20 points beyond it.
    found = summary["findings"]
    assert found["sft"]["size_gap"]["diff"] == pytest.approx(0.2) and not found["sft"]["size_gap"]["paired"]
    assert found["sft"]["size_gap"]["band"] == pytest.approx(0.09753, abs=1e-5)
    assert found["sft"]["size_gap"]["verdict"] == "beyond noise" and found["sft"]["nll_falls"]
    assert found["sft"]["filter_gap"]["verdict"] == "within noise" and found["sft"]["memorizes"]
    assert "+20.0 points, beyond noise, band ±9.8 points" in sft_text
    assert "falls with every doubling" in sft_text and "memorize" in sft_text
    assert "+2.0 points, within noise, band ±9.7 points" in sft_text
    # EI validation 0.30 -> 0.32 (within a 9.2-point band); sampled reward 20% -> 50% over 64 questions per round:
    # 2 sqrt((33/66)(33/66)/66 + (13.8/66)(52.2/66)/66) = 15.9 points, counted in questions, not rollouts.
    assert found["ei"]["G8"]["validation"]["verdict"] == "within noise"
    assert found["ei"]["G8"]["train"]["band"] == pytest.approx(0.15866, abs=1e-5)
    assert "(+2.0 points, within noise, band ±9.2 points)" in ei_text
    assert "20.0% -> 50.0% (+30.0 points, beyond noise, band ±15.9 points, counted in questions)" in ei_text
    assert summary["noise_band"] == pytest.approx(0.09753, abs=1e-5) and summary["pool_size"] == 4096
    assert summary["filtered_size"] == 3000 and summary["section_seconds"] == 12.0 and "grpo_run" not in summary
    # the writeup says how the runs were validated: greedy on the GSM8K course's arithmetic smoke task, sampled as the
    # handout does on the MATH course's (the SFT section used to say "greedy" for both)
    assert summary["validation"] == "greedy, 32 tokens"
    from hw3lib.evaluation.validate import validation_label

    math_sft = SFTConfig.for_profile("smoke", course="math-qwen2.5")
    assert validation_label(math_sft) == "sampled at T=1, top-p 1.0, 96 tokens"
    # EI vs SFT on all traces: 32% vs 60% (-28 points; unpaired band 9.5 points).
    assert found["ei_versus_sft"]["run"] == "G8" and found["ei_versus_sft"]["verdict"] == "beyond noise"
    assert ("Against SFT: the best EI run (G8) ended at 32.0%, below SFT on all 4096 teacher traces (60.0%; "
            "-28.0 points, beyond noise, band ±9.5 points), learning only from 128 rollouts") in ei_text
    assert [(t["value"], t["met"]) for t in summary["thresholds"]] == [(0.60, True), (0.32, True)]
    assert summary["thresholds"][0]["text"] == ("SFT on the full set (run `all`): 60.0% against the handout's 15%: met "
                                                "(the threshold is for the full profile's model; this is the smoke "
                                                "profile).")
