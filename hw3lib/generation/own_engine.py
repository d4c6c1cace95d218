"""The rollout engine for hw3lib's own transformer (hw3lib.models.nanogpt): a plain sampling loop with a KV cache.

Same interface and conventions as the other engines (hw3lib.generation.base): `.tokenizer`,
`.generate(prompts, SamplingConfig) -> list[list[Sample]]`, `.load_weights`, `.sleep`/`.wake_up`/`.reset_prefix_cache`
(no-ops: nothing to free between calls), `.close`.

How each `SamplingConfig` field is honoured:

- prompts are left-padded into batches of `batch_size` rows (sample j of prompt i is row i*n + j);
  the model prefills them once, then decodes one token per step with its `KVCache`, positions
  counted from each row's first real token (so a padded row computes what it would alone);
- per step, in vLLM's order: EOS banned while fewer than `min_tokens` tokens exist, logits divided
  by the temperature, top-p; the token is drawn from that distribution (argmax when greedy) and
  its log-prob under it recorded -- exactly softmax(logits / T) of the policy at top_p = 1, the
  quantity the trainer recomputes;
- a row stops at EOS (after `min_tokens`), at a stop string (checked with `base.find_stop` on
  the continuation), or at its budget; the batch ends when every row has; `finish_continuation`
  then cuts text, tokens and log-probs exactly as the other engines do;
- seeds: each batch draws from its own `torch.Generator` seeded with `derive_seed(seed, batch)`,
  so the same seed, prompts and weights give the same samples and the global RNG is untouched.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from hw3lib.generation.base import (InProcessEngine, Sample, SamplingConfig, copy_named_tensors, find_stop,
                                    finish_continuation, left_padded)


class OwnModelEngine(InProcessEngine):
    """Rollouts from a `hw3lib.models.nanogpt.GPT` (a folder or the module itself; see the module docstring)."""

    def __init__(self, model, tokenizer=None, *, device: str = "cpu", dtype: str = "float32", batch_size: int = 256,
                 max_model_len: int | None = None, progress: bool = True) -> None:
        """`model`: an own-model folder, or a loaded `GPT` (then pass its `tokenizer`; its device and
        dtype are kept). `batch_size`: rows per batch. `max_model_len`: context (default block_size)."""
        from hw3lib.models.load import load_model_and_tokenizer
        from hw3lib.models.nanogpt import GPT

        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1")
        if isinstance(model, GPT):
            if tokenizer is None:
                raise ValueError("OwnModelEngine(model=<GPT>) also needs tokenizer=<its WordTokenizer>")
            self.model_name = model.name_or_path
        else:
            self.model_name = str(model)
            model, loaded = load_model_and_tokenizer(self.model_name, device=device, dtype=dtype)  # hw3lib.models.load
            if not isinstance(model, GPT):
                raise ValueError(f"{self.model_name} is not a folder of hw3lib's own transformer "
                                 "(hw3lib.models.nanogpt): use the transformers or vLLM engine for it")
            tokenizer = tokenizer or loaded
            model.eval()
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.progress = batch_size, progress
        self.max_model_len = min(max_model_len or model.config.block_size, model.config.block_size)
        self.eos_ids = {tokenizer.eos_token_id}

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.inference_mode()
    def _generate_batch(self, rows: list[list[int]], sampling: SamplingConfig, seed: int | None) -> list[Sample]:
        device, pad = self.device, self.tokenizer.pad_token_id
        input_ids, mask = left_padded(rows, pad)  # [B, L] each; every continuation starts at column L
        input_ids, mask = input_ids.to(device), mask.to(device)
        budgets = [min(sampling.max_tokens, self.max_model_len - len(ids)) for ids in rows]
        generator = torch.Generator(device=device)
        if seed is not None:
            generator.manual_seed(seed)
        else:
            generator.seed()
        eos = sorted(self.eos_ids)

        out = self.model(input_ids, attention_mask=mask, use_cache=True, logits_to_keep=1)
        cache, logits = out.past_key_values, out.logits[:, -1]  # [B, V]
        tokens, logprobs = [], []  # per step: [B] each
        done = [False] * len(rows)
        for step in range(max(budgets)):
            scores = logits.float()  # [B, V]
            if step < sampling.min_tokens:
                scores = scores.clone()
                scores[:, eos] = float("-inf")
            if sampling.greedy:
                token = scores.argmax(dim=-1)  # [B]
            else:
                scores = scores / sampling.temperature  # [B, V]
                if sampling.top_p < 1.0:
                    scores = _top_p(scores, sampling.top_p)  # [B, V]
                token = torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=generator).squeeze(1)  # [B]
            logprobs.append(torch.log_softmax(scores, dim=-1).gather(1, token[:, None]).squeeze(1))  # [B]
            tokens.append(token)
            so_far = torch.stack(tokens, dim=1).tolist()  # [B, t]
            for row in range(len(rows)):
                if done[row]:
                    continue
                last = so_far[row][-1]
                done[row] = (step + 1 >= budgets[row] or (last in self.eos_ids and step >= sampling.min_tokens)
                             or (bool(sampling.stop) and find_stop(self.tokenizer, so_far[row], sampling.stop,
                                                                   sampling.min_tokens, True) is not None))
            if all(done):
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)  # [B, L+t]
            logits = self.model(token[:, None], attention_mask=mask, past_key_values=cache,
                                use_cache=True).logits[:, -1]  # [B, V]
        continuations = torch.stack(tokens, dim=1).tolist()  # [B, T]
        values = torch.stack(logprobs, dim=1).tolist()  # [B, T]
        return [finish_continuation(self.tokenizer, ids, lps, self.eos_ids, sampling, budget)
                for ids, lps, budget in zip(continuations, values, budgets)]

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]] | dict) -> int:
        """Copy (name, tensor) pairs (the policy's `state_dict()` names) into the engine's model; tensors
        that already share storage (the engine wraps the policy) are skipped. Returns how many were copied."""
        return copy_named_tensors(self.model, named_tensors)

    def sleep(self, level: int = 1) -> None:
        """No-op: the engine keeps no KV cache between calls."""

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """No-op: see `sleep`."""

    def reset_prefix_cache(self) -> None:
        """No-op: no prompt's KV is kept from one `generate` call to the next."""

    def close(self) -> None:
        """Drop the engine's reference to the model and free cached GPU memory (`free_cached_memory`)."""
        from hw3lib.generation.vllm_engine import free_cached_memory  # imports no vLLM

        self.model = None
        free_cached_memory()


def _top_p(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """-inf outside the smallest set of tokens whose probability reaches `top_p` (at least one kept): `[B, V]`."""
    sorted_scores, order = scores.sort(dim=-1, descending=True)  # [B, V]
    probs = torch.softmax(sorted_scores, dim=-1)  # [B, V]
    drop_sorted = probs.cumsum(dim=-1) - probs >= top_p  # [B, V]: mass before this token already reaches top_p
    drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)  # [B, V]
    return scores.masked_fill(drop, float("-inf"))
