"""The course's own grader as an option, and how often it agrees with ours.

hw3lib grades with its own reward functions (`hw3lib.tasks.rewards`), which are stricter than the
course's `drgrpo_grader.py` in documented ways. We do not ship the course's file; a student who has
it sets

    HW3_COURSE_GRADER=path/to/drgrpo_grader.py

and every loop that looks its reward up in the prompt table (evaluation, GRPO, SFT validation,
expert iteration) grades with the function of the same name from that file
(`r1_zero_reward_fn`, `question_only_reward_fn`). `hw3 eval` then also re-grades its generations
with ours and writes `grader_agreement.json`: how many samples the two graders score differently,
in which direction, with examples (`grader_agreement`).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable, Sequence
from pathlib import Path

COURSE_GRADER_ENV = "HW3_COURSE_GRADER"
# Prompts whose reward the course's grader file defines (the keyword task is ours alone).
COURSE_GRADED_PROMPTS = ("r1_zero", "question_only")


class CourseGraderError(RuntimeError):
    """The course grader named by $HW3_COURSE_GRADER cannot be used (missing, broken, or incomplete)."""


def course_grader_path() -> Path | None:
    """The file $HW3_COURSE_GRADER names, or None when it is unset or empty."""
    value = os.environ.get(COURSE_GRADER_ENV, "").strip()
    return Path(value).expanduser() if value else None


@functools.lru_cache(maxsize=4)
def load_course_grader(path: str | os.PathLike):
    """Import the course's grader file as a module (once per path)."""
    path = Path(path)
    if not path.is_file():
        raise CourseGraderError(f"{COURSE_GRADER_ENV}={path}: no such file; point it at your copy of the course's "
                                "grader (drgrpo_grader.py) or unset it to use hw3lib's grader")
    spec = importlib.util.spec_from_file_location(f"hw3_course_grader_{abs(hash(str(path.resolve())))}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the student's file: say which file failed and why, in one line
        raise CourseGraderError(f"{COURSE_GRADER_ENV}={path} failed to import: {type(exc).__name__}: {exc} "
                                "(install what it imports, e.g. math-verify, sympy, pylatexenc)") from exc
    return module


def course_reward_fn(prompt: str, path: str | os.PathLike | None = None) -> Callable[[str, str], dict] | None:
    """The course's reward function for `prompt` from the grader file at `path` (default: $HW3_COURSE_GRADER).

    None when no grader file is set or the prompt is not one the course grades. The returned
    function is named `course:<name>`, so evaluation outputs made with it are never mistaken for
    ones made with ours (their fingerprint differs).
    """
    path = Path(path) if path is not None else course_grader_path()
    if path is None or prompt not in COURSE_GRADED_PROMPTS:
        return None
    name = f"{prompt}_reward_fn"
    function = getattr(load_course_grader(path), name, None)
    if not callable(function):
        raise CourseGraderError(f"{COURSE_GRADER_ENV}={path} defines no function {name}(response, ground_truth): "
                                "is it the course's drgrpo_grader.py?")

    def graded(response: str, ground_truth: str) -> dict[str, float]:
        scores = function(response, ground_truth)
        return {key: float(scores[key]) for key in ("reward", "format_reward", "answer_reward")}

    graded.__name__ = graded.__qualname__ = f"course:{name}"
    return graded


def grader_agreement(samples: Sequence[tuple[str, str]], ours: Callable[[str, str], dict],
                     theirs: Callable[[str, str], dict], max_examples: int = 5) -> dict:
    """Grade each `(response, ground_truth)` with both graders and count where their rewards differ.

    Returns `{"samples", "agree", "differ", "ours_only_correct", "theirs_only_correct", "agreement",
    "examples": [...]}` where the examples (at most `max_examples` per direction) hold the response,
    the ground truth and both rewards.
    """
    counts = {"ours_only_correct": 0, "theirs_only_correct": 0}
    examples = {key: [] for key in counts}
    for response, truth in samples:
        our_reward, their_reward = float(ours(response, truth)["reward"]), float(theirs(response, truth)["reward"])
        if our_reward == their_reward:
            continue
        direction = "ours_only_correct" if our_reward > their_reward else "theirs_only_correct"
        counts[direction] += 1
        if len(examples[direction]) < max_examples:
            examples[direction].append({"response": response, "ground_truth": truth, "ours": our_reward,
                                        "theirs": their_reward})
    differ = sum(counts.values())
    return {"samples": len(samples), "agree": len(samples) - differ, "differ": differ, **counts,
            "agreement": (len(samples) - differ) / len(samples) if samples else float("nan"),
            "examples": examples["ours_only_correct"] + examples["theirs_only_correct"]}
