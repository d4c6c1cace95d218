"""What the full profile costs: GPU-hours per run and grid; the memory model lives in hw3lib.core.memory.

**Memory**: `hw3lib.core.memory` (what each run holds, phase by phase, against a card: the trainer's parts with
LoRA and gradient checkpointing, the engines, the GRPO/SFT/EI/evaluation/async plans). Its names are
re-exported here (`cost.Shape`, `cost.trainer_parts`, `cost.gpu_plan`, ...), so older callers keep working.
`hw3lib.core.preflight` runs it for a run's config on the detected card before any GPU work.

**Compute** (`run_gpu_hours`, `sft_gpu_hours`, `ei_gpu_hours`, `evaluation_gpu_hours`): per GRPO step, generation as a roofline (each decode step reads the weights
and the KV cache of every sequence, or is compute-bound, whichever is slower), old/reference log-prob passes
at 2 FLOPs per parameter per token, training at 6, validation as generation; at stated fractions of an
H100's peak (`H100`; `hw3lib.core.preflight.accelerator_for` gives other cards' datasheet figures). Engines that
vLLM runs eager (no CUDA graphs: the models it serves through its Transformers backend, CS336 2026's OLMo-2,
`EAGER_SHAPES`) decode `EAGER_DECODE_FACTOR` times slower. These are estimates, labelled as such wherever they are
shown.

`python bench/cost_model.py` prints the tables (the README's "What the full workbook costs" and "What fits your
card").
"""

from __future__ import annotations

from dataclasses import dataclass

# The memory model, re-exported (see the module docstring).
from hw3lib.core.memory import (  # noqa: F401
    ACTIVATION_BYTES_PER_TOKEN_LAYER, ADAM_BYTES, COLOCATED_SHARE, COURSE_SHAPES, CUDA_CONTEXT_BYTES, DEVICE_BYTES,
    ENGINE_WORKSPACE_BYTES, EVAL_SHARE, GPU_RUNTIME_BYTES, GRAD_BYTES, LOGITS_BYTES_PER_TOKEN, LORA_TARGETS,
    LOW_COPY_BYTES, MASTER_BYTES, PROMPT_TOKENS, RESIDUAL_BYTES, SAMPLING_BYTES_PER_LOGIT, SLEEPING_ENGINE_BYTES,
    Engine, GiB, Plan, Shape, Trainer, activation_bytes, async_plan, ei_plan, engine_needs, eval_plan, grpo_plan,
    lora_activation_bytes_per_token_layer, lora_params, sft_plan, trainer_parts, trainer_peak,
    trainer_resident_between_steps, transformers_engine_parts)


# ---- the plan of one GRPO run, as the README's 80 GB table shows it ----------------------------------------

@dataclass(frozen=True)
class GpuPlan:
    """Peak bytes on each GPU of a training run, and whether each fits."""

    device_bytes: int
    colocated: bool
    share: float
    generation_peak: int  # colocated: engine awake + trainer resident; else the engine's GPU
    training_peak: int  # colocated: trainer peak + sleeping engine; else the policy's GPU
    max_colocated_share: float
    fits: bool  # within the plan's limits (hw3lib.core.memory.Plan.fits: HEADROOM of the card beside a trainer)


def gpu_plan(shape: Shape, micro_batch: int, prompt_tokens: int, response_tokens: int, *, share: float,
             colocated: bool = True, monitor_kl: bool = False, device_bytes: int = DEVICE_BYTES, **trainer) -> GpuPlan:
    """The memory of a GRPO run of `shape` on GPUs of `device_bytes`, microbatches of `micro_batch` sequences of
    `prompt_tokens` + `response_tokens`, the vLLM engine at `share` (`trainer`: more `Trainer` settings)."""
    plan = grpo_plan(shape, Trainer(micro_batch, prompt_tokens, response_tokens, monitor_kl, **trainer),
                     Engine(share=share), device_bytes, colocated)
    generation, training = plan.peaks.values()
    return GpuPlan(device_bytes, colocated, share, generation, training, plan.max_share if colocated else 1.0,
                   plan.fits)


# ---- compute ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Accelerator:
    name: str
    peak_flops: float  # dense bf16, FLOP/s
    bandwidth: float  # memory, bytes/s
    compute_efficiency: float = 0.35  # stated assumption: the fraction of the peak a step reaches (MFU)
    bandwidth_efficiency: float = 0.6  # stated assumption: the fraction of the bandwidth decoding reaches


H100 = Accelerator("H100 SXM", 989e12, 3.35e12)

# Models vLLM 0.32 serves through its Transformers backend, which hw3lib starts with `enforce_eager=True`
# (hw3lib.generation.vllm_backend_guard says why): their decode steps launch every kernel from Python, no CUDA graph.
EAGER_SHAPES = frozenset({"OLMo-2-0425-1B"})  # Shape.name of allenai/OLMo-2-0425-1B (Olmo2ForCausalLM)
# Stated estimate, not measured here: how much slower an eager engine's decode step is than the graphed one. Reports
# of vLLM with and without CUDA graphs give 1.7-4.3x per decode step at a few concurrent requests (launch-bound,
# e.g. vllm-project/vllm-omni#7960); a GRPO step decodes hundreds of sequences at once, where reading the KV cache
# dominates and the launch overhead matters less, hence the low end of that range, rounded down.
EAGER_DECODE_FACTOR = 1.5


def served_eager(shape: Shape) -> bool:
    """Whether the cost model times `shape`'s engine as eager (`EAGER_SHAPES`)."""
    return shape.name in EAGER_SHAPES


def forward_flops(shape: Shape, tokens: int, response_tokens: int) -> float:
    """2 FLOPs per weight per token through the decoder, the output head on the response positions only."""
    return 2 * (shape.params - shape.embedding_params) * tokens + 2 * shape.embedding_params * response_tokens


def generation_seconds(shape: Shape, sequences: int, prompt_tokens: int, response_tokens: int,
                       acc: Accelerator = H100, eager: bool | None = None) -> float:
    """Roofline time to sample `sequences` responses of `response_tokens` (prefill compute-bound; each decode
    step the slower of its FLOPs and reading the weights plus every sequence's KV cache, times
    `EAGER_DECODE_FACTOR` for an eager engine; `eager` None: `served_eager(shape)`)."""
    prefill = forward_flops(shape, sequences * prompt_tokens, sequences) / (acc.peak_flops * acc.compute_efficiency)
    mean_context = prompt_tokens + response_tokens / 2
    step_bytes = 2 * shape.params + sequences * mean_context * shape.kv_bytes_per_token
    step_flops = forward_flops(shape, sequences, sequences)
    step = max(step_flops / (acc.peak_flops * acc.compute_efficiency),
               step_bytes / (acc.bandwidth * acc.bandwidth_efficiency))
    eager = served_eager(shape) if eager is None else eager
    if eager:
        step *= EAGER_DECODE_FACTOR  # the prefill is one large forward per batch: launches do not dominate it
    return prefill + response_tokens * step


def grpo_step_seconds(cfg, shape: Shape, prompt_tokens: int, response_tokens: int,
                      acc: Accelerator = H100) -> dict[str, float]:
    """Estimated seconds of one GRPO step of `cfg` (a GRPOConfig), by phase."""
    rollouts = cfg.rollout_batch_size
    tokens, responses = rollouts * (prompt_tokens + response_tokens), rollouts * response_tokens
    compute = acc.peak_flops * acc.compute_efficiency
    passes = (1 if cfg.off_policy else 0) + (1 if cfg.monitor_kl else 0)
    return {"generation": generation_seconds(shape, rollouts, prompt_tokens, response_tokens, acc),
            "log_prob_passes": passes * forward_flops(shape, tokens, responses) / compute,
            "training": cfg.epochs_per_rollout_batch * 3 * forward_flops(shape, tokens, responses) / compute,
            "validation": (generation_seconds(shape, cfg.n_eval_examples, prompt_tokens, response_tokens, acc)
                           / cfg.eval_every if cfg.eval_every and cfg.n_eval_examples else 0.0)}


def run_gpu_hours(cfg, shape: Shape, prompt_tokens: int, response_tokens: int, acc: Accelerator = H100) -> float:
    """Estimated GPU-hours of a whole GRPO run (`cfg.n_grpo_steps` steps)."""
    return cfg.n_grpo_steps * sum(grpo_step_seconds(cfg, shape, prompt_tokens, response_tokens, acc).values()) / 3600


def evaluation_gpu_hours(shape: Shape, questions: int, samples: int, prompt_tokens: int, response_tokens: int,
                         acc: Accelerator = H100) -> float:
    """Estimated GPU-hours of sampling `samples` responses to each of `questions` (notebooks 01 and 02)."""
    return generation_seconds(shape, questions * samples, prompt_tokens, response_tokens, acc) / 3600


def sft_gpu_hours(cfg, shape: Shape, prompt_tokens: int, response_tokens: int, acc: Accelerator = H100) -> float:
    """Estimated GPU-hours of an SFT run: `n_sft_steps` optimizer steps of `train_batch_size` traces, plus its
    validations (every `eval_every` steps and at both ends)."""
    traces = cfg.n_sft_steps * cfg.train_batch_size
    train = 3 * forward_flops(shape, traces * (prompt_tokens + response_tokens), traces * response_tokens)
    validations = cfg.n_sft_steps // cfg.eval_every + 1 if cfg.eval_every else 2
    validate = validations * generation_seconds(shape, cfg.n_eval_examples, prompt_tokens, response_tokens, acc)
    return (train / (acc.peak_flops * acc.compute_efficiency) + validate) / 3600


def ei_gpu_hours(cfg, shape: Shape, prompt_tokens: int, response_tokens: int, acc: Accelerator = H100) -> float:
    """Estimated GPU-hours of expert iteration: each of `n_ei_steps` rounds samples `group_size` rollouts of
    `questions_per_round` questions, trains `sft_epochs` on them (an upper bound: every rollout kept) and
    validates."""
    rollouts = cfg.questions_per_round * cfg.group_size
    sample = generation_seconds(shape, rollouts, prompt_tokens, response_tokens, acc)
    train = cfg.sft_epochs * 3 * forward_flops(shape, rollouts * (prompt_tokens + response_tokens),
                                               rollouts * response_tokens) / (acc.peak_flops * acc.compute_efficiency)
    validate = generation_seconds(shape, cfg.n_eval_examples, prompt_tokens, response_tokens, acc)
    return (cfg.n_ei_steps * (sample + train + validate) + validate) / 3600
