"""The one model-loading function for both profiles, and the model names it knows.

    model, tokenizer = load_model_and_tokenizer("tiny")            # the offline tiny Qwen3 model
    model, tokenizer = load_model_and_tokenizer("tiny-sft")        # ... after a brief SFT (built once)
    model, tokenizer = load_model_and_tokenizer("Qwen/Qwen3-0.6B", device="cuda")  # hub id or folder

Names: `tiny` (hw3lib.tiny), `tiny-sft` (hw3lib.warmstart.tiny_sft_path), a folder saved with
`save_pretrained` (a transformers model, or hw3lib's own transformer from hw3lib.nanogpt), or a
hub id. This module sits above both `tiny` and `warmstart`: building `tiny-sft` trains `tiny`,
so the name is resolved here rather than in hw3lib.tiny.
"""

from __future__ import annotations

from hw3lib.tiny import load_pretrained, tiny_or_path

TINY_SFT = "tiny-sft"


def resolve_model(name_or_path: str) -> str:
    """`tiny` / `tiny-sft` -> their built folders; an existing directory or a hub id unchanged (checked)."""
    if name_or_path == TINY_SFT:
        from hw3lib.warmstart import tiny_sft_path

        return str(tiny_sft_path())
    return tiny_or_path(name_or_path)


def load_model_and_tokenizer(name_or_path: str = "tiny", device: str = "cpu", dtype: str = "float32"):
    """Load a causal LM and its tokenizer (left padding) by any name `resolve_model` knows.

    On a CPU the model's `sdpa` attention is replaced by `hw3lib.attention.sdpa_gqa_attention`
    (same numbers, no K/V head copies). An own-model folder (hw3lib.nanogpt) loads as a `GPT` and its
    `WordTokenizer`."""
    from hw3lib.nanogpt import is_own_model, load_own_model

    if is_own_model(name_or_path):
        return load_own_model(name_or_path, device=device, dtype=dtype)
    return load_pretrained(resolve_model(name_or_path), device=device, dtype=dtype)
