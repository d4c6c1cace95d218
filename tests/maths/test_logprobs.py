"""hw3lib.maths.logprobs and hw3lib.grpo.step: rollout log-probs at the sampling temperature, the loss the
loop assembles (empty responses, truncated importance sampling), step metrics over all tokens, and
mixed precision that keeps every update."""

from __future__ import annotations

import math

import pytest
import torch


def test_shared_prefix_length():
    from hw3lib.maths.logprobs import shared_prefix_length

    assert shared_prefix_length([[1, 2, 3, 4], [1, 2, 3, 9, 9], [1, 2, 5]]) == 2
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3, 4]]) == 2  # one token short of the shortest prompt
    assert shared_prefix_length([[7, 1], [8, 1]]) == 0


@pytest.mark.parametrize("shared_prefix", [0, 2])
def test_response_log_probs_match_the_full_forward(tiny_model_dir, shared_prefix):
    """Logits for the response columns only (logits_to_keep), with or without the shared prompt prefix
    run once, give the full forward's log-probs, entropies and parameter gradients. (Qwen3's RMSNorm
    computes in float32 even in a float64 model, so the paths agree to float32 rounding.)"""
    from hw3lib.maths.sft import get_response_log_probs
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.maths.logprobs import response_log_probs
    from hw3lib.maths.sft import pack_prompt_and_output_ids

    model, _ = load_model_and_tokenizer(str(tiny_model_dir))
    model = model.double()
    batch = pack_prompt_and_output_ids([[5, 6, 7, 8], [5, 6, 11]], [[12, 13], [14, 15, 16]], pad_id=0)
    full = get_response_log_probs(model, batch["input_ids"], batch["labels"], return_token_entropy=True)
    (full["log_probs"] * batch["response_mask"]).sum().backward()
    expected_grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    cols = slice(int(batch["response_start"].min()), int(batch["lengths"].max()))  # label columns 2..4
    part = response_log_probs(model, batch["input_ids"][:, :cols.stop], batch["labels"][:, cols],
                              return_token_entropy=True, shared_prefix=shared_prefix)
    mask = batch["response_mask"][:, cols]
    (part["log_probs"] * mask).sum().backward()
    for key in ("log_probs", "token_entropy"):
        torch.testing.assert_close(part[key][mask], full[key][:, cols][mask], rtol=1e-6, atol=1e-7)
    for name, p in model.named_parameters():
        scale = expected_grads[name].abs().max().item()
        torch.testing.assert_close(p.grad, expected_grads[name], rtol=1e-4, atol=1e-6 * scale)
    if shared_prefix:
        with pytest.raises(ValueError, match="do not share"):
            response_log_probs(model, batch["input_ids"], batch["labels"], shared_prefix=3)


def test_kl_estimates_hand_worked():
    from hw3lib.maths.logprobs import kl_estimates

    log_p = torch.tensor([[math.log(0.5), math.log(0.25), 0.0]])
    log_ref = torch.tensor([[math.log(0.25), math.log(0.5), 5.0]])
    mask = torch.tensor([[True, True, False]])  # the third token is padding
    k1, k3 = kl_estimates(log_p, log_ref, mask)
    # k1 per token: log 2, -log 2 -> mean 0.  k3: r - log r - 1 with r = ref/p = 1/2 and 2:
    # (0.5 + log 2 - 1) + (2 - log 2 - 1) = 0.5 -> mean 0.25.
    assert k1.item() == pytest.approx(0.0, abs=1e-7)
    assert k3.item() == pytest.approx(0.25, abs=1e-6)
    same = kl_estimates(log_p, log_p, mask)
    assert same[0].item() == 0.0 and same[1].item() == 0.0



def test_trainer_log_probs_equal_the_transformers_engines_at_temperature_0_6():
    """At T = 0.6 (top_p 1, no min_tokens) the trainer's per-token log-probs equal the engine's within 1e-4."""
    from hw3lib.tasks.data import format_prompt, make_arithmetic_problems
    from hw3lib.generation import SamplingConfig, make_engine
    from hw3lib.maths.logprobs import batched_log_probs, shared_prefix_length
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.maths.sft import pack_prompt_and_output_ids

    model, tokenizer = load_model_and_tokenizer("tiny-sft")
    engine = make_engine("transformers", "tiny-sft", batch_size=16, progress=False)  # its own copy, static cache off
    prompts = [format_prompt("r1_zero", r["question"]) for r in make_arithmetic_problems(4, seed=3, max_operand=4)]
    samples = [s for group in engine.generate(prompts, SamplingConfig(n=4, temperature=0.6, max_tokens=24, stop=(),
                                                                      seed=0)) for s in group]
    prompt_ids = tokenizer([p for p in prompts for _ in range(4)], add_special_tokens=False)["input_ids"]
    batch = pack_prompt_and_output_ids(prompt_ids, [s.token_ids for s in samples], tokenizer.pad_token_id)
    prefix = shared_prefix_length(prompt_ids)
    ours = batched_log_probs(model, batch, 8, prefix, temperature=0.6)  # [N, L-1]
    raw = batched_log_probs(model, batch, 8, prefix, temperature=1.0)  # [N, L-1]
    gap = max((ours[i, batch["response_mask"][i]] - torch.tensor(s.logprobs)).abs().max().item()
              for i, s in enumerate(samples))
    raw_gap = max((raw[i, batch["response_mask"][i]] - torch.tensor(s.logprobs)).abs().max().item()
                  for i, s in enumerate(samples))
    print(f"max |trainer - engine| at T=0.6: {gap:.2e}; with the temperature ignored: {raw_gap:.2e}")
    assert gap < 1e-4
    assert raw_gap > 1e-2


def test_response_log_probs_divide_the_logits_by_the_temperature(tiny_model_dir):
    from hw3lib.maths.logprobs import response_log_probs
    from hw3lib.models.load import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(str(tiny_model_dir))
    ids, labels = torch.tensor([[5, 6, 7, 8, 9]]), torch.tensor([[7, 8, 9, 10]])
    with torch.no_grad():
        logits = model(ids).logits[:, 1:].float() / 0.5  # [1, 4, V]
        expected = torch.log_softmax(logits, -1).gather(-1, labels[..., None]).squeeze(-1)
        got = response_log_probs(model, ids, labels, temperature=0.5, return_token_entropy=True)
    torch.testing.assert_close(got["log_probs"], expected, rtol=1e-5, atol=1e-5)
    entropy = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    torch.testing.assert_close(got["token_entropy"], entropy, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="temperature"):
        response_log_probs(model, ids, labels, temperature=0.0)


# ---- the loss the loop assembles ---------------------------------------------------------------------------

def _cfg(**changes):
    from hw3lib.grpo.config import GRPOConfig

    base = dict(rollout_batch_size=4, group_size=2, train_batch_size=2, gradient_accumulation_steps=1,
                loss_type="reinforce_with_baseline", sampling_max_tokens=8)
    return GRPOConfig(**{**base, **changes})


def test_microbatch_loss_hand_worked_with_an_empty_response_and_tis():
    """Two sequences: lengths 2 and 0 (empty). reinforce_with_baseline, A = (1, 5):
    per-token loss -A * logp. Sequence 1: -(1)(-1 + -3)/2 = 2; the empty one contributes 0 (not NaN);
    the step's mean over train_batch_size = 2 sequences is 1. With TIS weights (2, 0.5) on sequence 1:
    -(2 * -1 + 0.5 * -3)/2 = 1.75 -> 0.875. Gradients: d/dlogp = -A * w / len / 2."""
    from hw3lib.grpo.step import microbatch_loss

    log_probs = torch.tensor([[-1.0, -3.0], [-2.0, -2.0]], requires_grad=True)
    mask = torch.tensor([[True, True], [False, False]])
    adv = torch.tensor([[1.0], [5.0]])
    loss = microbatch_loss(log_probs, mask, _cfg(), raw_rewards=adv, advantages=adv, old_log_probs=None,
                           tis_weights=None)
    assert loss.item() == pytest.approx(1.0)
    loss.backward()
    assert log_probs.grad.tolist() == [[-0.25, -0.25], [0.0, 0.0]]
    log_probs.grad = None
    weighted = microbatch_loss(log_probs, mask, _cfg(), raw_rewards=adv, advantages=adv, old_log_probs=None,
                               tis_weights=torch.tensor([[2.0, 0.5], [1.0, 1.0]]))
    assert weighted.item() == pytest.approx(0.875)
    weighted.backward()
    assert log_probs.grad.tolist() == [[-0.5, -0.125], [0.0, 0.0]]
    constant = microbatch_loss(log_probs, mask, _cfg(length_normalization="constant"), raw_rewards=adv,
                               advantages=adv, old_log_probs=None, tis_weights=None)
    assert constant.item() == pytest.approx(4.0 / 8 / 2)  # summed, / the budget 8, / 2 sequences


def _step_inputs(policy, tokenizer, n=8, temperature=1.0):
    from hw3lib.tasks.data import format_prompt, make_arithmetic_problems
    from hw3lib.generation import SamplingConfig, make_engine
    from hw3lib.maths.logprobs import shared_prefix_length
    from hw3lib.maths.sft import pack_prompt_and_output_ids
    from hw3lib.grpo.loop import response_values

    engine = make_engine("transformers", policy, tokenizer=tokenizer, batch_size=n, progress=False)
    prompts = [format_prompt("r1_zero", r["question"]) for r in make_arithmetic_problems(n // 2, seed=1, max_operand=4)]
    samples = [s for g in engine.generate(prompts, SamplingConfig(n=2, temperature=temperature, max_tokens=12,
                                                                  stop=(), seed=2)) for s in g]
    prompt_ids = tokenizer([p for p in prompts for _ in range(2)], add_special_tokens=False)["input_ids"]
    packed = pack_prompt_and_output_ids(prompt_ids, [s.token_ids for s in samples], tokenizer.pad_token_id)
    adv = torch.linspace(-1.0, 1.0, n).unsqueeze(1)  # [N, 1]
    return packed, response_values(packed, [s.logprobs for s in samples]), adv, shared_prefix_length(prompt_ids)


def test_step_metrics_are_token_means_over_the_whole_step_whatever_the_microbatching():
    """One optimizer step over 8 rollouts of different lengths as 1, 2 or 8 microbatches: the same
    gradient and the same entropy / ratio / clip statistics (means over all response tokens)."""
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.grpo.step import optimizer_step

    policy, tokenizer = load_model_and_tokenizer("tiny-sft")
    packed, engine_lp, adv, prefix = _step_inputs(policy, tokenizer)
    assert len(set(packed["lengths"].tolist())) > 1  # really different lengths
    old = engine_lp + 0.05 * torch.randn_like(engine_lp)  # a ratio != 1, some tokens clipped
    results, grads = [], []
    for accumulation in (1, 2, 8):
        cfg = _cfg(rollout_batch_size=8, group_size=2, train_batch_size=8, gradient_accumulation_steps=accumulation,
                   loss_type="grpo_clip", cliprange=0.02, dtype="float32")
        optimizer = torch.optim.SGD(policy.parameters(), lr=0.0)  # lr 0: the weights stay, the gradient is kept
        captured = {}
        stats = optimizer_step(policy, optimizer, list(policy.parameters()), cfg, dict(packed), torch.arange(8),
                               raw_rewards=adv, advantages=adv, old_log_probs=old, ref_log_probs=None,
                               engine_log_probs=engine_lp, shared_prefix=prefix, learning_rate=0.0,
                               measure_mismatch=True,
                               before_update=lambda m: captured.update({n: p.grad.clone() for n, p in
                                                                        m.named_parameters() if p.grad is not None}))
        results.append(stats)
        grads.append(captured)
    assert 0.0 < results[0]["clip_fraction"] < 1.0
    for other, other_grads in zip(results[1:], grads[1:]):
        for key in ("entropy", "clip_fraction", "ratio_mean", "loss"):  # (the mismatch is float noise here)
            assert other[key] == pytest.approx(results[0][key], rel=1e-4, abs=1e-6), key
        for name, grad in grads[0].items():
            torch.testing.assert_close(other_grads[name], grad, rtol=1e-3, atol=1e-6)
    assert results[0]["mismatch_abs"] / results[0]["mismatch_tokens"] < 1e-4  # float32 engine == trainer


def test_bfloat16_step_keeps_every_update_and_pure_bf16_would_not():
    """dtype='bfloat16' at lr 1e-5: float32 masters + bf16 autocast, so one AdamW step changes >= 99% of
    the weights that got a non-zero gradient. The same step applied to bf16 weights rounds most away."""
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.grpo.step import optimizer_step

    policy, tokenizer = load_model_and_tokenizer("tiny-sft")  # float32 masters, as the loop loads them
    packed, engine_lp, adv, prefix = _step_inputs(policy, tokenizer)
    cfg = _cfg(rollout_batch_size=8, group_size=2, train_batch_size=8, gradient_accumulation_steps=2,
               dtype="bfloat16", learning_rate=1e-5)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    grads = {}
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.0)
    stats = optimizer_step(policy, optimizer, list(policy.parameters()), cfg, dict(packed), torch.arange(8),
                           raw_rewards=adv, advantages=adv, old_log_probs=None, ref_log_probs=None,
                           engine_log_probs=engine_lp, shared_prefix=prefix, learning_rate=1e-5,
                           measure_mismatch=True,
                           before_update=lambda m: grads.update({n: p.grad.clone() for n, p in m.named_parameters()}))
    assert stats["updated"] and all(p.dtype == torch.float32 for p in policy.parameters())
    nonzero = changed = bf16_changed = 0
    for name, p in policy.named_parameters():
        has_grad = grads[name] != 0
        nonzero += int(has_grad.sum())
        changed += int((p.detach() != before[name])[has_grad].sum())
        # the same update applied to bf16 weights: what a pure-bf16 run would keep
        bf16_after = (before[name].bfloat16() + (p.detach() - before[name]).bfloat16()).bfloat16()
        bf16_changed += int((bf16_after != before[name].bfloat16())[has_grad].sum())
    print(f"changed {changed}/{nonzero} ({changed / nonzero:.1%}); pure bf16 would keep {bf16_changed / nonzero:.1%}")
    assert nonzero > 1000
    assert changed / nonzero >= 0.99
    assert bf16_changed / nonzero < 0.5


def test_top_p_and_bad_tis_cap_are_refused_at_config_time():
    from hw3lib.grpo.config import GRPOConfig

    with pytest.raises(ValueError, match="sampling_top_p=0.9: training needs 1.0"):
        GRPOConfig(sampling_top_p=0.9)
    with pytest.raises(ValueError, match="tis_cap"):
        GRPOConfig(tis_cap=0.5)
    assert GRPOConfig(tis_cap=2.0, train_batch_size=128, gradient_accumulation_steps=64).needs_old_log_probs
