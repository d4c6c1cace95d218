"""What notebook 02 samples, per profile and course: the questions, the model, the token budget and the runs.

    setup = best_of_n_setup(prof, crs)
    evaluate(make_engine(..., setup.model, ...), ..., setup.examples, "r1_zero",
             SamplingConfig(n=16, max_tokens=setup.max_tokens, ...), setup.run_dir)

Full profile: the course's test questions (GSM8K, or MATH) and model, the profile's budget, and notebook
01's zero-shot run as the N = 1 reference. Smoke profile: the course's GRPO smoke task (two-number
arithmetic for the GSM8K course, the generated MATH-format task for the MATH course) sampled from that
task's SFT warm start, so that the tiny model gets a share of the questions right; its N = 1 reference
is a one-sample draw of the same task. The budget is never below the task's own
(`sampling_max_tokens`): a MATH-format worked answer is ~55 tokens, and the profile's 48 cut off most
of them (measured: 81% of 512 samples truncated, pass@16 15.6%).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hw3lib.core.course import SMOKE_MATH_DATASET, Course
from hw3lib.core.io import runs_dir
from hw3lib.core.profile import Profile
from hw3lib.grpo.config import GRPOConfig
from hw3lib.models import load
from hw3lib.tasks.data import course_questions, load_task

SMOKE_TASK_WORDS = {"arithmetic": "arithmetic (operands 0-4)",
                    SMOKE_MATH_DATASET: "generated MATH-format (boxed answers)"}
"""How headings and the writeup name each smoke task."""


@dataclass(frozen=True)
class BestOfNSetup:
    task: str
    """The questions in words (headings, the writeup's settings line)."""
    model: str
    """What the engine loads: a hub id or a local folder."""
    model_label: str
    """The model in words."""
    examples: list[dict]
    """Records with `question` and `gold`."""
    run_dir: Path
    """Where the N = 16 samples are written (reused when finished)."""
    zero_shot_dir: Path
    """The N = 1 reference run: notebook 01's in full, a one-sample draw of the same task in smoke."""
    max_tokens: int
    """Generation budget per sample."""


def best_of_n_setup(prof: Profile, crs: Course) -> BestOfNSetup:
    """Notebook 02's setup for profile `prof` and course `crs` (see the module docstring)."""
    if prof.name == "smoke":
        cfg = GRPOConfig.for_profile("smoke", course=crs.name, n_eval_examples=prof.best_of_n_examples)
        run_dir = runs_dir() / f"best_of_n_smoke_{cfg.dataset}"
        return BestOfNSetup(task=SMOKE_TASK_WORDS.get(cfg.dataset, cfg.dataset), model=load.initial_policy_source(cfg),
                            model_label="tiny + SFT warm start", examples=load_task(cfg)[1], run_dir=run_dir,
                            zero_shot_dir=run_dir.with_name(run_dir.name + "_n1"),
                            max_tokens=max(prof.eval_max_tokens, cfg.sampling_max_tokens))
    model = crs.model_for(prof)
    examples, task = course_questions(crs, prof.name, "test", limit=prof.best_of_n_examples)
    return BestOfNSetup(task=task, model=model, model_label=model, examples=examples,
                        run_dir=runs_dir() / f"best_of_n_{prof.name}", zero_shot_dir=runs_dir() / f"zero_shot_{prof.name}",
                        max_tokens=prof.eval_max_tokens)
