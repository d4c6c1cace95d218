"""Attention for grouped-query models on a CPU: scaled-dot-product attention without copying K/V heads.

Qwen3 uses grouped-query attention (fewer key/value heads than query heads). transformers' `sdpa`
attention passes the key/value heads to `torch.nn.functional.scaled_dot_product_attention` as
they are (`enable_gqa=True`) only when there is no attention mask; with a padding mask -- every
batched, left-padded generation and every padded training batch -- it first copies each K/V head
once per query head of its group (`repeat_kv`). On a GPU that keeps SDPA on its fast kernels. On a
CPU it only costs time: for the tiny model's rollouts the copies were about 30% of generation.

`sdpa_gqa_attention` is the same computation without the copies: `enable_gqa=True` for prefill
and training, and for one-token decoding steps each group's query heads folded into the query
axis (plain multi-head attention over the shared K/V head). Same outputs up to float rounding.
`hw3lib.models.pretrained.load_resolved` selects it for models loaded onto a CPU (registered with transformers'
`AttentionInterface` as `"sdpa_gqa"`). It supports what Qwen3 needs (boolean or
additive masks, causal prefill, static and dynamic KV caches, dropout), not paged caches or
position biases.
"""

from __future__ import annotations

import torch

ATTENTION_NAME = "sdpa_gqa"


def sdpa_gqa_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                       is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers attention-function signature: `query` `[b, heads, q, d]`, `key`/`value` `[b, kv_heads, k, d]`,
    `attention_mask` `[b, 1, q, k]` (bool: True = attend; float: additive) or None. Returns `([b, q, heads, d], None)`."""
    if kwargs.get("position_bias") is not None or kwargs.get("cache") is not None:
        raise NotImplementedError("sdpa_gqa_attention does not support position biases or paged caches: "
                                  "use attn_implementation='sdpa'")
    batch, heads, q_length, head_dim = query.shape
    groups = heads // key.shape[1]  # query heads per K/V head
    if q_length == 1 and groups > 1:
        # Decoding: fold each group's query heads into the query axis, so that one K/V head serves
        # `groups` queries as plain multi-head attention (faster on a CPU than enable_gqa), with an
        # additive mask (faster than a boolean one). The mask [b, 1, 1, k] broadcasts over the groups.
        if attention_mask is not None and attention_mask.dtype == torch.bool:
            attention_mask = torch.zeros(attention_mask.shape, dtype=query.dtype,
                                         device=query.device).masked_fill_(~attention_mask, float("-inf"))
        out = torch.nn.functional.scaled_dot_product_attention(
            query.view(batch, key.shape[1], groups, head_dim), key, value, attn_mask=attention_mask,
            dropout_p=dropout, scale=scaling)  # [b, kv_heads, groups, d]
        return out.view(batch, heads, 1, head_dim).transpose(1, 2).contiguous(), None  # [b, 1, heads, d]
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    # A mask encodes causality itself; without one, a multi-token query (prefill) needs is_causal.
    causal = q_length > 1 and attention_mask is None and causal
    if causal and key.shape[2] > q_length:  # prefill into an empty static cache: the rest is unwritten
        key, value = key[:, :, :q_length], value[:, :, :q_length]
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal,
        enable_gqa=key.shape[1] != query.shape[1])  # [b, heads, q, d]
    return out.transpose(1, 2).contiguous(), None  # [b, q, heads, d]


def use_gqa_attention(model) -> None:
    """Switch a loaded transformers model to `sdpa_gqa_attention` (registering it on first use)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTENTION_NAME, sdpa_gqa_attention)
    # The masks are sdpa's (an unregistered name would get no mask at all: no padding, no causality).
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION_NAME, sdpa_mask)
    model.set_attn_implementation(ATTENTION_NAME)
