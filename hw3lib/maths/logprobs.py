"""Per-token log-probs of rollouts under a policy, as the training loop (and the SFT warm start) take them.

- **Temperature.** Rollouts are sampled from softmax(logits / T); the log-probs that enter the
  loss, the old log-probs, the importance ratio, the entropy and the KL monitor must be those of
  the same distribution, so `response_log_probs` divides the logits by the sampling temperature
  `T` (as TRL and verl do). At T = 1 nothing is divided. The engine reports log-probs of the
  same distribution (hw3lib.generation.base), so the two agree up to numerics.
- **Only the response positions** get logits (`logits_to_keep`), and a prompt prefix shared by
  every row (the template) runs through the model once; see `response_log_probs`.
- **KL monitor.** `kl_estimates` takes log-probs of tokens sampled by the *behaviour* policy (the
  engine's, at the sampling temperature) and returns Schulman's k1 and k3 estimates of
  KL(pi || pi_ref) at that temperature -- exact estimators when pi is the policy that sampled them
  (the first optimizer step of a rollout batch), slightly off-policy afterwards.

Pure functions around one model call each; the maths of the log-softmax itself is
`hw3lib.maths.sft.get_response_log_probs` (chunked, memory-bounded).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch

from hw3lib.maths.sft import label_log_probs, pack_prompt_and_output_ids


def shared_prefix_length(prompt_ids: Sequence[Sequence[int]]) -> int:
    """Length of the token prefix every prompt shares (the template before the question), kept at
    least one token short of the shortest prompt."""
    shortest = min(len(ids) for ids in prompt_ids)
    length = 0
    while length < shortest - 1 and all(ids[length] == prompt_ids[0][length] for ids in prompt_ids):
        length += 1
    return length


def pack_rollouts(tokenizer, prompts: Sequence[str], output_ids: Sequence[Sequence[int]], device: str | torch.device
                  ) -> tuple[dict[str, torch.Tensor], int]:
    """Rollouts as the training steps take them: `(batch, shared prefix length)`.

    `prompts[i]` is row i's prompt text and `output_ids[i]` the exact token ids the engine sampled
    (never a re-tokenization of the text). `batch` holds `input_ids`, `labels`, `response_mask` `[N, L-1]`
    on `device` and `lengths`, `response_start` `[N]` on the CPU (`pack_prompt_and_output_ids`).
    """
    prompt_ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    packed = pack_prompt_and_output_ids(prompt_ids, output_ids, tokenizer.pad_token_id)
    batch = {key: packed[key].to(device) for key in ("input_ids", "labels", "response_mask")}
    batch.update(lengths=packed["lengths"], response_start=packed["response_start"])  # stay on the CPU
    return batch, shared_prefix_length(prompt_ids)  # the prompt template: run once per microbatch


def autocast_for(dtype: str, device: str | torch.device) -> contextlib.AbstractContextManager:
    """Mixed precision for a policy held in float32: bf16/fp16 autocast on `device`, or nothing for float32.

    The policy's master weights (and AdamW's state) stay float32; matrix multiplications run in
    the low precision. See hw3lib.grpo.loop's module docstring for why.
    """
    if dtype in ("float32", "float64"):
        return contextlib.nullcontext()
    low = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if low is None:
        raise ValueError(f"dtype={dtype!r}: choose float32, bfloat16 or float16")
    return torch.autocast(device_type=torch.device(device).type, dtype=low)


def response_log_probs(model, input_ids: torch.Tensor, labels: torch.Tensor, return_token_entropy: bool = False,
                       shared_prefix: int = 0, temperature: float = 1.0) -> dict[str, torch.Tensor]:
    """`sft.get_response_log_probs` of softmax(logits / temperature) for the LAST `labels.shape[1]` positions.

    `input_ids` `[b, L]`, `labels` `[b, T]` with T <= L - shared_prefix (the labels of the last T
    positions). Two savings, same numbers as a full forward (up to float rounding):

    - the model computes logits for those T positions only (`logits_to_keep`), so the lm_head and
      the entropy skip the prompt;
    - the first `shared_prefix` tokens, identical in every row (the prompt template), go through
      the model once (batch 1) and their keys/values are repeated for the rows, which attend to
      them as a KV cache. Gradients flow back through the shared pass, so the gradient is the
      full forward's. (The R1-Zero template is ~170 of ~235 tokens of a smoke-profile sequence.)

    `temperature` (> 0): the sampling temperature of the rollouts; logits are divided by it (in
    float32). Returns `[b, T]` tensors.
    """
    if not temperature > 0:
        raise ValueError(f"temperature={temperature} must be > 0 (the rollouts' sampling temperature)")
    keep = labels.shape[1]
    if getattr(model, "is_gradient_checkpointing", False) and model.training:
        shared_prefix = 0  # checkpointed layers run without a KV cache (transformers turns it off): full forward
    if shared_prefix and not bool((input_ids[:, :shared_prefix] == input_ids[:1, :shared_prefix]).all()):
        raise ValueError(f"the rows do not share their first shared_prefix={shared_prefix} tokens")

    def last_positions(ids):
        if not shared_prefix:
            out = model(ids, use_cache=False, logits_to_keep=keep)  # .logits: [b, T, V]
        else:
            # Only the keys/values are wanted: logits_to_keep=1 skips the lm_head over the prefix (at a
            # 151,936-entry vocabulary that was [1, P, V] logits, most of a 2-layer model's forward pass).
            cache = model(ids[:1, :shared_prefix], use_cache=True, logits_to_keep=1).past_key_values  # [1, P]
            cache.batch_repeat_interleave(ids.shape[0])  # -> [b, P]: every row attends to the same prefix
            out = model(ids[:, shared_prefix:], past_key_values=cache, use_cache=True, logits_to_keep=keep)
        return out.logits  # [b, T, V]

    # The temperature is applied chunk by chunk inside (no float32 copy of the logits: label_log_probs).
    return label_log_probs(last_positions(input_ids), labels, return_token_entropy, temperature=temperature)


def batched_log_probs(model, batch: dict[str, torch.Tensor], micro_batch_size: int, shared_prefix: int = 0,
                      temperature: float = 1.0, precision: str = "float32") -> torch.Tensor:
    """log p(label | prefix) at `temperature` of every response token of `batch` under `model`, no autograd.

    `batch` holds `input_ids`, `labels`, `lengths`, `response_start` (hw3lib.maths.sft.pack_prompt_and_output_ids);
    runs in microbatches under `autocast_for(precision, ...)`. Returns `[N, L - 1]` float32
    aligned with `batch["labels"]` (zeros outside the responses), cloned out of inference mode so
    the loss may use it as a constant.
    """
    n, width = batch["labels"].shape
    out = torch.zeros((n, width), dtype=torch.float32, device=batch["labels"].device)  # [N, L-1]
    was_training = model.training
    model.eval()
    with torch.inference_mode(), autocast_for(precision, batch["labels"].device):
        for start in range(0, n, micro_batch_size):
            rows = slice(start, start + micro_batch_size)
            cols = slice(int(batch["response_start"][rows].min()), int(batch["lengths"][rows].max()))
            lp = response_log_probs(model, batch["input_ids"][rows, :cols.stop], batch["labels"][rows, cols],
                                    shared_prefix=shared_prefix, temperature=temperature)
            out[rows, cols] = lp["log_probs"].float()  # [b, T]
    model.train(was_training)
    return out.clone()


def kl_estimates(log_probs: torch.Tensor, ref_log_probs: torch.Tensor,
                 mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Estimates of KL(pi || pi_ref) from per-token log-probs of tokens sampled from pi: `[B, T] x 3 -> [], []`.

    k1 = logp - logp_ref (unbiased, can be negative per token); k3 = exp(logp_ref - logp) -
    (logp_ref - logp) - 1 (unbiased and never negative, lower variance; Schulman's estimators).
    Both are means over the tokens `mask` keeps. The samples are the rollouts, i.e. drawn from
    the policy that generated them; for later optimizer steps of the same rollout batch they are
    slightly off-policy for the current pi.
    """
    k1_sum, k3_sum = kl_token_sums(log_probs, ref_log_probs, mask)  # [], []
    tokens = mask.bool().sum()  # []
    return k1_sum / tokens, k3_sum / tokens


def kl_token_sums(log_probs: torch.Tensor, ref_log_probs: torch.Tensor,
                  mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sums (not means) of the k1 and k3 terms over the tokens `mask` keeps: `[B, T] x 3 -> [], []`.

    The training loop adds these over an optimizer step's microbatches and divides by the step's
    response-token count once, so the logged KL is a mean over all its tokens.
    """
    keep = mask.bool()
    delta = ref_log_probs - log_probs  # [B, T]: log pi_ref - log pi
    return torch.where(keep, -delta, 0.0).sum(), torch.where(keep, torch.expm1(delta) - delta, 0.0).sum()
