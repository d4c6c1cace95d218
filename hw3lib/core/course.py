"""The course a student follows: which data, model and settings every notebook and run uses.

Three courses share this workbook. One trains Qwen3-0.6B on GSM8K (and adds Best-of-N and the
kissing problem); two train Qwen2.5-Math-1.5B on MATH (and add SFT at several sizes, expert
iteration and a leaderboard; one of them also colocated/async GRPO, KL drift and keyword
inclusion). `get_course` turns a name into a frozen `Course`:

| course | data | full-profile model | smoke (CPU) data |
|---|---|---|---|
| `gsm8k-qwen3` | GSM8K | Qwen/Qwen3-0.6B | GSM8K questions (eval), two-number arithmetic (training) |
| `math-qwen2.5` | MATH (`$HW3_MATH_DATA`) | Qwen/Qwen2.5-Math-1.5B | a generated MATH-format task |

The course is orthogonal to the profile (`smoke`/`full`): notebooks read both from their
`parameters` cell (`course = None`: $HW3_COURSE, else `gsm8k-qwen3`), like the profile.
`sections_to_run` decides which sections a notebook runs: the handout's, and the extras too in the smoke
profile or when asked (`extras = True` in a notebook's parameters cell, or $HW3_EXTRAS=1). The
settings both handouts share (validation sampling, SFT sizes, expert-iteration batch sizes, the
off-policy sweep's length) are the defaults of the configs and grids that use them.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

COURSE_ENV = "HW3_COURSE"
SMOKE_MATH_DATASET = "math-synthetic"
"""The MATH course's smoke data: generated MATH-format problems (hw3lib.tasks.math_synthetic)."""
DEFAULT_COURSE = "gsm8k-qwen3"


@dataclass(frozen=True)
class Course:
    name: str
    title: str
    """One line for notebook headers: the course's data and model."""
    dataset: str
    """The training and evaluation data of the full profile: `gsm8k` or `math` (read from $HW3_MATH_DATA)."""
    uses_math_model: bool
    """True: runs use the profile's `math_model` (Qwen2.5-Math-1.5B in full) instead of its `model`."""
    sections: tuple[str, ...]
    """The workbook sections the course's handout asks for (see `SECTIONS`); the others are extras."""

    def replace(self, **changes) -> "Course":
        return dataclasses.replace(self, **changes)

    def run_data(self, profile: str) -> dict:
        """The dataset settings a run of this course takes in `profile` (what `for_profile` adds).

        Full: the course's dataset. Smoke: nothing for GSM8K (each run's CPU recipe keeps its synthetic
        arithmetic task, with GSM8K-style answers), the generated MATH-format task for MATH.
        """
        if profile == "full":
            return {"dataset": self.dataset}
        return {} if self.dataset == "gsm8k" else {"dataset": SMOKE_MATH_DATASET}

    def model_for(self, profile) -> str:
        """The model this course evaluates and trains in `profile` (a hw3lib.core.profile.Profile)."""
        return profile.math_model if self.uses_math_model else profile.model

    def covers(self, section: str) -> bool:
        """Whether the course's handout asks for `section` (a key of `SECTIONS`)."""
        if section not in SECTIONS:
            raise ValueError(f"unknown section {section!r}: choose one of {', '.join(SECTIONS)}")
        return section in self.sections


# Workbook sections, in notebook order, and where they live.
SECTIONS = {
    "zero_shot": "01 zero-shot baseline",
    "best_of_n": "02 Best-of-N",
    "grpo_units": "03 GRPO pieces",
    "grpo_loop": "04 the GRPO loop",
    "async_grpo": "04 colocated and asynchronous GRPO",
    "kl_drift": "04 KL to the initial policy",
    "keyword": "04 keyword inclusion on your own model",
    "ablations": "05 GRPO ablations",
    "sft": "05 SFT at several sizes",
    "expert_iteration": "05 expert iteration",
    "leaderboard": "05 leaderboard",
    "kissing": "06 kissing configurations",
}

COURSES = {
    "gsm8k-qwen3": Course(
        name="gsm8k-qwen3", title="GSM8K with Qwen3-0.6B", dataset="gsm8k", uses_math_model=False,
        sections=("zero_shot", "best_of_n", "grpo_units", "grpo_loop", "ablations", "kissing")),
    "math-qwen2.5": Course(
        name="math-qwen2.5", title="MATH with Qwen2.5-Math-1.5B", dataset="math", uses_math_model=True,
        sections=("zero_shot", "grpo_units", "grpo_loop", "async_grpo", "kl_drift", "keyword", "ablations", "sft",
                  "expert_iteration", "leaderboard")),
}
COURSE_NAMES = tuple(COURSES)


def default_course_name() -> str:
    """$HW3_COURSE if set, else `gsm8k-qwen3`."""
    return os.environ.get(COURSE_ENV, "").strip() or DEFAULT_COURSE


def get_course(name: str | None = None) -> Course:
    """The course called `name` (default: `default_course_name()`)."""
    name = name or default_course_name()
    if name not in COURSES:
        raise ValueError(f"unknown course {name!r}: choose one of {', '.join(COURSE_NAMES)} "
                         f"(set it with {COURSE_ENV} or the notebook's `course` parameter)")
    return COURSES[name]


EXTRAS_ENV = "HW3_EXTRAS"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def sections_to_run(course: Course | str | None, profile_name: str, extras: bool | None = None) -> set[str]:
    """The workbook sections (keys of `SECTIONS`) the notebooks run: the ones the course's handout asks for, and
    every other one (the extras) when `extras` is true.

    `extras` None: $HW3_EXTRAS (1/true/yes or 0/false/no) if set, else True in the smoke profile (CI executes
    every path there) and False in the full profile: there the extras cost GPU-hours the handout does not ask for
    (hw3lib.experiments.plan prints them), so they are opt-in. The full profile's CPU rehearsal follows the full
    profile (`make test` walks what a student's Run-All runs; `make rehearse` sets HW3_EXTRAS=1 for the rest).
    """
    crs = course if isinstance(course, Course) else get_course(course)
    if extras is None:
        value = os.environ.get(EXTRAS_ENV)
        if value is None:
            extras = profile_name == "smoke"
        elif value.strip().lower() in _TRUE + _FALSE:
            extras = value.strip().lower() in _TRUE
        else:
            raise ValueError(f"{EXTRAS_ENV}={value!r}: set it to 1 (run the extras) or 0 (only the handout's sections)")
    return set(SECTIONS) if extras else set(crs.sections)


def section_table(course: Course) -> str:
    """A markdown table of the workbook's sections, marking those the course's handout asks for."""
    rows = [f"| {where} | {'yes' if course.covers(key) else 'extra'} |" for key, where in SECTIONS.items()]
    return "\n".join([f"| section | in the {course.title} handout |", "|---|---|", *rows])
