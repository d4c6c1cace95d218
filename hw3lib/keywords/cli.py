"""`hw3 keyword`: the keyword-inclusion task on hw3lib's own transformer (a thin wrapper over hw3lib.keywords.recipe).

Examples:

    hw3 keyword data --out data/keyword                       # procedural answers (no model needed)
    hw3 keyword data --out data/keyword_qwen --generator Qwen/Qwen3-0.6B --engine vllm   # a real model's answers
    hw3 keyword train                                         # SFT (cached) then GRPO -> runs/keyword_smoke
    hw3 keyword train --reward sentence                       # the one-sentence gate -> runs/keyword_sentence_smoke
    hw3 keyword train --data data/keyword --steps 80 --name keyword_long --resume

Outputs go to runs/<name>/ as for `hw3 train`; a folder holding another run is refused in one line
(never deleted) that says which of --resume, --resume --steps N, another --name or --overwrite fits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)


@app.command("data")
def data_command(
    out: Path = typer.Option(..., help="Folder to write train.jsonl / validation.jsonl / dataset.json into."),
    n: int = typer.Option(2000, min=10, help="Prompts to make (split 80/20)."),
    seed: int = typer.Option(0, help="Seed of the keyword draws and of the split."),
    generator: Optional[str] = typer.Option(None, help="A model (name, folder or hub id) that writes the answers "
                                            "through the rollout engine; default: the procedural generator."),
    engine: str = typer.Option("transformers", help="Rollout engine for --generator: transformers or vllm."),
    device: str = typer.Option("cpu", help="Device of the --generator engine."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a different dataset already in --out."),
) -> None:
    """Write the keyword-inclusion dataset."""
    from hw3lib.keywords.recipe import write_keyword_dataset

    # A folder holding another dataset (RunExistsError) or a generator that cannot write it: one line (hw3lib.cli).
    folder = write_keyword_dataset(out, n=n, seed=seed, generator=generator, overwrite=overwrite,
                                   engine_kind=engine, device=device)
    typer.echo(json.dumps(json.loads((folder / "dataset.json").read_text()), indent=2))


@app.command("train")
def train_command(
    profile: Optional[str] = typer.Option(None, help="smoke or full (default: $HW3_PROFILE, else full on a GPU)."),
    data: Optional[Path] = typer.Option(None, help="A folder written by `hw3 keyword data` (default: the "
                                        "procedural dataset, built in the cache)."),
    reward: str = typer.Option("inclusion", help="inclusion: the course's keyword_inclusion_reward_fn (every keyword "
                               "as a whole word); sentence: keyword_sentence_reward_fn (the same, in one sentence)."),
    sft_steps: int = typer.Option(400, min=1, help="SFT steps before GRPO."),
    sft_seed: int = typer.Option(0, help="Seed of the SFT and of the default procedural dataset."),
    steps: Optional[int] = typer.Option(None, min=1, help="GRPO steps (default: the recipe's)."),
    name: Optional[str] = typer.Option(None, help="Run name (default: keyword_smoke, or keyword_sentence_smoke "
                                       "with --reward sentence)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from runs/<name>'s latest checkpoint."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete runs/<name>'s previous outputs first."),
    set_: Optional[list[str]] = typer.Option(None, "--set", help="Any GRPOConfig field as KEY=VALUE, repeatable."),
) -> None:
    """SFT the own model on the train split, then GRPO on --reward; print the first and last validation rewards."""
    from hw3lib.keywords.recipe import KeywordSFT, prepare_keyword_run
    from hw3lib.grpo.loop import train
    from hw3lib.core.cli_options import check_run_folder, overrides_from

    overrides = overrides_from(set_, n_grpo_steps=steps, name=name)
    # What the recipe or the run refuses (--reward, --set values, the data folder) is one line (hw3lib.cli).
    cfg = prepare_keyword_run(profile, data, KeywordSFT(steps=sft_steps, seed=sft_seed), reward=reward, **overrides)
    check_run_folder(cfg, resume, overwrite)
    result = train(cfg, resume=resume, overwrite=overwrite)
    first, last = result.eval_rows[0], result.eval_rows[-1]
    typer.echo(f"validation reward ({cfg.prompt}) {first['eval/reward']:.3f} -> {last['eval/reward']:.3f} in "
               f"{result.grpo_steps} GRPO steps ({result.elapsed_s:.1f}s); outputs in {result.run_dir}")


def register(parent: typer.Typer, name: str) -> None:
    """Add this sub-app to the `hw3` app as `hw3 <name>`."""
    parent.add_typer(app, name=name)
