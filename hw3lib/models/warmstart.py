"""A short SFT warm start, so GRPO on a tiny model has some reward to work with.

An untrained (or randomly initialised) policy almost never produces a correct, well-formatted
answer, so every group's rewards are equal, every advantage is zero and GRPO cannot learn.
`sft_warm_start` fine-tunes the model for a few steps on R1-Zero style solutions of synthetic
arithmetic problems (`hw3lib.tasks.data.arithmetic_sft_target`: " 23 + 45 = 68 </think> <answer> 68
</answer>") with the course's SFT loss (`hw3lib.maths.sft.sft_microbatch_train_step`): the policy learns
the format and partly the arithmetic, leaving room for RL to improve the answers. `prompt` picks the format
taught (`WARM_START_PROMPTS`): R1-Zero (the default), the question alone (the working, then EOS), or
`neutral` (each record under one of the two at random: the prompt ablation's start, which favours neither).

The result is saved with `save_pretrained` under `out_dir/<key>` (default
`$HW3_CACHE_DIR/warmstart/`), where the key hashes every setting (model, the records, steps,
learning rate, batch size, seed, prompt); a second call with the same settings reuses it.
Writing goes to a temporary folder renamed into place, so an interrupted build is never reused.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Sequence
from pathlib import Path

# Bump when the recipe (or the numerics of the code it runs, e.g. the attention) changes so stale
# warm starts are not reused.
RECIPE_VERSION = 3
# SFT steps of the named model `tiny-sft` (see tiny_sft_path).
TINY_SFT_STEPS = 40


# The prompts a warm start can teach: the R1-Zero format, the question alone (the working, then the end of the
# text), or `neutral`: each record under one of the two, drawn at random, so the start favours neither format
# (the prompt ablation's common start: hw3lib.experiments.grids).
WARM_START_PROMPTS = ("r1_zero", "question_only", "neutral")


def direct_answer_target(record: dict) -> str:
    """The R1-Zero completion without the working: " </think> <answer> 68 </answer>"."""
    return f" </think> <answer> {record['gold']} </answer>"


def question_only_target(record: dict, shows_working: bool, eos: str) -> str:
    """The completion of the question-only prompt: " 23 + 45 = 68<eos>" (or " \\boxed{68}<eos>" without the
    working: a bare `\\frac{1}{6}` would be graded by its last number); `question_only_reward_fn` grades the last
    box or number, and the EOS teaches the policy where to stop."""
    working = record["answer"].rsplit("####", 1)[0].strip() if shows_working else f"\\boxed{{{record['gold']}}}"
    return f" {working}{eos}"


def warm_start_examples(records: Sequence[dict], prompt: str, working_fraction: float, seed: int,
                        eos: str) -> tuple[list[str], list[str]]:
    """The (prompt texts, targets) a warm start trains on; see `WARM_START_PROMPTS` and `sft_warm_start`."""
    from hw3lib.tasks.data import arithmetic_sft_target, format_prompt

    shows_working = random.Random(seed).choices([True, False], [working_fraction, 1 - working_fraction], k=len(records))
    pick_format = random.Random(seed + 1)  # its own stream: r1_zero and question_only starts keep their draws
    formats = ([pick_format.choice(WARM_START_PROMPTS[:2]) for _ in records] if prompt == "neutral"
               else [prompt] * len(records))
    prompts, targets = [], []
    for record, shown, form in zip(records, shows_working, formats):
        prompts.append(format_prompt(form, record["question"]))
        if form == "question_only":
            targets.append(question_only_target(record, shown, eos))
        else:
            targets.append(arithmetic_sft_target(record) if shown else direct_answer_target(record))
    return prompts, targets


def warm_start_key(model_source: str, records: Sequence[dict], steps: int, lr: float, batch_size: int,
                   seed: int, prompt: str, working_fraction: float = 1.0) -> str:
    """A short hash of every setting that determines the warm-started weights."""
    blob = json.dumps({"recipe": RECIPE_VERSION, "model": model_source, "steps": steps, "lr": lr,
                       "batch_size": batch_size, "seed": seed, "prompt": prompt, "working_fraction": working_fraction,
                       "records": hashlib.sha256(json.dumps(list(records), sort_keys=True).encode()).hexdigest()},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def sft_warm_start(source: str, records: Sequence[dict] | None = None, steps: int = 150, lr: float = 2e-3,
                   batch_size: int = 32, seed: int = 0, out_dir: str | Path | None = None,
                   prompt: str = "r1_zero", working_fraction: float = 1.0, verbose: bool = True) -> Path:
    """Fine-tune the model at `source` with SFT on `records` (arithmetic problems); return the saved folder.

    `source` is a resolved model folder or hub id (`hw3lib.models.load.resolve_model`: callers resolve
    names such as `tiny`, since naming `tiny-sft` needs this warm start).

    Each step draws `batch_size` records at random (seeded), computes the summed negative
    log-likelihood of the target completion per sequence divided by the batch's mean response
    length (a per-token scale, so `lr` does not depend on answer length), averages over the batch
    and takes one AdamW step (betas 0.9/0.95, no weight decay, gradient clipping at 1.0) with a
    learning rate decaying linearly to 10% of `lr`. Cached: see the module docstring.

    `prompt`: the format taught, one of `WARM_START_PROMPTS` (see `warm_start_examples`).
    `working_fraction`: the share of records whose target shows the working
    (`arithmetic_sft_target`); the others get the bare answer `direct_answer_target` (a seeded,
    fixed choice per record). See the module docstring for why the smoke profile mixes them.
    """
    from hw3lib.core.io import build_folder_once, cache_dir, shown_path
    from hw3lib.tasks.data import make_arithmetic_problems

    if steps < 1 or batch_size < 1 or not lr > 0:
        raise ValueError(f"sft_warm_start: steps={steps}, batch_size={batch_size} and lr={lr} must be positive")
    if not 0.0 <= working_fraction <= 1.0:
        raise ValueError(f"sft_warm_start: working_fraction={working_fraction} must be in [0, 1]")
    if prompt not in WARM_START_PROMPTS:
        raise ValueError(f"sft_warm_start: prompt={prompt!r} is not supported: choose one of "
                         f"{', '.join(WARM_START_PROMPTS)} (`neutral` mixes the first two)")
    records = list(records) if records is not None else make_arithmetic_problems(2048, seed=seed + 2_000_003)
    if not records:
        raise ValueError("sft_warm_start: records is empty")
    source = str(source)
    root = Path(out_dir) if out_dir is not None else cache_dir() / "warmstart"
    target = root / warm_start_key(source, records, steps, lr, batch_size, seed, prompt, working_fraction)
    settings = {"model": source, "steps": steps, "lr": lr, "batch_size": batch_size, "seed": seed, "prompt": prompt,
                "working_fraction": working_fraction}
    if (target / "config.json").is_file():
        return target
    build_folder_once(target, lambda staging: _train_warm_start(staging, records, settings, verbose))
    if verbose:
        print(f"  warm start saved to {shown_path(target)}", flush=True)
    return target


def _train_warm_start(out: Path, records: Sequence[dict], settings: dict, verbose: bool) -> None:
    """The warm start's SFT (see `sft_warm_start`), saved into `out` with `warm_start.json`."""
    import torch

    from hw3lib.core.io import atomic_write_json
    from hw3lib.maths.sft import tokenize_prompt_and_output
    from hw3lib.maths.sft_step import response_bounds, sft_optimizer_step
    from hw3lib.models.pretrained import load_resolved, model_kind
    from hw3lib.maths.logprobs import shared_prefix_length

    started = time.perf_counter()
    steps, lr, batch_size, seed = settings["steps"], settings["lr"], settings["batch_size"], settings["seed"]
    policy, tokenizer = load_resolved(model_kind(settings["model"]), settings["model"], device="cpu", dtype="float32")
    policy.train()
    prompts, targets = warm_start_examples(records, settings["prompt"], settings["working_fraction"], seed,
                                           tokenizer.eos_token or "")
    prompt_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(steps):
        picks = torch.randint(len(records), (batch_size,), generator=generator).tolist()
        batch = tokenize_prompt_and_output([prompts[i] for i in picks], [targets[i] for i in picks], tokenizer)
        batch["response_start"], batch["lengths"] = response_bounds(batch["response_mask"])
        stats = sft_optimizer_step(policy, optimizer, params, batch, range(batch_size), micro_batch_size=batch_size,
                                   dtype="float32", max_grad_norm=1.0, learning_rate=lr * (1.0 - 0.9 * step / steps),
                                   shared_prefix=shared_prefix_length([prompt_ids[i] for i in picks]))
        losses.append(stats["loss"])
        if verbose and (step + 1) % max(1, steps // 5) == 0:
            print(f"  warm start step {step + 1}/{steps}: nll/token {losses[-1]:.3f}", flush=True)
    policy.save_pretrained(out)
    tokenizer.save_pretrained(out)
    atomic_write_json(out / "warm_start.json", {**settings, "n_records": len(records), "final_nll_per_token": losses[-1],
                                                "seconds": time.perf_counter() - started})


def tiny_sft_path() -> Path:
    """The model named `tiny-sft`: the tiny model after a brief SFT on arithmetic, built on first use.

    40 steps (batch 32, lr 3e-3) on 2,048 two-number problems with operands 0 to 4. The model has
    half learned the R1-Zero format: on GSM8K questions it closes `</think> <answer> ... </answer>`
    in about half of its samples and almost never has the answer right -- roughly how a small base
    model behaves zero-shot. The smoke profile evaluates it in notebooks 01 and 02, where an
    untrained model would put every response in the "unformatted" category. (The GRPO smoke run has
    its own, longer warm start: see `GRPOConfig.warm_start_steps`.)
    """
    from hw3lib.tasks.data import make_arithmetic_problems

    from hw3lib.models.tiny import tiny_model_path

    records = make_arithmetic_problems(2048, seed=2_000_003, max_operand=4)
    return sft_warm_start(str(tiny_model_path()), records, steps=TINY_SFT_STEPS, lr=3e-3, batch_size=32, seed=0, verbose=False)
