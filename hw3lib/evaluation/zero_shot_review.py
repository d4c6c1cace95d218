"""The zero-shot failures inspected: is each one the model's fault or the parser's? (course problem 1)

`review_zero_shot(run_dir, k=10, seed=0)` reads a finished `hw3lib.evaluation.evaluate.evaluate` run, draws
up to `k` samples (seeded, `sample_by_category`) from each failure category -- format 0 (answer 0)
and format 1 / answer 0 -- and classifies each by one rule:

- format 0: **parser** when the response holds the whole R1-Zero structure, a `</think>` followed by
  an `<answer>...</answer>` pair, but not with exactly one space between `</think>` and `<answer>` (the
  strict check rejects a response a reader would accept); else **model**, with what is missing
  (the token budget ran out; no `</think>`; no `<answer>` after the last one; `<answer>` never
  closed; other text between the two tags).
- format 1, answer 0: **parser** when the answer's last number (or its `\\boxed{}`) equals the gold
  answer, yet the grader rejected the text around it; else **model** (a wrong or missing number).

A couple of samples of the correct category (format 1, answer 1) are kept as examples too
(`correct_examples`). The verdict per category is the majority (`mixed` on a tie); `write_zero_shot_review` saves the
review to `figures/zero_shot_review.json`, which the writeup's zero-shot section prints.
"""

from __future__ import annotations

import re
from pathlib import Path

from hw3lib.core.writeup_keys import write_result
from hw3lib.evaluation.evaluate import load_run, sample_by_category
from hw3lib.tasks.rewards import answers_equivalent, extract_question_only_answer, extract_r1_zero_answer

REVIEWED = {"unformatted": "format 0, answer 0", "wrong_answer": "format 1, answer 0"}
# The R1-Zero structure with any separator between the tags (the strict check wants exactly one space).
_LOOSE_STRUCTURE = re.compile(r"</think>(\s*)<answer>(.*?)</answer>", re.DOTALL)
TAIL_CHARS = 160  # how much of each response's end the review keeps (where the tags are)
CORRECT_SHOWN = 2  # examples of the "correct" category shown beside the failures (the handout asks for every category)


def classify_unformatted(text: str, finish_reason: str) -> tuple[str, str]:
    """(`parser` | `model`, why) for a response with format reward 0."""
    loose = _LOOSE_STRUCTURE.search(text)
    if loose is not None:
        return "parser", (f"complete `</think>` ... `<answer>...</answer>` structure, but separated by "
                          f"{loose.group(1)!r} instead of one space")
    if finish_reason == "length":
        return "model", "hit the token budget before closing the answer"
    if "</think>" not in text:
        return "model", "never closed `<think>`"
    after = text.rsplit("</think>", 1)[1]
    if "<answer>" not in after:
        return "model", f"no `<answer>` after the last `</think>` (wrote {after.strip()[:40]!r})"
    if "</answer>" not in after.split("<answer>", 1)[1]:
        return "model", "`<answer>` opened after `</think>` but never closed"
    return "model", f"text between `</think>` and `<answer>`: {after.split('<answer>', 1)[0].strip()[:40]!r}"


def classify_wrong_answer(text: str, gold: str) -> tuple[str, str]:
    """(`parser` | `model`, why) for a formatted response with answer reward 0."""
    answer = extract_r1_zero_answer(text)
    if answer is None:
        return "model", "empty answer (or an unclosed \\boxed{)"
    last = extract_question_only_answer(answer)
    if last is not None and answers_equivalent(last, gold):
        return "parser", f"the answer {answer[:60]!r} ends in the gold value {gold!r}; the grader rejected the text"
    return "model", f"answered {answer[:60]!r}, gold {gold!r}"


def review_zero_shot(run_dir: str | Path, k: int = 10, seed: int = 0) -> dict:
    """Classify up to `k` samples of each failure category of the run in `run_dir` (see the module doc)."""
    if k < 1:
        raise ValueError(f"k={k}: inspect at least one example per category")
    rows, summary = load_run(run_dir)
    picked = sample_by_category(rows, k=k, seed=seed)
    examples, verdicts = [], {}
    for category, label in REVIEWED.items():
        tally = {"parser": 0, "model": 0}
        for item in picked[category]:
            if category == "unformatted":
                fault, why = classify_unformatted(item["text"], item["finish_reason"])
            else:
                fault, why = classify_wrong_answer(item["text"], item["ground_truth"])
            tally[fault] += 1
            examples.append({"category": category, "index": item["index"], "sample": item["sample"],
                             "ground_truth": item["ground_truth"], "fault": fault, "why": why,
                             "finish_reason": item["finish_reason"], "tail": item["text"][-TAIL_CHARS:]})
        verdict = ("none inspected" if not picked[category] else "model" if tally["model"] > tally["parser"]
                   else "parser" if tally["parser"] > tally["model"] else "mixed")
        verdicts[category] = {"label": label, "members": summary["counts"][category],
                              "inspected": len(picked[category]), **tally, "verdict": verdict}
    return {"profile": summary.get("profile"), "model": summary.get("model"), "dataset": summary.get("dataset"),
            "k": k, "seed": seed, "inspected": len(examples), "categories": verdicts, "examples": examples,
            "correct_examples": [{key: item[key] for key in ("index", "sample", "ground_truth")}
                                 | {"tail": item["text"][-TAIL_CHARS:]} for item in picked["correct"][:CORRECT_SHOWN]],
            "reading": _reading(verdicts)}


def _reading(verdicts: dict) -> str:
    parts = []
    for category, v in verdicts.items():
        if not v["inspected"]:
            parts.append(f"no {v['label']} samples to inspect")
            continue
        parts.append(f"of {v['inspected']} inspected {v['label']} samples (of {v['members']}), {v['model']} are the "
                     f"model's failures and {v['parser']} the parser's: verdict {v['verdict']}")
    return "; ".join(parts) + "."


def write_zero_shot_review(run_dir: str | Path, k: int = 10, seed: int = 0) -> dict:
    """`review_zero_shot`, saved atomically to `figures/zero_shot_review.json` (for the writeup)."""
    review = review_zero_shot(run_dir, k=k, seed=seed)
    write_result("zero_shot_review", review)
    return review
