"""The course a student follows: which data, model and sections every notebook and run uses.

Three courses (four offerings) share this workbook, each a preset named after the course:

| preset | handout | data | full-profile model | smoke (CPU) data |
|---|---|---|---|---|
| `nlpdl-hw3` | NLPDL HW3 | GSM8K | Qwen/Qwen3-0.6B | GSM8K questions (eval), two-number arithmetic (training) |
| `cse599o-a3` | CSE 599-O A3 | MATH (`$HW3_MATH_DATA`) | Qwen/Qwen2.5-Math-1.5B | a generated MATH-format task |
| `cs336-a5` | CS336 A5 (2025) | MATH (`$HW3_MATH_DATA`) | Qwen/Qwen2.5-Math-1.5B | a generated MATH-format task |
| `cs336-a5-2026` | CS336 A5 (Spring 2026, v26) | GSM8K | allenai/OLMo-2-0425-1B | as `nlpdl-hw3` |

The old names stay as aliases: `gsm8k-qwen3` is `nlpdl-hw3`, `math-qwen2.5` is `cs336-a5`. The course is
orthogonal to the profile (`smoke`/`full`): notebooks read both from their `parameters` cell (`course = None`:
$HW3_COURSE, else `nlpdl-hw3`). `sections_to_run` decides which sections a notebook runs: the handout's, and the
extras too when asked (`extras = True` in a notebook's parameters cell, or $HW3_EXTRAS=1), in either profile: a
student's `make workbook` runs their own handout (on 2 CPU cores the other courses' sections would more than double
its time); CI (`make test`) and the stored notebooks (`make store-outputs`) set HW3_EXTRAS=1 and run every path. The settings the handouts share (validation sampling, SFT
sizes, expert-iteration batch sizes, the off-policy sweep's length) are the defaults of the configs and grids.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

COURSE_ENV = "HW3_COURSE"
SMOKE_MATH_DATASET = "math-synthetic"
"""The MATH course's smoke data: generated MATH-format problems (hw3lib.tasks.math_synthetic)."""
DEFAULT_COURSE = "nlpdl-hw3"
DEFAULT_SETTING = "gsm8k-qwen3"
"""The default preset's runs folder name (`Course.runs_folder`): its runs live in runs/ itself."""


@dataclass(frozen=True)
class Course:
    name: str
    title: str
    """One line for notebook headers: the course's data and model."""
    handout: str
    """The course and handout the preset follows, as its students know it."""
    dataset: str
    """The training and evaluation data of the full profile: `gsm8k` or `math` (read from $HW3_MATH_DATA)."""
    uses_math_model: bool
    """True: runs use the profile's `math_model` (Qwen2.5-Math-1.5B in full) instead of its `model`."""
    sections: tuple[str, ...]
    """The workbook sections the course's handout asks for (see `SECTIONS`); the others are extras."""
    full_model: str | None = None
    """The hub id the full profile trains and evaluates when it is neither of the profile's own models
    (CS336 2026: OLMo-2-0425-1B); None: the profile's `model` or `math_model`. $HW3_MODEL still wins."""
    adapters: str = "hw3lib.adapters"
    """The module a student's `tests/adapters.py` imports (one line: `from <module> import *`)."""

    def runs_folder(self, profile_name: str) -> str:
        """The runs folder's name (under runs/) of this preset in `profile_name`: the data-and-model setting it
        trains, so presets that train the same model on the same data share their runs -- the same configs under
        the same names, trained once and read back by the other (the two MATH courses; in smoke, where every
        GSM8K preset trains the same tiny model, the GSM8K ones). The default setting (`DEFAULT_SETTING`) is
        runs/ itself."""
        if self.full_model and profile_name == "full":
            return f"{self.dataset}-{self.full_model.split('/')[-1].split('-')[0].lower()}"  # gsm8k-olmo
        return "math-qwen2.5" if self.uses_math_model else DEFAULT_SETTING

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
        """The model this course evaluates and trains in `profile` (a hw3lib.core.profile.Profile): the course's
        own `full_model` in the full profile (its random-weight stand-in in the CPU rehearsal) unless $HW3_MODEL
        names another, else the profile's `math_model` or `model`."""
        if self.uses_math_model:
            return profile.math_model
        if self.full_model and profile.name == "full" and not os.environ.get("HW3_MODEL"):
            return f"stand-in:{self.full_model}" if profile.rehearsal else self.full_model
        return profile.model

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

_GRPO = ("zero_shot", "grpo_units", "grpo_loop", "ablations")
COURSES = {
    "nlpdl-hw3": Course(
        name="nlpdl-hw3", title="GSM8K with Qwen3-0.6B", handout="NLPDL HW3", dataset="gsm8k",
        uses_math_model=False, sections=("zero_shot", "best_of_n", "grpo_units", "grpo_loop", "ablations", "kissing")),
    "cse599o-a3": Course(
        name="cse599o-a3", title="MATH with Qwen2.5-Math-1.5B", handout="CSE 599-O A3", dataset="math",
        uses_math_model=True, sections=(*_GRPO[:3], "async_grpo", "kl_drift", "keyword", "ablations")),
    "cs336-a5": Course(
        name="cs336-a5", title="MATH with Qwen2.5-Math-1.5B", handout="CS336 A5 (2025)", dataset="math",
        uses_math_model=True, sections=(*_GRPO, "sft", "expert_iteration", "leaderboard")),
    "cs336-a5-2026": Course(
        name="cs336-a5-2026", title="GSM8K with OLMo-2-0425-1B", handout="CS336 A5 (Spring 2026, v26)",
        dataset="gsm8k", uses_math_model=False, sections=(*_GRPO, "leaderboard"),
        full_model="allenai/OLMo-2-0425-1B", adapters="hw3lib.adapters_cs336_2026"),
}
ALIASES = {"gsm8k-qwen3": "nlpdl-hw3", "math-qwen2.5": "cs336-a5"}
"""The course settings' names before the presets (named after data and model), still accepted."""
COURSE_NAMES = tuple(COURSES)


def canonical_name(name: str) -> str:
    """The preset a course name means (an old alias resolved); unknown names pass through for `get_course`."""
    return ALIASES.get(name, name)


def default_course_name() -> str:
    """The preset $HW3_COURSE names (an alias resolved), else `nlpdl-hw3`."""
    return canonical_name(os.environ.get(COURSE_ENV, "").strip() or DEFAULT_COURSE)


def get_course(name: str | None = None) -> Course:
    """The course called `name` (a preset or an old alias; default: `default_course_name()`)."""
    name = canonical_name(name or default_course_name())
    if name not in COURSES:
        raise ValueError(f"unknown course {name!r}: choose one of {', '.join(COURSE_NAMES)} "
                         f"(old names: {', '.join(f'{a} = {b}' for a, b in ALIASES.items())}; "
                         f"set it with {COURSE_ENV} or the notebook's `course` parameter)")
    return COURSES[name]


EXTRAS_ENV = "HW3_EXTRAS"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def sections_to_run(course: Course | str | None, profile_name: str, extras: bool | None = None) -> set[str]:
    """The workbook sections (keys of `SECTIONS`) the notebooks run: the ones the course's handout asks for, and
    every other one (the extras) when `extras` is true.

    `extras` None: $HW3_EXTRAS (1/true/yes or 0/false/no) if set, else False in both profiles: in full the extras
    cost GPU-hours the handout does not ask for (hw3lib.experiments.plan prints them); in smoke they cost CPU time
    (`make workbook` for the default course: 69.6 minutes with every section, measured on 2 cores, against a
    40-minute budget). `make test` sets HW3_EXTRAS=1 where it walks every path (the smoke notebooks under nbval,
    the CSE 599-O walk), `make store-outputs` and `make rehearse` too.
    """
    crs = course if isinstance(course, Course) else get_course(course)
    if extras is None:
        value = os.environ.get(EXTRAS_ENV)
        if value is None:
            extras = False
        elif value.strip().lower() in _TRUE + _FALSE:
            extras = value.strip().lower() in _TRUE
        else:
            raise ValueError(f"{EXTRAS_ENV}={value!r}: set it to 1 (run the extras) or 0 (only the handout's sections)")
    return set(SECTIONS) if extras else set(crs.sections)


def section_table(course: Course) -> str:
    """A markdown table of the workbook's sections, marking those the course's handout asks for."""
    rows = [f"| {where} | {'yes' if course.covers(key) else 'extra'} |" for key, where in SECTIONS.items()]
    return "\n".join([f"| section | in the {course.handout} handout |", "|---|---|", *rows])
