"""Zero-shot evaluation: format prompts, sample, score, and save every generation -- resumably.

`evaluate(engine, reward_fn, examples, prompt_template, sampling, out_dir)` writes to `out_dir`:

- `generations.jsonl`: one row per example (in example order) with its prompt, ground truth and
  all `sampling.n` generations, each with its text, rewards, length in tokens, finish reason
  (`stop` | `eos` | `length`) and mean token log-probability;
- `summary.json`: the counts of the reward categories over ALL samples (so n >= 1 works):
  format 1 & answer 1 (`correct`), format 1 & answer 0 (`wrong_answer`), format 0 & answer 0
  (`unformatted`) and, counted separately because only some reward functions allow it, format 0 &
  answer 1 (`answer_without_format`); accuracy (mean answer reward over all samples), format rate,
  mean reward, mean response length, truncation rate (finish reason `length`), n, the number of
  examples, the sampling settings, the model name and the time spent.

Resuming: examples are processed in chunks of `batch_size` on a fixed grid over the example
list. Each finished chunk is written atomically as one jsonl file under `out_dir/checkpoint/`
(a chunk file is complete or absent, never torn); a rerun
skips every example whose key (example index + hash of its prompt) is already there, so an
interrupted run regenerates only what it had not finished. Each chunk samples with seed
`sampling.seed + <chunk start>`, so a resumed run draws the same samples as an uninterrupted one
(with an engine that seeds each `generate` call, as hw3lib.generation's engines do). The final files
are written atomically, then the checkpoint folder is removed; rerunning a finished run reuses
its `generations.jsonl` and generates nothing. A checkpoint or finished run made with different
settings (sampling, model, reward function) is refused with an error rather than mixed in.
The summary's `time` covers this call only (`examples_generated` now, `examples_resumed` reused).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from hw3lib.io import atomic_write_json, atomic_write_jsonl, read_jsonl, save_figure

# (key, label): reward categories of one sample; the label reads format / answer reward.
CATEGORIES = (
    ("correct", "format 1, answer 1"),
    ("wrong_answer", "format 1, answer 0"),
    ("unformatted", "format 0, answer 0"),
    ("answer_without_format", "format 0, answer 1"),
)
GENERATIONS_FILE = "generations.jsonl"
SUMMARY_FILE = "summary.json"
CHECKPOINT_DIR = "checkpoint"


class RunMismatchError(RuntimeError):
    """`out_dir` holds a run (or checkpoint) made with other settings."""


def category_of(generation: dict) -> str:
    """The reward category of one scored generation (see CATEGORIES)."""
    formatted = float(generation["format_reward"]) == 1.0
    answered = float(generation["answer_reward"]) == 1.0
    if formatted:
        return "correct" if answered else "wrong_answer"
    return "answer_without_format" if answered else "unformatted"


def example_key(index: int, prompt: str) -> str:
    """Identifies an example across runs: its position and a hash of its formatted prompt."""
    return f"{index}-{hashlib.sha256(prompt.encode('utf-8')).hexdigest()[:16]}"


def evaluate(engine, reward_fn: Callable[[str, str], dict], examples: Sequence[dict], prompt_template: str,
             sampling, out_dir: str | Path, *, question_key: str = "question", answer_key: str = "gold",
             batch_size: int = 64, model_name: str | None = None, metadata: dict | None = None,
             progress: bool = True) -> dict:
    """Generate `sampling.n` responses per example, score them, and write generations + summary.

    `prompt_template` is a template string or a prompt name for `hw3lib.data.format_prompt`;
    `reward_fn(response, ground_truth)` returns `reward`, `format_reward` and `answer_reward`.
    `metadata` (e.g. dataset and split) is copied into the summary. Returns the summary dict.
    """
    from tqdm.auto import tqdm

    from hw3lib.data import format_prompt

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if len(examples) == 0:
        raise ValueError("no examples to evaluate: check the dataset path and --limit")
    out_dir = Path(out_dir)
    model_name = model_name or _engine_model_name(engine)
    questions, prompts, truths = [], [], []
    for index, example in enumerate(examples):
        for key in (question_key, answer_key):
            if key not in example:
                raise KeyError(f"example {index} has no {key!r} field (it has {sorted(example)}): "
                               "pass question_key=/answer_key= naming the question and ground-truth fields")
        questions.append(str(example[question_key]))
        prompts.append(format_prompt(prompt_template, questions[-1]))
        truths.append(str(example[answer_key]))
    keys = [example_key(i, p) for i, p in enumerate(prompts)]
    fingerprint = {"model": model_name, "reward_fn": getattr(reward_fn, "__name__", repr(reward_fn)),
                   "sampling": _sampling_dict(sampling)}

    done = _load_finished_rows(out_dir, fingerprint, set(keys))
    resumed = sum(key in done for key in keys)
    started = time.perf_counter()
    generation_s, generated = 0.0, 0
    with tqdm(total=len(keys), initial=resumed, desc="eval", unit="ex", disable=not progress) as bar:
        for start in range(0, len(keys), batch_size):
            pending = [i for i in range(start, min(start + batch_size, len(keys))) if keys[i] not in done]
            if not pending:
                continue
            chunk_seed = None if sampling.seed is None else sampling.seed + start
            chunk_sampling = dataclasses.replace(sampling, seed=chunk_seed)
            tick = time.perf_counter()
            outputs = engine.generate([prompts[i] for i in pending], chunk_sampling)
            seconds = time.perf_counter() - tick
            _check_outputs(outputs, len(pending), sampling.n)
            rows = [_score_row(i, keys[i], questions[i], prompts[i], truths[i], samples, reward_fn)
                    for i, samples in zip(pending, outputs)]
            _write_chunk(out_dir, fingerprint, rows)
            done.update((row["key"], row) for row in rows)
            generation_s += seconds
            generated += len(rows)
            bar.update(len(rows))

    rows = [done[key] for key in keys]
    summary = {
        **(metadata or {}),
        **summarize(rows),
        "model": model_name,
        "reward_fn": fingerprint["reward_fn"],
        "sampling": fingerprint["sampling"],
        "time": {
            "generation_s": round(generation_s, 3),
            "wall_s": round(time.perf_counter() - started, 3),
            "examples_generated": generated,
            "examples_resumed": resumed,
            "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        },
    }
    atomic_write_jsonl(out_dir / GENERATIONS_FILE, rows)
    atomic_write_json(out_dir / SUMMARY_FILE, summary)
    shutil.rmtree(out_dir / CHECKPOINT_DIR, ignore_errors=True)
    return summary


def summarize(rows: Sequence[dict]) -> dict:
    """Category counts and rates over all generations of all rows (pure; no timing)."""
    generations = [g for row in rows for g in row["generations"]]
    if not generations:
        raise ValueError("no generations to summarize")
    total = len(generations)
    counts = Counter(category_of(g) for g in generations)
    n_values = {len(row["generations"]) for row in rows}
    return {
        "num_examples": len(rows),
        "n": n_values.pop() if len(n_values) == 1 else sorted(n_values),
        "num_samples": total,
        "counts": {key: counts.get(key, 0) for key, _ in CATEGORIES},
        "accuracy": sum(float(g["answer_reward"]) for g in generations) / total,
        "format_rate": sum(float(g["format_reward"]) for g in generations) / total,
        "mean_reward": sum(float(g["reward"]) for g in generations) / total,
        "mean_response_tokens": sum(g["num_tokens"] for g in generations) / total,
        "truncation_rate": sum(g["finish_reason"] == "length" for g in generations) / total,
        "finish_reasons": dict(sorted(Counter(g["finish_reason"] for g in generations).items())),
    }


def load_run(out_dir: str | Path) -> tuple[list[dict], dict]:
    """The rows of generations.jsonl and the summary of a finished run."""
    out_dir = Path(out_dir)
    if not (out_dir / SUMMARY_FILE).is_file():
        raise FileNotFoundError(f"{out_dir / SUMMARY_FILE} not found: run the evaluation first "
                                "(hw3lib.evaluation.evaluate or `hw3 eval --out ...`)")
    return read_jsonl(out_dir / GENERATIONS_FILE), json.loads((out_dir / SUMMARY_FILE).read_text())


def flatten(rows: Sequence[dict]) -> list[dict]:
    """One dict per generation: the example's fields beside the generation's, plus its category."""
    flat = []
    for row in rows:
        for sample, generation in enumerate(row["generations"]):
            flat.append({"index": row["index"], "sample": sample, "question": row["question"],
                         "ground_truth": row["ground_truth"], **generation,
                         "category": category_of(generation)})
    return flat


def sample_by_category(rows: Sequence[dict], k: int = 10, seed: int = 0) -> dict[str, list[dict]]:
    """Up to `k` generations drawn at random (seeded) from each category, in example order.

    Every category key is present; a category with fewer than `k` members returns all of them.
    Each category draws from its own seeded generator, so its sample does not depend on the
    sizes of the other categories.
    """
    members: dict[str, list[dict]] = {key: [] for key, _ in CATEGORIES}
    for item in flatten(rows):
        members[item["category"]].append(item)
    picked = {}
    for key, items in members.items():
        rng = random.Random(f"{seed}/{key}")
        chosen = rng.sample(range(len(items)), min(k, len(items)))
        picked[key] = [items[i] for i in sorted(chosen)]
    return picked


def category_table(summary: dict) -> list[dict]:
    """Rows (category, rewards, count, share) for a table of the summary's counts."""
    total = summary["num_samples"]
    return [{"category": key, "format / answer reward": label, "count": summary["counts"][key],
             "share": summary["counts"][key] / total} for key, label in CATEGORIES]


def plot_categories(summary: dict, path_stem: str | Path = "zero_shot_categories", title: str | None = None):
    """Bar chart of the category counts; saves `<stem>.pdf` and `<stem>.png` (bare stem: in figures/)."""
    import matplotlib.pyplot as plt

    table = category_table(summary)
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    bars = ax.bar([f"{r['category']}\n({r['format / answer reward']})" for r in table], [r["count"] for r in table],
                  color=["tab:green", "tab:orange", "tab:red", "tab:purple"])
    ax.bar_label(bars, [f"{r['count']} ({r['share']:.1%})" for r in table], fontsize=8)
    ax.set_ylabel("samples")
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title(title or f"{summary.get('model', '')}: {summary['num_samples']} samples", fontsize=9)
    ax.margins(y=0.15)
    fig.tight_layout()
    save_figure(fig, path_stem, dpi=150)
    return fig


def _score_row(index: int, key: str, question: str, prompt: str, truth: str, samples, reward_fn) -> dict:
    generations = []
    for sample in samples:
        rewards = reward_fn(sample.text, truth)
        generations.append({
            "text": sample.text,
            "reward": float(rewards["reward"]),
            "format_reward": float(rewards["format_reward"]),
            "answer_reward": float(rewards["answer_reward"]),
            "num_tokens": len(sample.token_ids),
            "finish_reason": sample.finish_reason,
            # NaN (no tokens) is not valid JSON: store None, which best_of_n reads back as NaN.
            "mean_logprob": None if not math.isfinite(sample.mean_logprob) else float(sample.mean_logprob),
        })
    return {"index": index, "key": key, "question": question, "prompt": prompt, "ground_truth": truth,
            "generations": generations}


def _check_outputs(outputs, num_prompts: int, n: int) -> None:
    if len(outputs) != num_prompts or any(len(samples) != n for samples in outputs):
        shape = [len(samples) for samples in outputs]
        raise RuntimeError(f"engine returned {len(outputs)} prompts with {shape} samples; expected {num_prompts} "
                           f"prompts with n={n} samples each")


def _sampling_dict(sampling) -> dict:
    values = dataclasses.asdict(sampling)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


def _engine_model_name(engine) -> str | None:
    for attribute in ("model_name", "model_id", "name_or_path"):
        value = getattr(engine, attribute, None)
        if isinstance(value, str):
            return value
    return None


def _write_chunk(out_dir: Path, fingerprint: dict, rows: list[dict]) -> None:
    folder = out_dir / CHECKPOINT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "meta.json").is_file():
        atomic_write_json(folder / "meta.json", fingerprint)
    number = 1 + max((int(p.stem.split("_")[1]) for p in folder.glob("chunk_*.jsonl")), default=-1)
    atomic_write_jsonl(folder / f"chunk_{number:05d}.jsonl", rows)


def _load_finished_rows(out_dir: Path, fingerprint: dict, wanted: set[str]) -> dict[str, dict]:
    """Rows already generated for the wanted keys: from a finished run and from checkpoint chunks."""
    done: dict[str, dict] = {}
    summary_path, checkpoint = out_dir / SUMMARY_FILE, out_dir / CHECKPOINT_DIR
    if summary_path.is_file() and (out_dir / GENERATIONS_FILE).is_file():
        previous = json.loads(summary_path.read_text())
        _check_fingerprint(fingerprint, {k: previous.get(k) for k in fingerprint}, summary_path)
        done.update((row["key"], row) for row in read_jsonl(out_dir / GENERATIONS_FILE) if row["key"] in wanted)
    if (checkpoint / "meta.json").is_file():
        _check_fingerprint(fingerprint, json.loads((checkpoint / "meta.json").read_text()), checkpoint / "meta.json")
        for path in sorted(checkpoint.glob("chunk_*.jsonl")):
            done.update((row["key"], row) for row in read_jsonl(path) if row["key"] in wanted)
    return done


def _check_fingerprint(expected: dict, found: dict, path: Path) -> None:
    found = json.loads(json.dumps(found))  # tuples vs lists: compare as JSON
    differing = sorted(k for k in expected if json.loads(json.dumps(expected[k])) != found.get(k))
    if differing:
        raise RunMismatchError(
            f"{path} was written by a run with different {', '.join(differing)} "
            f"(found {[found.get(k) for k in differing]}, now {[expected[k] for k in differing]}): "
            f"choose another output folder or delete {path.parent} to start over")
