"""Best-of-N metrics over N samples per prompt: pass@N (two estimators), Best@N and maj@N.

All metrics are pure functions of per-sample results (`SampleResults`: correctness, mean token
log-probability and extracted answer of each of the n samples of each prompt), so the N = 16
samples are generated once (`hw3lib.evaluation.evaluate.evaluate` with `n=16`) and every N <= n is read
off the same samples:

- `pass@N`, the course's definition: a prompt counts if at least one of its FIRST N samples is
  correct (`pass_at_n_first`). It depends on the sample order, so it is a single noisy draw.
- `pass@k`, the unbiased estimator of Chen et al. (2021), from all n samples with c correct:
  pass@k = 1 - C(n-c, k) / C(n, k), computed in product form
  1 - prod_{i=n-c+1..n} (1 - k/i) so no huge binomials are formed (`pass_at_k_unbiased`).
- `Best@N`: among the first N samples, keep the one with the highest mean token log-probability
  (the policy's own confidence; no reward model) and score only that one. Ties go to the lowest
  sample index; a missing or NaN log-probability ranks below every real one. Best@1 == pass@1.
- `maj@N`: majority vote over the extracted answers of the first N samples after
  `normalize_answer` ("18", "18.0", "$18" and "18.00" vote together, as do "1,800" and
  "1800"; the grader's normalisation, so votes merge exactly when the grader would call them
  equal numbers). Answers are extracted as the prompt's reward function extracts them
  (`ANSWER_EXTRACTORS`). Samples without an answer (unformatted responses, None) do not vote; a
  prompt where no sample votes counts as wrong. Ties between equally large groups go to the group
  whose first member comes first. The winning group is scored by the grader's verdict
  (`correct`) on its first member, so maj@N uses the same answer checker as every other metric
  instead of a second string comparison with the gold answer.
- Best@N's misses split in two (`best_at_n_misses`): a correct sample was among the N but not
  picked (the model can solve but not recognize), or none was (it cannot solve).

`plot_best_of_n` draws all four curves against N (log2 axis) and saves PDF + PNG to `figures/`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hw3lib.core.stats import Noise, noise_words, unpaired_band
from hw3lib.core.io import save_figure
from hw3lib.core.writeup_keys import settings_of
from hw3lib.tasks.rewards import extract_question_only_answer, extract_r1_zero_answer, parse_plain_number
from hw3lib.tasks.rewards import normalize_answer as grader_normalize

DEFAULT_NS = (1, 4, 8, 16)


@dataclass(frozen=True)
class SampleResults:
    """Per-sample results of P prompts with n samples each, in generation order."""

    correct: np.ndarray
    """[P, n] bool: the sample's answer reward is 1."""
    mean_logprob: np.ndarray
    """[P, n] float: mean token log-probability of the sample (NaN when unknown)."""
    answers: list[list[str | None]]
    """P lists of n extracted answers (None when the response has no answer to extract)."""

    def __post_init__(self) -> None:
        if self.correct.ndim != 2:
            raise ValueError(f"correct must be [prompts, samples], got shape {self.correct.shape}")
        if self.mean_logprob.shape != self.correct.shape:
            raise ValueError(f"mean_logprob shape {self.mean_logprob.shape} != correct shape {self.correct.shape}")
        if len(self.answers) != self.correct.shape[0] or any(len(a) != self.correct.shape[1] for a in self.answers):
            raise ValueError(f"answers must be {self.correct.shape[0]} lists of {self.correct.shape[1]} answers")

    @property
    def n(self) -> int:
        return int(self.correct.shape[1])


def pass_at_k_unbiased(n: int, c: int, k: int) -> float:
    """Chen et al. (2021): probability that a random k-subset of n samples (c correct) has a correct one.

    1 - C(n-c, k)/C(n, k) = 1 - prod_{i=n-c+1}^{n} (1 - k/i): a product of c factors in (0, 1],
    stable for any n (the binomials themselves overflow floats for n in the hundreds).
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:  # every k-subset must contain a correct sample
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def pass_at_n_first(correct: np.ndarray, n: int) -> float:
    """Course definition: fraction of prompts with a correct sample among their first `n`."""
    _check_n(correct, n)
    return float(correct[:, :n].any(axis=1).mean())


def pass_at_k_unbiased_mean(correct: np.ndarray, k: int) -> float:
    """Unbiased pass@k averaged over prompts, each from all of its samples."""
    _check_n(correct, k)
    n_samples = correct.shape[1]
    num_correct = correct.sum(axis=1)  # [P]
    return float(np.mean([pass_at_k_unbiased(n_samples, int(c), k) for c in num_correct]))


def best_at_n(correct: np.ndarray, mean_logprob: np.ndarray, n: int) -> float:
    """Fraction of prompts whose most confident sample (highest mean logprob) among the first `n` is correct."""
    _check_n(correct, n)
    scores = np.nan_to_num(mean_logprob[:, :n].astype(np.float64), nan=-np.inf)  # [P, n]
    # np.argmax returns the first maximum, which is the lowest-index tie-break we document.
    chosen = np.argmax(scores, axis=1)  # [P]
    return float(correct[np.arange(correct.shape[0]), chosen].mean())


def best_at_n_misses(correct: np.ndarray, mean_logprob: np.ndarray, n: int) -> dict:
    """Why Best@N missed: the handout's question, is the model failing to *solve* or to *recognize*?

    Of the prompts whose Best@N pick is wrong, `recognize` counts those with a correct sample among
    the first `n` (the model solved it but its confidence picked a wrong sample) and `solve` those
    with none (no selector could have helped). `recognize + solve` = prompts * (1 - Best@N).
    """
    _check_n(correct, n)
    scores = np.nan_to_num(mean_logprob[:, :n].astype(np.float64), nan=-np.inf)  # [P, n]
    picked_right = correct[np.arange(correct.shape[0]), np.argmax(scores, axis=1)]  # [P]
    solved = correct[:, :n].any(axis=1)  # [P]
    return {"recognize": int((~picked_right & solved).sum()), "solve": int((~solved).sum())}


def majority_choice(answers: Sequence[str | None]) -> int | None:
    """Index of the sample whose normalized answer wins the vote (its group's first member), or None."""
    votes: dict[str, list[int]] = {}
    for index, answer in enumerate(answers):
        key = normalize_answer(answer)
        if key is not None:
            votes.setdefault(key, []).append(index)
    if not votes:
        return None
    # Largest group; among equal groups the one whose first member is earliest.
    winner = min(votes.values(), key=lambda members: (-len(members), members[0]))
    return winner[0]


def majority_at_n(correct: np.ndarray, answers: Sequence[Sequence[str | None]], n: int) -> float:
    """Fraction of prompts whose majority answer among the first `n` samples is correct."""
    _check_n(correct, n)
    hits = 0
    for row, prompt_answers in enumerate(answers):
        choice = majority_choice(prompt_answers[:n])
        hits += int(choice is not None and bool(correct[row, choice]))
    return hits / correct.shape[0]


def normalize_answer(answer: str | None) -> str | None:
    """Canonical form of an answer for voting, using the grader's own normalisation (hw3lib.tasks.rewards).

    Presentation is stripped as the grader strips it (`\\boxed{}`, `$`, `\\text{}`, units, a
    trailing period, thousands separators); plain numbers become exact fractions, so "18", "18.0",
    "$18" and "18 dollars" all give "18" and "0.5", "1/2" and "\\frac{1}{2}" give "1/2". Other
    answers keep their normalised text (case kept: x and X differ in maths). None or an empty
    answer gives None (such samples do not vote).
    """
    if answer is None or not answer.strip():
        return None
    text = grader_normalize(answer)
    value = parse_plain_number(text)
    if value is not None:
        return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    return text or None


ANSWER_EXTRACTORS = {"r1_zero": extract_r1_zero_answer, "question_only": extract_question_only_answer}
"""Answer extraction matching each prompt's reward function (hw3lib.tasks.rewards), by prompt name."""


def results_from_rows(rows: Sequence[dict], extract_answer: Callable[[str], str | None] | str = "r1_zero"
                      ) -> SampleResults:
    """Per-sample results from `generations.jsonl` rows (see hw3lib.evaluation.evaluate).

    Correct means `answer_reward == 1`; `extract_answer(text)` (a function, or a prompt name in
    `ANSWER_EXTRACTORS`) gives the answer that votes.
    Every row must have the same number of generations.
    """
    if not rows:
        raise ValueError("no rows: run the evaluation first (hw3lib.evaluation.evaluate.evaluate)")
    if isinstance(extract_answer, str):
        if extract_answer not in ANSWER_EXTRACTORS:
            raise ValueError(f"no answer extractor for prompt {extract_answer!r}: choose one of "
                             f"{', '.join(ANSWER_EXTRACTORS)} or pass a function")
        extract_answer = ANSWER_EXTRACTORS[extract_answer]
    n = len(rows[0]["generations"])
    correct, logprobs, answers = [], [], []
    for number, row in enumerate(rows):
        generations = row["generations"]
        if len(generations) != n:
            raise ValueError(f"row {number} (example {row.get('index')}) has {len(generations)} generations, "
                             f"row 0 has {n}: Best-of-N needs the same n for every prompt")
        correct.append([float(g["answer_reward"]) == 1.0 for g in generations])
        logprobs.append([math.nan if g.get("mean_logprob") is None else float(g["mean_logprob"]) for g in generations])
        answers.append([extract_answer(g["text"]) for g in generations])
    return SampleResults(np.array(correct, dtype=bool), np.array(logprobs, dtype=np.float64), answers)


def best_of_n_metrics(results: SampleResults, ns: Sequence[int] = DEFAULT_NS) -> dict:
    """All four metrics for each N in `ns` (each N <= n), as lists aligned with `ns`."""
    ns = [int(n) for n in ns]
    for n in ns:
        _check_n(results.correct, n)
    return {
        "num_prompts": int(results.correct.shape[0]),
        "n_samples": results.n,
        "N": ns,
        "pass_at_n_first": [pass_at_n_first(results.correct, n) for n in ns],
        "pass_at_k_unbiased": [pass_at_k_unbiased_mean(results.correct, n) for n in ns],
        "best_at_n": [best_at_n(results.correct, results.mean_logprob, n) for n in ns],
        "maj_at_n": [majority_at_n(results.correct, results.answers, n) for n in ns],
        "misses": [best_at_n_misses(results.correct, results.mean_logprob, n) for n in ns],
    }


def flatten_metrics(metrics: dict) -> dict:
    """One scalar per metric and N (`pass_at_4_first`, `pass_at_4_unbiased`, `best_at_4`, `maj_at_4`)."""
    flat = {"num_prompts": metrics["num_prompts"], "n_samples": metrics["n_samples"]}
    for i, n in enumerate(metrics["N"]):
        flat[f"pass_at_{n}_first"] = metrics["pass_at_n_first"][i]
        flat[f"pass_at_{n}_unbiased"] = metrics["pass_at_k_unbiased"][i]
        flat[f"best_at_{n}"] = metrics["best_at_n"][i]
        flat[f"maj_at_{n}"] = metrics["maj_at_n"][i]
    return flat


def best_of_n_result(metrics: dict, profile: str, model: str, task: str, sampling) -> dict:
    """The writeup's `best_of_n` result (hw3lib.core.writeup_keys): the metrics per N, one scalar per metric
    and N, and the gaps pass@N - Best@N at the largest N (first-N and unbiased estimators)."""
    top = len(metrics["N"]) - 1
    return {"profile": profile, "model": model, "task": task, "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature, **flatten_metrics(metrics),
            "gap_pass_first_minus_best": metrics["pass_at_n_first"][top] - metrics["best_at_n"][top],
            "gap_pass_unbiased_minus_best": metrics["pass_at_k_unbiased"][top] - metrics["best_at_n"][top],
            **{key: metrics[key] for key in ("N", "pass_at_n_first", "pass_at_k_unbiased", "best_at_n", "maj_at_n")},
            "misses": metrics["misses"], "solving_or_recognizing": solving_or_recognizing(metrics),
            "settings": settings_of(profile, model, task, metrics["num_prompts"], sampling.temperature, sampling.top_p,
                                    sampling.max_tokens)}


def solving_or_recognizing(metrics: dict) -> str:
    """The handout's question answered from the counts at the largest N: where Best@N's misses come from."""
    top, prompts = len(metrics["N"]) - 1, metrics["num_prompts"]
    n, misses = metrics["N"][top], metrics["misses"][top]
    wrong = misses["recognize"] + misses["solve"]
    if wrong == 0:
        return f"Best@{n} was right on all {prompts} questions: nothing to recognize or solve better."
    share = misses["recognize"] / wrong
    verdict = ("mostly recognizing: the model often produced a correct response and then preferred a wrong one"
               if share > 0.5 else "mostly solving: for most misses no correct response was among the samples"
               if share < 0.5 else "half recognizing, half solving")
    return (f"Best@{n} missed {wrong} of {prompts} questions: on {misses['recognize']} of them a correct response "
            f"was among the {n} samples (a recognizing failure), on {misses['solve']} none was (a solving "
            f"failure), so the bottleneck here is {verdict}.")


def pass_at_1_check(zero_shot_summary: dict, metrics: dict) -> dict:
    """The handout's sanity check: pass@1 of the Best-of-N samples against problem 1's zero-shot accuracy.

    Both estimate the same probability (one sample per question, same model, prompt and sampling),
    from independent draws (no per-question pairing: the zero-shot run drew its own samples), so they agree up
    to noise: the check passes when their difference is within the unpaired band of two proportions
    (`hw3lib.core.stats.unpaired_band`, 2 s.e.), where m counts the zero-shot samples and k the Best-of-N samples
    (all n per question; the unbiased pass@1 is their mean). Returns both numbers, the band, the verdict and
    `within_noise`.
    """
    zero_shot, pass_1 = float(zero_shot_summary["accuracy"]), float(metrics["pass_at_k_unbiased"][0])
    m, k = int(zero_shot_summary["num_samples"]), metrics["num_prompts"] * metrics["n_samples"]
    noise = Noise(pass_1 - zero_shot, unpaired_band(pass_1, k, zero_shot, m))
    return {"zero_shot_accuracy": zero_shot, "pass_at_1": pass_1, "zero_shot_samples": m, "best_of_n_samples": k,
            "difference": noise.diff, "band": noise.band, "verdict": noise.verdict.value,
            "within_noise": not noise.beyond, "text": noise_words(noise)}


def plot_best_of_n(metrics: dict, path_stem: str | Path = "best_of_n", title: str | None = None):
    """Plot pass@N (both estimators), Best@N and maj@N against N; save `<stem>.pdf` and `<stem>.png`.

    A bare stem goes to `figures/`; a path with folders is used as given. Returns the figure.
    """
    import matplotlib.pyplot as plt

    ns = metrics["N"]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    curves = (
        ("pass_at_n_first", "pass@N (first N samples)", "o-"),
        ("pass_at_k_unbiased", "pass@N (unbiased, all n)", "s--"),
        ("best_at_n", "Best@N (max mean logprob)", "^-"),
        ("maj_at_n", "maj@N (majority vote)", "d-"),
    )
    for key, label, style in curves:
        ax.plot(ns, metrics[key], style, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("N (samples per prompt)")
    ax.set_ylabel("fraction of prompts")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    ax.set_title(title or f"Best-of-N on {metrics['num_prompts']} prompts, n = {metrics['n_samples']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path_stem, dpi=150)
    return fig


def _check_n(correct: np.ndarray, n: int) -> None:
    if not 1 <= n <= correct.shape[1]:
        raise ValueError(f"N={n} is outside 1..{correct.shape[1]} (the number of samples per prompt)")
