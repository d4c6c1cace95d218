"""`hw3 train`: run the GRPO loop from the shell (a thin wrapper over hw3lib.grpo.loop.train).

Examples:

    hw3 train --profile smoke                      # the CPU run that shows GRPO learning
    hw3 train --profile full --name grpo_gsm8k     # the course's settings on a GPU
    hw3 train --profile full --name grpo_gsm8k --resume   # continue after an interruption
    hw3 train --profile full --name grpo_gsm8k --overwrite  # delete that run's outputs and start over
    hw3 train --profile smoke --steps 5 --set rollout_batch_size=32 --set monitor_kl=true
    hw3 train --profile full --name grpo_math --dataset math      # MATH ($HW3_MATH_DATA) with the math model
    hw3 train --profile full --dataset /data/math --model /models/qwen-math   # a folder of train/test.jsonl

Outputs go to runs/<name>/ (config.json, metrics.jsonl, samples/, checkpoints/). A folder holding
another run is refused in one line (never deleted) that says what it holds and which of --resume,
--resume --steps N (a longer run), another --name or --overwrite goes on from it.
"""

from __future__ import annotations

import json
from typing import Optional

import typer


def train_command(
    profile: Optional[str] = typer.Option(None, help="smoke or full (default: $HW3_PROFILE, else full on a GPU)."),
    steps: Optional[int] = typer.Option(None, min=1, help="Number of GRPO steps (default: the profile's)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from runs/<name>'s latest checkpoint."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete runs/<name>'s previous outputs (metrics, "
                                   "samples, checkpoints) and start over."),
    name: Optional[str] = typer.Option(None, help="Run name (default: the profile's, e.g. grpo_smoke)."),
    loss_type: Optional[str] = typer.Option(None, help="no_baseline, reinforce_with_baseline, grpo_clip, grpo_no_clip "
                                            "(beyond the handouts: dapo_clip, gspo, cispo; their clip_low/clip_high "
                                            "via --set)."),
    learning_rate: Optional[float] = typer.Option(None, help="AdamW learning rate (default: the profile's)."),
    eval_every: Optional[int] = typer.Option(None, min=1, help="Validate every this many GRPO steps."),
    seed: Optional[int] = typer.Option(None, help="Seed (default: the profile's)."),
    dataset: Optional[str] = typer.Option(None, help="gsm8k, arithmetic, math ($HW3_MATH_DATA), a MATH-style .jsonl, "
                                          "a folder holding train.jsonl/test.jsonl, or a hub id (owner/name); "
                                          "default: the profile's."),
    model: Optional[str] = typer.Option(None, help="Initial policy: tiny, a folder or a hub id (default: the "
                                        "profile's model; for a MATH dataset the profile's math_model)."),
    set_: Optional[list[str]] = typer.Option(None, "--set", help="Any GRPOConfig field as KEY=VALUE (JSON value "
                                             "or plain string), repeatable: --set rollout_batch_size=32."),
) -> None:
    """Train a policy with GRPO; print the final validation metrics."""
    from hw3lib.core.cli_options import check_run_folder
    from hw3lib.grpo.loop import train

    cfg = build_config(profile, set_, n_grpo_steps=steps, name=name, loss_type=loss_type, learning_rate=learning_rate,
                       eval_every=eval_every, seed=seed, dataset=dataset, model=model)
    check_run_folder(cfg, resume, overwrite)  # a folder holding another run: one line on what to do, nothing loaded
    # What train refuses (a data file, settings, the preflight) is printed as one line by `hw3` (hw3lib.cli).
    result = train(cfg, resume=resume, overwrite=overwrite)
    final = result.eval_rows[-1] if result.eval_rows else {}
    typer.echo(json.dumps({key: value for key, value in final.items() if key.startswith("eval/")}, indent=2))
    typer.echo(f"{result.grpo_steps} GRPO steps ({result.optimizer_steps} optimizer steps, "
               f"{result.skipped_steps} skipped) in {result.elapsed_s:.1f}s; outputs in {result.run_dir}")


def build_config(profile: Optional[str], set_: Optional[list[str]] = None, **options):
    """The run's GRPOConfig: the profile's settings, then the options that were given (None: not
    given), then the `--set KEY=VALUE` items. A refused value is a one-line CommandError."""
    from hw3lib.core.cli_options import config_from_profile
    from hw3lib.grpo.config import GRPOConfig

    return config_from_profile(GRPOConfig, profile, set_, **options)


def register(app: typer.Typer, name: str) -> None:
    """Add the training command to the `hw3` app as `hw3 <name>`."""
    app.command(name=name, help=__doc__)(train_command)
