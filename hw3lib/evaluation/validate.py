"""Validation during training: one sampled (or greedy) response per held-out question, scored.

Shared by the GRPO loop, the SFT runner and expert iteration, so their `eval/...` curves are
measured the same way: the prompt's template, stop strings and reward (hw3lib.tasks.prompt_table),
`eval_temperature` (the courses' 1.0 in the full profile; 0, greedy, in smoke), top-p 1 and the
run's `sampling_max_tokens`. `validation_label(cfg)` says which, for every plot and sentence that
reports a validation number.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

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
    """Validation metrics (`eval/...`) on `records` and the first `cfg.n_eval_samples_saved` rollouts.

    `cfg` is any run config with `prompt`, `eval_temperature`, `sampling_max_tokens` and
    `n_eval_samples_saved` (GRPOConfig, SFTConfig, EIConfig).
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
                for record, sample, score in zip(records, samples, scores)][:cfg.n_eval_samples_saved]
    return metrics, examples
