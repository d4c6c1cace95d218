"""Small random-weight stand-ins of the full profile's models: what the full-profile rehearsal trains on a CPU.

The full profile's control flow (vLLM colocated with the trainer, sleep and wake, bf16 copies pushed
to the engine, the course's data, the grids' scheduling, the preflight) has to execute in CI, where
neither Qwen3-0.6B nor a GPU is available and where every notebook of both courses must finish in
minutes. `stand_in_path(hub_id)` builds, once per setting, a checkpoint folder with

- the real model's architecture class and its distinguishing switches (`REAL_SHAPES` of
  hw3lib.models.real_shape: Qwen3's q/k norms and head_dim, Qwen2's q/k/v biases and rope base, tied
  embeddings, the grouped-query ratio where it survives the shrink), at a width, depth and context
  CI can afford (`STAND_IN_SIZES`; head_dim 32, the least vLLM's CPU attention takes);
- the tiny model's GSM8K-trained byte-level BPE tokenizer (hw3lib.models.tiny), whose end-of-sequence
  token is Qwen's `<|endoftext|>` -- so prompts, EOS and stop strings are handled as the real ones;
- `hw3lib_stand_in.json` naming the hub id it stands in for (`stands_in_for`), which the preflight and
  the cost model read: a rehearsal's memory checks are those of the real model on the simulated card.

The real widths are rehearsed separately, phase by phase (bench/rehearse.py, hw3lib.models.real_shape).
Random weights never answer right: the rehearsal grades with real_shape's stand-in grader.
Names: `stand-in:<hub id>` resolves to the folder (hw3lib.models.load.resolve).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from hw3lib.core.io import build_folder_once, cache_dir

BUILD_VERSION = 1
PREFIX = "stand-in:"
MARKER = "hw3lib_stand_in.json"
# hub id -> (real shape name, the shrunk sizes). Query/KV heads keep each model's grouping where they can:
# Qwen3-0.6B 16/8 -> 2/1, Qwen2.5-Math-1.5B 12/2 -> 2/1 (its 6:1 cannot survive two query heads).
STAND_IN_SIZES = {
    "Qwen/Qwen3-0.6B": ("qwen3-0.6b", {"hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2,
                                       "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32}),
    "Qwen/Qwen2.5-Math-1.5B": ("qwen2.5-math-1.5b", {"hidden_size": 64, "intermediate_size": 192,
                                                     "num_hidden_layers": 2, "num_attention_heads": 2,
                                                     "num_key_value_heads": 1}),
    # CS336 2026: OLMo 2 has no grouped-query attention (16/16 heads), so neither has its stand-in (2/2).
    "allenai/OLMo-2-0425-1B": ("olmo2-0425-1b", {"hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2,
                                                 "num_attention_heads": 2, "num_key_value_heads": 2}),
}
CONTEXT = 1024  # positions: a course prompt plus the rehearsal's short responses fit many times over


def stand_in_name(hub_id: str) -> str:
    """The model name a rehearsal profile uses for `hub_id` (`stand-in:<hub id>`)."""
    if hub_id not in STAND_IN_SIZES:
        raise ValueError(f"no stand-in for {hub_id!r}: choose one of {', '.join(STAND_IN_SIZES)}")
    return PREFIX + hub_id


def stands_in_for(name_or_path: str) -> str | None:
    """The hub id a stand-in name or folder stands in for; None for any other model."""
    name = str(name_or_path)
    if name.startswith(PREFIX):
        return name[len(PREFIX):]
    marker = Path(name) / MARKER
    return json.loads(marker.read_text())["stands_in_for"] if marker.is_file() else None


def stand_in_config(hub_id: str, vocab_size: int, eos_id: int):
    """The real model's config (architecture class and switches) at the stand-in's sizes."""
    from hw3lib.models.real_shape import real_shape_config

    shape_name, sizes = STAND_IN_SIZES[hub_id]
    config = real_shape_config(shape_name, layers=sizes["num_hidden_layers"])
    for key, value in sizes.items():
        setattr(config, key, value)
    config.vocab_size, config.max_position_embeddings = vocab_size, CONTEXT
    config.bos_token_id = config.eos_token_id = config.pad_token_id = eos_id
    if hasattr(config, "sliding_window"):
        config.sliding_window = CONTEXT
    config.dtype = "bfloat16"
    return config


def stand_in_path(name_or_hub_id: str, seed: int = 0) -> Path:
    """The checkpoint folder of the stand-in for a hub id (or a `stand-in:` name), built on first use."""
    hub_id = stands_in_for(name_or_hub_id) or str(name_or_hub_id)
    stand_in_name(hub_id)  # checks the id before anything is built
    blob = json.dumps({"build": BUILD_VERSION, "hub_id": hub_id, "sizes": STAND_IN_SIZES[hub_id], "seed": seed},
                      sort_keys=True)
    key = hashlib.sha256(blob.encode()).hexdigest()[:10]
    target = cache_dir() / "stand_in" / f"{STAND_IN_SIZES[hub_id][0]}-{key}"
    return build_folder_once(target, lambda staging: _build(hub_id, seed, staging), marker=MARKER)


def _build(hub_id: str, seed: int, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from hw3lib.models.tiny import EOS_TOKEN, quiet_transformers, tiny_model_path

    quiet_transformers()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    config = stand_in_config(hub_id, len(tokenizer), eos_id)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # initialised in float32, saved in bf16
    model.generation_config = GenerationConfig(bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id)
    model.to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / MARKER).write_text(json.dumps({"stands_in_for": hub_id, "seed": seed}) + "\n")
