"""Validation during training: one sampled (or greedy) response per held-out question, scored.

Shared by the GRPO loop, the SFT runner and expert iteration, so their `eval/...` curves are
measured the same way: the prompt's template, stop strings and reward (hw3lib.tasks.prompt_table),
`eval_temperature` (the courses' 1.0 in the full profile; 0, greedy, in smoke), top-p 1 and the
run's `sampling_max_tokens`. `validation_label(cfg)` says which, for every plot and sentence that
reports a validation number.

`save_validation` writes what a validation leaves in the run folder: the first `n_eval_samples_saved` rollouts
in full (`samples/<name>.jsonl`, for reading) and every question's 0/1 answer reward in one compact line
(`samples/<name>.outcomes.json`: a few hundred bytes), so that two runs validated on the same questions are
compared paired, question by question (hw3lib.core.stats.paired), instead of as two independent samples.
`read_outcomes` reads them back (or, for a run made before the outcomes file, from the saved rollouts when they
hold every question); `run_outcomes` / `paired_outcomes` those of a run's (`RunResult`'s) validations.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from hw3lib.core.io import atomic_write_json, atomic_write_jsonl, read_json, read_jsonl
from hw3lib.core.runs import SAMPLES_DIR
from hw3lib.core.stats import question_outcomes
from hw3lib.generation import SamplingConfig
from hw3lib.tasks.data import format_prompt
from hw3lib.tasks.prompt_table import stop_strings_for


def validation_label(cfg) -> str:
    """How a run's validation responses were sampled, e.g. `greedy, 32 tokens` or
    `sampled at T=1.0, top-p 1.0, 1024 tokens` (the courses' setting)."""
    if cfg.eval_temperature == 0:
        return f"greedy, {cfg.sampling_max_tokens} tokens"
    return f"sampled at T={cfg.eval_temperature:g}, top-p 1.0, {cfg.sampling_max_tokens} tokens"


def validate(engine, records: Sequence[dict], cfg, reward_fn, seed: int) -> tuple[dict, list[dict]]:
    """Validation metrics (`eval/...`) on `records` and every question's rollout, scored, in order (the caller
    keeps what it saves: `save_validation`).

    `cfg` is any run config with `prompt`, `eval_temperature` and `sampling_max_tokens` (GRPOConfig, SFTConfig,
    EIConfig).
    """
    prompts = [format_prompt(cfg.prompt, record["question"]) for record in records]
    sampling = SamplingConfig(n=1, temperature=cfg.eval_temperature, top_p=1.0, max_tokens=cfg.sampling_max_tokens,
                              min_tokens=0, stop=stop_strings_for(cfg.prompt), include_stop_str_in_output=True,
                              seed=seed)
    samples = [group[0] for group in engine.generate(prompts, sampling)]
    scores = [reward_fn(sample.text, record["gold"]) for sample, record in zip(samples, records)]
    metrics = {
        "eval/reward": float(np.mean([s["reward"] for s in scores])),
        "eval/format_reward": float(np.mean([s["format_reward"] for s in scores])),
        "eval/answer_reward": float(np.mean([s["answer_reward"] for s in scores])),
        "eval/response_length": float(np.mean([len(s.token_ids) for s in samples])),
        "eval/truncation_rate": float(np.mean([s.finish_reason == "length" for s in samples])),
        "eval/n": len(records),
        "eval/temperature": float(cfg.eval_temperature),  # 0: greedy; so every logged number says how it was sampled
    }
    examples = [{"question": record["question"], "gold": record["gold"], "response": sample.text,
                 "finish_reason": sample.finish_reason, **score}
                for record, sample, score in zip(records, samples, scores)]
    return metrics, examples


OUTCOMES_SUFFIX = ".outcomes.json"


@dataclass(frozen=True)
class Outcomes:
    """One validation's per-question 0/1 answer rewards, in the questions' order, and a digest of those
    questions: two validations are paired only when their digests agree (same questions, same order)."""

    answer_rewards: tuple[int, ...]
    questions: str


def questions_digest(questions: Sequence[str]) -> str:
    """16 hex digits naming a list of questions in its order."""
    return hashlib.sha256("\x1f".join(questions).encode()).hexdigest()[:16]


def save_validation(run_dir: str | Path, name: str, examples: Sequence[dict], n_saved: int) -> None:
    """A validation's files under `run_dir/samples/`: its first `n_saved` rollouts (`<name>.jsonl`) and every
    question's outcome (`<name>.outcomes.json`); `examples` are all of the validation's rollouts, in order."""
    folder = Path(run_dir) / SAMPLES_DIR
    atomic_write_jsonl(folder / f"{name}.jsonl", list(examples[:n_saved]))
    rewards = [s["answer_reward"] for s in examples]
    if all(r in (0, 1) for r in rewards):  # a graded 0/1 reward: the paired test applies
        atomic_write_json(folder / f"{name}{OUTCOMES_SUFFIX}", {
            "n": len(rewards), "questions": questions_digest([s["question"] for s in examples]),
            "answer_reward": "".join(str(int(r)) for r in rewards)})


def read_outcomes(run_dir: str | Path, name: str, n: int) -> Outcomes | None:
    """The outcomes of validation `name` (e.g. `step_0050`) of `n` questions: from its outcomes file, else from its
    saved rollouts when they hold all `n` questions; None where neither does (the comparison is then unpaired)."""
    folder = Path(run_dir) / SAMPLES_DIR
    found = folder / f"{name}{OUTCOMES_SUFFIX}"
    if found.is_file():
        stored = read_json(found)
        if stored["n"] == n:
            return Outcomes(tuple(int(c) for c in stored["answer_reward"]), stored["questions"])
        return None
    if not (folder / f"{name}.jsonl").is_file():
        return None
    samples = read_jsonl(folder / f"{name}.jsonl")
    outcomes = question_outcomes(samples, n)
    if outcomes is None:
        return None
    return Outcomes(tuple(outcomes), questions_digest([s.get("question", "") for s in samples]))


def run_outcomes(run, which: int) -> Outcomes | None:
    """The run's per-question outcomes at its validation `which` (-1: last, 0: first), or None where they were
    not kept (`hw3lib.evaluation.validate.read_outcomes`)."""
    if run.run_dir is None or not run.eval_rows:
        return None
    row = run.eval_rows[which]
    if "grpo_step" not in row:
        return None
    return read_outcomes(run.run_dir, f"step_{row['grpo_step']:04d}", row.get("eval/n", -1))


def paired_outcomes(a, b, which_a: int = -1,
                    which_b: int = -1) -> tuple[list[int] | None, list[int] | None]:
    """Both runs' per-question outcomes when both kept every question's outcome of the same validation set, in
    the same order (else (None, None): the comparison is unpaired)."""
    found_a, found_b = run_outcomes(a, which_a), run_outcomes(b, which_b)
    if found_a is None or found_b is None or found_a.questions != found_b.questions:
        return None, None
    return list(found_a.answer_rewards), list(found_b.answer_rewards)
