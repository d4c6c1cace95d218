"""hw3lib.models.attention: grouped-query SDPA without K/V copies gives transformers' `sdpa` numbers."""

from __future__ import annotations

import pytest
import torch

from hw3lib.models.attention import ATTENTION_NAME, sdpa_gqa_attention, use_gqa_attention


def two_models():
    """The tiny model (4 query heads sharing 2 K/V heads) with transformers' sdpa, and a copy on ours."""
    from transformers import AutoModelForCausalLM

    from hw3lib.models.tiny import tiny_model_path

    reference = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=torch.float64)
    ours = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=torch.float64)
    assert reference.config._attn_implementation == "sdpa"
    assert reference.config.num_key_value_heads < reference.config.num_attention_heads  # grouped
    use_gqa_attention(ours)
    assert ours.config._attn_implementation == ATTENTION_NAME
    return reference, ours


def test_padded_forward_and_gradients_match_sdpa():
    reference, ours = two_models()
    ids = torch.randint(0, reference.config.vocab_size, (3, 9))  # [B, L]
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding: the mask is passed to SDPA, where transformers copies K/V heads
    mask[2, :1] = 0
    outputs = []
    for model in (reference, ours):
        logits = model(ids, attention_mask=mask).logits  # [B, L, V]
        (logits[mask.bool()] ** 2).mean().backward()
        outputs.append((logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (ref_logits, ref_grads), (our_logits, our_grads) = outputs
    real = mask.bool()
    torch.testing.assert_close(our_logits[real], ref_logits[real], rtol=1e-10, atol=1e-10)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(our_grads[name], grad, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_padded_decoding_step_matches_sdpa(cache):
    """One-token steps after a left-padded prefill (the folded-query path): same logits."""
    from transformers import DynamicCache, StaticCache

    reference, ours = two_models()
    ids = torch.randint(0, reference.config.vocab_size, (3, 6))  # [B, L]
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    steps = []
    for model in (reference, ours):
        past = (DynamicCache(config=model.config) if cache == "dynamic"
                else StaticCache(config=model.config, max_cache_len=10))
        with torch.no_grad():
            model(ids, attention_mask=mask, past_key_values=past, use_cache=True)
            logits = []
            for step in range(3):
                token = torch.full((3, 1), 5 + step)  # [B, 1]
                full_mask = torch.cat([mask, torch.ones(3, step + 1, dtype=mask.dtype)], dim=1)
                out = model(token, attention_mask=full_mask, past_key_values=past, use_cache=True,
                            cache_position=torch.tensor([ids.shape[1] + step]))
                logits.append(out.logits)  # [B, 1, V]
        steps.append(torch.cat(logits, dim=1))
    torch.testing.assert_close(steps[1], steps[0], rtol=1e-10, atol=1e-10)


def test_unpadded_causal_forward_matches_sdpa():
    reference, ours = two_models()
    ids = torch.randint(0, reference.config.vocab_size, (2, 7))
    torch.testing.assert_close(ours(ids).logits, reference(ids).logits, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("static_cache", [False, True])
def test_greedy_generation_matches_sdpa(static_cache):
    from hw3lib.generation import SamplingConfig, make_engine
    from hw3lib.models.load import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer("tiny-sft")  # CPU: loaded with the GQA attention
    assert model.config._attn_implementation == ATTENTION_NAME
    prompts = ["Tom has 3 apples and buys 4 more. How many apples?", "2 + 2 =", "A long question " * 5]
    sampling = SamplingConfig(n=1, temperature=0.0, max_tokens=24)
    texts = {}
    for implementation in ("sdpa", ATTENTION_NAME):
        model.set_attn_implementation(implementation)
        engine = make_engine("transformers", model, tokenizer=tokenizer, static_cache=static_cache, progress=False)
        texts[implementation] = [group[0].token_ids for group in engine.generate(prompts, sampling)]
    assert texts["sdpa"] == texts[ATTENTION_NAME]
    assert all(texts["sdpa"])  # every prompt got a non-empty continuation


def test_unsupported_features_are_refused():
    q = torch.zeros(1, 4, 2, 8)
    kv = torch.zeros(1, 2, 2, 8)
    with pytest.raises(NotImplementedError, match="position biases"):
        sdpa_gqa_attention(torch.nn.Module(), q, kv, kv, None, position_bias=torch.zeros(1, 4, 2, 2))
