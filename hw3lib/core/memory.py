"""The memory model of the full profile on a GPU: what each run holds, phase by phase, against the card.

**The trainer** (bytes; P = the model's parameters, `Shape.params`; `trainer_parts`):

| part | full fine-tuning | LoRA of rank r (A = its adapter parameters, `lora_params`) | source |
|---|---|---|---|
| float32 master weights | 4 P | 4 P (the frozen base stays float32: hw3lib.models.load) + 4 A | measured: checkpoints hold 4.02 bytes/parameter (bench/results/rehearse.json) |
| AdamW's two moments | 8 P | 8 A | measured: 8.00 bytes/parameter (same file) |
| gradients (float32) | 4 P | 4 A | freed after each optimizer step (`zero_grad(set_to_none=True)`) |
| bf16 weight copies | 2 P: the working copy (`working_copy`, resident for the whole run) | 2 P autocast copies, or with checkpointing the head's and one layer's; + 2 A | see below |
| KL monitoring's reference | 2 P (`monitor_kl`) | 0: the base with adapters disabled | hw3lib.grpo.loop |
| activations | tokens x layers x `layer_activation_bytes` (measured at Qwen3-0.6B: `ACTIVATION_BYTES_PER_TOKEN_LAYER`; its MLP part scaled with the model's MLP width, the rest with its width) | + each adapted layer's input once more | measured: bench/results/memory_calibration.json |
| K/V head copies | on a GPU: tokens x layers x (`kv_copy_bytes_per_token_layer` + `masked_attention_bytes_per_token_layer`) (transformers' SDPA with a mask repeats each K/V head per query head and saves the copies, and its kernels save a little more) | same | the copies derived; their sum measured on CPU through the same path: bench/results/memory_calibration_gpu_path.json |
| attention mask | rows x sequence^2 bytes (one boolean mask per forward) | same | transformers' SDPA path |
| logits | response tokens x 2 x `LOGITS_BYTES_PER_TOKEN` x (vocabulary / 151,936) | same | measured: same file (held twice in the backward: with their gradient) |
| output-head gradient | 6 x vocabulary x width (bf16, then its float32 cast) | 0: the head is frozen | the backward's first step |

Why the copies differ: full fine-tuning runs through a bf16 working copy refreshed once per optimizer step
(hw3lib.core.precision.MasterWeights), 2 P that stays resident between steps too, while a colocated engine
generates (`trainer_resident_between_steps` counts it: +1.1 GiB at Qwen3-0.6B); autocast over the float32 masters
held the same 2 P only during each forward/backward (its cast cache keeps casts of leaves that require a gradient:
torch's `autocast_mode.cpp`, `cached_cast`).
LoRA's frozen weights are cast anew at each use and each cast is saved for the backward of its layer's input:
2 P without checkpointing, the output head's and one decoder layer's with it. For the same reason each adapted
layer's input is cast to bf16 once more for its adapter A and saved (2 bytes x its input width per token and
layer: `lora_activation_bytes_per_token_layer`; an estimate derived from that rule, not measured).

**Gradient checkpointing** (`checkpointing=True`; transformers wraps each decoder layer in a non-reentrant
`torch.utils.checkpoint`): the forward keeps only each decoder layer's input -- the residual stream, which is
float32 under autocast (the embeddings are float32 and bf16 outputs are added to it), 4 bytes x width per token
and layer (`RESIDUAL_BYTES`) -- and the backward recomputes one layer at a time, holding that layer's full
activations. So activations = tokens x layers x 4 x width + tokens x (one layer's activations); the logits term
is unchanged (the head is outside the checkpointed layers). Sources: Chen et al. 2016, "Training Deep Nets with
Sublinear Memory Cost" (recompute per segment, keep its input); Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", section 4.1 (full recomputation stores each layer's input only).
The structure is those papers'; the per-layer constant is the measured one; not measured on a GPU here.

**float32 training** (`precision="float32"`: cards without bf16, hw3lib.core.preflight.supported_dtype): no
autocast copies; activations and logits twice the bf16 bytes (`FLOAT32_ACTIVATION_FACTOR`: an estimate, an
upper bound since some saved tensors are float32 already); the head's gradient float32 (4 x vocabulary x
width); the reference float32.

**Engines.** vLLM takes `share` (`gpu_memory_utilization`) x the card when it starts and refuses to start when
that share cannot hold its weights, its workspace (`ENGINE_WORKSPACE_BYTES`: the profiling pass's activations,
the sampler's logits, CUDA graphs; an estimate) and one sequence of `max_model_len` tokens of KV cache
(`engine_needs`). Colocated with a trainer it sleeps (level 2: weights and KV cache dropped) during training,
keeping `SLEEPING_ENGINE_BYTES` (an estimate). The transformers engine (the fallback without vLLM;
`transformers_engine_parts`) holds its own copy of the weights and, while it generates, the KV cache of one
batch at full length plus the sampling step's float32 work over the vocabulary (`SAMPLING_BYTES_PER_LOGIT`, an
estimate); its cache is freed between calls.

**Headroom.** A plan fits when every phase's peak is at most `HEADROOM` (85%) of the memory free to the run
(`Plan.budget`: `available_bytes`, the card's free memory plus what this process already holds, else the card):
the constants above are estimates and the CUDA caching allocator fragments, so a plan at 96% of the card is
one that runs out of memory. A phase with an engine alone on its GPU (evaluation; the engine's GPU of a two-GPU
run) has no trainer estimate to protect (vLLM's own share is its headroom): its limit is the free memory itself.

**Rows per forward** (`training_micro_batch`): the GRPO loop packs as many sequences into one training forward as
the plan allows within that budget; hw3lib.core.preflight.forward_rows makes that choice, the preflight prints it
and the run records it in its config (`forward_rows`), so the plan checked is the plan that runs.

**Phases** (`Plan`: each phase's peak against the card; `GPU_RUNTIME_BYTES` is the trainer process's CUDA context
and allocator slack, an estimate):

- GRPO colocated (`grpo_plan`): generation = the engine awake beside the trainer's resident state (masters,
  moments, reference, working copy); training = the trainer's peak beside the sleeping engine. On a second GPU: the engine
  alone on one, the trainer alone on the other.
- SFT (`sft_plan`): the same two moments -- validation (engine awake) and training (engine asleep).
- Expert iteration (`ei_plan`): sampling (engine awake beside the resident trainer; the moments persist across
  rounds), then the SFT phase (engine asleep).
- Evaluation (`eval_plan`): the engine alone at its share (notebooks 01/02, `hw3 eval`: 0.85).
- Asynchronous GRPO (`async_plan`, hw3lib.grpo.async_loop): the generator's engine never sleeps, and the
  learner validates with an engine of its own. On one GPU the generator's engine is awake while the learner
  trains (both at their peaks at once) and beside the learner's engine when that one wakes to validate. On two
  GPUs the learner's engine is built on `rollout_device` as the generator's is, so that GPU holds two awake
  engines and the policy's GPU the trainer alone.

An engine on a GPU without its trainer adds its process's CUDA context (`CUDA_CONTEXT_BYTES`, an estimate).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

GiB = 2**30
# Measured (bench/results/rehearse.json: checkpoint bytes / parameters; bench/results/memory_calibration.json:
# one forward/backward at Qwen3-0.6B's width under bf16 autocast, 2 rows per microbatch). tests/core/test_cost.py
# checks these constants against those files.
# AdamW is fused (hw3lib.core.lifecycle.adamw): no step temporaries. (torch's default foreach AdamW allocated a
# float32 copy of the model at every step, 4 more bytes per parameter.)
MASTER_BYTES, ADAM_BYTES, GRAD_BYTES, LOW_COPY_BYTES = 4, 8, 4, 2
ACTIVATION_BYTES_PER_TOKEN_LAYER = 82_100  # saved for backward, at Qwen3-0.6B's width 1,024 and MLP width 3,072
# Derived from what a SwiGLU MLP saves per token under autocast, bf16 each: the gate's and the up projection's
# outputs, SiLU(gate) and their product (the down projection's input): 4 x 2 bytes per MLP channel. That share of
# the measured constant scales with a model's MLP width, the rest with its width (`layer_activation_bytes`).
MLP_BYTES_PER_INTERMEDIATE = 8
# Measured on the CPU through a GPU's attention path (transformers' SDPA with the shared-prefix mask,
# bench/results/memory_calibration_gpu_path.json): 87,080 bytes per token and layer against the plain path's 82,088,
# +4,992, of which the K/V head copies are 4,096 (`kv_copy_bytes_per_token_layer`); the rest is what the masked
# path's kernels save besides, at Qwen3-0.6B's 16 query heads of 128, scaled with heads x head_dim.
MASKED_ATTENTION_BYTES_PER_TOKEN_LAYER = 4_992 - 4_096
CALIBRATION_QUERY_WIDTH = 16 * 128
CALIBRATION_HIDDEN, CALIBRATION_INTERMEDIATE = 1024, 3072
LOGITS_BYTES_PER_TOKEN = 314_400  # the bf16 logits saved for backward, at 151,936 entries; scaled with the vocabulary
# Gradient checkpointing keeps each decoder layer's input: the float32 residual stream (module docstring).
RESIDUAL_BYTES = 4
# Estimates (no GPU measured them here): the CUDA context and allocator slack of the training process, and what
# a sleeping vLLM engine keeps (CUDA graphs, its allocator's pools).
GPU_RUNTIME_BYTES = 2 * GiB
SLEEPING_ENGINE_BYTES = 2 * GiB
# Estimate: what a vLLM engine holds besides its weights and KV cache (the profiling pass's activations, the
# sampler's float32 logits of up to 1,024 sequences -- 0.6 GiB at Qwen's vocabulary -- and CUDA graphs).
ENGINE_WORKSPACE_BYTES = 2 * GiB
# Estimate: the CUDA context of a process, outside vLLM's share (vLLM refuses to start unless its share is free
# once its own process is up); counted for an engine in a process with no trainer on that GPU. A colocated
# engine shares the trainer's process, whose context is in GPU_RUNTIME_BYTES.
CUDA_CONTEXT_BYTES = GiB // 2
# Estimate: float32 training saves every activation in float32, at most twice autocast's bytes.
FLOAT32_ACTIVATION_FACTOR = 2
# Estimate: the transformers engine's float32 work per vocabulary entry and row in one sampling step (the last
# position's logits, top-p's sorted values and int64 indices, the cumulative sum, the softmax the token is drawn
# from, the recorder's log-softmax).
SAMPLING_BYTES_PER_LOGIT = 32
COLOCATED_SHARE = 0.5  # the full profile's gpu_memory_utilization for a colocated engine in a training run
EVAL_SHARE = 0.85  # an evaluation-only engine's (the handout's value: no trainer beside it)
MAX_SHARE = 0.95  # the most `plan.max_share` offers: vLLM refuses a share above what is free when it starts
DEVICE_BYTES = 79 * GiB  # an "80 GB" H100 as torch reports it (79.2 GiB)
PROMPT_TOKENS = 200  # stated assumption: the R1-Zero template (~120 tokens) plus a GSM8K/MATH question
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# The most of the memory free to a run that a plan with a trainer may fill (module docstring, "Headroom").
HEADROOM = 0.85
# RunConfig.lora_target_modules' default: every attention and MLP projection of a Qwen/Llama decoder layer.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Shape:
    """What the memory and compute models need of a decoder-only model. `max_positions` (its own context),
    `heads` (query heads) and `intermediate` (MLP width) are 0 where unknown; LoRA's terms need the last two."""

    name: str
    params: int
    layers: int
    hidden: int
    vocab: int
    kv_heads: int
    head_dim: int
    max_positions: int = 0
    heads: int = 0
    intermediate: int = 0

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def kv_bytes_per_token(self) -> int:
        """bf16 keys and values of one token, all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    def projections(self) -> dict[str, tuple[int, int]]:
        """(input width, output width) of each linear layer of a decoder layer, by its transformers name."""
        if not (self.heads and self.intermediate):
            raise ValueError(f"Shape {self.name!r} has no heads/intermediate sizes: build it with Shape.from_config")
        h, q, kv, mlp = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, mlp), "up_proj": (h, mlp), "down_proj": (mlp, h)}

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
                   config.num_key_value_heads, head_dim, getattr(config, "max_position_embeddings", 0) or 0,
                   config.num_attention_heads, getattr(config, "intermediate_size", 0) or 0)


# The two course models (hub ids), from their published configs; tests/core/test_cost.py checks them against
# hw3lib.models.real_shape.course_shapes(), which counts the parameters of the models built from those configs.
COURSE_SHAPES = {
    "Qwen/Qwen3-0.6B": Shape("Qwen3-0.6B", 596_049_920, 28, 1024, 151936, 8, 128, 40960, 16, 3072),
    "Qwen/Qwen2.5-Math-1.5B": Shape("Qwen2.5-Math-1.5B", 1_543_714_304, 28, 1536, 151936, 2, 128, 4096, 12, 8960),
    # CS336 2026's model (untied embeddings, no grouped-query attention: 16 KV heads)
    "allenai/OLMo-2-0425-1B": Shape("OLMo-2-0425-1B", 1_484_916_736, 16, 2048, 100352, 16, 128, 4096, 16, 8192),
}


# ---- the trainer ----------------------------------------------------------------------------------------------

def lora_params(shape: Shape, rank: int, targets: tuple[str, ...] = LORA_TARGETS) -> int:
    """Adapter parameters of LoRA at `rank` on `targets`: A (r x d_in) and B (d_out x r) per target and layer."""
    dims = shape.projections()
    unknown = [name for name in targets if name not in dims]
    if unknown:
        raise ValueError(f"lora_target_modules {unknown}: the memory model knows {', '.join(dims)}")
    return shape.layers * rank * sum(sum(dims[name]) for name in targets)


def lora_activation_bytes_per_token_layer(shape: Shape, targets: tuple[str, ...] = LORA_TARGETS) -> int:
    """Under autocast each adapter's A casts its layer's input to bf16 again and saves it: 2 bytes x input width."""
    dims = shape.projections()
    return LOW_COPY_BYTES * sum(dims[name][0] for name in targets)


def layer_activation_bytes(shape: Shape) -> float:
    """Bytes one decoder layer saves per token under bf16 autocast: the measured constant, its MLP share
    (`MLP_BYTES_PER_INTERMEDIATE` per MLP channel) scaled with the model's MLP width and the rest with its width.
    Without a known MLP width, Qwen3's ratio (3 x width)."""
    mlp_share = MLP_BYTES_PER_INTERMEDIATE * CALIBRATION_INTERMEDIATE
    intermediate = shape.intermediate or CALIBRATION_INTERMEDIATE * shape.hidden // CALIBRATION_HIDDEN
    return ((ACTIVATION_BYTES_PER_TOKEN_LAYER - mlp_share) * shape.hidden / CALIBRATION_HIDDEN
            + MLP_BYTES_PER_INTERMEDIATE * intermediate)


def masked_attention_bytes_per_token_layer(shape: Shape, precision: str = "bfloat16") -> float:
    """What one layer's masked attention saves per token besides the K/V copies (measured at Qwen3-0.6B's width:
    `MASKED_ATTENTION_BYTES_PER_TOKEN_LAYER`), scaled with the query width (heads x head_dim; the model's width when
    the heads are unknown) and the precision."""
    query_width = shape.heads * shape.head_dim if shape.heads else shape.hidden
    scale = DTYPE_BYTES[precision] // 2
    return MASKED_ATTENTION_BYTES_PER_TOKEN_LAYER * query_width / CALIBRATION_QUERY_WIDTH * scale


def kv_copy_bytes_per_token_layer(shape: Shape, precision: str = "bfloat16") -> int:
    """The K/V head copies one layer saves per token when attention runs with a mask through transformers' SDPA
    (a GPU's path: each K/V head repeated once per query head of its group, `repeat_kv`, and kept for the
    backward): keys and values of the `heads - kv_heads` extra heads. 0 without grouped-query attention or when
    the query heads are unknown. (hw3lib's own `sdpa_gqa` attention, which a CPU uses, makes no copies.)"""
    extra_heads = max(shape.heads - shape.kv_heads, 0) if shape.heads else 0
    return 2 * extra_heads * shape.head_dim * DTYPE_BYTES[precision]


def activation_bytes(shape: Shape, tokens: int, response_tokens: int, checkpointing: bool = False,
                     precision: str = "bfloat16", extra_per_token_layer: int = 0, rows: int = 0,
                     repeats_kv: bool = False) -> int:
    """Saved activations of a microbatch of `tokens` tokens (prompt + response) over `rows` sequences and the
    logits of its `response_tokens` response positions (module docstring); `extra_per_token_layer`: LoRA's saved
    inputs; `repeats_kv`: a GPU's attention path -- the K/V head copies and what the masked kernels save besides
    -- and the forward's boolean mask (rows x sequence^2 bytes)."""
    scale = FLOAT32_ACTIVATION_FACTOR if precision == "float32" else 1
    per_token_layer = layer_activation_bytes(shape) * scale + extra_per_token_layer
    mask = 0
    if repeats_kv:
        per_token_layer += kv_copy_bytes_per_token_layer(shape, precision) + masked_attention_bytes_per_token_layer(
            shape, precision)
        mask = rows * (tokens // rows) ** 2 if rows else 0
    if checkpointing:
        # each layer's float32 input kept, and one layer's activations while the backward recomputes it
        layers = tokens * shape.layers * RESIDUAL_BYTES * shape.hidden + tokens * per_token_layer
    else:
        layers = tokens * shape.layers * per_token_layer
    # The logits twice: the backward pass holds their gradient (same shape and dtype) while they are still saved.
    return int(layers + mask + 2 * response_tokens * LOGITS_BYTES_PER_TOKEN * shape.vocab / 151936 * scale)


def _frozen_copies(shape: Shape, checkpointing: bool) -> int:
    """Weights autocast casts for LoRA's frozen base and saves: all of them, or with checkpointing the output
    head's and one decoder layer's (the recomputed one)."""
    if not checkpointing:
        return shape.params
    return shape.embedding_params + (shape.params - shape.embedding_params) // shape.layers


def trainer_parts(shape: Shape, micro_tokens: int, micro_response_tokens: int, monitor_kl: bool, *,
                  lora_rank: int = 0, lora_targets: tuple[str, ...] = LORA_TARGETS, checkpointing: bool = False,
                  precision: str = "bfloat16", rows: int = 0, repeats_kv: bool = False) -> dict[str, int]:
    """Bytes of the training process's parts (see the module docstring's table); `rows` sequences share the
    microbatch's `micro_tokens`, `repeats_kv`: the GPU's attention path (`activation_bytes`)."""
    p, low = shape.params, 0 if precision == "float32" else LOW_COPY_BYTES
    attention = {"rows": rows, "repeats_kv": repeats_kv}
    if lora_rank:
        adapters = lora_params(shape, lora_rank, lora_targets)
        # float32: no cast, so each layer's input is one tensor, saved once
        extra = lora_activation_bytes_per_token_layer(shape, lora_targets) if low else 0
        return {"masters": MASTER_BYTES * (p + adapters), "adam": ADAM_BYTES * adapters, "grads": GRAD_BYTES * adapters,
                "autocast_copies": low * (_frozen_copies(shape, checkpointing) + adapters),
                "output_head_gradient": 0, "reference": 0,
                "activations": activation_bytes(shape, micro_tokens, micro_response_tokens, checkpointing,
                                                 precision, extra, **attention)}
    return {"masters": MASTER_BYTES * p, "adam": ADAM_BYTES * p, "grads": GRAD_BYTES * p,
            "working_copy": low * p,
            "output_head_gradient": (low + GRAD_BYTES) * shape.embedding_params,
            "reference": DTYPE_BYTES[precision] * p if monitor_kl else 0,
            "activations": activation_bytes(shape, micro_tokens, micro_response_tokens, checkpointing, precision,
                                            **attention)}


def trainer_peak(parts: dict[str, int], first_step: bool = False) -> int:
    """The training process's peak, where the backward pass starts: the state, the gradients, autocast's copies,
    the activations and the output head's gradient (the fused optimizer step adds nothing). `first_step`: on a
    CPU, AdamW has no moments yet during a run's first forward/backward (they appear in the step itself); on a GPU
    they are made before the first forward (hw3lib.core.lifecycle.materialize_adamw_state: so they never land in
    the blocks the first backward frees), and the plans never use `first_step`.
    An upper bound with checkpointing: autocast's cached copies are freed before the backward begins."""
    if not first_step:
        return sum(parts.values())
    step = parts["masters"] + parts["grads"] + parts["adam"] + parts["reference"]
    return max(sum(parts.values()) - parts["adam"], step)


def trainer_resident_between_steps(parts: dict[str, int]) -> int:
    """What the trainer keeps while the engine generates: masters, AdamW's moments, the reference and the bf16
    working copy (full fine-tuning in bf16; LoRA's autocast copies are freed after each backward)."""
    return parts["masters"] + parts["adam"] + parts["reference"] + parts.get("working_copy", 0)


@dataclass(frozen=True)
class Trainer:
    """A run's trainer as the memory model sees it: one microbatch of `micro_batch` sequences of
    `prompt_tokens` + `response_tokens` (the longest prompt of the run's data: a microbatch is padded to its
    longest row), and the settings that change its bytes; `repeats_kv`: on a GPU, where attention copies the K/V
    heads (`kv_copy_bytes_per_token_layer`)."""

    micro_batch: int
    prompt_tokens: int
    response_tokens: int
    monitor_kl: bool = False
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = LORA_TARGETS
    checkpointing: bool = False
    precision: str = "bfloat16"
    repeats_kv: bool = False

    def parts(self, shape: Shape) -> dict[str, int]:
        tokens = self.micro_batch * (self.prompt_tokens + self.response_tokens)
        return trainer_parts(shape, tokens, self.micro_batch * self.response_tokens, self.monitor_kl,
                             lora_rank=self.lora_rank, lora_targets=self.lora_targets,
                             checkpointing=self.checkpointing, precision=self.precision, rows=self.micro_batch,
                             repeats_kv=self.repeats_kv)


# The share of a CPU's physical memory a training run plans its microbatches for (`training_micro_batch`): the
# rest is left to the rollout engine's copy, the OS and whatever else runs on the machine.
CPU_TRAINING_SHARE = 0.5


def training_micro_batch(trainer: Trainer, sequences: int, fits) -> int:
    """Sequences per training forward, chosen by memory: the most, up to `sequences` (an optimizer step's), for
    which `fits(trainer with that many sequences per microbatch)` holds, scanning up from `trainer.micro_batch`
    (the course's microbatch, which the preflight checked: never fewer). `fits` is the device's test, e.g. the
    run's plan on the card (`grpo_plan(...).fits`) or the trainer's peak under a CPU budget (`cpu_fits`).

    Only how many sequences share one forward changes: the loss of a microbatch is its sequences' share of the
    optimizer step's loss (hw3lib.grpo.step divides by the step's sequences or tokens, not by the number of
    microbatches), so the course's gradient-accumulation arithmetic and the update stay the same up to float
    rounding. Peaks grow with the microbatch (activations, logits), so the first size that does not fit ends
    the scan."""
    best = trainer.micro_batch
    for rows in range(trainer.micro_batch + 1, sequences + 1):
        if not fits(dataclasses.replace(trainer, micro_batch=rows)):
            break
        best = rows
    return best


def cpu_fits(shape: Shape, engine: "Engine", memory_bytes: int, share: float = CPU_TRAINING_SHARE):
    """`training_micro_batch`'s test on a CPU of `memory_bytes`: the trainer's peak (`trainer_peak`) beside the
    rollout engine (on a CPU it never sleeps: its copy and cache, or vLLM's share, stay) within `share` of it."""
    awake_fixed, awake, _ = _engine_terms(shape, engine)
    engine_bytes = awake_fixed + awake * engine.share * memory_bytes
    return lambda trainer: trainer_peak(trainer.parts(shape)) + engine_bytes <= share * memory_bytes


# ---- the engines ---------------------------------------------------------------------------------------------

def transformers_engine_parts(shape: Shape, sequences: int, prompt_tokens: int, response_tokens: int) -> dict[str, int]:
    """Bytes of the transformers engine generating `sequences` rows at once (one `generate` call): its bf16
    weights, the KV cache at `prompt_tokens + response_tokens`, the sampling step's work over the vocabulary."""
    return {"weights": LOW_COPY_BYTES * shape.params,
            "kv_cache": sequences * (prompt_tokens + response_tokens) * shape.kv_bytes_per_token,
            "sampling": sequences * shape.vocab * SAMPLING_BYTES_PER_LOGIT}


@dataclass(frozen=True)
class Engine:
    """A rollout or evaluation engine: vLLM at `share` of the card with a context of `max_model_len` tokens
    (None: the model's own), or the transformers engine generating `batch` rows of `prompt_tokens` +
    `max_tokens` (`wraps_policy`: a float32 engine on the policy's device wraps the policy, no copy)."""

    kind: str = "vllm"
    share: float = COLOCATED_SHARE
    max_model_len: int | None = None
    dtype: str = "bfloat16"
    batch: int = 64
    prompt_tokens: int = PROMPT_TOKENS
    max_tokens: int = 1024
    wraps_policy: bool = False


def engine_needs(shape: Shape, engine: Engine) -> int:
    """What a vLLM engine's share must hold to start: its weights, its workspace and the KV cache of one
    sequence of `max_model_len` tokens (vLLM refuses to start otherwise). 0 for the transformers engine."""
    if engine.kind != "vllm":
        return 0
    width = DTYPE_BYTES[engine.dtype]
    context = engine.max_model_len or shape.max_positions
    return width * shape.params + ENGINE_WORKSPACE_BYTES + context * shape.kv_bytes_per_token * width // 2


def _engine_terms(shape: Shape, engine: Engine) -> tuple[int, int, int]:
    """(bytes awake besides vLLM's share, vLLM engines awake: 0 or 1, bytes asleep) of one engine."""
    if engine.kind == "vllm":
        return 0, 1, SLEEPING_ENGINE_BYTES
    parts = transformers_engine_parts(shape, engine.batch, engine.prompt_tokens, engine.max_tokens)
    weights = 0 if engine.wraps_policy else DTYPE_BYTES[engine.dtype] * shape.params
    scale = DTYPE_BYTES[engine.dtype] // 2  # a float32 engine's cache is twice the bf16 one
    return weights + parts["kv_cache"] * scale + parts["sampling"], 0, weights


# ---- the plans: each phase's peak on its card -------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """The peak of each phase of a run on cards of `device_bytes`. `phases[name] = (fixed bytes, vLLM engines
    awake)`: its peak is the fixed bytes plus each awake engine's `share` x the card. `engine_needs` is what one
    vLLM engine's share must hold (0: no vLLM engine). It fits when every peak is within its limit: `budget`,
    `headroom` of `available_bytes` (the memory free to the run; 0: the whole card), for a phase with a trainer;
    the free memory itself for the phases named in `engine_only` (an engine alone on its GPU: vLLM's share is its
    own headroom)."""

    device_bytes: int
    share: float
    phases: dict[str, tuple[int, int]]
    engine_needs: int = 0
    available_bytes: int = 0
    headroom: float = HEADROOM
    engine_only: tuple[str, ...] = ()

    @property
    def free(self) -> int:
        return self.available_bytes or self.device_bytes

    @property
    def budget(self) -> int:
        """The most a phase with a trainer may hold: `headroom` x the memory free to the run (module docstring)."""
        return int(self.headroom * self.free)

    def limit(self, phase: str) -> int:
        """The most `phase` may hold: the free memory for an engine alone, else `budget`."""
        return self.free if phase in self.engine_only else self.budget

    @property
    def engine_bytes(self) -> int:
        return int(self.share * self.device_bytes)

    @property
    def peaks(self) -> dict[str, int]:
        return {name: fixed + awake * self.engine_bytes for name, (fixed, awake) in self.phases.items()}

    @property
    def peak(self) -> int:
        return max(self.peaks.values())

    @property
    def engine_fits(self) -> bool:
        return self.engine_needs <= self.engine_bytes

    @property
    def fits(self) -> bool:
        return all(peak <= self.limit(name) for name, peak in self.peaks.items()) and self.engine_fits

    @property
    def max_share(self) -> float:
        """The largest share (in hundredths, at most `MAX_SHARE`) at which every phase with an awake engine fits."""
        room = [(self.limit(name) - fixed) / (awake * self.device_bytes) for name, (fixed, awake) in self.phases.items()
                if awake]
        return max(0.0, math.floor(100 * min(room + [MAX_SHARE])) / 100)

    @property
    def min_share(self) -> float:
        """The smallest share (in hundredths) that holds the engine's weights, workspace and one sequence."""
        return math.ceil(100 * self.engine_needs / self.device_bytes) / 100

    def with_share(self, share: float) -> "Plan":
        return dataclasses.replace(self, share=share)

    def with_available(self, available_bytes: int) -> "Plan":
        """The same plan against `available_bytes` free to the run (0: the whole card)."""
        return dataclasses.replace(self, available_bytes=available_bytes)


def _trainer_bytes(shape: Shape, trainer: Trainer) -> tuple[int, int]:
    """(peak, resident between steps) of the training process, its runtime included."""
    parts = trainer.parts(shape)
    return (trainer_peak(parts) + GPU_RUNTIME_BYTES,
            trainer_resident_between_steps(parts) + GPU_RUNTIME_BYTES)


def _train_and_engine_plan(shape: Shape, trainer: Trainer, engine: Engine, device_bytes: int, colocated: bool,
                           names: tuple[str, str]) -> Plan:
    """Two moments of a run that trains and generates: `names[0]` with the engine awake, `names[1]` training.
    Colocated, the engine awake beside the resident trainer, then asleep beside its peak; else one card each."""
    peak, resident = _trainer_bytes(shape, trainer)
    awake_fixed, awake, asleep = _engine_terms(shape, engine)
    if colocated:
        phases = {names[0]: (resident + awake_fixed, awake), names[1]: (peak + asleep, 0)}
    else:
        phases = {f"{names[0]} (engine's GPU)": (awake_fixed + CUDA_CONTEXT_BYTES, awake),
                  f"{names[1]} (policy's GPU)": (peak, 0)}
    return Plan(device_bytes, engine.share, phases, engine_needs(shape, engine),
                engine_only=() if colocated else (f"{names[0]} (engine's GPU)",))


def grpo_plan(shape: Shape, trainer: Trainer, engine: Engine, device_bytes: int, colocated: bool = True) -> Plan:
    """A GRPO run: generation (the engine awake) and training (the engine asleep, when colocated)."""
    return _train_and_engine_plan(shape, trainer, engine, device_bytes, colocated, ("generation", "training"))


def sft_plan(shape: Shape, trainer: Trainer, engine: Engine, device_bytes: int, colocated: bool = True) -> Plan:
    """An SFT run: validation (its engine awake beside the resident trainer) and training (the engine asleep)."""
    return _train_and_engine_plan(shape, trainer, engine, device_bytes, colocated, ("validation", "training"))


def ei_plan(shape: Shape, trainer: Trainer, engine: Engine, device_bytes: int, colocated: bool = True) -> Plan:
    """Expert iteration: each round's sampling (the engine awake beside the resident trainer, AdamW's moments
    kept across rounds) and its SFT phase (the engine asleep)."""
    return _train_and_engine_plan(shape, trainer, engine, device_bytes, colocated, ("sampling", "sft"))


def eval_plan(shape: Shape, engine: Engine, device_bytes: int) -> Plan:
    """An evaluation-only engine alone on the card (notebooks 01/02, `hw3 eval`)."""
    awake_fixed, awake, _ = _engine_terms(shape, engine)
    phases = {"evaluation": (awake_fixed + CUDA_CONTEXT_BYTES, awake)}
    # No trainer estimate to protect: vLLM's own share is its headroom (module docstring, "Headroom").
    return Plan(device_bytes, engine.share, phases, engine_needs(shape, engine), engine_only=("evaluation",))


def async_plan(shape: Shape, trainer: Trainer, engine: Engine, device_bytes: int, same_gpu: bool = True) -> Plan:
    """Asynchronous GRPO (hw3lib.grpo.async_loop): the generator's engine never sleeps, and the learner validates
    with an engine of its own, built like the generator's (hw3lib.generation.training_engine: on
    `rollout_device`). One GPU: the learner's engine sleeps while the learner trains and wakes to validate, and
    the generator's stays awake throughout -- beside the learner's peak. Two GPUs: the learner's engine lands on
    the rollout GPU beside the generator's and, not colocated with its policy, never sleeps (two engines there);
    the policy's GPU holds the trainer alone."""
    peak, resident = _trainer_bytes(shape, trainer)
    awake_fixed, awake, asleep = _engine_terms(shape, engine)
    generator = awake_fixed + CUDA_CONTEXT_BYTES  # the generator's process: its engine awake, its CUDA context
    if same_gpu:
        phases = {"training": (peak + asleep + generator, awake), "validation": (resident + awake_fixed + generator,
                                                                                 2 * awake)}
    else:  # the learner's process also holds a context on the rollout GPU, where its engine is
        phases = {"generation and validation (engine's GPU)": (2 * generator, 2 * awake),
                  "training (policy's GPU)": (peak, 0)}
    return Plan(device_bytes, engine.share, phases, engine_needs(shape, engine),
                engine_only=() if same_gpu else ("generation and validation (engine's GPU)",))
