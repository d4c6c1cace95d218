"""Supervised fine-tuning maths as pure tensor functions (plus the one model call for log-probs).

Implemented (the course's names and arguments):

- `pack_prompt_and_output_ids`: the packing behind it, on token ids: prompt + output concatenated,
  right-padded, shifted by one, plus each row's real length and first response column.
- `tokenize_prompt_and_output`: prompt and output tokenized separately, concatenated, right-padded;
  `input_ids`/`labels` are the sequence shifted by one and `response_mask` (bool) marks the labels
  that are response tokens.
- `compute_entropy`: per-token entropy of the next-token distribution, via `log_softmax`
  (logsumexp inside), safe for huge logits and `-inf` (masked-out) vocabulary entries.
- `get_response_log_probs`: log p(label | prefix) for every position, computed over chunks of
  tokens by a small autograd function, so besides the model's own `[batch, seq, vocab]` logits
  only one chunk's float32 temporaries exist at a time (forward and backward); see
  `bench/bench_logprobs.py` for the measured peaks.
- `masked_normalize` / `masked_mean`: sums and means over the entries a mask keeps. As in the
  course, `masked_mean` of a slice with no kept entry is 0/0 = NaN; the losses built on it
  (`sft_microbatch_train_step` stats, `hw3lib.maths.grpo.grpo_microbatch_train_step`) guard empty
  responses themselves, and any other caller averaging over a possibly empty mask must too.
- `sft_microbatch_train_step`: the SFT loss of one microbatch -- negative log-likelihood summed
  over response tokens, divided by `normalize_constant`, averaged over the batch, divided by
  `gradient_accumulation_steps` -- and its backward pass.

Masks may be bool or 0/1 integers/floats; masked entries are selected with `torch.where`, so
NaN or inf values under the mask never leak into sums or gradients.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# A chunk of logits holds at most this many elements (2**25 floats = 128 MiB in float32), so
# Qwen3's vocabulary of 151,936 gives chunks of 220 tokens.
CHUNK_ELEMENTS = 2**25


def pack_prompt_and_output_ids(prompt_ids: Sequence[Sequence[int]], output_ids: Sequence[Sequence[int]],
                               pad_id: int) -> dict[str, torch.Tensor]:
    """Prompt + output token ids, concatenated, right-padded with `pad_id` and shifted by one.

    With `L` the longest prompt + output, returns:

    - `input_ids`, `labels` (long, `[N, L - 1]`): the padded sequences without their last / first
      token, so `labels[:, j]` is the token that follows `input_ids[:, j]`;
    - `response_mask` (bool, `[N, L - 1]`): True exactly where `labels` is an output token;
    - `lengths` (long, `[N]`): each row's real (unpadded) length in these shifted tensors,
      `len(prompt) + len(output) - 1`;
    - `response_start` (long, `[N]`): the label column of each row's first output token,
      `len(prompt) - 1` (0 for an empty prompt, whose first output token is no label, as in the
      course's packing).

    Rows are left-aligned, so a subset of rows cut to the columns
    `[min response_start, max lengths)` keeps every output position where it was.
    """
    if len(prompt_ids) != len(output_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(output_ids)} outputs: pass one output per prompt")
    if not prompt_ids:
        raise ValueError("no sequences to pack: pass at least one prompt and output")
    totals = [len(p) + len(o) for p, o in zip(prompt_ids, output_ids)]
    full = torch.full((len(totals), max(totals)), pad_id, dtype=torch.long)  # [N, L]
    is_output = torch.zeros(full.shape, dtype=torch.bool)  # [N, L]
    for row, (prompt, output) in enumerate(zip(prompt_ids, output_ids)):
        full[row, :totals[row]] = torch.tensor([*prompt, *output], dtype=torch.long)
        is_output[row, len(prompt):totals[row]] = True
    return {
        "input_ids": full[:, :-1].contiguous(),  # [N, L-1]
        "labels": full[:, 1:].contiguous(),  # [N, L-1]
        "response_mask": is_output[:, 1:].contiguous(),  # [N, L-1]: label j is token j+1
        "lengths": torch.tensor([max(total - 1, 0) for total in totals], dtype=torch.long),  # [N]
        "response_start": torch.tensor([max(len(p) - 1, 0) for p in prompt_ids], dtype=torch.long),  # [N]
    }


def tokenize_prompt_and_output(prompt_strs: Sequence[str], output_strs: Sequence[str],
                               tokenizer) -> dict[str, torch.Tensor]:
    """Tokenize prompt/output pairs into shifted `input_ids`, `labels` and a response mask.

    Each prompt and each output are tokenized separately (no special tokens added) and
    concatenated; sequences are right-padded with `tokenizer.pad_token_id` to the longest one,
    `max_len` (see `pack_prompt_and_output_ids`). Returns exactly the course's keys, each of shape
    `[batch, max_len - 1]`:

    - `input_ids` (long): the full sequences without their last token;
    - `labels` (long): the full sequences without their first token (the next-token targets);
    - `response_mask` (bool): True exactly where `labels` is a response token (not prompt, not padding).
    """
    if len(prompt_strs) != len(output_strs):
        raise ValueError(f"prompt_strs has {len(prompt_strs)} entries but output_strs has {len(output_strs)}: "
                         "pass one output per prompt")
    if tokenizer.pad_token_id is None:
        raise ValueError("tokenizer has no pad token: set tokenizer.pad_token (e.g. to tokenizer.eos_token)")
    prompts = tokenizer(list(prompt_strs), add_special_tokens=False)["input_ids"]
    outputs = tokenizer(list(output_strs), add_special_tokens=False)["input_ids"]
    packed = pack_prompt_and_output_ids(prompts, outputs, tokenizer.pad_token_id)
    return {key: packed[key] for key in ("input_ids", "labels", "response_mask")}


def _upcast(logits: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 logits are computed on in float32; float32 and float64 stay as they are."""
    return logits.float() if logits.dtype in (torch.bfloat16, torch.float16) else logits


def _entropy_from_log_p(log_p: torch.Tensor) -> torch.Tensor:
    """Entropy `-sum p log p` from log-probabilities: `[..., V] -> [...]`."""
    # p underflows to exactly 0 well above log p = -1e4 (even in float64), so this clamp changes no
    # value but makes masked (-inf) entries finite: 0 * log p is then 0, not NaN, also in backward.
    log_p = log_p.clamp(min=-1e4)  # [..., V]
    return -(log_p.exp() * log_p).sum(dim=-1)  # [...]


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (in nats) of softmax(logits) over the last dim: `[..., V] -> [...]`.

    Uses `log_softmax` (logsumexp inside), so huge logits are fine; entries with logit `-inf`
    contribute exactly 0 to the value and the gradient. bf16/fp16 logits are computed on in
    float32 and the result is float32.
    """
    return _entropy_from_log_p(torch.log_softmax(_upcast(logits), dim=-1))  # [...]


class _ChunkedLabelLogProbs(torch.autograd.Function):
    """log softmax(logits)[label] for `[N, V]` logits, `step` rows at a time, plus optional entropy.

    A plain chunked `log_softmax` would let autograd keep every chunk's output (a full float32
    copy of the logits); this function keeps only the logits themselves and recomputes each
    chunk's softmax in backward, where d log p_y / d z = onehot(y) - softmax(z).

    `temperature`: of softmax(logits / temperature), divided chunk by chunk in float32, so bf16 logits are kept as
    they are (dividing them first would keep a float32 copy of all of them, and its gradient, for the backward);
    d log p_y / d z = (onehot(y) - softmax(z / t)) / t. Same numbers as dividing first.
    """

    @staticmethod
    def forward(ctx, logits, labels, step, with_entropy, temperature=1.0):  # [N, V], [N]
        out_dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
        log_probs = torch.empty(labels.shape, dtype=out_dtype, device=logits.device)  # [N]
        entropy = torch.empty(labels.shape if with_entropy else 0, dtype=out_dtype, device=logits.device)  # [N] or [0]
        for start in range(0, labels.shape[0], step):
            rows = slice(start, start + step)
            log_p = torch.log_softmax(_scaled(logits[rows], temperature), dim=-1)  # [n, V]
            log_probs[rows] = log_p.gather(-1, labels[rows].unsqueeze(-1)).squeeze(-1)  # [n]
            if with_entropy:
                entropy[rows] = _entropy_from_log_p(log_p)  # [n]
        ctx.save_for_backward(logits, labels)
        ctx.step, ctx.temperature = step, temperature
        ctx.mark_non_differentiable(entropy)
        return log_probs, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_log_probs, grad_entropy):  # [N], unused
        logits, labels = ctx.saved_tensors
        temperature = ctx.temperature
        grad_logits = torch.empty_like(logits)  # [N, V]
        for start in range(0, labels.shape[0], ctx.step):
            rows = slice(start, start + ctx.step)
            g = grad_log_probs[rows].unsqueeze(-1)  # [n, 1]
            grad = torch.softmax(_scaled(logits[rows], temperature), dim=-1).mul_(-g)  # [n, V]: -g * p
            grad = grad.scatter_add_(-1, labels[rows].unsqueeze(-1), g)  # [n, V]: + g at the label
            grad_logits[rows] = grad if temperature == 1.0 else grad / temperature  # [n, V]: d(z / t) / dz = 1 / t
        return grad_logits, None, None, None, None


def _scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """A chunk of logits as the softmax takes it: upcast (`_upcast`), divided by `temperature` unless it is 1."""
    logits = _upcast(logits)
    return logits if temperature == 1.0 else logits / temperature


def get_response_log_probs(model, input_ids: torch.Tensor, labels: torch.Tensor,
                           return_token_entropy: bool = False,
                           chunk_tokens: int | None = None) -> dict[str, torch.Tensor]:
    """Per-token log p(labels | prefix) under `model` and, optionally, the per-token entropy.

    `input_ids`, `labels`: `[B, T]` long. Returns `{"log_probs": [B, T]}` plus
    `"token_entropy": [B, T]` when `return_token_entropy`. Gradients flow from `log_probs` to the
    model; `token_entropy` is a detached logging statistic (use `compute_entropy` on logits if you
    want its gradient). Outputs are float32 for bf16/fp16/float32 models, float64 for float64 ones.

    Memory: the work runs over chunks of `chunk_tokens` positions (default
    `CHUNK_ELEMENTS // vocab`), so besides the model's own logits only one chunk's float32
    temporaries exist at a time, in forward and in backward (which adds one logits-sized gradient,
    as any implementation must). Nothing logits-sized is kept for backward but the logits.
    """
    return label_log_probs(model(input_ids).logits, labels, return_token_entropy, chunk_tokens)


def label_log_probs(logits: torch.Tensor, labels: torch.Tensor, return_token_entropy: bool = False,
                    chunk_tokens: int | None = None, temperature: float = 1.0) -> dict[str, torch.Tensor]:
    """`get_response_log_probs` from the logits `[B, T, V]` themselves, of softmax(logits / `temperature`): the
    division happens chunk by chunk inside, so no float32 copy of the logits is made or kept (hw3lib.maths.logprobs
    passes the rollouts' sampling temperature)."""
    batch, seq, vocab = logits.shape
    step = chunk_tokens or max(1, CHUNK_ELEMENTS // vocab)
    flat_logits = logits.reshape(batch * seq, vocab)  # [B*T, V], a view
    log_probs, entropy = _ChunkedLabelLogProbs.apply(
        flat_logits, labels.reshape(batch * seq), step, return_token_entropy, temperature)  # [B*T], [B*T] or [0]
    result = {"log_probs": log_probs.view(batch, seq)}  # [B, T]
    if return_token_entropy:
        result["token_entropy"] = entropy.view(batch, seq)  # [B, T]
    return result


def _check_mask(tensor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if mask.shape != tensor.shape:
        raise ValueError(f"mask has shape {tuple(mask.shape)} but tensor has shape {tuple(tensor.shape)}: "
                         "pass a mask with one entry per tensor entry")
    return mask.bool()


def _check_dim(dim) -> None:
    if dim is not None and not isinstance(dim, int):
        raise TypeError(f"dim must be an int or None, got {dim!r}; pass the constant as normalize_constant=... "
                        "(the handout lists normalize_constant before dim; the adapter's order, used here, does not)")


def masked_normalize(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None,
                     normalize_constant: float = 1.0, *, constant_normalizer: float | None = None) -> torch.Tensor:
    """Sum of the entries `mask` keeps (over `dim`, or all entries if None) divided by `normalize_constant`.

    Output shape follows `tensor.sum(dim)`. (The argument order is the course adapter's,
    `tensor, mask, dim, normalize_constant`; pass the constant by keyword. One handout spells it
    `constant_normalizer`: that keyword means the same.)
    """
    if constant_normalizer is not None:
        if normalize_constant != 1.0:
            raise TypeError("masked_normalize: pass the constant once, as normalize_constant or as "
                            f"constant_normalizer (got {normalize_constant} and {constant_normalizer})")
        normalize_constant = constant_normalizer
    _check_dim(dim)
    kept = torch.where(_check_mask(tensor, mask), tensor, 0.0)  # [*tensor.shape]
    return kept.sum(dim=dim) / normalize_constant  # tensor.sum(dim) shape


def masked_mean(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of the entries `mask` keeps, over `dim` (or all entries if None); shape as `tensor.mean(dim)`.

    As in the course, a slice whose mask is all zero has mean 0/0 = NaN: a caller that may meet an
    empty slice (an empty response) must guard it where it assembles its loss or statistic, e.g.
    `masked_mean_or_zero` below. The NaN never reaches the gradient of `tensor` behind such a
    guard (masked entries are dropped by `torch.where`, not multiplied by 0).
    """
    _check_dim(dim)
    keep = _check_mask(tensor, mask)
    total = torch.where(keep, tensor, 0.0).sum(dim=dim)  # tensor.sum(dim) shape
    count = keep.sum(dim=dim).to(total.dtype)  # tensor.sum(dim) shape
    return total / count  # an empty slice: 0 / 0 = NaN, as in the course


def masked_mean_or_zero(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """`masked_mean`, but 0 (with zero gradient) for a slice whose mask is all zero: the guard for
    losses and statistics over responses that may be empty. Equal to `masked_mean` elsewhere."""
    _check_dim(dim)
    keep = _check_mask(tensor, mask)
    nonempty = keep.any() if dim is None else keep.any(dim=dim)  # tensor.sum(dim) shape
    return torch.where(nonempty, masked_mean(tensor, keep, dim), 0.0)  # tensor.sum(dim) shape


def _check_accumulation(gradient_accumulation_steps: int) -> None:
    if not isinstance(gradient_accumulation_steps, int) or gradient_accumulation_steps < 1:
        raise ValueError(f"gradient_accumulation_steps must be a positive int, got {gradient_accumulation_steps!r}")


def sft_microbatch_train_step(policy_log_probs: torch.Tensor, response_mask: torch.Tensor,
                              gradient_accumulation_steps: int, normalize_constant: float = 1.0
                              ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SFT loss of one microbatch, backpropagated; returns (detached scaled loss, detached stats).

    The course's convention: per sequence, the negative log-likelihood summed over its response
    tokens and divided by `normalize_constant`; averaged over the batch; divided by
    `gradient_accumulation_steps` so summed microbatch gradients equal the minibatch gradient.
    """
    _check_accumulation(gradient_accumulation_steps)
    per_sequence = masked_normalize(-policy_log_probs, response_mask, dim=-1,
                                    normalize_constant=normalize_constant)  # [B]
    loss = per_sequence.mean() / gradient_accumulation_steps  # []
    loss.backward()
    stats = {
        "loss_unscaled": per_sequence.mean().detach(),
        # 0, not NaN, for a microbatch without response tokens (the loss itself is then 0)
        "nll_per_token": masked_mean_or_zero(-policy_log_probs, response_mask).detach(),
        "response_tokens": response_mask.bool().sum().detach(),
    }
    return loss.detach(), stats
