"""The GRPO run's configuration: one frozen dataclass, a docstring per field, derived values computed once.

`GRPOConfig()` holds the course's defaults (Qwen3-0.6B on GSM8K, 200 GRPO steps of 256 rollouts
in groups of 8, AdamW at 1e-5, REINFORCE with a group baseline and std-normalized advantages).
`GRPOConfig.for_profile("smoke")` gives the CPU settings that show GRPO learning in minutes: the
tiny offline model, briefly warm-started with SFT on two-number arithmetic word problems, then
GRPO on the same synthetic task with small batches and short generations.

A "GRPO step" is one rollout batch: `rollout_batch_size` responses (`group_size` per question)
followed by `epochs_per_rollout_batch` passes over them in optimizer steps of `train_batch_size`
responses, each accumulated over `gradient_accumulation_steps` microbatches. The course's sanity
checks run in `__post_init__` and say which values clash.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

# Loss types, which of them need old log-probs (RATIO_LOSSES) and length normalizations: one table, in grpo.
from hw3lib.grpo import LENGTH_NORMALIZATIONS, LOSS_TYPES, RATIO_LOSSES  # noqa: F401 -- re-exported

PROMPTS = ("r1_zero", "question_only", "keyword")
ENGINES = ("vllm", "transformers")
BUILTIN_DATASETS = ("gsm8k", "arithmetic")


@dataclass(frozen=True)
class GRPOConfig:
    # --- run identity -------------------------------------------------------------------------
    name: str = "grpo"
    """Run name: outputs go to `runs/<name>/` (config.json, metrics.jsonl, samples/, checkpoints/); `<grid>/<config>`
    for the runs of an experiment grid (hw3lib.experiments)."""
    profile: str = "full"
    """`smoke` (CPU, tiny model, arithmetic) or `full` (GPU, the course's settings); informational once built."""
    seed: int = 0
    """Seed for question sampling, rollouts (each step seeds its own sampling) and torch."""

    # --- model, data, prompt --------------------------------------------------------------------
    model: str = "Qwen/Qwen3-0.6B"
    """Initial policy: `tiny`, a hub id or a local directory (also the frozen KL reference). `for_profile` picks
    the profile's `math_model` when `dataset` is a MATH source and no model is given."""
    dtype: str = "bfloat16"
    """Compute precision. `bfloat16` (GPU): float32 master weights and AdamW state, forward and backward
    under bf16 autocast, bf16 copies pushed to the rollout engine (an optimizer step taken on bf16
    weights would round most lr-1e-5 updates away). `float32` (CPU): float32 everywhere, and the
    transformers engine wraps the policy module itself."""
    dataset: str = "gsm8k"
    """Training questions: `gsm8k`, `arithmetic` (synthetic two-number word problems), or a MATH source read by
    `hw3lib.data.load_math` (ground truth: the solution's last `\\boxed{}`): `math` (the source named by
    $HW3_MATH_DATA), a `.jsonl` file, a folder holding `train.jsonl`/`test.jsonl`, or a hub dataset id
    (`owner/name`, splits `train` and `test`). See `hw3lib.data.load_task`. Keyword inclusion (prompt
    `keyword`): `keyword` (the procedural dataset) or a folder written by `hw3 keyword data` (hw3lib.keyword)."""
    eval_dataset: str | None = None
    """Held-out questions: any MATH source as for `dataset` (split `test`; `{"question", "gold"}` jsonl lines work
    too). None: GSM8K's test split / fresh arithmetic problems / a MATH folder's or hub id's `test` split / a
    single jsonl's last `n_eval_examples` rows."""
    n_train_examples: int | None = None
    """Cap on training questions (None: all; arithmetic: how many problems to generate)."""
    arithmetic_max_operand: int = 99
    """Largest operand of the synthetic arithmetic problems."""
    prompt: str = "r1_zero"
    """Prompt template `r1_zero`, `question_only` or `keyword`; it also picks the matching reward function."""

    # --- optional SFT warm start (smoke profile: so the tiny model's reward is not always zero) ---
    warm_start_steps: int = 0
    """SFT steps on arithmetic solutions before GRPO (0: start GRPO from `model` directly). Cached by its settings."""
    warm_start_lr: float = 1e-3
    """SFT learning rate of the warm start."""
    warm_start_batch_size: int = 32
    """SFT batch size of the warm start."""
    warm_start_examples: int = 2048
    """Arithmetic problems the warm start trains on (a different seed from GRPO's questions)."""

    # --- rollouts --------------------------------------------------------------------------------
    engine: str = "vllm"
    """Rollout engine: `vllm` (full) or `transformers` (smoke: wraps the policy module itself)."""
    policy_device: str = "cuda:0"
    """Torch device of the policy being trained."""
    rollout_device: str = "cuda:0"
    """Device of the rollout engine: the policy's GPU (colocated) or a second GPU."""
    gpu_memory_utilization: float = 0.85
    """Fraction of the rollout device's memory vLLM may take (colocated: leave room for training)."""
    generation_batch_size: int = 64
    """Sequences per `generate` call of the transformers engine (memory: KV cache); vLLM schedules its own."""
    n_grpo_steps: int = 200
    """Number of rollout batches (GRPO steps)."""
    rollout_batch_size: int = 256
    """Responses per GRPO step (= questions per step x group_size)."""
    group_size: int = 8
    """Responses sampled per question; advantages are normalized within each group."""
    sampling_temperature: float = 1.0
    """Rollout sampling temperature."""
    sampling_top_p: float = 1.0
    """Rollout nucleus-sampling mass; must be 1.0 for training (see `_check`)."""
    sampling_min_tokens: int = 4
    """Minimum response length (the course: 4, so no empty responses)."""
    sampling_max_tokens: int = 1024
    """Generation budget per response; responses that hit it are counted as truncated."""

    # --- optimisation -------------------------------------------------------------------------------
    learning_rate: float = 1e-5
    """AdamW learning rate (constant after the optional warm-up)."""
    lr_warmup_steps: int = 0
    """Optimizer steps of linear learning-rate warm-up from 0 (the course: 0, a constant rate). Adam's
    first updates move every weight by about the learning rate whatever the gradient's size, which
    can wreck a small freshly fine-tuned model; a short warm-up avoids that."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    adam_betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold on the global L2 norm."""
    epochs_per_rollout_batch: int = 1
    """Passes over each rollout batch (> 1 is off-policy)."""
    train_batch_size: int = 256
    """Responses per optimizer step (< rollout_batch_size is off-policy after the first step)."""
    gradient_accumulation_steps: int = 128
    """Microbatches per optimizer step."""
    loss_type: str = "reinforce_with_baseline"
    """`no_baseline`, `reinforce_with_baseline`, `grpo_clip` or `grpo_no_clip` (hw3lib.grpo)."""
    use_std_normalization: bool = True
    """Divide group-centred rewards by the group's std (+ advantage_eps)."""
    advantage_eps: float = 1e-6
    """Added to the group std before dividing."""
    tis_cap: float | None = None
    """Truncated importance sampling against the engine/trainer mismatch: each token's loss is weighted
    by min(pi_trainer / pi_engine, tis_cap) at the sampling weights (hw3lib.train_step). None: off.
    The mismatch itself is always logged (`train/logprob_mismatch_*`)."""
    cliprange: float = 0.2
    """Trust region of grpo_clip: the ratio is clipped to [1 - cliprange, 1 + cliprange]."""
    length_normalization: str = "masked_mean"
    """`masked_mean` (divide by each response's length) or `constant` (divide by `length_normalization_constant`)."""
    length_normalization_constant: float | None = None
    """Normalizer of `constant` length normalization; None: `sampling_max_tokens`."""

    # --- evaluation, logging, checkpoints --------------------------------------------------------
    eval_every: int = 10
    """Validate every this many GRPO steps (and before the first and after the last)."""
    n_eval_examples: int = 1024
    """Held-out questions per validation (the course: >= 1,024 in the full profile)."""
    eval_temperature: float = 0.0
    """Validation sampling temperature; 0 = greedy decoding (a deterministic, low-variance estimate)."""
    n_eval_samples_saved: int = 4
    """Validation rollouts written to `samples/step_XXXX.jsonl` each time."""
    monitor_kl: bool = False
    """Log KL(pi || pi_ref) to the initial policy (k1, k3); costs a frozen reference copy and a forward pass."""
    checkpoint_every: int = 20
    """Save a resumable checkpoint every this many GRPO steps (and at the end); 0: only at the end."""
    wandb_project: str | None = None
    """Also log to this Weights & Biases project (None: off; wandb is only imported when set)."""

    # --- derived (computed once in __post_init__, saved with the config) ------------------------------
    micro_train_batch_size: int = field(init=False)
    """train_batch_size // gradient_accumulation_steps."""
    n_prompts_per_rollout_batch: int = field(init=False)
    """rollout_batch_size // group_size."""
    n_microbatches_per_rollout_batch: int = field(init=False)
    """rollout_batch_size // micro_train_batch_size."""
    optimizer_steps_per_rollout_batch: int = field(init=False)
    """rollout_batch_size // train_batch_size (per epoch)."""
    off_policy: bool = field(init=False)
    """True when the policy changes between sampling and some gradient step (needs old log-probs)."""

    def __post_init__(self) -> None:
        self._check()
        derived = {
            "micro_train_batch_size": self.train_batch_size // self.gradient_accumulation_steps,
            "n_prompts_per_rollout_batch": self.rollout_batch_size // self.group_size,
            "optimizer_steps_per_rollout_batch": self.rollout_batch_size // self.train_batch_size,
        }
        derived["n_microbatches_per_rollout_batch"] = self.rollout_batch_size // derived["micro_train_batch_size"]
        derived["off_policy"] = self.epochs_per_rollout_batch > 1 or derived["optimizer_steps_per_rollout_batch"] > 1
        for key, value in derived.items():
            object.__setattr__(self, key, value)  # frozen: derived fields are set exactly once, here

    def _check(self) -> None:
        """The course's sanity checks plus argument validation; each message names the clashing values."""
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise ValueError(f"GRPOConfig: {message}")

        for name in ("n_grpo_steps", "rollout_batch_size", "group_size", "train_batch_size",
                     "gradient_accumulation_steps", "epochs_per_rollout_batch", "sampling_max_tokens",
                     "n_eval_examples", "eval_every", "generation_batch_size"):
            value = getattr(self, name)
            need(isinstance(value, int) and value >= 1, f"{name} must be a positive int, got {value!r}")
        need(self.train_batch_size % self.gradient_accumulation_steps == 0,
             f"train_batch_size={self.train_batch_size} must be divisible by "
             f"gradient_accumulation_steps={self.gradient_accumulation_steps}")
        need(self.rollout_batch_size % self.group_size == 0,
             f"rollout_batch_size={self.rollout_batch_size} must be divisible by group_size={self.group_size}")
        need(self.train_batch_size >= self.group_size,
             f"train_batch_size={self.train_batch_size} must be >= group_size={self.group_size}")
        need(self.rollout_batch_size % self.train_batch_size == 0,
             f"rollout_batch_size={self.rollout_batch_size} must be divisible by "
             f"train_batch_size={self.train_batch_size}")
        need(self.loss_type in LOSS_TYPES, f"loss_type={self.loss_type!r}: choose one of {', '.join(LOSS_TYPES)}")
        need(self.length_normalization in LENGTH_NORMALIZATIONS,
             f"length_normalization={self.length_normalization!r}: choose one of {', '.join(LENGTH_NORMALIZATIONS)}")
        need(self.length_normalization_constant is None or self.length_normalization_constant > 0,
             f"length_normalization_constant={self.length_normalization_constant!r} must be positive (or None)")
        need(self.prompt in PROMPTS, f"prompt={self.prompt!r}: choose one of {', '.join(PROMPTS)}")
        need(self.engine in ENGINES, f"engine={self.engine!r}: choose one of {', '.join(ENGINES)}")
        need(isinstance(self.dataset, str) and self.dataset.strip() != "" and (
                 self.dataset in (*BUILTIN_DATASETS, "math", "keyword") or self.dataset.endswith(".jsonl")
                 or "/" in self.dataset or Path(self.dataset).is_dir()),
             f"dataset={self.dataset!r}: choose gsm8k, arithmetic, math (the MATH data named by $HW3_MATH_DATA), "
             "a MATH-style .jsonl file, a folder holding train.jsonl and test.jsonl, or a hub dataset id such "
             "as HuggingFaceH4/MATH-500")
        need(self.prompt != "keyword" or self.warm_start_steps == 0,
             f"prompt='keyword' with warm_start_steps={self.warm_start_steps}: the warm start is SFT on "
             "arithmetic; warm start a keyword model with hw3lib.keyword.keyword_sft and set warm_start_steps=0")
        need(not self.use_std_normalization or self.group_size >= 2,
             f"use_std_normalization=True needs group_size >= 2 (got group_size={self.group_size})")
        need(self.sampling_top_p == 1.0,
             f"sampling_top_p={self.sampling_top_p}: training needs 1.0. With top-p the rollouts come from the "
             "renormalized nucleus, while the loss, the importance ratio and the KL use the policy's full "
             "softmax, so every ratio would be biased from the first step; lower sampling_temperature instead")
        need(self.tis_cap is None or self.tis_cap >= 1.0,
             f"tis_cap={self.tis_cap} must be >= 1 (or None: off); 2 is a common choice")
        need(self.dtype in ("float32", "bfloat16", "float16"),
             f"dtype={self.dtype!r}: choose float32, bfloat16 or float16")
        need(self.sampling_temperature > 0, f"sampling_temperature={self.sampling_temperature} must be > 0 "
             "(rollouts must be sampled; greedy rollouts give zero-variance groups)")
        need(0 <= self.sampling_min_tokens <= self.sampling_max_tokens,
             f"sampling_min_tokens={self.sampling_min_tokens} must be between 0 and "
             f"sampling_max_tokens={self.sampling_max_tokens}")
        need(self.cliprange > 0, f"cliprange={self.cliprange} must be > 0")
        need(self.learning_rate > 0 and self.max_grad_norm > 0,
             f"learning_rate={self.learning_rate} and max_grad_norm={self.max_grad_norm} must be > 0")
        need(self.lr_warmup_steps >= 0, f"lr_warmup_steps={self.lr_warmup_steps} must be >= 0")
        need(self.checkpoint_every >= 0, f"checkpoint_every={self.checkpoint_every} must be >= 0")
        need(self.warm_start_steps >= 0, f"warm_start_steps={self.warm_start_steps} must be >= 0")
        need(0.0 < self.gpu_memory_utilization <= 1.0,
             f"gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]")
        # One level of grouping is allowed: a grid's runs are named `<grid>/<config>` (hw3lib.experiments).
        need(isinstance(self.name, str) and self.name.count("/") <= 1
             and all(part and part not in (".", "..") for part in self.name.split("/")),
             f"name={self.name!r} must be a plain folder name, or `<group>/<name>` (it becomes runs/<name>)")

    # --- convenience ------------------------------------------------------------------------------
    @property
    def needs_old_log_probs(self) -> bool:
        """Old log-probs are computed (once per rollout batch) only for ratio losses (or TIS) trained off-policy.

        On-policy, the sampling policy *is* the current one, so its log-probs are the current
        log-probs detached (ratio exactly 1) and the extra forward pass is skipped.
        """
        return (self.loss_type in RATIO_LOSSES or self.tis_cap is not None) and self.off_policy

    def replace(self, **changes) -> "GRPOConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """The whole config, one `field = value` per line (printed at the start of every run)."""
        return "\n".join(f"  {key} = {value!r}" for key, value in self.to_dict().items())

    @classmethod
    def from_dict(cls, data: dict) -> "GRPOConfig":
        """Rebuild from `to_dict()` output (derived fields are recomputed; unknown keys are an error)."""
        init_fields = {f.name for f in dataclasses.fields(cls) if f.init}
        derived = {f.name for f in dataclasses.fields(cls) if not f.init}
        unknown = set(data) - init_fields - derived
        if unknown:
            raise ValueError(f"GRPOConfig.from_dict: unknown fields {sorted(unknown)}; "
                             "was the config saved by a different version of hw3lib?")
        kwargs = {key: value for key, value in data.items() if key in init_fields}
        if "adam_betas" in kwargs:
            kwargs["adam_betas"] = tuple(kwargs["adam_betas"])  # JSON turns the tuple into a list
        return cls(**kwargs)

    @classmethod
    def load(cls, path: str | Path) -> "GRPOConfig":
        path = Path(path)
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read a GRPOConfig ({exc})") from None

    @classmethod
    def for_profile(cls, profile_name: str | None = None, **overrides) -> "GRPOConfig":
        """The settings of a profile (`smoke` or `full`; None: $HW3_PROFILE / GPU present), with overrides.

        A MATH `dataset` (anything but gsm8k and arithmetic) trains the profile's `math_model` unless
        `model` is among the overrides.
        """
        from hw3lib.config import get_profile

        prof = get_profile(profile_name)
        base = {
            "profile": prof.name, "model": prof.model, "dtype": prof.dtype, "engine": prof.engine,
            "policy_device": "cuda:0" if prof.device == "cuda" else prof.device,
            "rollout_device": "cuda:0" if prof.device == "cuda" else prof.device,
            "gpu_memory_utilization": prof.gpu_memory_utilization, "seed": prof.seed,
        }
        if prof.name == "smoke":
            base.update(_SMOKE)
        if overrides.get("dataset", base.get("dataset")) not in (*BUILTIN_DATASETS, None) and "model" not in overrides:
            base["model"] = prof.math_model
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls) if f.init}
        if unknown:
            raise ValueError(f"GRPOConfig.for_profile: unknown settings {sorted(unknown)}")
        return cls(**{**base, **overrides})


# The smoke profile: GRPO visibly learning on 2 CPU cores within minutes (tuned by hand; see the
# notebook 04). Task: two-number arithmetic with operands 0..4 (an R1-Zero answer is ~19 tokens, so
# 32 new tokens suffice). The tiny model is warm started with 125 SFT steps, which leaves it at
# roughly a third of held-out answers right (greedy): the SFT skill is still fragile there (half of
# its errors copy the wrong operands from the question). GRPO then uses 32 questions x 8 samples per
# step, because smaller rollout batches gave gradients too noisy to generalize to held-out questions
# (the policy learned the training questions only), and reuses each rollout batch for 2 epochs of 4
# optimizer steps of 64 rollouts with the clipped objective (grpo_clip): off-policy steps, old
# log-probs computed once per batch. Reusing each batch pays: with the engine of the time and 256
# held-out questions (seed 0), one epoch rose 0.344 -> 0.438 in 80 steps, two epochs 0.344 -> 0.617
# in the same 80 steps for ~30% more time per step (seeds 1 and 2: 0.426 -> 0.637 and 0.223 -> 0.422
# by step 70). With the current code the 80 steps take about 2.5 minutes here and reach 0.531 from
# 0.344 (seed 0): single runs vary by several points with float-level changes. A learning
# rate of 2e-4 (20x the course's, for a 0.5M-parameter model) with a 10-step warm-up; 3e-4 and above
# made early steps destroy the warm start's skill. 256 held-out questions keep the validation's
# standard error near 3 points.
_SMOKE = {
    "name": "grpo_smoke",
    "model": "tiny",  # the untrained tiny model; the warm start below is part of the recipe
    "dataset": "arithmetic",
    "arithmetic_max_operand": 4,
    "n_train_examples": 4096,
    "warm_start_steps": 125,
    "warm_start_lr": 3e-3,
    "warm_start_batch_size": 32,
    "warm_start_examples": 2048,
    "generation_batch_size": 256,  # the whole rollout batch in one call: fastest on CPU
    "n_grpo_steps": 80,
    "rollout_batch_size": 256,
    "group_size": 8,
    "train_batch_size": 64,
    "epochs_per_rollout_batch": 2,
    "gradient_accumulation_steps": 1,
    "loss_type": "grpo_clip",
    "sampling_max_tokens": 32,
    "sampling_min_tokens": 4,
    "learning_rate": 2e-4,
    "lr_warmup_steps": 10,
    "eval_every": 10,
    "n_eval_examples": 256,
    "checkpoint_every": 20,
}
