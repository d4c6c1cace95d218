"""`hw3 sft` and `hw3 expert-iteration`: the SFT runner and expert iteration from the shell.

Examples:

    hw3 sft --profile smoke --examples 128                   # SFT on 128 arithmetic traces (CPU)
    hw3 sft --profile full --name sft_gsm8k_512 --examples 512   # GSM8K traces on a GPU
    hw3 sft --profile full --name sft_gsm8k_filtered --filter-correct
    hw3 sft --profile full --dataset data/math/train.jsonl --name sft_math   # {problem, solution} records
    hw3 expert-iteration --profile smoke --steps 4 --set group_size=4
    hw3 expert-iteration --profile full --name ei_g8 --resume

Outputs go to runs/<name>/ (config.json, metrics.jsonl, generations/, samples/, checkpoints/). A
folder holding another run is refused in one line (never deleted) that says which of --resume,
--resume --steps N, another --name or --overwrite goes on from it.
"""

from __future__ import annotations

import json
from typing import Optional

import typer

from hw3lib.core.cli_options import check_run_folder, config_from_profile


def _run(function, cfg, resume: bool, overwrite: bool, unit: str) -> None:
    # A folder holding another run: one line on what to do, before anything is loaded. What the run itself refuses
    # (a data file, settings, the preflight) is printed as one line by `hw3` (hw3lib.cli).
    check_run_folder(cfg, resume, overwrite)
    result = function(cfg, resume=resume, overwrite=overwrite)
    final = result.eval_rows[-1] if result.eval_rows else {}
    typer.echo(json.dumps({key: value for key, value in final.items() if key.startswith("eval/")}, indent=2))
    typer.echo(f"{result.steps} {unit} in {result.elapsed_s:.1f}s; outputs in {result.run_dir}")


_SET_HELP = "Any config field as KEY=VALUE (JSON value or plain string), repeatable."


def sft_command(
    profile: Optional[str] = typer.Option(None, help="smoke or full (default: $HW3_PROFILE, else full on a GPU)."),
    examples: Optional[int] = typer.Option(None, min=1, help="Unique training traces (default: all)."),
    filter_correct: bool = typer.Option(False, "--filter-correct", help="Keep only traces whose final answer is "
                                        "graded correct."),
    steps: Optional[int] = typer.Option(None, min=1, help="Optimizer steps (default: the profile's)."),
    dataset: Optional[str] = typer.Option(None, help="gsm8k, arithmetic, math, a {problem, solution} .jsonl, a "
                                          "folder of train/test.jsonl, or a hub id."),
    model: Optional[str] = typer.Option(None, help="Initial policy: tiny, a folder or a hub id."),
    name: Optional[str] = typer.Option(None, help="Run name (default: the profile's, e.g. sft_smoke)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from runs/<name>'s latest checkpoint."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete runs/<name>'s previous outputs first."),
    set_: Optional[list[str]] = typer.Option(None, "--set", help=_SET_HELP),
) -> None:
    """Supervised fine-tuning on R1-Zero reasoning traces; print the final validation metrics."""
    from hw3lib.sft.config import SFTConfig
    from hw3lib.sft.loop import train_sft

    cfg = config_from_profile(SFTConfig, profile, set_, n_examples=examples, filter_correct=filter_correct or None,
                 n_sft_steps=steps, dataset=dataset, model=model, name=name)
    _run(train_sft, cfg, resume, overwrite, "SFT steps")


def expert_iteration_command(
    profile: Optional[str] = typer.Option(None, help="smoke or full (default: $HW3_PROFILE, else full on a GPU)."),
    steps: Optional[int] = typer.Option(None, min=1, help="Rounds, n_ei_steps (default: the profile's)."),
    group_size: Optional[int] = typer.Option(None, "-G", "--group-size", min=1, help="Rollouts per question."),
    sft_epochs: Optional[int] = typer.Option(None, min=1, help="SFT passes over each round's kept rollouts."),
    questions: Optional[int] = typer.Option(None, min=1, help="Questions per round."),
    dataset: Optional[str] = typer.Option(None, help="gsm8k, arithmetic, math, a .jsonl, a folder or a hub id."),
    model: Optional[str] = typer.Option(None, help="Initial policy: tiny, a folder or a hub id."),
    name: Optional[str] = typer.Option(None, help="Run name (default: the profile's, e.g. ei_smoke)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from runs/<name>'s latest checkpoint."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete runs/<name>'s previous outputs first."),
    set_: Optional[list[str]] = typer.Option(None, "--set", help=_SET_HELP),
) -> None:
    """Expert iteration: sample G rollouts per question, keep the correct ones, SFT on them; repeat."""
    from hw3lib.sft.expert_iteration import expert_iteration
    from hw3lib.sft.config import EIConfig

    cfg = config_from_profile(EIConfig, profile, set_, n_ei_steps=steps, group_size=group_size, sft_epochs=sft_epochs,
                 questions_per_round=questions, dataset=dataset, model=model, name=name)
    _run(expert_iteration, cfg, resume, overwrite, "rounds")


def register(app: typer.Typer, name: str) -> None:
    """Add `hw3 sft` and `hw3 expert-iteration` to the `hw3` app (`name` is the first's)."""
    app.command(name=name, help=sft_command.__doc__)(sft_command)
    app.command(name="expert-iteration", help=expert_iteration_command.__doc__)(expert_iteration_command)
