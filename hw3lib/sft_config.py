"""Configs of the SFT runner (`SFTConfig`) and of expert iteration (`EIConfig`): frozen, a docstring per field.

Both follow `hw3lib.train_config.GRPOConfig`: the defaults are the `full` profile's settings
(Qwen3-0.6B on GSM8K on a GPU, bf16 autocast over float32 masters), `for_profile("smoke")` gives the
CPU settings that show the effect in seconds (the tiny model on the synthetic arithmetic task of
notebook 04, with the same held-out questions), derived values are computed once in
`__post_init__`, and every check names the values that clash.

The fields shared with `GRPOConfig` (`dataset`, `eval_dataset`, `n_train_examples`,
`n_eval_examples`, `arithmetic_max_operand`, `prompt`, `engine`, the devices, the evaluation
settings) mean the same, so `hw3lib.data.load_task`, `hw3lib.generation.training_engine` and
`hw3lib.train.validate` take these configs as they are: the same data, engine and evaluation code.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from hw3lib.train_config import BUILTIN_DATASETS, ENGINES


def _need(cls_name: str, ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(f"{cls_name}: {message}")


def _check_common(cfg) -> None:
    """Checks shared by both configs (the fields they have in common)."""
    need = lambda ok, message: _need(type(cfg).__name__, ok, message)  # noqa: E731
    for name in ("n_eval_examples", "eval_every", "sampling_max_tokens", "generation_batch_size",
                 "gradient_accumulation_steps"):
        value = getattr(cfg, name)
        need(isinstance(value, int) and value >= 1, f"{name} must be a positive int, got {value!r}")
    need(cfg.prompt == "r1_zero", f"prompt={cfg.prompt!r}: the SFT targets and kept rollouts are R1-Zero "
         "completions (reasoning </think> <answer> ... </answer>); use prompt='r1_zero'")
    need(cfg.engine in ENGINES, f"engine={cfg.engine!r}: choose one of {', '.join(ENGINES)}")
    need(isinstance(cfg.dataset, str) and cfg.dataset.strip() != "" and (
             cfg.dataset in (*BUILTIN_DATASETS, "math") or cfg.dataset.endswith(".jsonl")
             or "/" in cfg.dataset or Path(cfg.dataset).is_dir()),
         f"dataset={cfg.dataset!r}: choose gsm8k, arithmetic, math ($HW3_MATH_DATA), a MATH-style .jsonl "
         "file of {problem, solution} records, a folder holding train.jsonl and test.jsonl, or a hub id")
    need(cfg.dtype in ("float32", "bfloat16", "float16"), f"dtype={cfg.dtype!r}: choose float32, bfloat16 or float16")
    need(cfg.learning_rate > 0 and cfg.max_grad_norm > 0,
         f"learning_rate={cfg.learning_rate} and max_grad_norm={cfg.max_grad_norm} must be > 0")
    need(cfg.checkpoint_every >= 0, f"checkpoint_every={cfg.checkpoint_every} must be >= 0")
    need(cfg.eval_temperature >= 0, f"eval_temperature={cfg.eval_temperature} must be >= 0 (0: greedy)")
    need(0.0 < cfg.gpu_memory_utilization <= 1.0,
         f"gpu_memory_utilization={cfg.gpu_memory_utilization} must be in (0, 1]")
    need(cfg.name and "/" not in cfg.name and cfg.name not in (".", ".."),
         f"name={cfg.name!r} must be a plain folder name (it becomes runs/<name>)")


class _ConfigMixin:
    """replace / to_dict / describe / from_dict / load / for_profile, as GRPOConfig has them."""

    _SMOKE: dict = {}

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """The whole config, one `field = value` per line (printed at the start of every run)."""
        return "\n".join(f"  {key} = {value!r}" for key, value in self.to_dict().items())

    @classmethod
    def from_dict(cls, data: dict):
        """Rebuild from `to_dict()` output (derived fields are recomputed; unknown keys are an error)."""
        init_fields = {f.name for f in dataclasses.fields(cls) if f.init}
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"{cls.__name__}.from_dict: unknown fields {sorted(unknown)}; "
                             "was the config saved by a different version of hw3lib?")
        kwargs = {key: value for key, value in data.items() if key in init_fields}
        if "adam_betas" in kwargs:
            kwargs["adam_betas"] = tuple(kwargs["adam_betas"])  # JSON turns the tuple into a list
        return cls(**kwargs)

    @classmethod
    def load(cls, path: str | Path):
        path = Path(path)
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read a {cls.__name__} ({exc})") from None

    @classmethod
    def for_profile(cls, profile_name: str | None = None, **overrides):
        """The settings of a profile (`smoke` or `full`; None: $HW3_PROFILE / GPU present), with overrides.

        A MATH `dataset` trains the profile's `math_model` unless `model` is among the overrides.
        """
        from hw3lib.config import get_profile

        prof = get_profile(profile_name)
        device = "cuda:0" if prof.device == "cuda" else prof.device
        base = {"profile": prof.name, "model": prof.model, "dtype": prof.dtype, "engine": prof.engine,
                "policy_device": device, "rollout_device": device,
                "gpu_memory_utilization": prof.gpu_memory_utilization, "seed": prof.seed}
        if prof.name == "smoke":
            base.update(cls._SMOKE)
        if overrides.get("dataset", base.get("dataset")) not in (*BUILTIN_DATASETS, None) and "model" not in overrides:
            base["model"] = prof.math_model
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls) if f.init}
        if unknown:
            raise ValueError(f"{cls.__name__}.for_profile: unknown settings {sorted(unknown)}")
        return cls(**{**base, **overrides})


@dataclass(frozen=True)
class SFTConfig(_ConfigMixin):
    # --- run identity -------------------------------------------------------------------------
    name: str = "sft"
    """Run name: outputs go to `runs/<name>/` (config.json, traces.json, metrics.jsonl, generations/, checkpoints/)."""
    profile: str = "full"
    """`smoke` or `full`; informational once built."""
    seed: int = 0
    """Seed of the trace subset, the batch order, the held-out questions and torch."""

    # --- model, data ---------------------------------------------------------------------------
    model: str = "Qwen/Qwen3-0.6B"
    """Initial policy: `tiny`, `tiny-sft`, a hub id or a local directory."""
    dtype: str = "bfloat16"
    """`bfloat16`: float32 master weights and AdamW state, forward and backward under bf16 autocast
    (hw3lib.logprobs.autocast_for); `float32`: float32 everywhere (CPU)."""
    dataset: str = "gsm8k"
    """Where the traces come from: `gsm8k` (the train split's worked solutions), `arithmetic` (the
    synthetic task's one-line working) or a MATH source of `{problem, solution}` records (see
    `hw3lib.data.load_task`); held-out questions as for GRPO."""
    eval_dataset: str | None = None
    """Held-out questions from another MATH source (None: the dataset's own, as GRPOConfig)."""
    n_train_examples: int | None = None
    """The trace pool ("all"): cap on training records (None: all; arithmetic: how many to generate)."""
    n_examples: int | None = None
    """Unique examples trained on: the first `n_examples` of the pool after a seeded shuffle, so the
    sets of different sizes are nested (None: the whole pool)."""
    filter_correct: bool = False
    """Keep only the traces whose final answer the reward function grades correct (before `n_examples`)."""
    trace_noise: float = 0.0
    """Share of traces whose final answer is replaced by a wrong one (seeded), standing in for an imperfect
    teacher so that `filter_correct` has something to remove on data built from correct worked solutions.
    0 for real data; the smoke profile's filter experiment sets it and says so."""
    arithmetic_max_operand: int = 99
    """Largest operand of the synthetic arithmetic problems."""
    prompt: str = "r1_zero"
    """Prompt template; only `r1_zero` (the traces are R1-Zero completions)."""

    # --- optimisation -------------------------------------------------------------------------------
    n_sft_steps: int = 500
    """Optimizer steps."""
    train_batch_size: int = 32
    """Traces per optimizer step (batches run through seeded permutations of the traces, epoch after epoch)."""
    gradient_accumulation_steps: int = 8
    """Microbatches per optimizer step."""
    learning_rate: float = 2e-5
    """AdamW peak learning rate."""
    lr_warmup_steps: int = 10
    """Linear warm-up steps from 0; afterwards the rate decays linearly to 10% of the peak at the last step."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    adam_betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold on the global L2 norm."""

    # --- rollouts (validation only) ----------------------------------------------------------------
    engine: str = "vllm"
    """Rollout engine used for validation: `vllm` (full) or `transformers` (smoke: wraps the policy itself)."""
    policy_device: str = "cuda:0"
    """Torch device of the policy being trained."""
    rollout_device: str = "cuda:0"
    """Device of the validation engine."""
    gpu_memory_utilization: float = 0.5
    """Fraction of the rollout device's memory vLLM may take (colocated with training: leave room)."""
    generation_batch_size: int = 64
    """Sequences per `generate` call of the transformers engine."""

    # --- evaluation, logging, checkpoints --------------------------------------------------------
    eval_every: int = 50
    """Validate every this many optimizer steps (and before the first and after the last)."""
    n_eval_examples: int = 1024
    """Held-out questions per validation."""
    eval_temperature: float = 0.0
    """Validation sampling temperature; 0 = greedy."""
    sampling_max_tokens: int = 1024
    """Generation budget of a validation response."""
    n_eval_samples_saved: int = 4
    """Validation rollouts kept in `samples/`; `generations/step_XXXX.jsonl` (log_generations) holds all."""
    checkpoint_every: int = 100
    """Save a resumable checkpoint every this many optimizer steps (and at the end); 0: only at the end."""

    # --- derived ----------------------------------------------------------------------------------
    micro_train_batch_size: int = field(init=False)
    """train_batch_size // gradient_accumulation_steps."""

    def __post_init__(self) -> None:
        _check_common(self)
        need = lambda ok, message: _need("SFTConfig", ok, message)  # noqa: E731
        for name in ("n_sft_steps", "train_batch_size"):
            value = getattr(self, name)
            need(isinstance(value, int) and value >= 1, f"{name} must be a positive int, got {value!r}")
        need(self.train_batch_size % self.gradient_accumulation_steps == 0,
             f"train_batch_size={self.train_batch_size} must be divisible by "
             f"gradient_accumulation_steps={self.gradient_accumulation_steps}")
        need(self.n_examples is None or (isinstance(self.n_examples, int) and self.n_examples >= 1),
             f"n_examples={self.n_examples!r}: pass None (all traces) or a positive int")
        need(0.0 <= self.trace_noise < 1.0, f"trace_noise={self.trace_noise} must be in [0, 1)")
        need(self.lr_warmup_steps >= 0, f"lr_warmup_steps={self.lr_warmup_steps} must be >= 0")
        object.__setattr__(self, "micro_train_batch_size", self.train_batch_size // self.gradient_accumulation_steps)


@dataclass(frozen=True)
class EIConfig(_ConfigMixin):
    # --- run identity -------------------------------------------------------------------------
    name: str = "expert_iteration"
    """Run name: outputs go to `runs/<name>/`."""
    profile: str = "full"
    """`smoke` or `full`; informational once built."""
    seed: int = 0
    """Seed of the questions of each round, the rollouts, the batch order and torch."""

    # --- model, data ---------------------------------------------------------------------------
    model: str = "Qwen/Qwen3-0.6B"
    """Initial policy: `tiny`, `tiny-sft`, a hub id or a local directory (see `warm_start_steps`)."""
    dtype: str = "bfloat16"
    """As SFTConfig.dtype: float32 masters, bf16 autocast, bf16 copies pushed to the engine."""
    dataset: str = "gsm8k"
    """Training questions: `gsm8k`, `arithmetic` or a MATH source (hw3lib.data.load_task)."""
    eval_dataset: str | None = None
    """Held-out questions from another MATH source (None: the dataset's own)."""
    n_train_examples: int | None = None
    """Cap on training questions (None: all; arithmetic: how many to generate)."""
    arithmetic_max_operand: int = 99
    """Largest operand of the synthetic arithmetic problems."""
    prompt: str = "r1_zero"
    """Prompt template; only `r1_zero`."""
    warm_start_steps: int = 0
    """SFT warm-start steps on arithmetic before the first round, as GRPOConfig's (the same cached warm start
    for the same settings, so EI and the GRPO smoke run start from one policy); 0: start from `model`."""
    warm_start_lr: float = 1e-3
    """Learning rate of the warm start."""
    warm_start_batch_size: int = 32
    """Batch size of the warm start."""
    warm_start_examples: int = 2048
    """Arithmetic problems of the warm start."""

    # --- rounds -------------------------------------------------------------------------------------
    n_ei_steps: int = 5
    """Expert-iteration rounds: sample -> keep the correct rollouts -> SFT on them -> push weights."""
    questions_per_round: int = 512
    """Questions sampled (without replacement, seeded) each round."""
    group_size: int = 8
    """Rollouts per question (G)."""
    sampling_temperature: float = 1.0
    """Rollout sampling temperature."""
    sampling_min_tokens: int = 4
    """Minimum rollout length (as GRPO: no empty responses)."""
    sampling_max_tokens: int = 1024
    """Generation budget of a rollout and of a validation response."""
    sft_epochs: int = 1
    """Passes over the kept rollouts of a round."""
    train_batch_size: int = 32
    """Kept rollouts per optimizer step (a round's last batch may be smaller)."""
    gradient_accumulation_steps: int = 8
    """Microbatches per optimizer step (of train_batch_size rollouts)."""
    learning_rate: float = 2e-5
    """AdamW learning rate (one optimizer across rounds: its moments carry over)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    adam_betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold on the global L2 norm."""

    # --- engine ------------------------------------------------------------------------------------
    engine: str = "vllm"
    """Rollout engine: `vllm` (full) or `transformers` (smoke)."""
    policy_device: str = "cuda:0"
    """Torch device of the policy."""
    rollout_device: str = "cuda:0"
    """Device of the rollout engine."""
    gpu_memory_utilization: float = 0.5
    """Fraction of the rollout device's memory vLLM may take."""
    generation_batch_size: int = 64
    """Sequences per `generate` call of the transformers engine."""

    # --- evaluation, logging, checkpoints --------------------------------------------------------
    eval_every: int = 1
    """Validate every this many rounds (and before the first and after the last)."""
    n_eval_examples: int = 1024
    """Held-out questions per validation."""
    eval_temperature: float = 0.0
    """Validation sampling temperature; 0 = greedy."""
    n_eval_samples_saved: int = 4
    """Validation rollouts kept in `samples/`; `generations/round_XXXX.jsonl` holds all."""
    checkpoint_every: int = 1
    """Save a resumable checkpoint every this many rounds (and at the end); 0: only at the end."""

    # --- derived ----------------------------------------------------------------------------------
    micro_train_batch_size: int = field(init=False)
    """train_batch_size // gradient_accumulation_steps."""
    rollouts_per_round: int = field(init=False)
    """questions_per_round * group_size."""

    def __post_init__(self) -> None:
        _check_common(self)
        need = lambda ok, message: _need("EIConfig", ok, message)  # noqa: E731
        for name in ("n_ei_steps", "questions_per_round", "group_size", "sft_epochs", "train_batch_size"):
            value = getattr(self, name)
            need(isinstance(value, int) and value >= 1, f"{name} must be a positive int, got {value!r}")
        need(self.train_batch_size % self.gradient_accumulation_steps == 0,
             f"train_batch_size={self.train_batch_size} must be divisible by "
             f"gradient_accumulation_steps={self.gradient_accumulation_steps}")
        need(self.sampling_temperature > 0, f"sampling_temperature={self.sampling_temperature} must be > 0 "
             "(greedy rollouts would make the G samples of a question identical)")
        need(0 <= self.sampling_min_tokens <= self.sampling_max_tokens,
             f"sampling_min_tokens={self.sampling_min_tokens} must be between 0 and "
             f"sampling_max_tokens={self.sampling_max_tokens}")
        need(self.warm_start_steps >= 0, f"warm_start_steps={self.warm_start_steps} must be >= 0")
        need(self.n_train_examples is None or self.questions_per_round <= self.n_train_examples,
             f"questions_per_round={self.questions_per_round} exceeds n_train_examples={self.n_train_examples}")
        object.__setattr__(self, "micro_train_batch_size", self.train_batch_size // self.gradient_accumulation_steps)
        object.__setattr__(self, "rollouts_per_round", self.questions_per_round * self.group_size)


# The smoke profile (2 CPU cores): the tiny model on notebook 04's arithmetic task (operands 0..4, the same
# 4,096-problem pool and the same 256 held-out questions as the GRPO smoke runs, so the curves are comparable).
# SFT starts from the untrained `tiny`. Why 300 steps of 32: the tiny model only learns to copy the operands
# out of the question after ~200-300 such steps (measured: 100 steps leave every run at 15-25%, guessing,
# whatever the data size; at 200 steps lr 6e-3 or batches of 16 do not get there either); only once it
# can does the number of unique examples decide between learning the task and memorizing the few traces.
# EI starts from GRPO's warm start (125 SFT steps at 3e-3, cached) and takes 8 rounds of 256 questions x G
# (~15-20 optimizer steps each) at 3e-4: at 1e-3 the held-out trace NLL rose 0.25 -> 0.43 in 4 rounds (the kept
# rollouts include lucky answers with wrong working, and a high rate imitates those too), and 4 rounds of 128
# questions stayed within noise (greedy 0.344 -> 0.320); with 256 questions per round (G8) the greedy reward
# was 0.320 at round 4, 0.453 at round 8 (+11 points on 256 held-out questions, beyond the ~9-point band) and
# 0.457 at round 12, the sampled reward 0.19 -> 0.35 by round 8: 8 rounds keep the workbook's time down.
SFTConfig._SMOKE = {
    "name": "sft_smoke", "model": "tiny", "dataset": "arithmetic", "arithmetic_max_operand": 4,
    "n_train_examples": 4096, "n_sft_steps": 300, "train_batch_size": 32, "gradient_accumulation_steps": 1,
    "learning_rate": 3e-3, "lr_warmup_steps": 0, "generation_batch_size": 256, "eval_every": 150,
    "n_eval_examples": 256, "sampling_max_tokens": 32, "checkpoint_every": 150,
}
EIConfig._SMOKE = {
    "name": "ei_smoke", "model": "tiny", "dataset": "arithmetic", "arithmetic_max_operand": 4,
    "n_train_examples": 4096, "warm_start_steps": 125, "warm_start_lr": 3e-3, "warm_start_batch_size": 32,
    "warm_start_examples": 2048, "n_ei_steps": 8, "questions_per_round": 256, "group_size": 8,
    "sampling_max_tokens": 32, "sft_epochs": 1, "train_batch_size": 32, "gradient_accumulation_steps": 1,
    "learning_rate": 3e-4, "generation_batch_size": 256, "eval_every": 4, "n_eval_examples": 256,
    "checkpoint_every": 4,
}
