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
are written atomically, then the checkpoint's files are removed; rerunning a finished run with the
same settings reuses it as is (nothing is generated or rewritten; its saved summary is returned),
and a longer example list that starts with the saved examples generates only the new ones.
The summary's `time` covers the call that wrote it (`examples_generated` then, `examples_resumed` reused).

Nothing a user made is deleted implicitly: when `out_dir` holds a finished run or a checkpoint made
with other settings (model, reward function, sampling), other examples or another prompt (a saved
example that differs from, or is missing in, this call's list), `evaluate` changes nothing and raises
`hw3lib.core.runs.RunExistsError` (as `RunMismatchError`) naming the folder, what differs and the choices:
another `out_dir`, or `overwrite=True`, the only path that deletes outputs -- and then only the
files `evaluate` writes (generations.jsonl, summary.json, checkpoint/), never anything else there.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from hw3lib.core.io import atomic_write_json, atomic_write_jsonl, read_jsonl, save_figure
from hw3lib.core.runs import RunExistsError
from hw3lib.core.writeup_keys import settings_of

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


class RunMismatchError(RunExistsError, RuntimeError):
    """`out_dir` holds a run (or checkpoint) that this call would not reuse: a `hw3lib.core.runs.RunExistsError`
    (still a RuntimeError, as it was before that existed)."""


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
             progress: bool = True, overwrite: bool = False) -> dict:
    """Generate `sampling.n` responses per example, score them, and write generations + summary.

    `prompt_template` is a template string or a prompt name for `hw3lib.tasks.data.format_prompt`;
    `reward_fn(response, ground_truth)` returns `reward`, `format_reward` and `answer_reward`.
    `metadata` (e.g. dataset and split) is copied into the summary. Returns the summary dict.
    Outputs already in `out_dir` are resumed or reused when made with the same settings, else refused
    with `RunExistsError`; `overwrite=True` deletes them first (see the module docstring).
    """
    from tqdm.auto import tqdm

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    out_dir = Path(out_dir)
    model_name = model_name or _engine_model_name(engine)
    plan = _plan(reward_fn, examples, prompt_template, sampling, model_name, question_key, answer_key)
    questions, prompts, truths, keys, fingerprint = plan
    if overwrite:
        delete_outputs(out_dir)
    done, saved_summary = _load_existing(out_dir, plan)
    if saved_summary is not None:  # a finished run of exactly these examples and settings: reuse it as is
        return saved_summary
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
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_jsonl(out_dir / GENERATIONS_FILE, rows)
    atomic_write_json(out_dir / SUMMARY_FILE, summary)
    _remove_checkpoint(out_dir)  # every row it held is in generations.jsonl now
    return summary


def check_out_dir(reward_fn: Callable[[str, str], dict], examples: Sequence[dict], prompt_template: str, sampling,
                  out_dir: str | Path, *, model_name: str | None, question_key: str = "question",
                  answer_key: str = "gold") -> int:
    """Raise `RunExistsError` now if `evaluate` with these arguments would refuse `out_dir` (e.g. before
    loading a model); else return how many examples it would reuse. Reads only; changes nothing."""
    plan = _plan(reward_fn, examples, prompt_template, sampling, model_name, question_key, answer_key)
    done, _ = _load_existing(Path(out_dir), plan)
    return sum(key in done for key in plan[3])


def delete_outputs(out_dir: str | Path) -> None:
    """Remove what `evaluate` wrote in `out_dir` (generations.jsonl, summary.json, the checkpoint's
    files) and nothing else -- only ever called for an explicit `overwrite=True`."""
    out_dir = Path(out_dir)
    ours = [out_dir / GENERATIONS_FILE, out_dir / SUMMARY_FILE, out_dir / CHECKPOINT_DIR]
    if not any(path.exists() for path in ours):
        return
    print(f"overwrite=True: deleting the previous evaluation outputs in {out_dir}", flush=True)
    for path in ours[:2]:
        path.unlink(missing_ok=True)
    _remove_checkpoint(out_dir)


def zero_shot_result(summary: dict, profile: str) -> dict:
    """The writeup's `zero_shot` result (hw3lib.core.writeup_keys) from an evaluation's `summary.json`."""
    result = {"profile": profile, **{key: summary[key] for key in (
        "model", "num_examples", "n", "num_samples", "accuracy", "format_rate", "mean_reward",
        "mean_response_tokens", "truncation_rate")}}
    result.update({f"count_{key}": summary["counts"][key] for key, _ in CATEGORIES})
    result.update({key: summary["sampling"][key] for key in ("temperature", "top_p", "max_tokens", "seed")})
    # The questions in words (notebook 01 stores e.g. "generated MATH-format test" as `task`): the MATH course's
    # smoke profile evaluates generated problems, not MATH, though its `dataset` is the course's `math`.
    result["dataset"] = summary.get("task") or summary.get("dataset", "unknown")
    result["settings"] = settings_of(profile, summary["model"], result["dataset"], summary["num_examples"],
                                     result["temperature"], result["top_p"], result["max_tokens"])
    return result


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
                                "(hw3lib.evaluation.evaluate.evaluate or `hw3 eval --out ...`)")
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


def _plan(reward_fn, examples: Sequence[dict], prompt_template: str, sampling, model_name: str | None,
          question_key: str, answer_key: str):
    """Questions, formatted prompts, ground truths, example keys and the settings' fingerprint."""
    from hw3lib.tasks.data import format_prompt

    if len(examples) == 0:
        raise ValueError("no examples to evaluate: check the dataset path and --limit")
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
    return questions, prompts, truths, keys, fingerprint


def _write_chunk(out_dir: Path, fingerprint: dict, rows: list[dict]) -> None:
    folder = out_dir / CHECKPOINT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "meta.json").is_file():
        atomic_write_json(folder / "meta.json", fingerprint)
    number = 1 + max((int(p.stem.split("_")[1]) for p in folder.glob("chunk_*.jsonl")), default=-1)
    atomic_write_jsonl(folder / f"chunk_{number:05d}.jsonl", rows)


def _remove_checkpoint(out_dir: Path) -> None:
    """Remove the checkpoint's own files (meta.json, chunks, their temporary files), then the folder if empty."""
    folder = out_dir / CHECKPOINT_DIR
    if not folder.is_dir():
        return
    for path in [folder / "meta.json", *folder.glob("chunk_*.jsonl"), *folder.glob(".chunk_*.tmp"),
                 *folder.glob(".meta.json.*.tmp")]:
        path.unlink(missing_ok=True)
    try:
        folder.rmdir()
    except OSError:  # it holds files evaluate did not write: leave them
        pass


def _load_existing(out_dir: Path, plan) -> tuple[dict[str, dict], dict | None]:
    """Rows already generated (by key) from a finished run and from checkpoint chunks, after checking
    that they were made with this call's settings and examples (else RunMismatchError); and the saved
    summary when the finished run is exactly this one (same examples, no checkpoint), to reuse as is."""
    questions, prompts, truths, keys, fingerprint = plan
    done: dict[str, dict] = {}
    summary_path, generations_path = out_dir / SUMMARY_FILE, out_dir / GENERATIONS_FILE
    checkpoint = out_dir / CHECKPOINT_DIR
    meta_path = checkpoint / "meta.json"
    chunks = sorted(checkpoint.glob("chunk_*.jsonl")) if checkpoint.is_dir() else []
    if chunks and not meta_path.is_file():
        raise _refuse(out_dir, f"{checkpoint} holds chunk files but no meta.json, so the settings that made "
                               "them are unknown")
    previous_summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    if previous_summary is not None:
        saved = {k: previous_summary.get(k) for k in fingerprint}
        _refuse_differences(out_dir, summary_path, _fingerprint_differences(fingerprint, saved))
    checkpoint_rows = []
    if meta_path.is_file():
        found = json.loads(meta_path.read_text())
        _refuse_differences(out_dir, meta_path, _fingerprint_differences(fingerprint, found))
        checkpoint_rows = [row for path in chunks for row in read_jsonl(path)]
        _refuse_differences(out_dir, checkpoint, _row_differences(checkpoint_rows, questions, prompts, truths))
    finished_rows = None
    if generations_path.is_file():
        if previous_summary is None and not meta_path.is_file():
            raise _refuse(out_dir, f"{generations_path} has no {SUMMARY_FILE} beside it (nor a checkpoint), so "
                                   "the settings that made it are unknown")
        finished_rows = read_jsonl(generations_path)
        _refuse_differences(out_dir, generations_path, _row_differences(finished_rows, questions, prompts, truths))
        done.update((row["key"], row) for row in finished_rows)
    done.update((row["key"], row) for row in checkpoint_rows)
    reusable = (previous_summary is not None and finished_rows is not None and not meta_path.is_file()
                and [row["key"] for row in finished_rows] == keys)
    return done, previous_summary if reusable else None


def _fingerprint_differences(expected: dict, found: dict) -> list[str]:
    """`setting: saved X vs now Y` for each differing setting (sampling field by field)."""
    expected, found = json.loads(json.dumps(expected)), json.loads(json.dumps(found))  # tuples vs lists
    differences = []
    for key in expected:
        now, saved = expected[key], found.get(key)
        if isinstance(now, dict) and isinstance(saved, dict):
            differences += [f"{key}.{field}: saved {saved.get(field)!r} vs now {now.get(field)!r}"
                            for field in sorted(set(now) | set(saved)) if now.get(field) != saved.get(field)]
        elif now != saved:
            differences.append(f"{key}: saved {saved!r} vs now {now!r}")
    return differences


def _row_differences(rows: Sequence[dict], questions: list[str], prompts: list[str], truths: list[str]) -> list[str]:
    """How saved rows disagree with this call's examples (missing examples, questions, prompts, answers)."""
    for row in rows:
        index = row.get("index")
        if not isinstance(index, int) or not 0 <= index < len(prompts):
            return [f"examples: it holds example {index}, but {len(prompts)} examples are given now "
                    "(fewer or other examples would drop its generations)"]
        if row.get("question") != questions[index]:
            return [f"examples: example {index}'s question is saved as {_short(row.get('question'))} but is "
                    f"{_short(questions[index])} now"]
        if row.get("prompt") != prompts[index]:
            return [f"prompt: example {index}'s prompt differs (another prompt template?): saved "
                    f"{_short(row.get('prompt'))} vs now {_short(prompts[index])}"]
        if row.get("ground_truth") != truths[index]:
            return [f"examples: example {index}'s ground truth is saved as {row.get('ground_truth')!r} but is "
                    f"{truths[index]!r} now"]
    return []


def _short(text, limit: int = 60) -> str:
    text = str(text)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _refuse_differences(out_dir: Path, path: Path, differences: list[str]) -> None:
    if differences:
        raise _refuse(out_dir, f"{path} was made with other settings: {'; '.join(differences)}")


def _refuse(out_dir: Path, why: str) -> RunMismatchError:
    return RunMismatchError(
        f"{out_dir} already holds evaluation outputs that this call would not reuse ({why}). Nothing was "
        f"changed. Choose another out_dir (hw3 eval --out) to keep them and evaluate there, or overwrite=True "
        f"(hw3 eval --overwrite) to delete its {GENERATIONS_FILE}, {SUMMARY_FILE} and {CHECKPOINT_DIR}/ and "
        "start over.")
