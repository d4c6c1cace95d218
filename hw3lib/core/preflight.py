"""Preflight at every run start: read the card, choose the dtype it supports, check the run fits before any GPU work.

    from hw3lib.core.preflight import preflight
    report = preflight(cfg, "grpo")   # raises PreflightError, naming settings that fit, when the run does not
    print(report.summary())

`preflight(cfg, kind, device=None)`, in order:

1. **The device** (`detect_device`, hw3lib.core.devices, re-exported here with `DeviceInfo`, `supported_dtype`,
   `accelerator_for`, `PreflightError`): torch.cuda's device 0 (name, total memory, compute capability) and the
   number of GPUs. On a machine without one, `$HW3_SIMULATE_GPU` names a simulated card (`H100-80GB`,
   `A100-40GB`, `L4-24GB`, `RTX4090-24GB`, `T4-16GB`, ... -- the keys of `CARDS` -- or `NAME:GiB:major.minor`,
   optionally `2x` in front for two of them): CI rehearses the full profile's preflight that way. Otherwise the
   CPU, where no GPU check applies (the report says so). A real GPU wins over the variable.
2. **The dtype** (`supported_dtype`): bf16 from compute capability 8.0 (vLLM refuses bf16 below it: T4, V100);
   below, float32 (the trainer then trains without autocast). A config asking bf16 on such a card is refused.
3. **The devices the config names exist**: a rollout engine and a policy on different GPUs need two.
4. **The model's shape**: the course models by hub id (`hw3lib.core.memory.COURSE_SHAPES`; a rehearsal's
   `stand-in:<hub id>` and its folders are checked as the real model), `Shape.from_config` of a local folder's
   config.json (or a hub id in the local cache), and the tiny smoke models fit any card without a check.
5. **The memory model** (hw3lib.core.memory) for the run's config on the card: every phase's peak against the
   card's memory, and whether the vLLM engine's share holds its weights, workspace and one sequence. When it
   does not fit, `PreflightError` says which phase and names settings that would (`suggest`: a lower or higher
   `gpu_memory_utilization`, `gradient_checkpointing=True`, smaller microbatches, `lora_rank=16`, a shorter
   `sampling_max_tokens` / `max_model_len`), never an out-of-memory traceback halfway through a run.

What `cfg` is, by `kind`: "grpo", "async" (the same GRPOConfig; `policy_device != rollout_device` puts the
generator on its own GPU), "sft", "ei" (SFTConfig, EIConfig; any RunConfig works); "eval": an `EvalRequest`, a
dict of its fields, or any object with `model` (and optionally `gpu_memory_utilization`, `max_model_len`,
`dtype`, `engine`, `device`, such as a `Profile`).

6. **The rows per forward** of a GRPO or async run (`forward_rows`): the most sequences whose plan fits within
   `HEADROOM` (85%) of the memory free to the run (`DeviceInfo.free_bytes`: the driver's free memory plus this
   process's own), the one choice the loop trains with (hw3lib.grpo.memory_plan records it in the run's config),
   this line prints, and the README's table shows.

Assumptions the model makes of a config: prompts of its recorded `prompt_tokens` (the longest of the run's data,
measured at its start), else `PROMPT_TOKENS` (200); responses of the whole `sampling_max_tokens` (an upper bound);
a training engine's context is prompt + budget rounded up to 128 (hw3lib.generation.rollout_max_model_len), an
evaluation engine's the model's own unless `max_model_len` is given. `fit_table` and `recipe_24gb` give the README's
"What fits your card" (at each course's longest prompt, `COURSE_PROMPT_TOKENS`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from hw3lib.core.cost import Accelerator
from hw3lib.core.devices import (BF16_MIN_CAPABILITY, CARDS, SIMULATE_ENV, Card, DeviceInfo,  # noqa: F401
                                 PreflightError, accelerator_for, card_for, detect_device, simulated_device,
                                 supported_dtype)
from hw3lib.core.memory import (COLOCATED_SHARE, COURSE_SHAPES, EVAL_SHARE, HEADROOM, GiB, LORA_TARGETS, PROMPT_TOKENS,
                                Engine, Plan, Shape, Trainer, async_plan, ei_plan, eval_plan, grpo_plan, sft_plan,
                                training_micro_batch)

KINDS = ("grpo", "sft", "ei", "eval", "async")
TINY_MODELS = ("tiny", "tiny-sft")
STAND_IN_PREFIX, STAND_IN_MARKER = "stand-in:", "hw3lib_stand_in.json"  # hw3lib.models.stand_in's (tested)
SUGGESTED_LORA_RANK = 16
CONTEXT_MULTIPLE = 128  # hw3lib.generation.MAX_MODEL_LEN_MULTIPLE


# ---- what a config asks of the card --------------------------------------------------------------------------

@dataclass(frozen=True)
class EvalRequest:
    """An evaluation-only engine (notebooks 01/02, `hw3 eval`): no trainer beside it."""

    model: str
    gpu_memory_utilization: float = EVAL_SHARE
    max_model_len: int | None = None  # None: the model's own context, as vLLM takes it
    dtype: str = "bfloat16"
    device: str = "cuda:0"
    engine: str = "vllm"
    batch_size: int = 64  # the transformers engine's rows per generate call
    max_tokens: int = 1024


def eval_request(cfg) -> EvalRequest:
    """`cfg` as an EvalRequest: itself, a dict of its fields, or any object with `model` (a Profile...)."""
    if isinstance(cfg, EvalRequest):
        return cfg
    if isinstance(cfg, dict):
        known = {f.name for f in dataclasses.fields(EvalRequest)}
        if "model" not in cfg or set(cfg) - known:
            raise ValueError(f"preflight(kind='eval'): a dict with 'model' and any of {sorted(known)}, "
                             f"got {sorted(cfg)}")
        return EvalRequest(**cfg)
    if not hasattr(cfg, "model"):
        raise ValueError(f"preflight(kind='eval'): pass an EvalRequest, a dict or an object with .model, not {cfg!r}")
    fields = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(EvalRequest) if hasattr(cfg, f.name)}
    return EvalRequest(**fields)


def _gpu_index(device: str, simulated: bool) -> int | None:
    """`cuda` / `cuda:N` -> its index; on a simulated card `cpu` stands for GPU 0 (the rehearsal's configs)."""
    name = str(device)
    if name.startswith("cuda"):
        return int(name.split(":", 1)[1]) if ":" in name else 0
    return 0 if simulated and name == "cpu" else None


def _devices(cfg, kind: str) -> list[tuple[str, str]]:
    """(setting, device) pairs the config places work on."""
    if kind == "eval":
        return [("device", cfg.device)]
    return [("policy_device", cfg.policy_device), ("rollout_device", cfg.rollout_device)]


def colocated(cfg, kind: str) -> bool:
    """Whether the engine shares the policy's card (always, for an evaluation)."""
    return kind == "eval" or _gpu_index(cfg.policy_device, True) == _gpu_index(cfg.rollout_device, True)


def _rollout_context(cfg, shape: Shape) -> int:
    """A training engine's max_model_len: prompt + budget rounded up to 128, at most the model's context."""
    needed = -(-(PROMPT_TOKENS + cfg.sampling_max_tokens) // CONTEXT_MULTIPLE) * CONTEXT_MULTIPLE
    return min(needed, shape.max_positions) if shape.max_positions else needed


# The kinds whose loop packs sequences into forwards by memory (hw3lib.grpo.step); SFT and EI keep their microbatch.
PACKED_KINDS = ("grpo", "async")


def prompt_tokens_of(cfg) -> int:
    """The prompt length the memory model pads each row to: the run's recorded longest prompt (`prompt_tokens`,
    measured from its data at its start: hw3lib.grpo.step.with_memory_plan), else `PROMPT_TOKENS`."""
    return getattr(cfg, "prompt_tokens", None) or PROMPT_TOKENS


def trainer_for(cfg, rows: int | None = None, gpu: bool = True) -> Trainer:
    """The run config's trainer as the memory model sees it, with `rows` sequences per forward (None: the run's
    recorded `forward_rows`, else the course's microbatch); `gpu`: on a card, where attention copies the K/V heads.
    Unknown LoRA targets are left out."""
    rows = rows or getattr(cfg, "forward_rows", None) or cfg.micro_train_batch_size
    return Trainer(rows, prompt_tokens_of(cfg), cfg.sampling_max_tokens,
                   monitor_kl=bool(getattr(cfg, "monitor_kl", False)), lora_rank=cfg.lora_rank,
                   lora_targets=tuple(t for t in cfg.lora_target_modules if t in LORA_TARGETS),
                   checkpointing=cfg.gradient_checkpointing, precision=cfg.dtype, repeats_kv=gpu)


def engine_for(cfg, kind: str, shape: Shape) -> Engine:
    """The run's engine: vLLM at its share, or the transformers engine (wrapping a float32 policy beside it)."""
    if kind == "eval":
        return Engine(cfg.engine, cfg.gpu_memory_utilization, cfg.max_model_len, cfg.dtype, cfg.batch_size,
                      PROMPT_TOKENS, cfg.max_tokens)
    context = getattr(cfg, "max_model_len", None) or _rollout_context(cfg, shape)
    wraps = cfg.engine == "transformers" and colocated(cfg, kind) and cfg.dtype == "float32" and not cfg.lora_rank
    return Engine(cfg.engine, cfg.gpu_memory_utilization, context, cfg.dtype, cfg.generation_batch_size,
                  PROMPT_TOKENS, cfg.sampling_max_tokens, wraps)


def plan_for(cfg, kind: str, shape: Shape, device_bytes: int, available_bytes: int = 0,
             rows: int | None = None) -> Plan:
    """The memory model's plan of the run `cfg` of `kind` on a card of `device_bytes` of which `available_bytes`
    are free to it (0: all), at the rows per forward the loop uses (`forward_rows`; `rows` pins them)."""
    engine = engine_for(cfg, kind, shape)
    if kind == "eval":
        return eval_plan(shape, engine, device_bytes).with_available(available_bytes)
    if rows is None:
        rows = forward_rows(cfg, kind, shape, device_bytes, available_bytes)
    builder = {"grpo": grpo_plan, "sft": sft_plan, "ei": ei_plan, "async": async_plan}[kind]
    return builder(shape, trainer_for(cfg, rows), engine, device_bytes, colocated(cfg, kind)).with_available(
        available_bytes)


def forward_rows(cfg, kind: str, shape: Shape, device_bytes: int, available_bytes: int = 0) -> int:
    """Sequences per training forward of the run `cfg` of `kind` on this card: the one function that decides them,
    for the loop (hw3lib.grpo.step.with_memory_plan records them in the run's config), the preflight line, the
    README's fit table and docs/gpu.md. A recorded `forward_rows` is kept; else, for the packed kinds (GRPO, async
    GRPO), the most sequences, up to an optimizer step's, whose plan still fits within `HEADROOM` of the free
    memory (hw3lib.core.memory.training_micro_batch), never fewer than the course's microbatch; SFT and EI use the
    course's microbatch."""
    recorded = getattr(cfg, "forward_rows", None)
    if recorded:
        return recorded
    if kind not in PACKED_KINDS:
        return cfg.micro_train_batch_size
    engine, together = engine_for(cfg, kind, shape), colocated(cfg, kind)
    builder = {"grpo": grpo_plan, "async": async_plan}[kind]
    return training_micro_batch(trainer_for(cfg, cfg.micro_train_batch_size), cfg.train_batch_size, lambda t: builder(
        shape, t, engine, device_bytes, together).with_available(available_bytes).fits)


def resolve_shape(model: str) -> tuple[Shape | None, str]:
    """`(shape, note)` of a config's model; shape None when there is nothing to check (the note says why)."""
    name = str(model)
    if name in TINY_MODELS:
        return None, f"{name} is a tiny smoke model (megabytes): it fits any card"
    folder = Path(name).expanduser()
    real = name[len(STAND_IN_PREFIX):] if name.startswith(STAND_IN_PREFIX) else None
    if real is None and (folder / STAND_IN_MARKER).is_file():
        real = json.loads((folder / STAND_IN_MARKER).read_text())["stands_in_for"]
    if real is not None:
        shape = COURSE_SHAPES.get(real)
        return shape, f"{name} stands in for {real}: checked as the real model" if shape else f"unknown stand-in {real}"
    if name in COURSE_SHAPES:
        return COURSE_SHAPES[name], ""
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(str(folder) if folder.is_dir() else name, local_files_only=True)
        return Shape.from_config(folder.name or name, config), ""
    except (OSError, ValueError, KeyError, AttributeError, TypeError):  # not a causal LM's config we can read
        return None, (f"{name}: neither a course model nor a folder (or cached hub id) with a config.json, so its "
                      "memory was not checked")


# ---- the report ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PreflightReport:
    """What `preflight` found: the device, the dtype it supports and why, and (when checked) each phase's peak
    by the memory model against the card; `summary()` is the line a run prints at its start."""

    kind: str
    device: DeviceInfo
    dtype: str  # what the card supports (supported_dtype)
    dtype_reason: str
    model: str
    checked: bool  # False: no memory check applied (`note` says why)
    fits: bool = True
    note: str = ""
    peaks: dict[str, int] = field(default_factory=dict)  # phase -> peak bytes on its card
    engine_needs: int = 0  # what the vLLM engine's share must hold (0: none)
    engine_bytes: int = 0  # the engine's share of the card
    suggestions: tuple[str, ...] = ()  # settings that fit, `name=value, ...` each (when it does not)
    accelerator: Accelerator | None = None  # the card's datasheet figures, for GPU-hour estimates
    forward_rows: int = 0  # sequences per training forward the plan (and the loop) uses; 0: not a packed kind
    budget: int = 0  # the most a phase may hold: HEADROOM x the memory free to the run
    prompt_tokens: int = 0  # the prompt length each row is padded to

    def summary(self, model: str | None = None) -> str:
        """One line to print at a run's start; `model` names the model there (default `self.model`; callers print
        a local folder as `hw3lib.core.io.shown_model` does, so stored notebooks name no machine's path)."""
        head = f"preflight {self.kind} of {model or self.model} on {self.device.describe()}, {self.dtype}"
        if not self.checked:
            return f"{head}: no memory check ({self.note})"
        phases = ", ".join(f"{name} {value / GiB:.1f} GiB" for name, value in self.peaks.items())
        verdict = "fits" if self.fits else "DOES NOT FIT"
        rows = (f"{self.forward_rows} rows per forward of {self.prompt_tokens} + budget tokens: "
                if self.forward_rows else "")
        budget = (f" (budget {self.budget / GiB:.1f} GiB: {HEADROOM:.0%} of "
                  f"{self.device.available_bytes / GiB:.1f} GiB free)" if self.kind != "eval" and self.budget else "")
        return f"{head}: {rows}{phases} of {self.device.total_bytes / GiB:.1f} GiB{budget} -- {verdict}"


# ---- settings that would fit -------------------------------------------------------------------------------

def _microbatch_changes(cfg) -> list[dict]:
    """Smaller microbatches (same optimizer steps, more accumulation), largest first, down to 1."""
    micro, out = cfg.micro_train_batch_size // 2, []
    while micro >= 1:
        if cfg.train_batch_size % micro == 0:
            out.append({"gradient_accumulation_steps": cfg.train_batch_size // micro})
        micro //= 2
    return out


def _variants(cfg, kind: str, context: int) -> list[dict]:
    """Changes to try, in order of how little they change the run: the share alone (nothing else), gradient
    checkpointing (same gradients, ~1/3 more compute), smaller microbatches (same gradients, slower), LoRA (a
    different training: adapters only), then a shorter generation budget or context (a different task)."""
    if kind == "eval":
        lengths = [{"max_model_len": n} for n in (16384, 8192, 4096, 2048) if n < context]
        return [{}, *lengths, *([{"dtype": "float16"}] if cfg.dtype == "float32" else [])]
    ckpt, lora = {"gradient_checkpointing": True}, {"lora_rank": SUGGESTED_LORA_RANK}
    micro = _microbatch_changes(cfg)
    smallest = micro[-1:] or [{}]
    budgets = [{"sampling_max_tokens": n} for n in (512, 256) if n < cfg.sampling_max_tokens]
    return [{}, ckpt, *micro, *[{**ckpt, **m} for m in micro], lora, {**lora, **ckpt},
            *[{**lora, **ckpt, **m} for m in smallest], *budgets,
            *[{**lora, **ckpt, **smallest[0], **b} for b in budgets]]


def _fit(cfg, kind: str, shape: Shape, device_bytes: int, changes: dict, available_bytes: int = 0) -> dict | None:
    """`changes` (plus a share that fits, when the share is what stops it) if the run then fits; else None."""
    try:
        candidate = dataclasses.replace(cfg, **changes)
    except (ValueError, TypeError):  # the config refuses the combination
        return None
    plan = plan_for(candidate, kind, shape, device_bytes, available_bytes)
    if plan.fits:
        return changes
    share = plan.max_share  # the most KV cache that still fits beside the trainer
    if plan.engine_needs and share != candidate.gpu_memory_utilization and plan.with_share(share).fits:
        return {**changes, "gpu_memory_utilization": share}
    return None


def suggest(cfg, kind: str, shape: Shape, device_bytes: int, limit: int = 3, available_bytes: int = 0) -> list[dict]:
    """Up to `limit` sets of changes under which the run fits, least change first (`_variants`); a set that
    only adds settings to an earlier one is left out."""
    context = engine_for(cfg, kind, shape).max_model_len or shape.max_positions
    found: list[dict] = []
    tried: list[dict] = []
    for variant in _variants(cfg, kind, context):
        changes = {key: value for key, value in variant.items() if getattr(cfg, key) != value}  # real changes only
        if changes in tried:
            continue
        tried.append(changes)
        fitted = _fit(cfg, kind, shape, device_bytes, changes, available_bytes)
        if fitted is not None and not any(set(earlier) <= set(fitted) for earlier in found):
            found.append(fitted)
        if len(found) == limit:
            break
    return found


def describe_changes(cfg, changes: dict) -> str:
    """`gradient_checkpointing=True, gradient_accumulation_steps=256 (microbatches of 1)`."""
    words = []
    for key, value in changes.items():
        text = f"{key}={value!r}"
        if key == "gradient_accumulation_steps":
            text += f" (microbatches of {cfg.train_batch_size // value})"
        words.append(text)
    return ", ".join(words)


# ---- the check ------------------------------------------------------------------------------------------------

def _check_devices(cfg, kind: str, info: DeviceInfo) -> None:
    """Every GPU the config names exists."""
    for setting, device in _devices(cfg, kind):
        index = _gpu_index(device, info.simulated)
        if index is not None and index >= info.count:
            raise PreflightError(
                f"{setting}={device!r}, but this machine has {info.count} GPU(s) ({info.describe()}): a rollout engine "
                "and a policy on different GPUs need two. On one GPU set policy_device='cuda:0' and "
                f"rollout_device='cuda:0' (colocated, gpu_memory_utilization={COLOCATED_SHARE}).")


def _check_dtype(cfg, info: DeviceInfo, supported: str, why: str) -> None:
    if cfg.dtype == "bfloat16" and supported != "bfloat16":
        raise PreflightError(f"dtype='bfloat16' cannot run here: {why}. Set dtype='float32' in the run's config "
                             "(the full profile picks it on such a card).")


def _unchecked_reason(cfg, kind: str, info: DeviceInfo) -> str:
    if info.kind != "cuda":
        return f"no GPU here; set ${SIMULATE_ENV} (e.g. L4-24GB) to rehearse a card's check"
    if all(_gpu_index(device, info.simulated) is None for _, device in _devices(cfg, kind)):
        return "the run is on the CPU"
    return ""


def _refusal(report: PreflightReport, plan: Plan, cfg, options: list[dict]) -> str:
    """The one-paragraph message of a run that does not fit."""
    card = report.device.total_bytes / GiB
    over = [f"{name} needs {peak / GiB:.1f} GiB" for name, peak in plan.peaks.items() if peak > plan.budget]
    if not plan.engine_fits:
        over.append(f"the engine's share (gpu_memory_utilization={plan.share}: {plan.engine_bytes / GiB:.1f} GiB) "
                    f"cannot hold its weights, workspace and one sequence ({plan.engine_needs / GiB:.1f} GiB)")
    head = (f"{report.kind} of {report.model} does not fit {report.device.describe()} by the memory model "
            f"(hw3lib.core.memory), on {card:.1f} GiB with its budget of {plan.budget / GiB:.1f} GiB "
            f"({plan.headroom:.0%} of the {report.device.available_bytes / GiB:.1f} GiB free): {'; '.join(over)}.")
    if not options:
        return (f"{head} None of the settings the preflight tries fits (share, gradient_checkpointing, microbatches, "
                f"lora_rank={SUGGESTED_LORA_RANK}, a shorter budget): use a larger card, or two GPUs "
                "(rollout_device='cuda:0', policy_device='cuda:1').")
    listed = "; ".join(f"`{describe_changes(cfg, changes)}`" for changes in options)
    return (f"{head} Settings that fit: {listed}. Set one of them in the run's config, or use a larger card "
            "(README: \"What fits your card\").")


def preflight(cfg, kind: str, device: DeviceInfo | None = None) -> PreflightReport:
    """Check that the run `cfg` of `kind` fits `device` (None: `detect_device()`) before any GPU work; returns
    the report, or raises PreflightError naming settings that fit (module docstring)."""
    if kind not in KINDS:
        raise ValueError(f"preflight kind {kind!r}: choose one of {', '.join(KINDS)}")
    cfg = eval_request(cfg) if kind == "eval" else cfg
    info = device if device is not None else detect_device()
    dtype, why = supported_dtype(info)
    report = PreflightReport(kind, info, dtype, why, str(cfg.model), checked=False, accelerator=accelerator_for(info))
    skipped = _unchecked_reason(cfg, kind, info)
    if skipped:
        return dataclasses.replace(report, note=skipped)
    _check_devices(cfg, kind, info)
    _check_dtype(cfg, info, dtype, why)
    shape, note = resolve_shape(cfg.model)
    if shape is None:
        return dataclasses.replace(report, note=note)
    free = info.free_bytes
    rows = forward_rows(cfg, kind, shape, info.total_bytes, free) if kind in PACKED_KINDS else 0
    plan = plan_for(cfg, kind, shape, info.total_bytes, free, rows or None)
    report = dataclasses.replace(report, checked=True, fits=plan.fits, note=note, peaks=plan.peaks,
                                 engine_needs=plan.engine_needs,
                                 engine_bytes=plan.engine_bytes if plan.engine_needs else 0,
                                 forward_rows=rows, budget=plan.budget,
                                 prompt_tokens=prompt_tokens_of(cfg) if kind != "eval" else 0)
    if plan.fits:
        return report
    options = suggest(cfg, kind, shape, info.total_bytes, available_bytes=free)
    report = dataclasses.replace(report, suggestions=tuple(describe_changes(cfg, c) for c in options))
    raise PreflightError(_refusal(report, plan, cfg, options), report, tuple(options))


# ---- what fits each card: the README's table ----------------------------------------------------------------

# Each course preset's full-profile model (hw3lib.core.course; the two MATH courses share theirs).
COURSE_MODELS = {"nlpdl-hw3": "Qwen/Qwen3-0.6B", "cse599o-a3": "Qwen/Qwen2.5-Math-1.5B",
                 "cs336-a5": "Qwen/Qwen2.5-Math-1.5B", "cs336-a5-2026": "allenai/OLMo-2-0425-1B"}
FIT_ROWS = (("nlpdl-hw3", "eval"), ("nlpdl-hw3", "grpo"), ("cs336-a5", "eval"), ("cs336-a5", "grpo"),
            ("cs336-a5", "sft"), ("cs336-a5", "ei"), ("cs336-a5-2026", "eval"), ("cs336-a5-2026", "grpo"))
# The memory-relevant settings each kind's config class gives the full profile (GRPOConfig, SFTConfig, EIConfig:
# tests/core/test_preflight.py checks them against the classes, which sit above hw3lib.core).
KIND_SETTINGS = {"grpo": {"train_batch_size": 256, "gradient_accumulation_steps": 128},
                 "sft": {"train_batch_size": 32, "gradient_accumulation_steps": 8},
                 "ei": {"train_batch_size": 32, "gradient_accumulation_steps": 8}}
# The longest prompt of each course's data in its model's tokens, for the tables (a run measures its own at its start:
# hw3lib.grpo.step.with_memory_plan). GSM8K: the longest R1-Zero prompt is 1,424 characters (train split, measured
# here), about 390 tokens at the template's ~3.7 characters per token -- 400. MATH: an estimate (no MATH data here;
# its longest problems, with Asymptote figures, run to several thousand characters) -- 800.
GSM8K_PROMPT_TOKENS, MATH_PROMPT_TOKENS = 400, 800
COURSE_PROMPT_TOKENS = {"nlpdl-hw3": GSM8K_PROMPT_TOKENS, "cs336-a5-2026": GSM8K_PROMPT_TOKENS,
                        "cse599o-a3": MATH_PROMPT_TOKENS, "cs336-a5": MATH_PROMPT_TOKENS}


def expected_prompt_tokens(cfg) -> int:
    """The prompt length to plan a run for before it has measured its own: its recorded `prompt_tokens`, else its
    data's table estimate (GSM8K 400; MATH and anything else 800)."""
    recorded = getattr(cfg, "prompt_tokens", None)
    if recorded:
        return recorded
    return GSM8K_PROMPT_TOKENS if getattr(cfg, "dataset", "") == "gsm8k" else MATH_PROMPT_TOKENS
# What a nominal "N GB" card has, as torch reports it (the smaller of its class: L4/A10G for 24 GB, T4 for 16 GB).
USABLE_GIB = {80: 79.2, 40: 39.4, 24: 22.5, 16: 14.6}


@dataclass(frozen=True)
class RunSettings:
    """What the memory model reads of a training run's config, with RunConfig's names and the full profile's
    values (tests/core/test_preflight.py checks them against GRPOConfig, SFTConfig and EIConfig): the course
    runs `fit_table` checks. Not the config classes themselves: hw3lib.core.config imports the profile, which
    imports this module."""

    model: str
    dtype: str = "bfloat16"
    train_batch_size: int = 256
    gradient_accumulation_steps: int = 128
    sampling_max_tokens: int = 1024
    gpu_memory_utilization: float = COLOCATED_SHARE
    gradient_checkpointing: bool = False
    lora_rank: int = 0
    lora_target_modules: tuple[str, ...] = LORA_TARGETS
    monitor_kl: bool = False
    engine: str = "vllm"
    policy_device: str = "cuda:0"
    rollout_device: str = "cuda:0"
    generation_batch_size: int = 64
    learning_rate: float = 1e-5
    prompt_tokens: int = PROMPT_TOKENS
    forward_rows: int | None = None

    @property
    def micro_train_batch_size(self) -> int:
        return self.train_batch_size // self.gradient_accumulation_steps

    def replace(self, **changes) -> "RunSettings":
        return dataclasses.replace(self, **changes)


def course_config(course: str, kind: str, dtype: str = "bfloat16"):
    """The full profile's `kind` run of `course` as the memory model needs it: `RunSettings` with the course's
    model and the kind's batch sizes (an EvalRequest at the evaluation share for "eval"); no environment
    ($HW3_MODEL, $HW3_REHEARSAL) changes it."""
    name = _known_course(course, "course_config")
    model = COURSE_MODELS[name]
    if kind == "eval":
        return EvalRequest(model, EVAL_SHARE, None, dtype)
    return RunSettings(model, dtype, **KIND_SETTINGS[kind], prompt_tokens=COURSE_PROMPT_TOKENS[name])


def _known_course(course: str, caller: str) -> str:
    """`course` as a preset name (an old alias resolved), or a ValueError naming the choices."""
    from hw3lib.core.course import canonical_name

    name = canonical_name(course)
    if name not in COURSE_MODELS:
        raise ValueError(f"{caller}: unknown course {course!r}: choose one of {', '.join(COURSE_MODELS)}")
    return name


def nominal_device(gib: int | str) -> DeviceInfo:
    """A card of `gib` nominal GB with bf16 (`USABLE_GIB`, else 93% of it), or a key of `CARDS`."""
    if isinstance(gib, str):
        return simulated_device(gib)
    usable = USABLE_GIB.get(gib, 0.93 * gib)
    return DeviceInfo("cuda", f"a {gib} GB card", int(usable * GiB), BF16_MIN_CAPABILITY, 1, simulated=True)


def fit_row(course: str, kind: str, info: DeviceInfo) -> dict:
    """Whether the course's default `kind` run fits `info`, else the least change that does (`suggest`)."""
    dtype = supported_dtype(info)[0]
    cfg = course_config(course, kind, dtype)
    shape = resolve_shape(cfg.model)[0]
    plan = plan_for(cfg, kind, shape, info.total_bytes)
    options = [] if plan.fits else suggest(cfg, kind, shape, info.total_bytes, limit=1)
    chosen = cfg if plan.fits or not options else dataclasses.replace(cfg, **options[0])
    fitted = plan if chosen is cfg else plan_for(chosen, kind, shape, info.total_bytes)
    change = "" if plan.fits else describe_changes(cfg, options[0]) if options else "does not fit"
    rows = forward_rows(chosen, kind, shape, info.total_bytes) if kind in PACKED_KINDS else 0
    return {"course": course, "kind": kind, "model": cfg.model, "card": info.name,
            "card_gib": round(info.total_bytes / GiB, 1), "dtype": dtype, "fits": plan.fits, "change": change,
            "peak_gib": round(fitted.peak / GiB, 1), "share_of_card": round(fitted.peak / info.total_bytes, 3),
            "forward_rows": rows, "prompt_tokens": getattr(cfg, "prompt_tokens", 0)}


def fit_table(devices_gib=(80, 40, 24, 16)) -> list[dict]:
    """For each course run (`FIT_ROWS`) and card (a nominal size in GB, or a key of `CARDS` such as "T4-16GB"),
    whether the course's default config fits, and if not the least change that does, or "does not fit"."""
    return [fit_row(course, kind, nominal_device(gib)) for course, kind in FIT_ROWS for gib in devices_gib]


def recipe_24gb(course: str = "nlpdl-hw3") -> dict:
    """Settings under which the course's GRPO run fits a 24 GB card (the smaller ones: 22.5 GiB) within the plan's
    headroom (85% of the card), by the memory model; pass them to the config: `GRPOConfig.for_profile("full",
    course=course, **recipe_24gb(course))`. Qwen3-0.6B: gradient checkpointing (full fine-tuning, the course's
    gradients) and an engine share of 0.4 (beside the engine the trainer keeps its masters, moments and bf16 working
    copy: at the default 0.5 the generation phase would take 93% of a 22.5 GiB card).
    Qwen2.5-Math-1.5B and OLMo-2-0425-1B: LoRA of rank 16 with checkpointing, at 10x the learning rate (LoRA's usual
    starting point, RunConfig.lora_rank; not tuned here), and an engine share of 0.45."""
    if COURSE_MODELS[_known_course(course, "recipe_24gb")] == "Qwen/Qwen3-0.6B":
        return {"gradient_checkpointing": True, "gpu_memory_utilization": 0.4}
    # the 1.5B models (Qwen2.5-Math-1.5B; OLMo-2-0425-1B, 1.48B parameters)
    return {"gradient_checkpointing": True, "lora_rank": SUGGESTED_LORA_RANK, "learning_rate": 1e-4,
            "gpu_memory_utilization": 0.45}
