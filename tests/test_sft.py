"""hw3lib.maths.sft: hand-worked numbers, naive references and float64 gradient checks."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from hw3lib import adapters
from hw3lib.maths.sft import (compute_entropy, get_response_log_probs, masked_mean, masked_mean_or_zero, masked_normalize,
                        pack_prompt_and_output_ids, sft_microbatch_train_step, tokenize_prompt_and_output)

INF = float("inf")


def word_tokenizer(pad_token: str | None = "<pad>") -> PreTrainedTokenizerFast:
    """One id per whitespace-separated word, so expected ids can be worked out by hand."""
    vocab = {"<pad>": 0, "a": 1, "b": 2, "c": 3, "d": 4, "e": 5}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=pad_token)


def tiny_qwen3(dtype: torch.dtype = torch.float32, vocab_size: int = 64) -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
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


# --- pack_prompt_and_output_ids (ported from tests/grpo/test_loop.py::rollout_tensors) ------------------

def test_pack_prompt_and_output_ids_hand_worked():
    out = pack_prompt_and_output_ids([[1, 2], [3]], [[4, 5, 6], [7]], pad_id=0)
    # Rows: 1 2 4 5 6 and 3 7 0 0 0 (right padding); labels are the rows shifted by one.
    assert out["input_ids"].tolist() == [[1, 2, 4, 5], [3, 7, 0, 0]]
    assert out["labels"].tolist() == [[2, 4, 5, 6], [7, 0, 0, 0]]
    assert out["response_mask"].tolist() == [[False, True, True, True], [True, False, False, False]]
    assert out["lengths"].tolist() == [4, 1]
    assert out["response_start"].tolist() == [1, 0]  # label columns of the first response tokens
    assert all(out[key].dtype == torch.long for key in ("input_ids", "labels", "lengths", "response_start"))
    assert out["response_mask"].dtype == torch.bool
    assert all(out[key].is_contiguous() for key in out)


def test_pack_column_cut_keeps_every_response_position():
    # The batch of test_train.py::test_response_log_probs_match_the_full_forward: label columns 2..4.
    out = pack_prompt_and_output_ids([[5, 6, 7, 8], [5, 6, 11]], [[12, 13], [14, 15, 16]], pad_id=0)
    cols = slice(int(out["response_start"].min()), int(out["lengths"].max()))
    assert (cols.start, cols.stop) == (2, 5)
    mask = out["response_mask"]
    assert int(mask[:, cols].sum()) == int(mask.sum()) == 5
    for row in range(2):  # each row's response is exactly the label columns [response_start, lengths)
        expected = torch.zeros(mask.shape[1], dtype=torch.bool)
        expected[int(out["response_start"][row]):int(out["lengths"][row])] = True
        assert torch.equal(mask[row], expected)
    assert out["labels"][:, cols][mask[:, cols]].tolist() == [12, 13, 14, 15, 16]


def test_pack_edge_cases_and_errors():
    # an empty response: no response label, response_start == lengths (an empty column range)
    out = pack_prompt_and_output_ids([[1, 2, 3], [4]], [[], [5, 6]], pad_id=9)
    assert out["response_mask"].tolist() == [[False, False], [True, True]]
    assert out["lengths"].tolist() == [2, 2] and out["response_start"].tolist() == [2, 0]
    # an empty prompt: the first output token is no label (as in the course's packing)
    out = pack_prompt_and_output_ids([[]], [[7, 8, 9]], pad_id=0)
    assert out["labels"].tolist() == [[8, 9]] and out["response_mask"].tolist() == [[True, True]]
    assert out["response_start"].tolist() == [0] and out["lengths"].tolist() == [2]
    with pytest.raises(ValueError, match="2 prompts but 1 outputs"):
        pack_prompt_and_output_ids([[1], [2]], [[3]], pad_id=0)
    with pytest.raises(ValueError, match="no sequences"):
        pack_prompt_and_output_ids([], [], pad_id=0)


def test_tokenize_is_pack_on_token_ids_with_the_course_keys(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompts, outputs = ["Question: 2+3?\nAnswer:", "Hi"], [" 5 </answer>", " there, 12 apples"]
    out = tokenize_prompt_and_output(prompts, outputs, tokenizer)
    assert set(out) == {"input_ids", "labels", "response_mask"}  # the course's snapshot compares exactly these
    packed = pack_prompt_and_output_ids(tokenizer(prompts, add_special_tokens=False)["input_ids"],
                                        tokenizer(outputs, add_special_tokens=False)["input_ids"],
                                        tokenizer.pad_token_id)
    for key in out:
        assert torch.equal(out[key], packed[key])


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
    per_seq = masked_normalize(values, mask, dim=-1, normalize_constant=7)
    torch.testing.assert_close(per_seq, torch.tensor([8 / 7, 2.0], dtype=torch.float64))  # 1.1429, 2.0
    per_seq.sum().backward()
    torch.testing.assert_close(values.grad, mask.double() / 7.0)  # 0.1429 on every response token


def test_masked_normalize_dims_keywords_and_masked_nan():
    x = torch.tensor([[1.0, 2.0, float("nan")], [4.0, INF, 6.0]], requires_grad=True)
    mask = torch.tensor([[True, True, False], [True, False, True]])
    torch.testing.assert_close(masked_normalize(x, mask), torch.tensor(13.0))
    torch.testing.assert_close(masked_normalize(x, mask, dim=0, normalize_constant=2.0), torch.tensor([2.5, 1.0, 3.0]))
    torch.testing.assert_close(masked_normalize(x, mask, 1, 2.0), torch.tensor([1.5, 5.0]))  # the adapter's order
    masked_normalize(x, mask, dim=-1).sum().backward()
    assert torch.equal(x.grad, mask.float())  # no NaN from the masked-out NaN/inf
    # Both spellings the handouts use: (1 + 2) / 3 and (4 + 6) / 3 per row; never both at once.
    torch.testing.assert_close(masked_normalize(x, mask, dim=1, constant_normalizer=3.0), torch.tensor([1.0, 10 / 3]))
    torch.testing.assert_close(masked_normalize(x, mask, dim=1, constant_normalizer=3.0),
                               masked_normalize(x, mask, dim=1, normalize_constant=3.0))
    with pytest.raises(TypeError, match="pass the constant once"):
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
    torch.testing.assert_close(row_means, torch.tensor([2.0, math.nan, 8.5]), equal_nan=True)  # empty row: 0/0
    assert row_means.shape == x.mean(-1).shape and masked_mean(x, mask).shape == x.mean().shape
    assert masked_mean(x, torch.zeros_like(mask)).isnan()  # nothing kept at all: NaN, as in the course
    # The guard the losses use: 0 and no gradient for the empty row, masked_mean elsewhere.
    guarded = masked_mean_or_zero(x, mask, dim=-1)
    torch.testing.assert_close(guarded, torch.tensor([2.0, 0.0, 8.5]))
    guarded.sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([[0.5, 0, 0.5], [0, 0, 0], [0, 0.5, 0.5]]))
    assert masked_mean_or_zero(x, torch.zeros_like(mask)).item() == 0.0
    torch.testing.assert_close(masked_mean_or_zero(x, mask), masked_mean(x, mask))


def test_masked_functions_gradcheck_float64():
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(3, 5) > 0.4
    mask[:, 0] = mask[0] = True  # no empty slice along any dim (masked_mean would be NaN there)
    for dim in (None, 0, -1):
        assert torch.autograd.gradcheck(lambda t: masked_mean(t, mask, dim=dim), (x,))
        assert torch.autograd.gradcheck(lambda t: masked_normalize(t, mask, dim=dim, normalize_constant=3.0), (x,))
    # with an empty row, the guarded mean is smooth and its gradient finite
    mask[1] = False
    assert torch.autograd.gradcheck(lambda t: masked_mean_or_zero(t, mask, dim=-1), (x,))


def test_masked_functions_keep_dtype_and_device():
    for device in ("cpu", "meta"):
        for dtype in (torch.bfloat16, torch.float32, torch.float64):
            x = torch.ones(2, 3, dtype=dtype, device=device)
            mask = torch.ones(2, 3, dtype=torch.bool, device=device)
            for out in (masked_mean(x, mask, dim=-1), masked_normalize(x, mask, dim=-1, normalize_constant=3),
                        masked_mean_or_zero(x, mask, dim=-1)):
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


def test_sft_microbatch_train_step_gradcheck_float64():
    log_probs = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(3, 6) > 0.4
    mask[2] = False  # an empty response: contributes 0 to the sum, as the course's masked_normalize

    def composed(lp):  # the loss the step backpropagates, with autograd end to end
        return masked_normalize(-lp, mask, dim=-1, normalize_constant=5.0).mean() / 3

    assert torch.autograd.gradcheck(composed, (log_probs,))
    loss, stats = sft_microbatch_train_step(log_probs, mask, gradient_accumulation_steps=3, normalize_constant=5.0)
    torch.testing.assert_close(log_probs.grad, torch.autograd.grad(composed(log_probs), log_probs)[0])
    torch.testing.assert_close(loss, composed(log_probs).detach())
    # a microbatch without response tokens: loss 0, statistics finite (0), no NaN gradient
    log_probs.grad = None
    loss, stats = sft_microbatch_train_step(log_probs, torch.zeros(3, 6, dtype=torch.bool), 1)
    assert loss.item() == 0.0 and stats["nll_per_token"].item() == 0.0 and torch.equal(
        log_probs.grad, torch.zeros_like(log_probs))


# --- the course's public tests (stanford-cs336/assignment5-alignment tests/test_sft.py) ---------------
# Same fixtures as the course's conftest.py and the same calls; the course compares against stored
# snapshots (np.testing.assert_allclose, NaN == NaN, rtol 1e-4 / atol 1e-2, and exactly the same dict
# keys), which are not available offline, so each test compares against a straightforward reference
# written from the handout's definitions instead, at float32 tolerances. The course's model and
# tokenizer (Qwen2.5-Math-1.5B-Instruct) are replaced by the tiny offline ones.

COURSE_STRS = ["Hello, world!", "This is a test.", "This is another test."]


@pytest.fixture
def course_logits():
    torch.manual_seed(42)
    return torch.randn(size=(2, 10, 100))  # batch_size 2, seq_length 10, vocab_size 100


@pytest.fixture
def course_mask(course_logits):
    torch.manual_seed(42)
    return torch.rand_like(course_logits) > 0.5


@pytest.fixture
def course_input_ids_and_labels():
    torch.manual_seed(42)
    input_ids = torch.randint(0, 100, size=(2, 10))
    labels = torch.cat([input_ids[:, 1:], torch.zeros(size=(2, 1), dtype=input_ids.dtype)], dim=1)
    return input_ids, labels


@pytest.fixture
def course_policy_log_probs():
    torch.manual_seed(42)
    return torch.randn(size=(2, 10))


@pytest.fixture
def course_response_mask(course_policy_log_probs):
    torch.manual_seed(42)
    return torch.rand_like(course_policy_log_probs) > 0.5


def reference_tokenize(prompt_strs, output_strs, tokenizer):
    """The handout's recipe, written out: tokenize separately, concatenate, pad, shift, mask."""
    rows = []
    for prompt, output in zip(prompt_strs, output_strs):
        p, o = tokenizer(prompt)["input_ids"], tokenizer(output)["input_ids"]
        rows.append((p + o, [0] * len(p) + [1] * len(o)))
    width = max(len(ids) for ids, _ in rows)
    ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r, _ in rows])
    is_out = torch.tensor([m + [0] * (width - len(m)) for _, m in rows])
    return {"input_ids": ids[:, :-1], "labels": ids[:, 1:], "response_mask": is_out[:, 1:]}


def reference_masked_normalize(tensor, mask, dim, normalize_constant):
    return torch.sum(tensor * mask, dim=dim) / normalize_constant


def reference_sft_loss(policy_log_probs, response_mask, gradient_accumulation_steps, normalize_constant):
    per_sequence = reference_masked_normalize(-policy_log_probs, response_mask, -1, normalize_constant)
    return per_sequence.mean() / gradient_accumulation_steps


def test_tokenize_prompt_and_output(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    out = adapters.run_tokenize_prompt_and_output(prompt_strs=COURSE_STRS, output_strs=COURSE_STRS,
                                                  tokenizer=tokenizer)
    expected = reference_tokenize(COURSE_STRS, COURSE_STRS, tokenizer)
    assert set(out) == set(expected)
    for key in expected:
        assert torch.equal(out[key], expected[key].to(out[key].dtype)), key
    # hand-worked shape: the longest row is the third prompt + output, one column shorter after the shift
    longest = 2 * len(tokenizer(COURSE_STRS[2])["input_ids"])
    assert out["input_ids"].shape == (3, longest - 1)


def test_compute_entropy(course_logits):
    output = adapters.run_compute_entropy(course_logits)
    expected = -(torch.softmax(course_logits.double(), -1) * torch.log_softmax(course_logits.double(), -1)).sum(-1)
    assert output.shape == (2, 10) and output.dtype == torch.float32
    torch.testing.assert_close(output.double(), expected, atol=1e-5, rtol=1e-5)


def test_get_response_log_probs(course_input_ids_and_labels):
    model = tiny_qwen3(vocab_size=100)
    input_ids, labels = course_input_ids_and_labels
    output = adapters.run_get_response_log_probs(model=model, input_ids=input_ids, labels=labels,
                                                 return_token_entropy=True)
    assert set(output) == {"log_probs", "token_entropy"}  # the snapshot holds exactly these keys
    ref_log_probs, ref_entropy = naive_log_probs_and_entropy(model, input_ids, labels)
    torch.testing.assert_close(output["log_probs"].double(), ref_log_probs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(output["token_entropy"].double(), ref_entropy, atol=1e-5, rtol=1e-5)


def check_masked_normalize(tensor, mask, dim):
    if dim == "none":
        output = adapters.run_masked_normalize(tensor=tensor, mask=mask, normalize_constant=42.0)
    else:
        output = adapters.run_masked_normalize(tensor=tensor, mask=mask, normalize_constant=42.0, dim=dim)
    expected = reference_masked_normalize(tensor, mask, None if dim == "none" else dim, 42.0)
    assert output.shape == expected.shape
    torch.testing.assert_close(output, expected)
    # the other handout's spelling of the constant gives the same numbers
    spelled = adapters.run_masked_normalize(tensor, mask, None if dim == "none" else dim, constant_normalizer=42.0)
    torch.testing.assert_close(spelled, output)


def test_masked_normalize_dim0(course_logits, course_mask):
    check_masked_normalize(course_logits, course_mask, dim=0)


def test_masked_normalize_dim1(course_logits, course_mask):
    check_masked_normalize(course_logits, course_mask, dim=1)


def test_masked_normalize_dimlast(course_logits, course_mask):
    check_masked_normalize(course_logits, course_mask, dim=-1)


def test_masked_normalize_dimNone(course_logits, course_mask):
    check_masked_normalize(course_logits, course_mask, dim="none")


def check_sft_step(course_policy_log_probs, course_response_mask, normalize_constant, **spelling):
    policy_log_probs = course_policy_log_probs.clone().requires_grad_()
    constant = spelling or {"normalize_constant": normalize_constant}
    loss, _ = adapters.run_sft_microbatch_train_step(policy_log_probs=policy_log_probs,
                                                     response_mask=course_response_mask,
                                                     gradient_accumulation_steps=2, **constant)
    expected_lp = course_policy_log_probs.clone().requires_grad_()
    expected = reference_sft_loss(expected_lp, course_response_mask, 2, normalize_constant)
    expected.backward()
    torch.testing.assert_close(loss, expected.detach())  # the scaled loss is returned
    torch.testing.assert_close(policy_log_probs.grad, expected_lp.grad)
    # hand-worked gradient: -mask / (normalize_constant * batch 2 * accumulation 2)
    torch.testing.assert_close(policy_log_probs.grad, -course_response_mask.float() / (normalize_constant * 4))


def test_sft_microbatch_train_step(course_policy_log_probs, course_response_mask):
    check_sft_step(course_policy_log_probs, course_response_mask, 1.0)


def test_sft_microbatch_train_step_normalize(course_policy_log_probs, course_response_mask):
    check_sft_step(course_policy_log_probs, course_response_mask, 42.0)
    # the spellings other handouts and student repositories use for the constant
    check_sft_step(course_policy_log_probs, course_response_mask, 42.0, constant_normalizer=42.0)
    check_sft_step(course_policy_log_probs, course_response_mask, 42.0, normalization_constant=42.0)
    with pytest.raises(TypeError, match="once"):
        adapters.run_sft_microbatch_train_step(course_policy_log_probs.clone().requires_grad_(),
                                               course_response_mask, 2, 42.0, constant_normalizer=42.0)


def test_sft_microbatch_train_step_10_steps(course_policy_log_probs, course_response_mask):
    policy_log_probs = course_policy_log_probs.clone().requires_grad_()
    losses, grads = [], []
    for _ in range(10):  # as the course: .grad accumulates in place, so every entry is the final sum
        loss, _ = adapters.run_sft_microbatch_train_step(policy_log_probs=policy_log_probs,
                                                         response_mask=course_response_mask,
                                                         gradient_accumulation_steps=2, normalize_constant=1.0)
        losses.append(loss)
        grads.append(policy_log_probs.grad)
    expected_lp = course_policy_log_probs.clone().requires_grad_()
    expected = reference_sft_loss(expected_lp, course_response_mask, 2, 1.0)
    for _ in range(10):
        expected.backward(retain_graph=True)
    torch.testing.assert_close(torch.stack(losses), expected.detach().expand(10))
    torch.testing.assert_close(torch.stack(grads), expected_lp.grad.expand(10, 2, 10))
    torch.testing.assert_close(expected_lp.grad, -10 * course_response_mask.float() / 4)
