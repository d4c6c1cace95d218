"""Supervised fine-tuning maths as pure tensor functions (plus the one model call for log-probs).

Implemented (the course's names and arguments):

- `tokenize_prompt_and_output`: prompt and output tokenized separately, concatenated, right-padded;
  `input_ids`/`labels` are the sequence shifted by one and `response_mask` (bool) marks the labels
  that are response tokens.
- `compute_entropy`: per-token entropy of the next-token distribution, via `log_softmax`
  (logsumexp inside), safe for huge logits and `-inf` (masked-out) vocabulary entries.
- `get_response_log_probs`: log p(label | prefix) for every position, computed over chunks of
  tokens so at most one float32 chunk of the `[batch, seq, vocab]` logits is materialised beside
  the model's own logits (see its docstring for the memory budget).
- `masked_normalize` / `masked_mean`: sums and means over the entries a mask keeps.
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


def tokenize_prompt_and_output(prompt_strs: Sequence[str], output_strs: Sequence[str], tokenizer) -> dict[str, torch.Tensor]:
    """Tokenize prompt/output pairs into shifted `input_ids`, `labels` and a response mask.

    Each prompt and each output are tokenized separately (no special tokens added) and
    concatenated; sequences are right-padded with `tokenizer.pad_token_id` to the longest one,
    `max_len`. Returns, each of shape `[batch, max_len - 1]`:

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
    max_len = max(len(p) + len(o) for p, o in zip(prompts, outputs))
    full = torch.full((len(prompts), max_len), tokenizer.pad_token_id, dtype=torch.long)  # [B, L]
    is_response = torch.zeros((len(prompts), max_len), dtype=torch.bool)  # [B, L]
    for row, (prompt, output) in enumerate(zip(prompts, outputs)):
        end = len(prompt) + len(output)
        full[row, :end] = torch.tensor(prompt + output, dtype=torch.long)
        is_response[row, len(prompt):end] = True
    return {
        "input_ids": full[:, :-1].contiguous(),  # [B, L-1]
        "labels": full[:, 1:].contiguous(),  # [B, L-1]
        "response_mask": is_response[:, 1:].contiguous(),  # [B, L-1]: label j is token j+1
    }


def _upcast(logits: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 logits are computed on in float32; float32 and float64 stay as they are."""
    return logits.float() if logits.dtype in (torch.bfloat16, torch.float16) else logits


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (in nats) of softmax(logits) over the last dim: `[..., V] -> [...]`.

    Computed as `-sum p * log p` with `log p = log_softmax(logits)` (stable for huge logits).
    Entries with logit `-inf` have p = 0 and contribute exactly 0 (also to the gradient).
    bf16/fp16 logits are computed on in float32 and the result is float32.
    """
    log_p = torch.log_softmax(_upcast(logits), dim=-1)  # [..., V]
    p = log_p.exp()  # [..., V]
    # -inf logits give p * log p = 0 * -inf = NaN; their true contribution is 0.
    finite_log_p = torch.where(torch.isfinite(log_p), log_p, 0.0)  # [..., V]
    return -(p * finite_log_p).sum(dim=-1)  # [...]


def _label_log_probs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[label] for a chunk of tokens: `[N, V], [N] -> [N]`."""
    logits = _upcast(logits)  # [N, V]
    # gather - logsumexp saves only a view of float32 logits for backward, not a log_softmax copy.
    picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # [N]
    return picked - torch.logsumexp(logits, dim=-1)  # [N]


def get_response_log_probs(model, input_ids: torch.Tensor, labels: torch.Tensor,
                           return_token_entropy: bool = False, chunk_tokens: int | None = None) -> dict[str, torch.Tensor]:
    """Per-token log p(labels | prefix) under `model` and, optionally, the per-token entropy.

    `input_ids`, `labels`: `[B, T]` long. Returns `{"log_probs": [B, T]}` plus
    `"token_entropy": [B, T]` when `return_token_entropy`. Gradients flow from `log_probs` to the
    model; `token_entropy` is a detached logging statistic (use `compute_entropy` on logits if you
    want its gradient). Outputs are float32 for bf16/fp16/float32 models, float64 for float64 ones.

    Memory: besides the model's own logits, the work runs over chunks of `chunk_tokens` token
    positions (default: `CHUNK_ELEMENTS // vocab`), so only one chunk's float32 temporaries exist
    at a time. What autograd keeps is a view of the float32 logits (no copy for float32 models,
    one float32 copy for bf16 ones) -- never a full log_softmax, probs and entropy product.
    """
    logits = model(input_ids).logits  # [B, T, V]
    batch, seq, vocab = logits.shape
    step = chunk_tokens or max(1, CHUNK_ELEMENTS // vocab)
    flat_logits = logits.reshape(batch * seq, vocab).split(step)  # chunks of [<=step, V]
    flat_labels = labels.reshape(batch * seq).split(step)  # chunks of [<=step]
    log_probs = torch.cat([_label_log_probs(c, y) for c, y in zip(flat_logits, flat_labels)])  # [B*T]
    result = {"log_probs": log_probs.view(batch, seq)}  # [B, T]
    if return_token_entropy:
        with torch.no_grad():
            entropy = torch.cat([compute_entropy(c) for c in flat_logits])  # [B*T]
        result["token_entropy"] = entropy.view(batch, seq)  # [B, T]
    return result


def _check_mask(tensor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if mask.shape != tensor.shape:
        raise ValueError(f"mask has shape {tuple(mask.shape)} but tensor has shape {tuple(tensor.shape)}: "
                         "pass a mask with one entry per tensor entry")
    return mask.bool()


def _check_dim(dim) -> None:
    if dim is not None and not isinstance(dim, int):
        raise TypeError(f"dim must be an int or None, got {dim!r}; pass the constant as "
                        "normalize_constant=... (the course's positional order differs from this one)")


def masked_normalize(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None,
                     normalize_constant: float | None = None, *, constant_normalizer: float | None = None) -> torch.Tensor:
    """Sum of the entries `mask` keeps (over `dim`, or all entries if None) divided by a constant.

    The constant may be passed as `normalize_constant` (the function signature) or
    `constant_normalizer` (the course's worked example); default 1.0. Output shape follows
    `tensor.sum(dim)`.
    """
    if normalize_constant is not None and constant_normalizer is not None and normalize_constant != constant_normalizer:
        raise ValueError(f"normalize_constant={normalize_constant} and constant_normalizer={constant_normalizer} "
                         "disagree: pass only one of them")
    constant = next((c for c in (normalize_constant, constant_normalizer) if c is not None), 1.0)
    _check_dim(dim)
    kept = torch.where(_check_mask(tensor, mask), tensor, 0.0)  # [*tensor.shape]
    return kept.sum(dim=dim) / constant  # tensor.sum(dim) shape


def masked_mean(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of the entries `mask` keeps, over `dim` (or all entries if None); shape as `tensor.mean(dim)`.

    A slice whose mask is all zero has mean 0 (not NaN) and passes no gradient.
    """
    _check_dim(dim)
    keep = _check_mask(tensor, mask)
    total = torch.where(keep, tensor, 0.0).sum(dim=dim)  # tensor.sum(dim) shape
    count = keep.sum(dim=dim).to(total.dtype)  # tensor.sum(dim) shape
    return total / count.clamp(min=1)  # an empty slice has total 0, so 0 / 1 = 0


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
    per_sequence = masked_normalize(-policy_log_probs, response_mask, dim=-1, normalize_constant=normalize_constant)  # [B]
    loss = per_sequence.mean() / gradient_accumulation_steps  # []
    loss.backward()
    stats = {
        "loss_unscaled": per_sequence.mean().detach(),
        "nll_per_token": masked_mean(-policy_log_probs, response_mask).detach(),
        "response_tokens": response_mask.bool().sum().detach(),
    }
    return loss.detach(), stats
