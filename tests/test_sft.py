"""hw3lib.sft: hand-worked numbers, naive references and float64 gradient checks."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from hw3lib.sft import (compute_entropy, get_response_log_probs, masked_mean, masked_normalize,
                        sft_microbatch_train_step, tokenize_prompt_and_output)

INF = float("inf")


def word_tokenizer(pad_token: str | None = "<pad>") -> PreTrainedTokenizerFast:
    """One id per whitespace-separated word, so expected ids can be worked out by hand."""
    vocab = {"<pad>": 0, "a": 1, "b": 2, "c": 3, "d": 4, "e": 5}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=pad_token)


def tiny_qwen3(dtype: torch.dtype = torch.float32) -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    return Qwen3ForCausalLM(cfg).to(dtype).eval()


def naive_log_probs_and_entropy(model, input_ids, labels):
    """Reference: full log_softmax over the vocabulary, gather, entropy from the same tensor."""
    log_p = torch.log_softmax(model(input_ids).logits.double(), dim=-1)  # [B, T, V]
    picked = log_p.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # [B, T]
    return picked, -(log_p.exp() * log_p).sum(-1)


# --- tokenize_prompt_and_output ---------------------------------------------------------------

def test_tokenize_hand_worked():
    # prompts -> [1, 2], [3]; outputs -> [3], [4, 5, 1]; full (pad 0): [1, 2, 3, 0], [3, 4, 5, 1]
    out = tokenize_prompt_and_output(["a b", "c"], ["c", "d e a"], word_tokenizer())
    assert out["input_ids"].tolist() == [[1, 2, 3], [3, 4, 5]]
    assert out["labels"].tolist() == [[2, 3, 0], [4, 5, 1]]
    assert out["response_mask"].tolist() == [[False, True, False], [True, True, True]]
    assert out["input_ids"].dtype == out["labels"].dtype == torch.long
    assert out["response_mask"].dtype == torch.bool


def test_tokenize_no_special_tokens_and_byte_level_bpe(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompts, outputs = ["Question: 2+3?\nAnswer:", "Hi"], [" 5 </answer>", " there, 12 apples"]
    out = tokenize_prompt_and_output(prompts, outputs, tokenizer)
    for row, (prompt, output) in enumerate(zip(prompts, outputs)):
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        output_ids = tokenizer(output, add_special_tokens=False)["input_ids"]
        mask = out["response_mask"][row]
        assert out["labels"][row][mask].tolist() == output_ids
        assert out["input_ids"][row, :len(prompt_ids)].tolist() == prompt_ids
        assert int(mask.sum()) == len(output_ids)
        assert out["labels"][row, len(prompt_ids) + len(output_ids) - 1:].eq(tokenizer.pad_token_id).all()
    assert out["input_ids"].shape == out["labels"].shape == out["response_mask"].shape


def test_tokenize_errors():
    with pytest.raises(ValueError, match="output_strs has 1"):
        tokenize_prompt_and_output(["a", "b"], ["c"], word_tokenizer())
    with pytest.raises(ValueError, match="no pad token"):
        tokenize_prompt_and_output(["a"], ["c"], word_tokenizer(pad_token=None))


# --- compute_entropy ---------------------------------------------------------------------------

def test_entropy_hand_worked_and_extreme_logits():
    logits = torch.tensor([
        [0.0, 0.0, 0.0, 0.0],                  # uniform over 4: log 4
        [0.0, math.log(3.0), -INF, -INF],      # p = (1/4, 3/4): 0.5623
        [1e4, 1e4, -INF, 1e4],                 # huge logits, one masked: log 3
        [1e4, 0.0, -1e4, -INF],                # effectively one-hot: 0
    ], dtype=torch.float64)
    expected = [math.log(4), -(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), math.log(3), 0.0]
    torch.testing.assert_close(compute_entropy(logits), torch.tensor(expected, dtype=torch.float64))


def test_entropy_gradient_float64_and_masked_entries():
    logits = torch.randn(3, 5, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(compute_entropy, (logits,))
    # dH/dz_i = -p_i (log p_i + H); masked (-inf) entries get exactly 0, not NaN.
    masked = torch.tensor([[0.3, -1.2, -INF, 2.0]], dtype=torch.float64, requires_grad=True)
    compute_entropy(masked).sum().backward()
    p = torch.softmax(masked.detach(), -1)
    h = compute_entropy(masked.detach())
    expected = torch.where(p > 0, -p * (torch.log(p) + h), 0.0)
    torch.testing.assert_close(masked.grad, expected)


def test_entropy_bf16_computed_in_float32():
    logits = (torch.randn(4, 50) * 5).bfloat16()
    entropy = compute_entropy(logits)
    log_p = torch.log_softmax(logits.double(), -1)
    assert entropy.dtype == torch.float32
    torch.testing.assert_close(entropy.double(), -(log_p.exp() * log_p).sum(-1), atol=1e-5, rtol=1e-5)


# --- get_response_log_probs --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("chunk_tokens", [None, 1, 3, 7])
def test_log_probs_match_naive_reference(dtype, chunk_tokens):
    model = tiny_qwen3(dtype)
    input_ids = torch.randint(0, 64, (3, 9), generator=torch.Generator().manual_seed(1))
    labels = torch.randint(0, 64, (3, 9), generator=torch.Generator().manual_seed(2))
    out = get_response_log_probs(model, input_ids, labels, return_token_entropy=True, chunk_tokens=chunk_tokens)
    ref_log_probs, ref_entropy = naive_log_probs_and_entropy(model, input_ids, labels)
    tol = {"atol": 1e-12, "rtol": 1e-12} if dtype == torch.float64 else {"atol": 1e-5, "rtol": 1e-5}
    assert out["log_probs"].shape == out["token_entropy"].shape == (3, 9)
    assert out["log_probs"].dtype == dtype
    torch.testing.assert_close(out["log_probs"].double(), ref_log_probs, **tol)
    torch.testing.assert_close(out["token_entropy"].double(), ref_entropy, **tol)
    assert "token_entropy" not in get_response_log_probs(model, input_ids, labels)


def test_log_probs_gradients_match_naive_reference():
    model = tiny_qwen3(torch.float64)
    input_ids, labels = torch.randint(0, 64, (2, 6)), torch.randint(0, 64, (2, 6))
    weights = torch.randn(2, 6, dtype=torch.float64)
    (get_response_log_probs(model, input_ids, labels, chunk_tokens=5)["log_probs"] * weights).sum().backward()
    chunked = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    (naive_log_probs_and_entropy(model, input_ids, labels)[0] * weights).sum().backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(chunked[name], p.grad, msg=name)
    assert any(g.abs().sum() > 0 for g in chunked.values())


def test_log_probs_gradcheck_float64_through_logits():
    labels = torch.tensor([[0, 3, 1], [2, 2, 4]])
    logits = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)

    def log_probs_of(z):
        model = lambda ids: SimpleNamespace(logits=z)  # noqa: E731 -- a 'model' returning fixed logits
        return get_response_log_probs(model, labels, labels, chunk_tokens=4)["log_probs"]

    assert torch.autograd.gradcheck(log_probs_of, (logits,))
    # closed form: d log p_y / d z = onehot(y) - softmax(z)
    log_probs_of(logits).sum().backward()
    expected = torch.nn.functional.one_hot(labels, 5) - torch.softmax(logits.detach(), -1)
    torch.testing.assert_close(logits.grad, expected)


def test_log_probs_bf16_model_are_float32():
    model = tiny_qwen3(torch.bfloat16)
    input_ids, labels = torch.randint(0, 64, (2, 5)), torch.randint(0, 64, (2, 5))
    out = get_response_log_probs(model, input_ids, labels, return_token_entropy=True, chunk_tokens=4)
    ref_log_probs, ref_entropy = naive_log_probs_and_entropy(model, input_ids, labels)
    assert out["log_probs"].dtype == out["token_entropy"].dtype == torch.float32
    torch.testing.assert_close(out["log_probs"].double(), ref_log_probs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out["token_entropy"].double(), ref_entropy, atol=1e-5, rtol=1e-5)
    assert not out["token_entropy"].requires_grad and out["log_probs"].requires_grad


# --- masked_normalize / masked_mean ------------------------------------------------------------

def length_example():
    """The course's example: every token value 2, responses of 4 and 7 tokens."""
    values = torch.full((2, 7), 2.0, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0], [1] * 7])
    return values, mask


def test_length_normalization_example_values_and_gradients():
    values, mask = length_example()
    per_seq = masked_mean(values, mask, dim=-1)
    torch.testing.assert_close(per_seq, torch.tensor([2.0, 2.0], dtype=torch.float64))
    per_seq.sum().backward()
    torch.testing.assert_close(values.grad, mask / torch.tensor([[4.0], [7.0]], dtype=torch.float64))  # 0.25, 1/7

    values, mask = length_example()
    per_seq = masked_normalize(values, mask, dim=-1, constant_normalizer=7)
    torch.testing.assert_close(per_seq, torch.tensor([8 / 7, 2.0], dtype=torch.float64))  # 1.1429, 2.0
    per_seq.sum().backward()
    torch.testing.assert_close(values.grad, mask.double() / 7.0)  # 0.1429 on every response token


def test_masked_normalize_dims_keywords_and_masked_nan():
    x = torch.tensor([[1.0, 2.0, float("nan")], [4.0, INF, 6.0]], requires_grad=True)
    mask = torch.tensor([[True, True, False], [True, False, True]])
    torch.testing.assert_close(masked_normalize(x, mask), torch.tensor(13.0))
    torch.testing.assert_close(masked_normalize(x, mask, dim=0, normalize_constant=2.0), torch.tensor([2.5, 1.0, 3.0]))
    torch.testing.assert_close(masked_normalize(x, mask, 1, 2.0, constant_normalizer=2.0), torch.tensor([1.5, 5.0]))
    masked_normalize(x, mask, dim=-1).sum().backward()
    assert torch.equal(x.grad, mask.float())  # no NaN from the masked-out NaN/inf
    with pytest.raises(ValueError, match="disagree"):
        masked_normalize(x, mask, normalize_constant=2.0, constant_normalizer=3.0)
    with pytest.raises(TypeError, match="normalize_constant="):
        masked_normalize(x, mask, 2.0)
    with pytest.raises(ValueError, match="mask has shape"):
        masked_normalize(x, mask[:, :2])


def test_masked_mean_dims_and_empty_rows():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], requires_grad=True)
    mask = torch.tensor([[1, 0, 1], [0, 0, 0], [0, 1, 1]])
    torch.testing.assert_close(masked_mean(x, mask), torch.tensor(21.0 / 4))
    torch.testing.assert_close(masked_mean(x, mask, dim=0), torch.tensor([1.0, 8.0, 6.0]))
    row_means = masked_mean(x, mask, dim=-1)
    torch.testing.assert_close(row_means, torch.tensor([2.0, 0.0, 8.5]))  # empty row -> 0
    assert row_means.shape == x.mean(-1).shape and masked_mean(x, mask).shape == x.mean().shape
    row_means.sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([[0.5, 0, 0.5], [0, 0, 0], [0, 0.5, 0.5]]))


def test_masked_functions_gradcheck_float64():
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(3, 5) > 0.4
    for dim in (None, 0, -1):
        assert torch.autograd.gradcheck(lambda t: masked_mean(t, mask, dim=dim), (x,))
        assert torch.autograd.gradcheck(lambda t: masked_normalize(t, mask, dim=dim, normalize_constant=3.0), (x,))


def test_masked_functions_keep_dtype_and_device():
    for device in ("cpu", "meta"):
        for dtype in (torch.bfloat16, torch.float32, torch.float64):
            x = torch.ones(2, 3, dtype=dtype, device=device)
            mask = torch.ones(2, 3, dtype=torch.bool, device=device)
            for out in (masked_mean(x, mask, dim=-1), masked_normalize(x, mask, dim=-1, normalize_constant=3)):
                assert out.dtype == dtype and out.device.type == device


# --- sft_microbatch_train_step -----------------------------------------------------------------

def test_sft_microbatch_train_step_hand_worked():
    log_probs = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    # per sequence NLL sums: [3, 11]; / constant 2 -> [1.5, 5.5]; batch mean 3.5; / 2 microbatches -> 1.75
    loss, stats = sft_microbatch_train_step(log_probs, mask, gradient_accumulation_steps=2, normalize_constant=2.0)
    torch.testing.assert_close(loss, torch.tensor(1.75, dtype=torch.float64))
    torch.testing.assert_close(stats["loss_unscaled"], torch.tensor(3.5, dtype=torch.float64))
    torch.testing.assert_close(stats["nll_per_token"], torch.tensor(14.0 / 4, dtype=torch.float64))
    assert int(stats["response_tokens"]) == 4
    # d loss / d logp = -mask / (constant * batch * accumulation steps) = -1/8
    torch.testing.assert_close(log_probs.grad, -mask.double() / 8.0)
    assert not loss.requires_grad and not any(v.requires_grad for v in stats.values())


def test_sft_microbatch_train_step_accumulates_to_full_batch_gradient():
    log_probs = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(4, 5) > 0.3
    sft_microbatch_train_step(log_probs, mask, gradient_accumulation_steps=1, normalize_constant=3.0)
    full_grad = log_probs.grad.clone()
    halves = [log_probs.detach()[:2].clone().requires_grad_(), log_probs.detach()[2:].clone().requires_grad_()]
    for half, half_mask in zip(halves, (mask[:2], mask[2:])):
        sft_microbatch_train_step(half, half_mask, gradient_accumulation_steps=2, normalize_constant=3.0)
    torch.testing.assert_close(torch.cat([h.grad for h in halves]), full_grad)
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        sft_microbatch_train_step(log_probs, mask, gradient_accumulation_steps=0)
