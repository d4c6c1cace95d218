"""A GRPO run's memory plan, chosen once at its start and recorded in its config: the longest prompt of its data and
the sequences per training forward.

    cfg = with_memory_plan(cfg, "grpo")   # before the preflight: hw3lib.grpo.loop.train, hw3lib.grpo.async_loop

The rows per forward are decided by one function, `hw3lib.core.preflight.forward_rows` (the most sequences whose
plan fits within `HEADROOM` of the GPU memory free to the run), and this module hands its answer to the config
(`GRPOConfig.forward_rows`, `prompt_tokens`): the preflight then prints and checks the plan at exactly those rows,
the loop trains with them, and config.json records them so that a resume, a read-back or a grid that shares the
run uses the same. Where the run trains:

- a CUDA policy: the card (`hw3lib.core.devices.detect_device`: its free memory plus this process's own);
- the CPU under `$HW3_SIMULATE_GPU` (the full profile's rehearsal): the simulated card, as the preflight checks it;
- the CPU otherwise: the trainer's peak beside the engine within `CPU_TRAINING_SHARE` of its memory
  (`training_forward_rows`);
- a tiny smoke model (megabytes): one forward per optimizer step; a model the memory model cannot read: the
  course's microbatch.

A run folder that already holds a config.json with a plan (a resume, a finished run read back) gives its plan;
one without (a run made before hw3lib recorded plans) leaves the config as it is, and the learner chooses as it
always did.
"""

from __future__ import annotations

import json
import os

import torch

from hw3lib.core import memory, preflight
from hw3lib.core.config import PLAN_FIELDS
from hw3lib.core.io import runs_dir


def with_memory_plan(cfg, kind: str = "grpo", overwrite: bool = False):
    """`cfg` with `prompt_tokens` and `forward_rows` set (see the module docstring); `kind`: "grpo" or "async"
    (the plan the rows must fit: hw3lib.core.memory.grpo_plan or async_plan). `overwrite`: the run folder's old
    outputs are about to be deleted, so its recorded plan is not adopted."""
    if cfg.forward_rows is not None:
        return cfg
    saved = runs_dir() / cfg.name / "config.json"
    if saved.is_file() and not overwrite:
        recorded = {key: json.loads(saved.read_text()).get(key) for key in PLAN_FIELDS}
        return cfg.replace(**recorded) if recorded["forward_rows"] else cfg
    return planned(cfg, kind)


def planned(cfg, kind: str = "grpo"):
    """`cfg` with the plan chosen now, whatever its folder holds (`with_memory_plan`'s choice for a new run)."""
    shape, _ = preflight.resolve_shape(cfg.model)
    if shape is None:  # a tiny smoke model (fits anything: the whole step) or one the memory model cannot read
        rows = cfg.train_batch_size if cfg.model in preflight.TINY_MODELS else cfg.micro_train_batch_size
        return cfg.replace(forward_rows=rows)
    cfg = cfg.replace(prompt_tokens=cfg.prompt_tokens or measured_prompt_tokens(cfg))
    return cfg.replace(forward_rows=choose_rows(cfg, kind, shape))


def measured_prompt_tokens(cfg) -> int | None:
    """`longest_prompt_tokens(cfg)`, or None (the plan then assumes `PROMPT_TOKENS`, and says so) where the data or
    the tokenizer cannot be read here -- the run itself stops on that right after its preflight."""
    try:
        return longest_prompt_tokens(cfg)
    except (OSError, ValueError) as error:
        print(f"memory plan: the prompts could not be measured ({type(error).__name__}); planning for "
              f"{preflight.PROMPT_TOKENS}-token prompts", flush=True)
        return None


def choose_rows(cfg, kind: str, shape: memory.Shape) -> int:
    """Sequences per training forward on the device the run trains on (module docstring)."""
    if torch.device(cfg.policy_device).type == "cuda":
        info = preflight.detect_device()
        return preflight.forward_rows(cfg, kind, shape, info.total_bytes, info.free_bytes)
    info = preflight.detect_device()
    if info.simulated:  # the rehearsal: the rows the simulated card's plan allows, as its preflight prints
        return preflight.forward_rows(cfg, kind, shape, info.total_bytes)
    return training_forward_rows(cfg, shape)


def training_forward_rows(cfg, shape: memory.Shape) -> int:
    """On a CPU: the most sequences, up to an optimizer step's, whose trainer peak beside the rollout engine stays
    within `CPU_TRAINING_SHARE` of the machine's memory (hw3lib.core.memory.cpu_fits); never fewer than the
    course's microbatch."""
    trainer, engine = preflight.trainer_for(cfg, cfg.micro_train_batch_size, gpu=False), preflight.engine_for(
        cfg, "grpo", shape)
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return memory.training_micro_batch(trainer, cfg.train_batch_size, memory.cpu_fits(shape, engine, physical))


def longest_prompt_tokens(cfg) -> int:
    """The longest prompt of the run's training and held-out records, formatted with its template, in its model's
    tokenizer's tokens (what a microbatch is padded to)."""
    from hw3lib.models.load import resolve_model
    from hw3lib.tasks.data import format_prompt, load_task
    from transformers import AutoTokenizer

    train_records, eval_records = load_task(cfg)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(cfg.model))  # the run loads it next anyway
    prompts = [format_prompt(cfg.prompt, record["question"]) for record in (*train_records, *eval_records)]
    return max(len(ids) for ids in tokenizer(prompts, add_special_tokens=False)["input_ids"])
