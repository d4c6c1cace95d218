"""The transformers rollout engine: batched `model.generate` with a KV cache.

The fallback when vLLM is absent and the fast path on CPU. It either loads a model (`tiny`, a
directory, a hub id) or wraps an existing module -- the training loop passes its policy and
tokenizer, so rollouts come from the very weights being trained and `load_weights` is a copy of
each tensor onto itself (skipped when the storage is shared).

How each `SamplingConfig` field is honoured (conventions: hw3lib.generation.base):

- prompts are left-padded by hand into batches of `batch_size` sequences (n samples of a prompt
  are n rows), decoded with the dynamic KV cache, or with `static_cache=True` a preallocated
  `StaticCache` (`cache_implementation="static"`), which `compile=True` lets transformers wrap
  in `torch.compile` on a GPU;
- the min-tokens EOS ban / temperature / top-p are logits processors we build ourselves (in
  vLLM's order), followed by `SampledLogprobRecorder` (so it sees the distribution the token is
  drawn from) and a last processor, `InverseCdfSampler`, that draws the token; `generate` itself
  always runs its greedy path, which then takes the drawn token, so HF's own sampling and
  warpers stay off;
- stop strings: HF's `StopStringCriteria` on the continuation only (and only after `min_tokens`
  tokens) ends a row early; `finish_continuation` then cuts text, tokens and log-probs exactly;
- seeds: each batch samples under `torch.random.fork_rng` seeded with `derive_seed(seed, batch)`,
  so results are reproducible and the caller's global RNG is left untouched.

Log-probs: `output_logits=True` would keep every step's [B, V] float32 logits alive until the
end ([B, T, V]: 40 GB for 64 x 1024 tokens of Qwen3's 151,936 vocabulary). `SampledLogprobRecorder`
sees the processed scores one step at a time, keeps one step's [B, V] log-softmax and gathers the
sampled token's entry when the next step reveals it. Tests check it against both the
`output_logits=True` route and a fresh forward pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

import torch

from hw3lib.generation.base import (InProcessEngine, Sample, SamplingConfig, copy_named_tensors, finish_continuation,
                                    left_padded)


class SampledLogprobRecorder:
    """Logits processor that records log p(sampled token) under the scores it sees, leaving them unchanged.

    The engine places it right before the sampler, so it sees the sampling distribution (after the
    min-tokens EOS ban, temperature and top-p; the unscaled logits when greedy). At step t it
    receives the scores of step t and the tokens so far, whose last column is the token sampled
    at step t-1.
    """

    def __init__(self) -> None:
        self.pending: torch.Tensor | None = None  # [B, V] log-softmax of the last step
        self.gathered: list[torch.Tensor] = []  # T-1 entries of [B]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.pending is not None:
            self.gathered.append(self.pending.gather(1, input_ids[:, -1:]).squeeze(1))  # [B]
        self.pending = torch.log_softmax(scores.float(), dim=-1)  # [B, V]
        return scores

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """[B, T] log-probs of all T sampled tokens, given the tokens sampled at the last step."""
        if self.pending is None:
            raise RuntimeError("SampledLogprobRecorder saw no generation step: was it passed to generate?")
        steps = [*self.gathered, self.pending.gather(1, last_tokens[:, None]).squeeze(1)]  # T x [B]
        self.pending = None
        return torch.stack(steps, dim=1)  # [B, T]


class MinTokensEosBan:
    """Logits processor: EOS gets -inf while fewer than `min_tokens` tokens follow the prompt.

    (transformers' MinNewTokensLengthLogitsProcessor does the same but clones the scores at every
    step, also after `min_tokens`; on a CPU that was 5% of a tiny model's generation.)
    """

    def __init__(self, prompt_length: int, min_tokens: int, eos_ids: Iterable[int]) -> None:
        self.prompt_length, self.min_tokens, self.eos_ids = prompt_length, min_tokens, sorted(eos_ids)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[1] - self.prompt_length >= self.min_tokens:
            return scores
        banned = scores.clone()
        banned[:, self.eos_ids] = float("-inf")
        return banned


class InverseCdfSampler:
    """Last logits processor: draws each row's next token from softmax(scores) and returns scores that
    are 0 for the drawn token and -inf elsewhere, so `generate`'s greedy argmax picks exactly it.

    Why not `generate`'s own sampling: it calls `torch.multinomial`, about 1.2 ms per [64, 1024]
    draw on a CPU (15% of a tiny model's generation); inverse-CDF sampling -- a uniform number
    scaled by the total, found by binary search in the cumulative sum -- takes a fraction of that.
    The cumulative sum is float64, so a token's share of [0, total) is its float32 probability
    with no accumulated rounding, even over a 151,936-token vocabulary. Tokens with zero
    probability (-inf scores: the min-tokens EOS ban, top-p) have an empty interval and are never
    drawn. Uses the global torch RNG, which the engine seeds per batch.
    """

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        cdf = torch.softmax(scores.float(), dim=-1).double().cumsum_(dim=-1)  # [B, V]
        u = torch.rand((scores.shape[0], 1), dtype=cdf.dtype, device=cdf.device) * cdf[:, -1:]  # [B, 1] in [0, total)
        token = torch.searchsorted(cdf, u, right=True).clamp_(max=scores.shape[-1] - 1)  # [B, 1]: first cdf > u
        return torch.full_like(scores, float("-inf")).scatter_(1, token, 0.0)  # [B, V]


class ContinuationStopStrings:
    """Stopping criterion: HF's stop-string matcher applied to the continuation past `min_tokens` only."""

    def __init__(self, criteria, prompt_length: int, min_tokens: int) -> None:
        self.criteria, self.prompt_length, self.min_tokens = criteria, prompt_length, min_tokens

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        continuation = input_ids[:, self.prompt_length:]  # [B, t]
        if continuation.shape[1] <= self.min_tokens:
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)  # [B]
        return self.criteria(continuation, scores)  # [B]


class TransformersEngine(InProcessEngine):
    """Rollouts with transformers' `generate` (see the module docstring)."""

    def __init__(self, model="tiny", tokenizer=None, *, device: str = "cpu", dtype: str = "float32",
                 batch_size: int = 64, static_cache: bool = False, compile: bool = False,
                 max_model_len: int | None = None, progress: bool = True) -> None:
        """`model`: `tiny`, a model directory, a hub id, or a loaded module (then pass its `tokenizer`;
        `device` and `dtype` are the module's own). `batch_size`: sequences per `generate` call.
        `static_cache` (+ `compile`): the GPU speed path. `max_model_len`: context length (default:
        the model's max_position_embeddings). `progress`: tqdm bar over batches."""
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1")
        if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
            from hw3lib.models.load import load_model_and_tokenizer

            self.model_name = str(model)
            model, loaded_tokenizer = load_model_and_tokenizer(str(model), device=device, dtype=dtype)
            tokenizer = tokenizer or loaded_tokenizer
            model.eval()
        elif tokenizer is None:
            raise ValueError("TransformersEngine(model=<module>) also needs tokenizer=<its tokenizer>")
        else:
            self.model_name = getattr(model, "name_or_path", None) or type(model).__name__
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.static_cache, self.compile, self.progress = batch_size, static_cache, compile, progress
        self.max_model_len = max_model_len or model.config.max_position_embeddings
        self.eos_ids = _eos_ids(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)
        self._stop_criteria: dict[tuple[str, ...], object] = {}

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _generate_batch(self, rows: list[list[int]], sampling: SamplingConfig, seed: int | None) -> list[Sample]:
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList
        from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

        device = self.device
        input_ids, attention_mask = left_padded(rows, self.pad_id)  # [B, L] each
        width = input_ids.shape[1]  # left padding: every continuation starts at column `width`
        budgets = [min(sampling.max_tokens, self.max_model_len - len(ids)) for ids in rows]

        recorder = SampledLogprobRecorder()
        processors = []  # vLLM's order: min-tokens ban, temperature, top-p; then record, then sample
        if sampling.min_tokens:
            processors.append(MinTokensEosBan(width, sampling.min_tokens, self.eos_ids))
        if not sampling.greedy and sampling.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(sampling.temperature))
        if not sampling.greedy and sampling.top_p < 1.0:
            processors.append(TopPLogitsWarper(sampling.top_p))
        processors.append(recorder)  # sees exactly the distribution the token is drawn from
        if not sampling.greedy:
            processors.append(InverseCdfSampler())  # last: it samples; generate then decodes "greedily"
        stopping = StoppingCriteriaList()
        if sampling.stop:
            stopping.append(ContinuationStopStrings(self._stop_criterion(sampling.stop), width, sampling.min_tokens))
        config = GenerationConfig(
            # Always HF's greedy path: when sampling, InverseCdfSampler has already drawn the token and
            # left it the only finite score. Greedy decoding applies no HF warpers; top_k/min_p unset
            # (None would otherwise inherit the model's defaults, e.g. Qwen3's top_k 20, but greedy
            # ignores them) and temperature/top_p neutral, so HF adds none of its own processors.
            max_new_tokens=max(budgets), do_sample=False, num_beams=1,
            temperature=1.0, top_p=1.0, top_k=None, min_p=None, repetition_penalty=1.0, min_new_tokens=0,
            eos_token_id=sorted(self.eos_ids), pad_token_id=self.pad_id,
            return_dict_in_generate=True, use_cache=True, disable_compile=not self.compile,
        )
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        devices = [device] if device.type == "cuda" else []
        rng = torch.random.fork_rng(devices=devices) if seed is not None else contextlib.nullcontext()
        with rng, torch.inference_mode():
            cache = self._shared_prompt_cache(input_ids, attention_mask, rows, config.max_new_tokens)
            if cache is None and self.static_cache:
                config.cache_implementation = "static"  # generate allocates it
            if seed is not None:
                torch.manual_seed(seed)
            out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache,
                                      generation_config=config, logits_processor=LogitsProcessorList(processors),
                                      stopping_criteria=stopping)
        continuations = out.sequences[:, width:]  # [B, T]
        logprobs = recorder.finish(out.sequences[:, -1])  # [B, T]
        return [finish_continuation(self.tokenizer, tokens, lps, self.eos_ids, sampling, budget)
                for tokens, lps, budget in zip(continuations.tolist(), logprobs.tolist(), budgets)]

    def _shared_prompt_cache(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: list[list[int]],
                             max_new_tokens: int):
        """The KV cache of every prompt token but the last, computed once per distinct prompt, or None.

        The n samples of a prompt are n identical rows, so prefilling each row (what `generate`
        does) repeats the same work n times. Here the distinct rows run through the model once
        and their keys/values are copied to their duplicates -- into a preallocated StaticCache
        with room for `max_new_tokens` when the engine uses one; `generate` then processes only
        the last prompt token. Same numbers as a full prefill (positions from the padding mask,
        as `generate` computes them). None (an ordinary prefill) when no row repeats or a prompt
        has a single token.
        """
        from transformers import DynamicCache, StaticCache

        first = {}  # distinct row -> its index among the distinct rows
        source = [first.setdefault(tuple(ids), len(first)) for ids in rows]  # [B]: distinct index of each row
        if len(first) == len(rows) or min(len(ids) for ids in rows) < 2:
            return None
        distinct = [source.index(k) for k in range(len(first))]  # first row of each distinct prompt
        ids, mask = input_ids[distinct, :-1], attention_mask[distinct, :-1]  # [U, L-1]
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [U, L-1]: generate's positions under left padding
        cache = DynamicCache(config=self.model.config)
        self.model(ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True,
                   logits_to_keep=1)
        index = torch.tensor(source, device=input_ids.device)  # [B]
        if not self.static_cache:
            cache.reorder_cache(index)  # [U, ...] -> [B, ...]
            return cache
        static = StaticCache(config=self.model.config, max_cache_len=input_ids.shape[1] + max_new_tokens)
        for layer_index, layer in enumerate(cache.layers):  # writes positions [0, L - 1) of each layer
            static.update(layer.keys.index_select(0, index), layer.values.index_select(0, index), layer_index)
        return static

    def _stop_criterion(self, stop: tuple[str, ...]):
        """HF's stop-string matcher for `stop` (its set-up scans the vocabulary, so it is cached)."""
        if stop not in self._stop_criteria:
            from transformers import StopStringCriteria

            self._stop_criteria[stop] = StopStringCriteria(tokenizer=self.tokenizer, stop_strings=list(stop))
        return self._stop_criteria[stop]

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]] | dict) -> int:
        """Copy (name, tensor) pairs (a policy's `state_dict()` names) into the engine's module.

        Returns how many tensors were copied; tensors that already share storage with the
        engine's (the engine wraps the policy module itself) are skipped.
        """
        return copy_named_tensors(self.model, named_tensors)

    def sleep(self, level: int = 1) -> None:
        """No-op: the transformers engine holds no KV cache between calls (its memory is the model's)."""

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """No-op: see `sleep`."""

    def reset_prefix_cache(self) -> None:
        """No-op: no prompt's KV is kept from one `generate` call to the next."""

    def close(self) -> None:
        """Drop the engine's references to the model and free cached GPU memory (`free_cached_memory`)."""
        from hw3lib.generation.vllm_engine import free_cached_memory  # imports no vLLM

        self.model = None
        self._stop_criteria.clear()
        free_cached_memory()


def _eos_ids(model, tokenizer) -> set[int]:
    """End-of-sequence ids: the tokenizer's plus the model's generation config's (Qwen3 lists two)."""
    ids = set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (tokenizer.eos_token_id, configured):
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(int(v) for v in value)
    if not ids:
        raise ValueError("the tokenizer and model define no eos_token_id: set tokenizer.eos_token")
    return ids
