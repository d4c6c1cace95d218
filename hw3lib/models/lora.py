"""LoRA through peft (beyond the handouts): train low-rank adapters, push merged weights to the engine.

`lora_rank > 0` in any run config (GRPO, SFT, expert iteration) wraps the float32 policy with peft's LoRA
(`apply_lora`, called by hw3lib.models.load.load_training_policy): each target linear layer W (d_out x d_in)
gains A (r x d_in, random) and B (d_out x r, zeros, so training starts at the base model), its forward
computes `W x + (lora_alpha / r) B A x`, and only A and B require gradients. The base weights stay
bit-identical (tested) and AdamW, built on the parameters that require gradients
(hw3lib.core.lifecycle.TrainingRun), holds moments for the adapters only.

The rollout engine never sees adapters: it receives `merged_weights(policy)`, the base model's own
names and shapes with `W + (lora_alpha / r) B A` in place of each target weight (peft's
`get_delta_weight`, exactly what `merge_and_unload` adds; tested), computed one tensor at a time from
the LoRA modules without touching the training model. Not peft's `merge_adapter()` / `unmerge_adapter()`
around the export: they add the update into W in place and subtract it again, and (W + D) - D is not W in
floating point, so the frozen base would drift by rounding at every push; nor `merge_and_unload` on a
copy, which copies the whole model each step.

Checkpoints hold the adapter only (peft's `adapter_config.json` and `adapter_model.safetensors`) beside
the optimizer state; a resumed run rebuilds the policy from the run's initial model -- the base, which
training never changes -- and loads the adapter into it (`load_adapter`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def is_lora(model) -> bool:
    """Whether `model` is a peft-wrapped policy (peft is imported only by `apply_lora`: no import, no LoRA)."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def is_adapter_folder(path) -> bool:
    """Whether `path` is a folder holding a peft adapter (a LoRA run's checkpoint `policy` folder)."""
    return (Path(str(path)) / ADAPTER_CONFIG).is_file()


def apply_lora(model, cfg):
    """`model` (a transformers causal LM) wrapped with fresh LoRA adapters as `cfg` says (`lora_rank`,
    `lora_alpha`, `lora_dropout`, `lora_target_modules`); every other parameter frozen. A's random
    initialization is seeded by `cfg.seed` (and leaves the global RNG alone)."""
    from peft import LoraConfig, get_peft_model

    from hw3lib.models.nanogpt import is_own_model

    if is_own_model(model):
        raise ValueError("lora_rank > 0: LoRA (peft) is for transformers models, not hw3lib's own transformer; "
                         "set lora_rank=0")
    config = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                        target_modules=list(cfg.lora_target_modules), bias="none", task_type="CAUSAL_LM")
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(cfg.seed)
        return get_peft_model(model, config)


def merged_weights(policy):
    """(name, tensor) pairs of `policy` (a LoRA policy) with every adapter merged in, one tensor at a time:
    exactly the base model's `state_dict()` names and shapes, a target's weight being `W + (alpha / r) B A`.
    The training model is not modified; untouched tensors are its own (not copies)."""
    from peft.tuners.lora import LoraLayer

    model = policy.get_base_model()  # the transformers model, LoRA layers injected
    layers = {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)}
    for name, tensor in model.state_dict().items():
        if ".lora_" in name:  # lora_A / lora_B: folded into their layer's weight below
            continue
        owner, marker, leaf = name.rpartition(".base_layer.")
        if marker:
            name = f"{owner}.{leaf}"  # the base model's own name
            if leaf == "weight":
                layer = layers[owner]
                with torch.no_grad():
                    for adapter in layer.active_adapters:
                        tensor = tensor + layer.get_delta_weight(adapter)  # [d_out, d_in]
        yield name, tensor


def load_adapter(policy, folder) -> None:
    """Load the adapter weights a checkpoint saved (`folder`: its `policy` folder) into `policy`, a LoRA
    policy built by `apply_lora` with the same settings; every adapter tensor must be found."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    device = next(policy.parameters()).device
    weights = load_file(str(Path(str(folder)) / ADAPTER_WEIGHTS), device=str(device))
    result = set_peft_model_state_dict(policy, weights)
    missing = [key for key in result.missing_keys if ".lora_" in key]
    if result.unexpected_keys or missing:
        raise ValueError(f"{folder}: the adapter does not fit the policy (unexpected {result.unexpected_keys[:3]}, "
                         f"missing {missing[:3]}): were lora_rank and lora_target_modules changed?")
