"""Model names: `resolve(name) -> (kind, path)`, then one load (`hw3lib.models.pretrained`).

    model, tokenizer = load_model_and_tokenizer("tiny")            # the offline tiny Qwen3 model
    model, tokenizer = load_model_and_tokenizer("tiny-sft")        # ... after a brief SFT (built once)
    model, tokenizer = load_model_and_tokenizer("Qwen/Qwen3-0.6B", device="cuda")  # hub id or folder

Names: `tiny` (built by hw3lib.models.tiny), `tiny-sft` (built by hw3lib.models.warmstart.tiny_sft_path),
`stand-in:<hub id>` (the full-profile rehearsal's small random-weight stand-ins, hw3lib.models.stand_in),
a folder saved with `save_pretrained` (a transformers model, or hw3lib's own transformer from
hw3lib.models.nanogpt: kind `own`), or a hub id. `initial_policy_source(cfg)` is where a run's policy
starts: `cfg.model` resolved, or its SFT warm start. This module is the top of `models`: naming
`tiny-sft` trains `tiny`, so resolution sits above the warm start, which sits above the load.
"""

from __future__ import annotations

import os
from pathlib import Path

from hw3lib.models.lora import apply_lora, is_adapter_folder, load_adapter
from hw3lib.models.pretrained import load_resolved, model_kind
from hw3lib.models.stand_in import PREFIX as STAND_IN_PREFIX
from hw3lib.models.stand_in import stand_in_path
from hw3lib.models.tiny import tiny_model_path
from hw3lib.models.warmstart import sft_warm_start, tiny_sft_path

TINY = "tiny"
TINY_SFT = "tiny-sft"


def resolve(name_or_path: str) -> tuple[str, str]:
    """`(kind, path)`: `tiny` / `tiny-sft` -> their built folders; an existing directory (checked) or a
    hub id unchanged. `kind` is `own` for hw3lib's own transformer, else `transformers`."""
    name_or_path = str(name_or_path)
    if name_or_path == TINY:
        return "transformers", str(tiny_model_path())
    if name_or_path == TINY_SFT:
        return "transformers", str(tiny_sft_path())
    if name_or_path.startswith(STAND_IN_PREFIX):  # the full-profile rehearsal's stand-ins (hw3lib.models.stand_in)
        return "transformers", str(stand_in_path(name_or_path))
    path = Path(os.path.expanduser(name_or_path))
    if path.exists() and not (path / "config.json").is_file():
        raise FileNotFoundError(f"model directory {path} has no config.json: point it at a folder "
                                "saved with save_pretrained (config.json, weights, tokenizer files)")
    if not path.exists() and (name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1):
        raise FileNotFoundError(f"model path {name_or_path} does not exist: pass a local model directory, "
                                "a hub id like Qwen/Qwen3-0.6B, `tiny` or `tiny-sft`")
    if not path.exists():
        return "transformers", name_or_path  # a hub id
    return model_kind(path), str(path)


def resolve_model(name_or_path: str) -> str:
    """The folder (or hub id) a name resolves to: `resolve(name)[1]`."""
    return resolve(name_or_path)[1]


def load_model_and_tokenizer(name_or_path: str = TINY, device: str = "cpu", dtype: str = "float32"):
    """Load a causal LM and its tokenizer (left padding) by any name `resolve` knows."""
    return load_resolved(*resolve(name_or_path), device=device, dtype=dtype)


def load_training_policy(source: str, cfg, base: str | None = None):
    """The policy a run trains: float32 master weights on `cfg.policy_device` (the low precision is
    autocast's), with gradient checkpointing when `cfg.gradient_checkpointing` and LoRA adapters when
    `cfg.lora_rank` > 0 (hw3lib.models.lora). `source`: the initial model or a checkpoint's `policy` folder;
    a LoRA run's checkpoint holds the adapter only, loaded onto `base` (the run's initial model, which LoRA
    never changes). Returns (policy, tokenizer)."""
    lora = getattr(cfg, "lora_rank", 0) > 0
    adapter = lora and is_adapter_folder(source)
    if adapter and base is None:
        raise ValueError(f"{source} holds a LoRA adapter only: pass base=<the run's initial model>")
    policy, tokenizer = load_model_and_tokenizer(base if adapter else source, device=cfg.policy_device,
                                                 dtype="float32")
    if cfg.gradient_checkpointing:
        enable_gradient_checkpointing(policy)
    if lora:
        policy = apply_lora(policy, cfg)
        if adapter:
            load_adapter(policy, source)
    return policy, tokenizer


def enable_gradient_checkpointing(model) -> None:
    """Keep only each decoder layer's input in the forward pass and recompute the layer in the backward one:
    activation memory falls from O(layers x tokens x width) to about one layer's, for ~1/3 more compute.

    Non-reentrant checkpointing (works with inputs that do not require gradients and with autocast).
    Only transformers models have it; hw3lib's own transformer is small enough not to need it.
    """
    if not hasattr(model, "gradient_checkpointing_enable"):
        raise ValueError(f"gradient_checkpointing=True: {type(model).__name__} does not support it (only "
                         "transformers models do); set gradient_checkpointing=False")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False  # a KV cache is useless in training and conflicts with recomputation


def initial_policy_source(cfg, warm_start_prompt: str | None = None) -> str:
    """Where a run's initial policy loads from: `cfg.model` resolved, or its SFT warm start on the run's
    task (cached; `cfg.warm_start_steps` > 0): see `warm_start_records`. The warm start teaches `cfg.prompt`'s
    format unless `warm_start_prompt` names another (`neutral`: both; hw3lib.models.warmstart)."""
    if not cfg.warm_start_steps:
        return cfg.model
    return str(sft_warm_start(resolve_model(cfg.model), warm_start_records(cfg), steps=cfg.warm_start_steps,
                              lr=cfg.warm_start_lr, batch_size=cfg.warm_start_batch_size,
                              seed=warm_start_seed(cfg),
                              prompt=warm_start_prompt or cfg.prompt, working_fraction=cfg.warm_start_working_fraction))


def warm_start_seed(cfg) -> int:
    """The seed of a run's warm start, its data included: `cfg.warm_start_seed`, else the run's own seed."""
    return cfg.seed if getattr(cfg, "warm_start_seed", None) is None else cfg.warm_start_seed


def warm_start_records(cfg) -> list[dict]:
    """The `cfg.warm_start_examples` records (`question`, worked `answer`, `gold`) a run's warm start trains on.

    The generated MATH-format task's training split (another seed than the run's own) for a run on
    `math-synthetic` -- an arithmetic warm start would leave the policy at 0% there, with no reward for
    GRPO to work with; two-number arithmetic problems (another seed) otherwise.
    """
    from hw3lib.tasks.data import load_questions, make_arithmetic_problems, synthetic_math_folder

    seed = warm_start_seed(cfg) + 2_000_003
    if cfg.dataset == "math-synthetic":
        return load_questions(str(synthetic_math_folder(seed)), "train", cfg.warm_start_examples)
    return make_arithmetic_problems(cfg.warm_start_examples, seed=seed, max_operand=cfg.arithmetic_max_operand)
