"""What every rollout engine shares: the sampling settings, the `Sample` record and the rules.

Both engines follow vLLM's conventions, so a rollout means the same thing whichever engine made it:

- Prompts are tokenized by the engine's tokenizer without special tokens (as the training code
  tokenizes them), and a prompt must leave room for at least one new token in the context.
- A continuation ends at the first of: a stop string (`finish_reason="stop"`), an end-of-sequence
  token (`"eos"`), or the token budget `max_tokens` / the context length (`"length"`).
- Stop strings are searched in the decoded continuation only (never in the prompt), and only in
  text produced after the first `min_tokens` tokens; the one that completes earliest wins (ties:
  list order). `token_ids` and `logprobs` keep every token up to and including the one that
  completes the stop string; `text` is cut right after the stop string
  (`include_stop_str_in_output=True`) or right before it.
- An EOS token is kept as the last entry of `token_ids` and `logprobs` (the policy must learn the
  probability of stopping) but never appears in `text`.
- `logprobs[t]` is log p(token_t | prompt, tokens_<t) under the distribution the token was drawn
  from: softmax(logits / temperature) after the min-tokens EOS ban and top-p (vLLM's
  `processed_logprobs`); at temperature 0 (greedy) the unscaled logits after the ban. With
  top_p = 1 and past the first `min_tokens` tokens that is exactly what the trainer computes
  from the policy's logits divided by the sampling temperature (hw3lib.maths.logprobs), so the
  engine/trainer mismatch the training loop logs is numerical only (dtype, kernels).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: this module stays light
    import torch

FINISH_REASONS = ("stop", "eos", "length")


@dataclass(frozen=True)
class SamplingConfig:
    """How to sample continuations; the same object drives every engine."""

    n: int = 1
    """Samples per prompt."""
    temperature: float = 1.0
    """Softmax temperature for sampling; 0 means greedy decoding (argmax)."""
    top_p: float = 1.0
    """Nucleus sampling: sample from the smallest set of tokens whose probability reaches top_p (1 = off)."""
    max_tokens: int = 1024
    """Budget of new tokens per sample (the context length may cut it shorter)."""
    min_tokens: int = 0
    """EOS is forbidden, and stop strings are not checked, before this many tokens (training rollouts use 4)."""
    stop: tuple[str, ...] = ("</answer>",)
    """Stop strings: generation ends once the continuation contains one of them."""
    include_stop_str_in_output: bool = True
    """Keep the stop string at the end of `Sample.text` (the reward function needs `</answer>`)."""
    seed: int | None = 0
    """Seed of this call: same seed, prompts and weights -> same samples. None = nondeterministic.
    Pass a different seed per call (e.g. seed + step) when every call must draw fresh samples."""

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        object.__setattr__(self, "stop", tuple(self.stop))
        problems = []
        if self.n < 1:
            problems.append(f"n={self.n} (must be >= 1)")
        if not self.temperature >= 0:
            problems.append(f"temperature={self.temperature} (must be >= 0; 0 is greedy)")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p={self.top_p} (must be in (0, 1])")
        if self.max_tokens < 1:
            problems.append(f"max_tokens={self.max_tokens} (must be >= 1)")
        if not 0 <= self.min_tokens <= self.max_tokens:
            problems.append(f"min_tokens={self.min_tokens} (must be in [0, max_tokens={self.max_tokens}])")
        if any(not isinstance(s, str) or not s for s in self.stop):
            problems.append(f"stop={self.stop!r} (stop strings must be non-empty strings)")
        if problems:
            raise ValueError("invalid SamplingConfig: " + "; ".join(problems))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Sample:
    """One sampled continuation of one prompt."""

    text: str
    """The decoded continuation (no EOS token; cut after/before the stop string, see the module docstring)."""
    token_ids: list[int]
    """The sampled tokens, including the EOS or stop-completing token that ended the sample."""
    logprobs: list[float]
    """log p(token | prefix) of each token under the distribution it was sampled from (see the module docstring)."""
    finish_reason: str
    """Why it ended: "stop" (a stop string), "eos" (end-of-sequence token), "length" (budget or context full)."""
    mean_logprob: float = field(init=False)
    """Mean of `logprobs`; NaN for an empty sample (cannot happen: every sample has >= 1 token)."""

    def __post_init__(self) -> None:
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"finish_reason {self.finish_reason!r} is not one of {FINISH_REASONS}")
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(f"{len(self.token_ids)} token_ids but {len(self.logprobs)} logprobs")
        self.mean_logprob = math.fsum(self.logprobs) / len(self.logprobs) if self.logprobs else math.nan


def derive_seed(seed: int, index: int) -> int:
    """A 31-bit seed for item `index` of a call seeded with `seed`.

    Hashing (rather than seed + index) keeps calls with neighbouring seeds (seed + step in a
    training loop) from reusing each other's random streams.
    """
    digest = hashlib.sha256(f"{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def encode_prompts(tokenizer, prompts: Sequence[str], max_model_len: int) -> list[list[int]]:
    """Token ids of each prompt (no special tokens added), checked against the context length."""
    if isinstance(prompts, str) or not all(isinstance(p, str) for p in prompts):
        raise TypeError("prompts must be a list of strings (wrap a single prompt in a list)")
    encoded = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    for index, ids in enumerate(encoded):
        if not ids:
            raise ValueError(f"prompt {index} is empty: every prompt needs at least one token")
        if len(ids) >= max_model_len:
            raise ValueError(
                f"prompt {index} has {len(ids)} tokens but the model's max length is {max_model_len}, "
                "which leaves no room for a continuation: shorten the prompt, or raise the engine's "
                "max_model_len (up to the model's max_position_embeddings)")
    return encoded


def decode(tokenizer, token_ids: Sequence[int]) -> str:
    """Text of `token_ids` the way vLLM's detokenizer writes it (special tokens skipped, no clean-up)."""
    return tokenizer.decode(list(token_ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)


def find_stop(tokenizer, token_ids: Sequence[int], stop: Sequence[str], min_tokens: int,
              include_stop_str: bool) -> tuple[int, str] | None:
    """Where the first stop string ends a continuation: (tokens to keep, text), or None.

    Mirrors vLLM's detokenizer: only text produced after the first `min_tokens` tokens counts,
    the stop string completing earliest in the text wins (ties: `stop` order), and the tokens
    kept run up to and including the one that completes it.
    """
    if not stop or len(token_ids) <= min_tokens:
        return None
    text = decode(tokenizer, token_ids)
    checked_from = len(decode(tokenizer, token_ids[:min_tokens])) if min_tokens else 0
    best = None  # (end, start, stop string)
    for stop_str in stop:
        start = text.find(stop_str, max(0, checked_from - len(stop_str) + 1))
        if start != -1 and (best is None or start + len(stop_str) < best[0]):
            best = (start + len(stop_str), start, stop_str)
    if best is None:
        return None
    end, start, stop_str = best
    search_from = max(0, checked_from - len(stop_str) + 1)
    # Smallest prefix whose text already holds this occurrence; "contains" only turns on once as
    # the prefix grows, so a binary search finds it with O(log T) decodes.
    low, high = min_tokens + 1, len(token_ids)
    while low < high:
        mid = (low + high) // 2
        if decode(tokenizer, token_ids[:mid]).find(stop_str, search_from) != -1:
            high = mid
        else:
            low = mid + 1
    return low, text[:end] if include_stop_str else text[:start]


def finish_continuation(tokenizer, token_ids: Sequence[int], logprobs: Sequence[float], eos_ids: set[int],
                        sampling: SamplingConfig, budget: int) -> Sample:
    """Cut a raw continuation (which may run past its end, e.g. padding) into a `Sample`.

    `budget` is the most tokens this sample may have (max_tokens, or less when the context fills).
    """
    token_ids, logprobs = list(token_ids[:budget]), list(logprobs[:budget])
    eos_at = next((t for t, token in enumerate(token_ids) if token in eos_ids and t >= sampling.min_tokens), None)
    before_eos = token_ids if eos_at is None else token_ids[:eos_at]
    stop = find_stop(tokenizer, before_eos, sampling.stop, sampling.min_tokens, sampling.include_stop_str_in_output)
    if stop is not None:
        keep, text = stop
        return Sample(text=text, token_ids=token_ids[:keep], logprobs=logprobs[:keep], finish_reason="stop")
    if eos_at is not None:
        return Sample(text=decode(tokenizer, before_eos), token_ids=token_ids[:eos_at + 1],
                      logprobs=logprobs[:eos_at + 1], finish_reason="eos")
    return Sample(text=decode(tokenizer, token_ids), token_ids=token_ids, logprobs=logprobs, finish_reason="length")


def copy_named_tensors(model, named_tensors) -> int:
    """Copy `(name, tensor)` pairs (or a dict; a policy's `state_dict()` names) into `model`'s tensors:
    an engine's `load_weights`. Tensors that already share storage with the model's (an engine that
    wraps the policy module itself) are skipped; returns how many were copied."""
    import torch

    items = named_tensors.items() if isinstance(named_tensors, dict) else named_tensors
    targets = model.state_dict(keep_vars=True)
    copied = 0
    with torch.no_grad():
        for name, tensor in items:
            if name not in targets:
                examples = ", ".join(list(targets)[:3])
                raise KeyError(f"load_weights: the engine's model has no tensor named {name!r} "
                               f"(it has e.g. {examples}): pass the policy's state_dict() names")
            target = targets[name]
            if target.shape != tensor.shape:
                raise ValueError(f"load_weights: {name} has shape {tuple(tensor.shape)} but the engine's "
                                 f"is {tuple(target.shape)}: is this the same architecture?")
            if target.data_ptr() != tensor.data_ptr():
                target.copy_(tensor)
                copied += 1
    return copied


def left_padded(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`(input_ids, attention_mask)`, both `[B, L]`, with every row left-padded so that each continuation
    starts at column L (the longest row's length)."""
    import torch

    width = max(len(ids) for ids in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # [B, L]
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)  # [B, L]
    for row, ids in enumerate(rows):
        input_ids[row, width - len(ids):] = torch.tensor(ids)
        attention_mask[row, width - len(ids):] = 1
    return input_ids, attention_mask


class InProcessEngine:
    """What the two engines that run a model in this process (transformers, hw3lib's own) share: `generate`
    splits the prompts' `n` samples into batches of `batch_size` rows, each with its own derived seed, in
    eval mode, and regroups the samples by prompt. Subclasses set `model`, `tokenizer`, `max_model_len`,
    `batch_size`, `progress` and implement `_generate_batch(rows, sampling, seed)`."""

    def generate(self, prompts: Sequence[str], sampling: SamplingConfig = SamplingConfig()) -> list[list[Sample]]:
        """For each prompt, `sampling.n` samples (in prompt order)."""
        from tqdm.auto import tqdm

        encoded = encode_prompts(self.tokenizer, prompts, self.max_model_len)
        rows = [ids for ids in encoded for _ in range(sampling.n)]  # sample j of prompt i is row i * n + j
        starts = range(0, len(rows), self.batch_size)
        samples: list[Sample] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for batch_index, start in enumerate(tqdm(starts, desc="generate", unit="batch",
                                                     disable=not self.progress or len(starts) < 2)):
                seed = None if sampling.seed is None else derive_seed(sampling.seed, batch_index)
                samples.extend(self._generate_batch(rows[start:start + self.batch_size], sampling, seed))
        finally:
            self.model.train(was_training)
        return [samples[i * sampling.n:(i + 1) * sampling.n] for i in range(len(encoded))]

