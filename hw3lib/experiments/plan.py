"""What a notebook is about to run and what it will cost, printed before it starts any GPU work.

`notebook_plan(notebook, profile, course, extras)` lists the runs and grids that notebook 01, 02, 04 or 05 starts in
the full profile -- only the sections `hw3lib.core.course.sections_to_run` chose -- each with its estimated
GPU-hours (hw3lib.core.cost: every response at the token budget, an upper bound, and at half of it), their total,
and the sections it skips as extras with how to opt in. Runs that already finished are read back, not rerun, so the
estimate is a fresh start's. In the smoke profile (and the full profile's CPU rehearsal) nothing runs on a GPU and
`Plan.text()` says so in one line (plus the skipped sections, if any). The estimates are for the detected card where hw3lib.core.preflight can tell, else
for an H100 (`plan_accelerator`, the one place that asks). `skipped_note(section, course)` is the line a notebook
prints in place of a section it skips; `profile_line(prof)` the setup cell's line naming the profile and why.

Before any GPU work (the full profile on this machine's GPU: not a simulated one, nor the CPU rehearsal)
`notebook_plan` also stops the notebook in one line, in the plan cell its first GPU cell follows:
- **hours**: when the plan's total (every response at the token budget) exceeds `$HW3_MAX_GPU_HOURS`
  (`DEFAULT_MAX_GPU_HOURS`: admits one course run, notebook 04 with its extras, and refuses a notebook 05), so
  starting tens of GPU-hours is a deliberate act (`GpuHoursError`);
- **disk**: when the runs folder's disk cannot hold the checkpoints of the runs not yet on it (hw3lib.core.disk;
  `DiskSpaceError`). The full profile's plan text says how much they take and what is free.
`check_disk_for(configs, what)` is the same disk check for a grid or a sweep; `python -m hw3lib.experiments.plan`
(`make workbook`) checks every notebook's plan first and says the same line.

bench/cost_model.py prints the same estimates for every section of both courses (the README's table).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

from hw3lib.core import cost, disk
from hw3lib.core.course import SECTIONS, Course, get_course, sections_to_run
from hw3lib.core.devices import PreflightError
from hw3lib.experiments.disk_check import new_checkpoints, run_checkpoint_bytes

PROMPT_TOKENS = 200  # stated assumption (as bench/cost_model.py): the R1-Zero template (~120 tokens) plus a question
GSM8K_TEST_QUESTIONS, MATH_TEST_QUESTIONS = 1319, 5000  # the published test splits, when no file says otherwise
# The sections each notebook can run, in its order (the KL-drift grid runs in notebook 05).
NOTEBOOK_SECTIONS = {"01": ("zero_shot",), "02": ("best_of_n",), "04": ("grpo_loop", "keyword", "async_grpo"),
                     "05": ("ablations", "kl_drift", "leaderboard", "sft", "expert_iteration")}
OPT_IN = "set `extras = True` in the notebook's parameters cell (or HW3_EXTRAS=1)"
BEYOND_HANDOUTS = "the `algorithms` grid (beyond the handouts)"
# How a skipped section is named where SECTIONS' words would mislead: the KL-drift section is a grid of notebook 05.
SECTION_WORDS = {"kl_drift": "the `kl_drift` grid (KL to the initial policy)", "leaderboard": "the `leaderboard` grid"}
MAX_HOURS_ENV = "HW3_MAX_GPU_HOURS"
# Admits one course run and refuses a notebook 05, for every course (tests/experiments/test_plan_gates.py): notebook
# 04 with its extras is 1.8-4.6 GPU-hours on an H100 (up to 9 on an RTX 4090, 18 for CS336 2026's eager OLMo-2);
# notebook 05 without them 21-49 on an H100.
DEFAULT_MAX_GPU_HOURS = 16.0


class GpuHoursError(PreflightError):
    """The plan's GPU-hours exceed $HW3_MAX_GPU_HOURS: one line naming the variable and the plan's total."""

    def _render_traceback_(self) -> list[str]:
        # IPython shows this instead of a traceback: the notebook stops with the one line, not a page of frames
        return [f"{type(self).__name__}: {self}"]


class NotebookDiskError(disk.DiskSpaceError):
    """A notebook's plan does not fit the runs folder's disk (one line, as in a notebook cell)."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


@dataclass(frozen=True)
class PlanItem:
    section: str
    """The workbook section it belongs to (a key of hw3lib.core.course.SECTIONS; `algorithms`: beyond them)."""
    what: str
    hours: tuple[float, float] | None
    """Estimated GPU-hours, every response at the token budget (an upper bound) and at half of it; None: a model
    too small for the cost model to matter (minutes)."""
    checkpoints: tuple[int, ...] = ()
    """Bytes of the checkpoint each of its runs not yet on disk will keep (hw3lib.core.disk.checkpoint_bytes)."""


@dataclass(frozen=True)
class Plan:
    notebook: str
    profile: str
    """`full`, or where the notebook runs without a GPU in words (`smoke profile`, a rehearsal)."""
    course: Course
    card: str
    """Which card the estimates are for, in words ("estimated on an H100")."""
    items: tuple[PlanItem, ...]
    skipped: tuple[str, ...]
    """What the notebook skips as extras for this course, in words."""
    expected: str = ""
    """Off the GPU: how long the notebook took when `make workbook` last ran it with these sections on this
    kind of machine, in words (hw3lib.core.command_times.expected_words), or "" where it has not been measured."""
    gated: bool = False
    """Whether the runs start on this machine's GPU (detected, not simulated; not the CPU rehearsal): the hours and
    the disk are then checked before any of them (`check_plan`)."""
    free_bytes: int | None = None
    """Free bytes under the runs folder when the plan was made (full profile, not the rehearsal); None: not read."""

    @property
    def disk(self) -> disk.DiskPlan:
        return disk.disk_plan([b for item in self.items for b in item.checkpoints])

    @property
    def total(self) -> tuple[float, float]:
        hours = [item.hours for item in self.items if item.hours is not None]
        return sum(h[0] for h in hours), sum(h[1] for h in hours)

    def text(self) -> str:
        """The plan in a few lines (smoke: one line, plus the skipped sections if any)."""
        skipped = [f"Skipped as extras for the {self.course.handout} handout: {'; '.join(self.skipped)}. To run them, "
                   f"{OPT_IN}."] if self.skipped else []
        if self.profile != "full":
            return "\n".join([f"{self.profile}: CPU only, no GPU work." + (f" {self.expected}" if self.expected else ""),
                              *skipped])
        width = max([len(item.what) for item in self.items] + [5])
        head = (f"Notebook {self.notebook}, full profile, {self.course.handout} ({self.course.title}): what it runs and its GPU-hours, "
                f"{self.card} (every response at the token budget / at half of it; from hw3lib.core.cost):")
        rows = [f"  {item.what:{width}s}  {_hours(item.hours)}" for item in self.items]
        disk_line = [disk.disk_words(self.disk, self.free_bytes)] if self.free_bytes is not None else []
        return "\n".join([head, *rows, f"  {'total':{width}s}  {_hours(self.total)}", *skipped,
                          "Runs that already finished are read back, not rerun: the estimate is a fresh start's.",
                          *disk_line])


def _hours(hours: tuple[float, float] | None) -> str:
    if hours is None:
        return "minutes (a tiny model)"
    return " / ".join(f"{h:.1f}" if h >= 1 else f"{h:.2f}" for h in hours) + " h"


def skipped_note(section: str | None, course: Course | str | None = None) -> str:
    """The line a notebook prints in place of `section` (None: the `algorithms` grid) when it skips it as an extra."""
    crs = course if isinstance(course, Course) else get_course(course)
    what = BEYOND_HANDOUTS if section is None else section_words(section)
    return f"Skipped: {what} is an extra for the {crs.handout} handout. To run it, {OPT_IN} and run again."


def section_words(section: str) -> str:
    """A section as the plan and the skip notes name it."""
    return SECTION_WORDS.get(section, f'section "{SECTIONS[section]}"')


def profile_line(prof) -> str:
    """One line for a notebook's setup cell: the profile and why it was chosen (`Profile.reason`, where the profile
    records one), so a profile is never switched silently."""
    reason = getattr(prof, "reason", "")
    return f"profile {prof.name}" + (f": {reason}" if reason else "")


def plan_accelerator(device=None) -> tuple[cost.Accelerator, str]:
    """The card the estimates are for, and the words that say so: the detected (or $HW3_SIMULATE_GPU's simulated)
    GPU's datasheet figures from hw3lib.core.preflight (`device`: a DeviceInfo it returned; None: detect), an H100
    without a GPU. The one place that asks which card this is."""
    from hw3lib.core import preflight

    info = device if device is not None else preflight.detect_device()
    if info.kind != "cuda":
        return cost.H100, "estimated on an H100 (no GPU detected)"
    acc = preflight.accelerator_for(info)
    return acc, f"estimated on the {'simulated' if info.simulated else 'detected'} {acc.name}"


def notebook_plan(notebook: str, profile, course: Course | str | None = None, extras: bool | None = None,
                  device=None) -> Plan:
    """What notebook `notebook` ("01", "02", "04", "05") runs in `profile` (a Profile or its name) for `course`
    with `extras` (see `sections_to_run`), and its estimated GPU-hours (full profile only)."""
    from hw3lib.core.profile import get_profile
    from hw3lib.experiments.parallel import grids_to_run

    if notebook not in NOTEBOOK_SECTIONS:
        raise ValueError(f"no plan for notebook {notebook!r}: choose one of {', '.join(NOTEBOOK_SECTIONS)}")
    prof = get_profile(profile) if profile is None or isinstance(profile, str) else profile
    crs = course if isinstance(course, Course) else get_course(course)
    run = sections_to_run(crs, prof.name, extras)
    skipped = [section_words(s) for s in NOTEBOOK_SECTIONS[notebook] if s not in run]
    if notebook == "05" and "algorithms" not in grids_to_run(run):
        skipped.append(BEYOND_HANDOUTS)
    if prof.name != "full":  # nothing runs on a GPU; the time measured here, where known
        from hw3lib.core.profile import notebook_short
        from hw3lib.core.command_times import expected_words

        measured = not (prof.rehearsal or notebook_short())  # `make workbook`'s length, not CI's short one
        expected = expected_words(notebook, crs.name, run != set(crs.sections)) if measured else ""
        return Plan(notebook, f"{prof.name} profile", crs, "", (), tuple(skipped), expected)
    from hw3lib.core import preflight

    info = device if device is not None else preflight.detect_device()
    acc, card = plan_accelerator(info)
    if prof.rehearsal:  # the same cost logic, over the rehearsal's own (shrunk) runs
        card += ", for this CPU rehearsal's shrunk runs ($HW3_REHEARSAL=1; a course run is far longer)"
    items = ITEMS[notebook](prof, crs, run, acc)
    # Gated where the runs will start on this machine's GPU: not for a card named by the caller (bench's tables) or
    # simulated ($HW3_SIMULATE_GPU: CI's preflight checks), nor in the rehearsal, whose shrunk stand-ins would be
    # costed at the real models' size (no disk figure there either).
    gated = device is None and info.kind == "cuda" and not info.simulated and not prof.rehearsal
    plan = Plan(notebook, prof.name, crs, card, tuple(items), tuple(skipped), gated=gated,
                free_bytes=None if prof.rehearsal else disk.free_bytes())
    if plan.gated:
        check_plan(plan)
    return plan


# ---- the gates: GPU-hours and disk -------------------------------------------------------------------------------

def max_gpu_hours() -> float:
    """$HW3_MAX_GPU_HOURS, else `DEFAULT_MAX_GPU_HOURS`."""
    value = os.environ.get(MAX_HOURS_ENV, "").strip()
    if not value:
        return DEFAULT_MAX_GPU_HOURS
    try:
        hours = float(value)
    except ValueError:
        hours = -1.0
    if not hours >= 0:  # also refuses nan
        raise ValueError(f"{MAX_HOURS_ENV}={value!r}: give the GPU-hours a notebook may start, e.g. "
                         f"{MAX_HOURS_ENV}=40")
    return hours


def hours_refusal(plan: Plan, limit: float) -> str:
    """The one line that stops a notebook whose plan exceeds `limit` GPU-hours."""
    upper, half = plan.total
    how = ("run its grids one by one (`hw3 sweep <grid>`)" if plan.notebook == "05"
           else "run its sections one at a time")
    return (f"notebook {plan.notebook}'s plan totals {upper:.1f} GPU-hours ({half:.1f} at half the token budget; "
            f"{plan.card}), over {MAX_HOURS_ENV}={limit:g}: to start it, set {MAX_HOURS_ENV}={math.ceil(upper)} "
            f"(or more) and run again, or {how}")


def check_plan(plan: Plan) -> None:
    """Stop before the plan's first GPU work, in one line: its GPU-hours over $HW3_MAX_GPU_HOURS (`GpuHoursError`),
    or its new runs' checkpoints beyond the runs folder's free disk (`NotebookDiskError`)."""
    limit = max_gpu_hours()
    if plan.total[0] > limit:
        raise GpuHoursError(hours_refusal(plan, limit))
    try:
        disk.check_disk(plan.disk, f"notebook {plan.notebook}'s plan", prunable_bytes=_prunable_bytes)
    except disk.DiskSpaceError as exc:
        raise NotebookDiskError(str(exc)) from None


def _prunable_bytes() -> int:
    from hw3lib.experiments.prune import prunable_runs

    return sum(entry.bytes for entry in prunable_runs())


def check_workbook(profile=None, course=None, extras: bool | None = None) -> None:
    """What `make workbook` checks before it starts: each notebook's plan, with the line its plan cell would stop
    with (on a GPU; nothing to check elsewhere)."""
    for notebook in NOTEBOOK_SECTIONS:
        notebook_plan(notebook, profile, course, extras)


# ---- the items of each notebook (full profile) ------------------------------------------------------------------

@lru_cache(maxsize=None)
def _shapes() -> dict:
    from hw3lib.models.real_shape import course_shapes

    return course_shapes()


def shape_for(model: str, crs: Course):
    """The cost model's Shape of `model`: a course model by its hub id; any other (a local folder, $HW3_MODEL) as the
    course's own model, whose shape the full profile assumes."""
    from hw3lib.core.preflight import COURSE_MODELS

    shapes = _shapes()
    default = COURSE_MODELS[crs.name]
    return shapes.get(model, shapes.get(default, shapes["Qwen/Qwen3-0.6B"]))


def _lengths(budget: int) -> tuple[int, int]:
    return budget, budget // 2


def count_test_questions(crs: Course, limit: int | None = None) -> int:
    """How many test questions the course's evaluation reads: its file's lines when it is here (GSM8K's, or the
    MATH file $HW3_MATH_DATA names), else the published split's size; at most `limit`."""
    from hw3lib.core.io import DataFileError
    from hw3lib.tasks.data import gsm8k_path, math_source_file

    try:
        path = gsm8k_path("test") if crs.dataset == "gsm8k" else math_source_file("math", "test")
    except DataFileError:
        path = None
    if path is not None and path.is_file():
        count = sum(1 for line in path.open(encoding="utf-8") if line.strip())
    else:
        count = GSM8K_TEST_QUESTIONS if crs.dataset == "gsm8k" else MATH_TEST_QUESTIONS
    return min(count, limit) if limit else count


def _evaluation(prof, crs: Course, samples: int, limit: int | None, acc) -> tuple[int, tuple[float, float]]:
    questions, shape = count_test_questions(crs, limit), shape_for(crs.model_for(prof), crs)
    return questions, tuple(cost.evaluation_gpu_hours(shape, questions, samples, PROMPT_TOKENS, n, acc)
                            for n in _lengths(prof.eval_max_tokens))


def _grpo_hours(configs, crs: Course, acc) -> tuple[float, float]:
    """GPU-hours of GRPO runs, each at its own token budget and half of it."""
    return tuple(sum(cost.run_gpu_hours(c, shape_for(c.model, crs), PROMPT_TOKENS, _lengths(c.sampling_max_tokens)[i],
                                        acc) for c in configs) for i in (0, 1))


def _items_01(prof, crs: Course, run: set[str], acc) -> list[PlanItem]:
    questions, hours = _evaluation(prof, crs, 1, prof.eval_examples, acc)
    return [PlanItem("zero_shot", f"zero-shot, {questions} test questions x 1 sample", hours)]


def _items_02(prof, crs: Course, run: set[str], acc) -> list[PlanItem]:
    if "best_of_n" not in run:
        return []
    questions, hours = _evaluation(prof, crs, prof.best_of_n, prof.best_of_n_examples, acc)
    zero_questions, zero_hours = _evaluation(prof, crs, 1, prof.best_of_n_examples, acc)
    return [PlanItem("best_of_n", f"Best-of-N, {questions} test questions x {prof.best_of_n} samples", hours),
            PlanItem("best_of_n", f"pass@1 check, {zero_questions} x 1 (notebook 01's run, read back if done)",
                     zero_hours)]


def _items_04(prof, crs: Course, run: set[str], acc) -> list[PlanItem]:
    from hw3lib.grpo.async_report import schedule_comparison
    from hw3lib.grpo.config import GRPOConfig

    cfg = GRPOConfig.for_profile("full", course=crs.name)
    items = [PlanItem("grpo_loop", f"one GRPO run, {cfg.n_grpo_steps} steps", _grpo_hours([cfg], crs, acc),
                      new_checkpoints([cfg], crs))]
    if "keyword" in run:
        items.append(PlanItem("keyword", "keyword inclusion: SFT and 2 GRPO runs of a 0.1M-parameter model", None))
    if "async_grpo" in run:
        with course_environment(crs):
            async_cfg, schedules = schedule_comparison("full")
        items.append(PlanItem("async_grpo", f"async GRPO, {len(schedules)} schedules x {async_cfg.n_grpo_steps} steps "
                                            "(as if run synchronously: an upper bound)",
                              _grpo_hours([async_cfg] * len(schedules), crs, acc),
                              # one run per schedule, each named after it (hw3lib.grpo.async_report)
                              (run_checkpoint_bytes(async_cfg, crs),) * len(schedules)))
    return items


def _items_05(prof, crs: Course, run: set[str], acc) -> list[PlanItem]:
    from hw3lib.experiments.parallel import GRID_SECTIONS, grids_to_run

    items, seen = [], set()  # `seen`: settings whose disk is counted (a grid's base is another's config)
    for name in grids_to_run(run):
        configs = grid_configs(name, crs)
        steps = "/".join(str(s) for s in sorted({c.n_grpo_steps for c in configs}))
        items.append(PlanItem(GRID_SECTIONS[name] or "algorithms", f"grid `{name}`, {len(configs)} run(s) x {steps} "
                                                                   "steps", _grpo_hours(configs, crs, acc),
                              new_checkpoints(configs, crs, seen)))
    if "ablations" in run:  # the base recipe's seed replicas (hw3lib.experiments.seeds): the first is a grid's run
        from hw3lib.experiments.seeds import SEED_REPLICAS, seed_grid

        with course_environment(crs):
            replicas = list(seed_grid("full").configs.values())[1:]
        items.append(PlanItem("ablations", f"seed band: the base recipe with {SEED_REPLICAS['full']} seeds, "
                                           f"{len(replicas)} more run(s) x {replicas[0].n_grpo_steps} steps",
                              _grpo_hours(replicas, crs, acc), new_checkpoints(replicas, crs, seen)))
    if {"sft", "expert_iteration"} & run:  # notebook 05 runs the two together (one reading compares them)
        items += _sft_ei_items(crs, acc)
    return items


def _sft_ei_items(crs: Course, acc) -> list[PlanItem]:
    from hw3lib.sft.config import EIConfig, SFTConfig
    from hw3lib.sft.experiments import EI_VARIANTS, SFT_SIZES, ei_variant_configs, sft_size_configs

    sft = list(sft_size_configs(SFTConfig.for_profile("full", course=crs.name), SFT_SIZES).values())
    ei = list(ei_variant_configs(EIConfig.for_profile("full", course=crs.name), EI_VARIANTS).values())
    hours = [tuple(sum(function(c, shape_for(c.model, crs), PROMPT_TOKENS, _lengths(c.sampling_max_tokens)[i], acc)
                       for c in configs) for i in (0, 1))
             for function, configs in ((cost.sft_gpu_hours, sft), (cost.ei_gpu_hours, ei))]
    return [PlanItem("sft", f"SFT, {len(sft)} runs x {sft[0].n_sft_steps} steps", hours[0], new_checkpoints(sft, crs)),
            PlanItem("expert_iteration", f"expert iteration, {len(ei)} runs (every rollout kept: an upper bound)",
                     hours[1], new_checkpoints(ei, crs))]


ITEMS = {"01": _items_01, "02": _items_02, "04": _items_04, "05": _items_05}


@contextmanager
def course_environment(crs: Course) -> Iterator[None]:
    """$HW3_COURSE set to `crs` for the block: the grids and schedules take the course from it, as the notebooks'
    worker processes do."""
    saved = os.environ.get("HW3_COURSE")
    os.environ["HW3_COURSE"] = crs.name
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("HW3_COURSE", None)
        else:
            os.environ["HW3_COURSE"] = saved


def grid_configs(name: str, crs: Course) -> list:
    """A grid's full-profile configs for the course; a grid that picks up earlier grids' winners gets the base's own
    settings as winners (the on-policy point), so its size and length are what it will run."""
    from hw3lib.experiments.grids import GRIDS, build_grid

    choices = {"top": [{}, {}], "off_policy": {}, "settings": {}} if GRIDS[name].needs else None
    with course_environment(crs):
        return list(build_grid(name, "full", choices=choices).configs.values())


def main(argv: list[str] | None = None) -> int:
    """`python -m hw3lib.experiments.plan`: `check_workbook` for this machine's profile and course (`make workbook`
    runs it first); exit status 1 with the one line when a notebook's plan would stop."""
    del argv
    try:
        check_workbook()
    except (GpuHoursError, disk.DiskSpaceError) as exc:
        print(f"make workbook: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
