"""The writeup's inputs: one JSON per section in `figures/`, its keys declared here, once.

Each `figures/<name>.json` the writeup reads is written by `write_result(name, values)`, which refuses
a result that lacks a key declared for it in `RESULT_KEYS`. The values come from hw3lib functions that
the notebooks call and show (`zero_shot_result`, `review_zero_shot`, `best_of_n_result`,
`grpo_units_result`, `run_summary`, `keyword_result`, `async_result`, `report_grid`, `sft_ei_reading`,
`kissing_result`). `typst_reads(writeup_dir)` parses the Typst sources (`writeup/*.typ`) for the keys
they read (`R.<name>.<key>`, or through a `#let x = R.<name>` alias), so tests/core/test_writeup_keys.py
fails when the writeup reads a key nobody declares. (In `core` so that every layer can write its result.)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from hw3lib.core import io  # io.figures_dir looked up at call time (tests point it at a temporary folder)

GRID_KEYS = ("profile", "model", "dataset", "grid", "n_grpo_steps", "n_eval", "reference", "question", "rows",
             "figures", "reading", "answers", "trends", "trend_sentences", "stability", "rationale", "selection",
             "settings")
"""Every grid's `grid_<name>.json` (hw3lib.experiments.report.report_grid), read by writeup/grids.typ."""

RESULT_KEYS: dict[str, tuple[str, ...]] = {
    "zero_shot": ("profile", "model", "num_examples", "n", "num_samples", "accuracy", "format_rate", "mean_reward",
                  "mean_response_tokens", "truncation_rate", "count_correct", "count_wrong_answer",
                  "count_unformatted", "temperature", "top_p", "max_tokens", "seed", "dataset", "settings"),
    "zero_shot_review": ("profile", "model", "inspected", "k", "seed", "categories", "reading", "examples",
                         "correct_examples"),
    "best_of_n": ("profile", "model", "task", "max_tokens", "temperature", "num_prompts", "n_samples", "N",
                  "pass_at_n_first", "pass_at_k_unbiased", "best_at_n", "maj_at_n", "gap_pass_first_minus_best",
                  "gap_pass_unbiased_minus_best", "misses", "solving_or_recognizing", "settings"),
    "grpo_units": ("length_normalization_example", "clip_example", "tiny_reinforce"),
    "train_loop": ("profile", "model", "dataset", "loss_type", "grpo_steps", "optimizer_steps", "skipped_steps",
                   "eval_answer_reward_start", "eval_answer_reward_end", "eval_answer_reward_rise",
                   "eval_answer_reward_rise_noise", "eval_answer_reward_rise_words", "wall_clock_s",
                   "example_rollouts", "settings"),
    "keyword": ("profile", "model", "data_source", "n_train", "n_validation_used", "sft_steps", "grpo_steps", "steps",
                "eval_reward", "eval_reward_start", "eval_reward_end", "train_reward_first", "train_reward_last",
                "minutes", "max_logprob_mismatch", "examples", "reward_fn", "hacking_rows", "hacking_reading",
                "hacking_examples", "settings"),
    "async_grpo": ("profile", "model", "dataset", "n_grpo_steps", "rollout_batch_size", "rows", "reading", "settings"),
    "sft_ei": ("profile", "dataset", "sft_model", "ei_model", "sft_steps", "sft_batch_size", "n_eval", "validation",
               "trace_noise", "noise_band", "pool_size", "filtered_size", "sft_rows", "ei_rows", "sft_reading",
               "ei_reading",
               "grpo_run", "grpo_start", "grpo_end", "grpo_steps", "grpo_rollouts", "grpo_optimizer_steps",
               "thresholds", "settings"),
    "seed_band": ("profile", "seeds", "runs", "n_grpo_steps", "n_eval", "values", "mean", "sd", "band", "multiplier"),
    "kissing": ("source", "llm_label", "model", "starter_points", "d11_roots_points", "code_582_points",
                "local_search_points", "local_search_iterations", "llm_iterations", "agentic_best_score",
                "best_of_n_best_score", "hybrid_best_score", "program_py_score", "deliverable"),
}


def settings_of(profile: str, model: str, dataset: str, n_examples: int, temperature: float, top_p: float,
                max_tokens: int, course: str | None = None) -> dict:
    """What every writeup section states beside its numbers: course, profile, model, data, number of
    examples and sampling settings (`text`: one line of them; greedy decoding is called greedy)."""
    from hw3lib.core.course import get_course

    crs = get_course(course)
    # a local folder (a cached data set or model) is shown relative to the project or the cache, never absolute
    model, dataset = (io.shown_path(v) if os.path.isabs(str(v)) else str(v) for v in (model, dataset))
    sampling = ("greedy (temperature 0)" if temperature == 0 else f"temperature {temperature:g}, top-p {top_p:g}")
    text = (f"course {crs.title} (`{crs.name}`), profile `{profile}`, model `{model}`, data `{dataset}` "
            f"({n_examples} examples), sampling {sampling}, at most {max_tokens} tokens")
    return {"course": crs.name, "profile": profile, "model": str(model), "dataset": str(dataset),
            "n_examples": n_examples, "temperature": temperature, "top_p": top_p, "max_tokens": max_tokens,
            "text": text}


def config_settings(cfg, model: str | None = None) -> dict:
    """`settings_of` for a run config's validation (GRPO, SFT, EI): its model, data, held-out questions and
    validation sampling (`eval_temperature`, top-p 1, `sampling_max_tokens`)."""
    return settings_of(cfg.profile, model or cfg.model, cfg.dataset, cfg.n_eval_examples, cfg.eval_temperature, 1.0,
                       cfg.sampling_max_tokens)


def declared_keys(name: str) -> tuple[str, ...]:
    """The keys result `name` must hold (`grid_<grid>` results share GRID_KEYS)."""
    if name.startswith("grid_"):
        return GRID_KEYS
    if name not in RESULT_KEYS:
        raise KeyError(f"unknown writeup result {name!r}: declare its keys in hw3lib.workbook.results.RESULT_KEYS")
    return RESULT_KEYS[name]


def write_result(name: str, values: dict, folder: Path | None = None) -> Path:
    """Write `figures/<name>.json` (atomically) after checking it holds every declared key; returns the path."""
    missing = [key for key in declared_keys(name) if key not in values]
    if missing:
        raise ValueError(f"result {name!r} lacks {', '.join(missing)}: the writeup reads these keys "
                         "(hw3lib.workbook.results.RESULT_KEYS); its producer must write them")
    return io.atomic_write_json((folder or io.figures_dir()) / f"{name}.json", values)


_ALIAS = re.compile(r"#let\s+(\w+)\s*=\s*R\.(\w+)(\.\w+)?")
_GRID_ALIAS = re.compile(r"#let\s+(\w+)\s*=\s*R\.at\(key\)")
_DIRECT = re.compile(r"\bR\.(\w+)\.(\w+)")


def typst_reads(writeup_dir: Path) -> dict[str, set[str]]:
    """`{result name: top-level keys the .typ files read}`; `grid_*` for writeup/grids.typ's `R.at(key)`.

    Reads through an alias of a nested value (`#let g = R.grpo_units.length_normalization_example`)
    count as reading that nested key only."""
    reads: dict[str, set[str]] = {}
    for path in sorted(Path(writeup_dir).glob("*.typ")):
        text = path.read_text(encoding="utf-8")
        aliases = {alias: (name, nested) for alias, name, nested in _ALIAS.findall(text)}
        aliases.update({alias: ("grid_*", "") for alias in _GRID_ALIAS.findall(text)})
        for name, key in _DIRECT.findall(text):
            reads.setdefault(name, set()).add(key)
        for alias, (name, nested) in aliases.items():
            keys = reads.setdefault(name, set())
            if nested:
                keys.add(nested[1:])
                continue
            # `x.key` not preceded by a name or a member access (`..x.key`, Typst's spread, counts)
            keys.update(key for key in re.findall(rf"(?<!\w)(?<!\w\.){alias}\.(\w+)", text) if key != "at")
            keys.update(re.findall(rf"(?<!\w)(?<!\w\.){alias}\.at\(\"(\w+)\"", text))
    return reads


def undeclared_reads(writeup_dir: Path) -> list[str]:
    """`name.key` for every key the writeup reads that RESULT_KEYS (or GRID_KEYS) does not declare."""
    bad = []
    for name, keys in sorted(typst_reads(writeup_dir).items()):
        declared = GRID_KEYS if name == "grid_*" else RESULT_KEYS.get(name, ())
        bad += [f"{name}.{key}" for key in sorted(keys) if key not in declared]
    return bad
