"""What the full profile costs: a memory model of one training run on a GPU, and GPU-hours per run and grid.

**Memory** (bytes; P = the model's parameters, `Shape.params`). A training run holds

| part | bytes | where the number comes from |
|---|---|---|
| float32 master weights | 4 P | checkpoints hold 4.02 bytes/parameter (bench/results/rehearse.json) |
| AdamW's two moments | 8 P | checkpoints: 8.00 bytes/parameter (same file) |
| gradients (float32) | 4 P | freed after each optimizer step (`zero_grad(set_to_none=True)`) |
| autocast's bf16 weight copies | 2 P | cached for one forward/backward |
| KL monitoring's reference | 2 P | a bf16 copy (`monitor_kl` only) |
| activations | tokens x layers x `ACTIVATION_BYTES_PER_TOKEN_LAYER` x (width / 1,024) | bench/results/memory_calibration.json: what autograd saves for the backward |
| logits | response tokens x 2 x `LOGITS_BYTES_PER_TOKEN` x (vocabulary / 151,936) | same file: the saved bf16 logits, and their gradient in the backward |
| output-head gradient | 6 x vocabulary x width | the backward's first step: the head's weight gradient in bf16, then its float32 cast |

The transformers rollout engine (the fallback without vLLM; `transformers_engine_parts`) holds its own bf16 copy
of the weights (2 P) and, while it generates, the KV cache of one batch at full length plus the sampling step's
float32 work over the vocabulary (`SAMPLING_BYTES_PER_LOGIT`, an estimate); its cache is freed between calls.

The rollout engine (vLLM) takes `gpu_memory_utilization` x the GPU's memory when it starts (weights, its
activations, the KV cache in what is left) -- vLLM refuses to start when less is free -- and, colocated on the
policy's GPU, sleeps during the training half (`hw3lib.grpo.loop`: weights offloaded, KV cache dropped). So
colocated, two moments must fit: generation (the engine awake beside the trainer's resident 12 P, plus the
reference) and training (the trainer's peak beside the sleeping engine's remainder). `gpu_plan` says whether
they fit and the largest share that does; `COLOCATED_SHARE` is the full profile's default for training runs.

**Compute** (`run_gpu_hours`, `sft_gpu_hours`, `ei_gpu_hours`, `evaluation_gpu_hours`): per GRPO step, generation as a roofline (each decode step reads the weights
and the KV cache of every sequence, or is compute-bound, whichever is slower), old/reference log-prob passes
at 2 FLOPs per parameter per token, training at 6, validation as generation; at stated fractions of an
H100's peak (`H100`). These are estimates, labelled as such wherever they are shown.

`python bench/cost_model.py` prints the tables (the README's "What the full workbook costs").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GiB = 2**30
# Measured (bench/results/rehearse.json: checkpoint bytes / parameters; bench/results/memory_calibration.json:
# one forward/backward at Qwen3-0.6B's width under bf16 autocast, 2 rows per microbatch). tests/core/test_cost.py
# checks these constants against those files.
# AdamW is fused (hw3lib.core.lifecycle.adamw): no step temporaries. (torch's default foreach AdamW allocated a
# float32 copy of the model at every step, 4 more bytes per parameter.)
MASTER_BYTES, ADAM_BYTES, GRAD_BYTES, LOW_COPY_BYTES = 4, 8, 4, 2
ACTIVATION_BYTES_PER_TOKEN_LAYER = 82_100  # saved for backward, at width 1,024; scaled linearly with the width
LOGITS_BYTES_PER_TOKEN = 314_400  # the bf16 logits saved for backward, at 151,936 entries; scaled with the vocabulary
# Estimates (no GPU measured them here): the CUDA context and allocator slack of the training process, and what
# a sleeping vLLM engine keeps (CUDA graphs, its allocator's pools).
GPU_RUNTIME_BYTES = 2 * GiB
SLEEPING_ENGINE_BYTES = 2 * GiB
# Estimate: the transformers engine's float32 work per vocabulary entry and row in one sampling step (the last
# position's logits, top-p's sorted values and int64 indices, the cumulative sum, the softmax the token is drawn
# from, the recorder's log-softmax).
SAMPLING_BYTES_PER_LOGIT = 32
COLOCATED_SHARE = 0.5  # the full profile's gpu_memory_utilization for a colocated engine in a training run
DEVICE_BYTES = 79 * GiB  # an "80 GB" H100 as torch reports it (79.2 GiB)


@dataclass(frozen=True)
class Shape:
    """What the cost model needs of a decoder-only model."""

    name: str
    params: int
    layers: int
    hidden: int
    vocab: int
    kv_heads: int
    head_dim: int

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def kv_bytes_per_token(self) -> int:
        """bf16 keys and values of one token, all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    @classmethod
    def from_config(cls, name: str, config) -> "Shape":
        """Exact parameter count: the model built on the meta device (no memory)."""
        import torch
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        params = sum(p.numel() for p in model.parameters())
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(name, params, config.num_hidden_layers, config.hidden_size, config.vocab_size,
                   config.num_key_value_heads, head_dim)
    # The course models' shapes: hw3lib.models.real_shape.course_shapes().


# ---- memory ---------------------------------------------------------------------------------------------------

def activation_bytes(shape: Shape, tokens: int, response_tokens: int) -> int:
    """Saved activations of a microbatch of `tokens` tokens (prompt + response) and the logits of its
    `response_tokens` response positions, under bf16 autocast without gradient checkpointing."""
    layers = tokens * shape.layers * ACTIVATION_BYTES_PER_TOKEN_LAYER * shape.hidden / 1024
    # The logits twice: the backward pass holds their gradient (same shape and dtype) while they are still saved.
    return int(layers + 2 * response_tokens * LOGITS_BYTES_PER_TOKEN * shape.vocab / 151936)


def trainer_parts(shape: Shape, micro_tokens: int, micro_response_tokens: int, monitor_kl: bool) -> dict[str, int]:
    """Bytes of the training process's parts (see the module docstring)."""
    p = shape.params
    return {"masters": MASTER_BYTES * p, "adam": ADAM_BYTES * p, "grads": GRAD_BYTES * p,
            "autocast_copies": LOW_COPY_BYTES * p,
            "output_head_gradient": (LOW_COPY_BYTES + GRAD_BYTES) * shape.embedding_params,
            "reference": LOW_COPY_BYTES * p if monitor_kl else 0,
            "activations": activation_bytes(shape, micro_tokens, micro_response_tokens)}


def trainer_peak(parts: dict[str, int], first_step: bool = False) -> int:
    """The training process's peak, where the backward pass starts: the state, the gradients, autocast's copies,
    the activations and the output head's gradient (the fused optimizer step adds nothing). In a run's first
    optimizer step AdamW has no moments yet during the forward/backward; they appear in the step itself."""
    if not first_step:
        return sum(parts.values())
    step = parts["masters"] + parts["grads"] + parts["adam"] + parts["reference"]
    return max(sum(parts.values()) - parts["adam"], step)


def trainer_resident_between_steps(parts: dict[str, int]) -> int:
    """What the trainer keeps while the engine generates: masters, AdamW's moments, the reference."""
    return parts["masters"] + parts["adam"] + parts["reference"]


def transformers_engine_parts(shape: Shape, sequences: int, prompt_tokens: int, response_tokens: int) -> dict[str, int]:
    """Bytes of the transformers engine generating `sequences` rows at once (one `generate` call): its bf16
    weights, the KV cache at `prompt_tokens + response_tokens`, the sampling step's work over the vocabulary."""
    return {"weights": LOW_COPY_BYTES * shape.params,
            "kv_cache": sequences * (prompt_tokens + response_tokens) * shape.kv_bytes_per_token,
            "sampling": sequences * shape.vocab * SAMPLING_BYTES_PER_LOGIT}


@dataclass(frozen=True)
class GpuPlan:
    """Peak bytes on each GPU of a training run, and whether each fits."""

    device_bytes: int
    colocated: bool
    share: float
    generation_peak: int  # colocated: engine awake + trainer resident; else the engine's GPU
    training_peak: int  # colocated: trainer peak + sleeping engine; else the policy's GPU
    max_colocated_share: float

    @property
    def fits(self) -> bool:
        return max(self.generation_peak, self.training_peak) <= self.device_bytes


def gpu_plan(shape: Shape, micro_batch: int, prompt_tokens: int, response_tokens: int, *, share: float,
             colocated: bool = True, monitor_kl: bool = False, device_bytes: int = DEVICE_BYTES) -> GpuPlan:
    """The memory of a training run of `shape` on GPUs of `device_bytes`, microbatches of `micro_batch`
    sequences of `prompt_tokens` + `response_tokens`, the engine at `share`."""
    parts = trainer_parts(shape, micro_batch * (prompt_tokens + response_tokens), micro_batch * response_tokens,
                          monitor_kl)
    engine = int(share * device_bytes)
    peak = trainer_peak(parts) + GPU_RUNTIME_BYTES
    resident = trainer_resident_between_steps(parts) + GPU_RUNTIME_BYTES
    free_for_engine = device_bytes - resident
    max_share = max(0.0, math.floor(100 * free_for_engine / device_bytes) / 100)
    if colocated:
        return GpuPlan(device_bytes, True, share, resident + engine, peak + SLEEPING_ENGINE_BYTES, max_share)
    return GpuPlan(device_bytes, False, share, engine, peak, 1.0)


# ---- compute ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Accelerator:
    name: str
    peak_flops: float  # dense bf16, FLOP/s
    bandwidth: float  # memory, bytes/s
    compute_efficiency: float = 0.35  # stated assumption: the fraction of the peak a step reaches (MFU)
    bandwidth_efficiency: float = 0.6  # stated assumption: the fraction of the bandwidth decoding reaches


H100 = Accelerator("H100 SXM", 989e12, 3.35e12)


def forward_flops(shape: Shape, tokens: int, response_tokens: int) -> float:
    """2 FLOPs per weight per token through the decoder, the output head on the response positions only."""
    return 2 * (shape.params - shape.embedding_params) * tokens + 2 * shape.embedding_params * response_tokens


def generation_seconds(shape: Shape, sequences: int, prompt_tokens: int, response_tokens: int,
                       acc: Accelerator = H100) -> float:
    """Roofline time to sample `sequences` responses of `response_tokens` (prefill compute-bound; each decode
    step the slower of its FLOPs and reading the weights plus every sequence's KV cache)."""
    prefill = forward_flops(shape, sequences * prompt_tokens, sequences) / (acc.peak_flops * acc.compute_efficiency)
    mean_context = prompt_tokens + response_tokens / 2
    step_bytes = 2 * shape.params + sequences * mean_context * shape.kv_bytes_per_token
    step_flops = forward_flops(shape, sequences, sequences)
    step = max(step_flops / (acc.peak_flops * acc.compute_efficiency),
               step_bytes / (acc.bandwidth * acc.bandwidth_efficiency))
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
