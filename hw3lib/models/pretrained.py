"""The one load: a model already resolved to `(kind, folder or hub id)` and its tokenizer.

`hw3lib.models.load.resolve` turns a name into `(kind, path)`; this module only loads. Two kinds:
`transformers` (any `save_pretrained` folder or hub id, through `AutoModelForCausalLM` /
`AutoTokenizer`, left padding for generation; on a CPU the `sdpa` attention is swapped for
`hw3lib.models.attention`'s, same numbers without K/V head copies) and `own` (hw3lib's own
transformer, hw3lib.models.nanogpt). It sits below the warm start, which loads its base model here.
"""

from __future__ import annotations

from pathlib import Path

from hw3lib.models.nanogpt import is_own_model, load_own_model
from hw3lib.models.tiny import quiet_transformers

KINDS = ("transformers", "own")


def model_kind(path: str | Path) -> str:
    """`own` for a folder saved by hw3lib's own transformer, else `transformers` (a folder or a hub id)."""
    return "own" if is_own_model(path) else "transformers"


def load_resolved(kind: str, path: str, device: str = "cpu", dtype: str = "float32"):
    """`(model, tokenizer)` of a resolved model, on `device` at `dtype`; errors name the model and the fix."""
    if kind == "own":
        return load_own_model(path, device=device, dtype=dtype)
    if kind != "transformers":
        raise ValueError(f"unknown model kind {kind!r}: choose one of {', '.join(KINDS)}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_transformers()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    except OSError as exc:
        raise OSError(f"could not load model {path!r} ({exc.__class__.__name__}: {exc}). "
                      "Without access to the Hugging Face hub, download it elsewhere and pass the local "
                      "directory (HW3_MODEL=/path/to/model or the `model` argument).") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if torch.device(device).type == "cpu" and getattr(model.config, "_attn_implementation", None) == "sdpa":
        from hw3lib.models.attention import use_gqa_attention

        use_gqa_attention(model)  # same numbers, no K/V head copies (see hw3lib.models.attention)
    return model.to(device), tokenizer
