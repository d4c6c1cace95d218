"""What every training run's config shares: `RunConfig`, the base of GRPOConfig, SFTConfig and EIConfig.

The fields here mean the same in every run (model, data, precision, devices, the optimizer, validation,
checkpointing, seed) and are documented once, here; each subclass adds its own fields and may give a
shared field another default. The methods (`replace`, `to_dict`, `describe`, `from_dict`, `load`,
`for_profile`) and the common checks are written once too. Configs are frozen; derived values are
computed once in `__post_init__` and saved with the config.

`for_profile(name)` starts from the profile's model, precision, engine and devices
(hw3lib.core.profile), adds the class's `_SMOKE` settings in the smoke profile (and `_SMOKE_MATH` on the
MATH course's generated task, and `_SHORT` under CI's short setting of the notebooks), then the overrides.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

ENGINES = ("vllm", "transformers")
# Settings a run chooses for itself at its start when left None and records in its config.json (GRPO's memory plan:
# hw3lib.grpo.memory_plan); a run's start message leaves them out (the preflight line prints them).
PLAN_FIELDS = ("forward_rows", "prompt_tokens")
# Datasets hw3lib reads or generates itself (the rest are MATH sources): GSM8K, the synthetic arithmetic
# task, and the generated MATH-format task of the MATH course's smoke profile (hw3lib.tasks.math_synthetic).
BUILTIN_DATASETS = ("gsm8k", "arithmetic", "math-synthetic")


@dataclass(frozen=True)
class RunConfig:
    # --- run identity -------------------------------------------------------------------------
    name: str = "run"
    """Run name: outputs go to `runs/<name>/` (config.json, metrics.jsonl, samples/, checkpoints/); `<grid>/<config>`
    for the runs of an experiment grid (hw3lib.experiments.grids)."""
    profile: str = "full"
    """`smoke` (CPU, tiny model, arithmetic) or `full` (GPU, the course's settings); informational once built."""
    seed: int = 0
    """Seed of everything random in the run: the questions or traces drawn, the rollouts (each step seeds its
    own sampling), the batch order, the held-out questions and torch."""

    # --- model, data, prompt --------------------------------------------------------------------
    model: str = "Qwen/Qwen3-0.6B"
    """Initial policy: `tiny`, `tiny-sft`, a hub id or a local directory (also the frozen KL reference). `for_profile`
    picks the profile's `math_model` when `dataset` is a MATH source and no model is given."""
    dtype: str = "bfloat16"
    """Compute precision. `bfloat16` (GPU): float32 master weights and AdamW state, forward and backward
    under bf16 autocast (hw3lib.maths.logprobs.autocast_for), bf16 copies pushed to the rollout engine (an
    optimizer step taken on bf16 weights would round most lr-1e-5 updates away). `float32` (CPU): float32
    everywhere, and the transformers engine wraps the policy module itself."""
    dataset: str = "gsm8k"
    """Training questions (or SFT traces): `gsm8k` (SFT: the train split's worked solutions), `arithmetic`
    (synthetic two-number word problems; SFT: their one-line working), or a MATH source read by
    `hw3lib.tasks.data.load_math` (ground truth: the solution's last `\\boxed{}`): `math` (the source named by
    $HW3_MATH_DATA), a `.jsonl` file, a folder holding `train.jsonl`/`test.jsonl`, or a hub dataset id
    (`owner/name`, splits `train` and `test`). See `hw3lib.tasks.data.load_task`. GRPO's keyword inclusion
    (prompt `keyword`): `keyword` (the procedural dataset) or a folder written by `hw3 keyword data`."""
    eval_dataset: str | None = None
    """Held-out questions: any MATH source as for `dataset` (split `test`; `{"question", "gold"}` jsonl lines work
    too). None: GSM8K's test split / fresh arithmetic problems / a MATH folder's or hub id's `test` split / a
    single jsonl's last `n_eval_examples` rows."""
    n_train_examples: int | None = None
    """Cap on training records (None: all; arithmetic: how many problems to generate)."""
    arithmetic_max_operand: int = 99
    """Largest operand of the synthetic arithmetic problems."""
    prompt: str = "r1_zero"
    """Prompt template (hw3lib.tasks.prompt_table): `r1_zero`, `question_only` or `keyword`; it also picks
    the matching reward function and stop strings. SFT and expert iteration take `r1_zero` only."""

    # --- rollout engine ----------------------------------------------------------------------------
    engine: str = "vllm"
    """Rollout engine (rollouts and validation): `vllm` (full) or `transformers` (smoke: wraps the policy
    module itself)."""
    policy_device: str = "cuda:0"
    """Torch device of the policy being trained."""
    rollout_device: str = "cuda:0"
    """Device of the rollout engine: the policy's GPU (colocated) or a second GPU."""
    gpu_memory_utilization: float = 0.85
    """Fraction of the rollout device's memory vLLM takes when it starts (weights, KV cache): the handout's 0.85,
    meant for vLLM on a GPU of its own. Colocated it must leave room for training, and on one 80 GB GPU 0.85 does
    not leave enough for Qwen2.5-Math-1.5B's: `for_profile` gives the full profile's training runs
    `hw3lib.core.cost.COLOCATED_SHARE` (0.5, which fits both course models; the README's cost tables)."""
    generation_batch_size: int = 64
    """Sequences per `generate` call of the transformers engine (memory: KV cache); vLLM schedules its own."""

    # --- optimisation -------------------------------------------------------------------------------
    learning_rate: float = 1e-5
    """AdamW (peak) learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    adam_betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them (transformers
    models): much less activation memory for about a third more compute. Same gradients (tested)."""
    lora_rank: int = 0
    """Beyond the handouts: the rank r of LoRA adapters trained instead of the whole model (peft; hw3lib.models.lora);
    0: full fine-tuning. The base weights stay frozen (AdamW holds moments for the adapters only), the rollout
    engine receives the merged weights W + (lora_alpha / r) B A after each step, and checkpoints hold the adapter
    only. LoRA usually wants a larger learning_rate than full fine-tuning (~10x is a common starting point)."""
    lora_alpha: int = 32
    """LoRA's scale numerator: the adapter's update is multiplied by lora_alpha / lora_rank. 32 is the common
    alpha = 2 x rank at rank 16 (scale 2); kept fixed when sweeping the rank, so a larger rank takes smaller steps."""
    lora_dropout: float = 0.0
    """Dropout on the adapters' input during training. 0 (the default) keeps the training log-probs those of the
    weights the engine samples with (the ratio is exactly 1 on-policy); dropout would make them noisy."""
    lora_target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                            "down_proj")
    """Names of the linear layers that get adapters (peft's `target_modules`): every attention and MLP projection
    of a Qwen/Llama-style decoder layer (adapting the MLPs as well as attention is what brings LoRA close to full
    fine-tuning: Schulman et al., 2025, "LoRA Without Regret"); the embeddings and the output head stay frozen."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold on the global L2 norm."""
    train_batch_size: int = 256
    """Sequences per optimizer step (GRPO: responses; SFT: traces; EI: kept rollouts)."""
    gradient_accumulation_steps: int = 128
    """Microbatches per optimizer step."""

    # --- evaluation, logging, checkpoints --------------------------------------------------------
    eval_every: int = 10
    """Validate every this many steps (GRPO steps, SFT optimizer steps, EI rounds), before the first and
    after the last."""
    n_eval_examples: int = 1024
    """Held-out questions per validation (the course: >= 1,024 in the full profile)."""
    eval_temperature: float = 1.0
    """Validation sampling temperature. The courses evaluate at 1.0 (top-p 1.0, `sampling_max_tokens`,
    stop at `</answer>` kept), so the full profile does too and its numbers compare with the handouts'
    thresholds; 0 = greedy decoding (deterministic, lower variance), which the smoke profile uses and
    every report labels (`validation_label`)."""
    sampling_max_tokens: int = 1024
    """Generation budget per response (rollouts and validation); responses that hit it count as truncated."""
    n_eval_samples_saved: int = 4
    """Validation rollouts written to `samples/step_XXXX.jsonl` each time (SFT and EI also write every
    validation generation to `generations/`)."""
    checkpoint_every: int = 20
    """Save a resumable checkpoint every this many steps (and at the end); 0: only at the end."""
    wandb_project: str | None = None
    """Also log to this Weights & Biases project (None: off; wandb is only imported when set)."""

    # --- derived (computed once in __post_init__, saved with the config) ------------------------------
    micro_train_batch_size: int = field(init=False)
    """train_batch_size // gradient_accumulation_steps."""

    COUNTER: ClassVar[str] = "step"
    """The state counter the run's steps are numbered by (and checkpoints named after): hw3lib.core.lifecycle."""
    TOTAL_FIELD: ClassVar[str] = ""
    """The field holding how many steps the run takes (each subclass names its own)."""
    _SMOKE: ClassVar[dict] = {}
    """The smoke profile's settings (each subclass sets its own, with the reasons beside them)."""
    _SMOKE_MATH: ClassVar[dict] = {
        # A worked solution of the generated MATH-format task is 55 tokens on average, 92 at most (the tiny
        # model's tokenizer): the arithmetic recipe's 32 would truncate nearly every answer.
        "sampling_max_tokens": 96,
        # Validation as the MATH course validates: sampled at T=1 (top-p 1), not greedy. Measured (80 GRPO steps of
        # the smoke recipe after the 200-step warm start, 256 held-out problems): sampled accuracy 0.44 -> 0.56
        # (+12 points, 2 standard errors of the difference 8.7), greedy 0.64 -> 0.55 at step 20 -- GRPO sharpens
        # the sampling distribution the course measures, not the tiny model's argmax. 512 problems keep the
        # sampling noise of a difference at ~6 points (2 standard errors).
        "eval_temperature": 1.0,
        "n_eval_examples": 512,
    }
    """What the smoke settings change for the MATH course's generated task (`math-synthetic`)."""
    _SHORT: ClassVar[dict] = {
        # CI runs every notebook of both courses (hw3lib.core.profile.notebook_short); validation is most of a
        # 3-step run's time there (the MATH task: 512 problems sampled at up to 96 tokens, twice per run), and
        # CI checks the code paths, not the numbers (`make workbook` validates on the full sets).
        "n_eval_examples": 64,
    }
    """What CI's short setting of the notebooks ($HW3_NOTEBOOK_SHORT=1) changes in the smoke profile."""
    _REHEARSAL: ClassVar[dict] = {
        # The full profile at rehearsal scale (hw3lib.core.profile._rehearsal): the course's settings with only the
        # counts cut, so every notebook of both courses walks its full-profile path in CI in minutes.
        "generation_batch_size": 16,
    }
    """What the full profile's rehearsal scale starts from (each subclass adds its own batch shapes)."""
    _REHEARSAL_CAPS: ClassVar[dict] = {"n_eval_examples": 4, "sampling_max_tokens": 24, "n_train_examples": 256}
    """Upper bounds on counts in the rehearsal, applied in `__post_init__` to every config of a full-profile run
    built while $HW3_REHEARSAL=1 -- also to those a grid, a notebook or `replace` derives with the course's own
    sizes (e.g. expert iteration's 2,048 questions per round) -- so that only the sizes shrink, never the paths."""
    _EXTRA_DATASETS: ClassVar[tuple[str, ...]] = ()
    """Dataset names this kind of run accepts besides the built-in and MATH ones."""

    def __post_init__(self) -> None:
        self._cap_for_rehearsal()
        self._check_common()
        object.__setattr__(self, "micro_train_batch_size", self.train_batch_size // self.gradient_accumulation_steps)

    def _cap_for_rehearsal(self) -> None:
        """In the full profile's rehearsal, cut each count of `_REHEARSAL_CAPS` to its bound (see there)."""
        from hw3lib.core.profile import rehearsal_requested

        if self.profile != "full" or not rehearsal_requested():
            return
        for name, bound in self._REHEARSAL_CAPS.items():
            value = getattr(self, name)
            object.__setattr__(self, name, bound if value is None else min(value, bound))

    def _need(self, ok: bool, message: str) -> None:
        if not ok:
            raise ValueError(f"{type(self).__name__}: {message}")

    def _check_common(self) -> None:
        """Checks of the shared fields; each message names the clashing values."""
        need = self._need
        for name in ("train_batch_size", "gradient_accumulation_steps", "sampling_max_tokens", "n_eval_examples",
                     "eval_every", "generation_batch_size"):
            value = getattr(self, name)
            need(isinstance(value, int) and value >= 1, f"{name} must be a positive int, got {value!r}")
        need(self.train_batch_size % self.gradient_accumulation_steps == 0,
             f"train_batch_size={self.train_batch_size} must be divisible by "
             f"gradient_accumulation_steps={self.gradient_accumulation_steps}")
        need(self.engine in ENGINES, f"engine={self.engine!r}: choose one of {', '.join(ENGINES)}")
        need(isinstance(self.dataset, str) and self.dataset.strip() != "" and (
                 self.dataset in (*BUILTIN_DATASETS, "math", *self._EXTRA_DATASETS) or self.dataset.endswith(".jsonl")
                 or "/" in self.dataset or Path(self.dataset).is_dir()),
             f"dataset={self.dataset!r}: choose gsm8k, arithmetic, math (the MATH data named by $HW3_MATH_DATA), "
             "a MATH-style .jsonl file of {problem, solution} records, a folder holding train.jsonl and "
             "test.jsonl, or a hub dataset id such as HuggingFaceH4/MATH-500")
        need(self.dtype in ("float32", "bfloat16", "float16"),
             f"dtype={self.dtype!r}: choose float32, bfloat16 or float16")
        need(self.learning_rate > 0 and self.max_grad_norm > 0,
             f"learning_rate={self.learning_rate} and max_grad_norm={self.max_grad_norm} must be > 0")
        need(self.checkpoint_every >= 0, f"checkpoint_every={self.checkpoint_every} must be >= 0")
        need(isinstance(self.lora_rank, int) and self.lora_rank >= 0,
             f"lora_rank={self.lora_rank!r} must be an int >= 0 (0: full fine-tuning)")
        need(self.lora_alpha > 0 and 0.0 <= self.lora_dropout < 1.0,
             f"lora_alpha={self.lora_alpha} must be > 0 and lora_dropout={self.lora_dropout} in [0, 1)")
        need(isinstance(self.lora_target_modules, tuple) and len(self.lora_target_modules) > 0
             and all(isinstance(name, str) and name for name in self.lora_target_modules),
             f"lora_target_modules={self.lora_target_modules!r} must be a non-empty tuple of module names")
        need(self.eval_temperature >= 0, f"eval_temperature={self.eval_temperature} must be >= 0 (0: greedy)")
        need(0.0 < self.gpu_memory_utilization <= 1.0,
             f"gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]")
        # One level of grouping is allowed: a grid's runs are named `<grid>/<config>` (hw3lib.experiments.grids).
        need(isinstance(self.name, str) and self.name.count("/") <= 1
             and all(part and part not in (".", "..") for part in self.name.split("/")),
             f"name={self.name!r} must be a plain folder name, or `<group>/<name>` (it becomes runs/<name>)")

    # --- convenience ------------------------------------------------------------------------------
    @property
    def total_steps(self) -> int:
        """The number of steps the run takes (GRPO steps, SFT optimizer steps, EI rounds)."""
        return getattr(self, self.TOTAL_FIELD)

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """The whole config, one `field = value` per line (saved with every run as config.json)."""
        return "\n".join(f"  {key} = {value!r}" for key, value in self.to_dict().items())

    def describe_changes(self) -> str:
        """The settings that differ from this class's profile recipe (`for_profile(self.profile)`), one
        `field = value (recipe: ...)` per line: what a run's start prints (its whole config is in config.json)."""
        try:
            base = type(self).for_profile(self.profile).to_dict()
        except (ValueError, TypeError):  # a class or profile without a recipe: the field defaults instead
            base = {f.name: f.default for f in dataclasses.fields(self) if f.default is not dataclasses.MISSING}
        # derived values follow; the memory plan a run records at its start (`PLAN_FIELDS`) is printed by the preflight
        settable = {f.name for f in dataclasses.fields(self) if f.init} - {"name", *PLAN_FIELDS}
        changed = [f"  {key} = {_shown(value)!r} (recipe: {_shown(base[key])!r})" for key, value in self.to_dict().items()
                   if key in settable and key in base and base[key] != value]
        return "\n".join([f"  settings that differ from the {self.profile} profile's {type(self).__name__} recipe:"]
                         + (changed or ["  (none)"]))

    @classmethod
    def from_dict(cls, data: dict):
        """Rebuild from `to_dict()` output (derived fields are recomputed; unknown keys are an error)."""
        init_fields = {f.name for f in dataclasses.fields(cls) if f.init}
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"{cls.__name__}.from_dict: unknown fields {sorted(unknown)}; "
                             "was the config saved by a different version of hw3lib?")
        kwargs = {key: value for key, value in data.items() if key in init_fields}
        for name in ("adam_betas", "lora_target_modules"):
            if name in kwargs:
                kwargs[name] = tuple(kwargs[name])  # JSON turns the tuple into a list
        return cls(**kwargs)

    @classmethod
    def load(cls, path: str | Path):
        path = Path(path)
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read a {cls.__name__} ({exc})") from None

    @classmethod
    def for_profile(cls, profile_name: str | None = None, course: str | None = None, **overrides):
        """The settings of a profile (`smoke` or `full`; None: $HW3_PROFILE / GPU present) for a course
        (a preset of hw3lib.core.course, e.g. `nlpdl-hw3` or `cs336-a5`; None: $HW3_COURSE, else nlpdl-hw3), with
        overrides.

        The course picks the data and the model: in the full profile its dataset (GSM8K, or MATH from
        $HW3_MATH_DATA) and its model (`Course.model_for`: e.g. OLMo-2-0425-1B for CS336 2026);
        in smoke the class's own CPU recipe, on the generated MATH-format task for the MATH course. A
        MATH `dataset` (anything but gsm8k and arithmetic) trains the profile's `math_model` unless
        `model` is among the overrides.
        """
        from hw3lib.core.course import get_course
        from hw3lib.core.profile import get_profile, notebook_short

        prof, chosen = get_profile(profile_name), get_course(course)
        device = "cuda:0" if prof.device == "cuda" else prof.device
        base = {"profile": prof.name, "model": chosen.model_for(prof) if prof.name == "full" else prof.model,
                "dtype": prof.dtype, "engine": prof.engine,
                "policy_device": device, "rollout_device": device,
                "gpu_memory_utilization": colocated_share(prof), "seed": prof.seed}
        if prof.name == "smoke":
            base.update(cls._SMOKE)
        base.update(chosen.run_data(prof.name))
        if prof.name == "smoke" and overrides.get("dataset", base.get("dataset")) == "math-synthetic":
            base.update(cls._SMOKE_MATH)
        if prof.name == "smoke" and notebook_short():
            base.update(cls._SHORT)
        if prof.rehearsal:
            base.update(cls._REHEARSAL)
        if overrides.get("dataset", base.get("dataset")) not in (*BUILTIN_DATASETS, None) and "model" not in overrides:
            base["model"] = prof.math_model
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls) if f.init}
        if unknown:
            raise ValueError(f"{cls.__name__}.for_profile: unknown settings {sorted(unknown)}")
        return cls(**{**base, **overrides})


def _shown(value):
    """A setting as a run's start prints it: a local folder relative to the project (hw3lib.core.io.shown_path),
    so stored notebook outputs never carry a machine's absolute path."""
    if isinstance(value, str) and os.path.isabs(value):
        from hw3lib.core.io import shown_path

        return shown_path(value)
    return value


def colocated_share(prof) -> float:
    """`gpu_memory_utilization` of a training run's engine, which sits on the policy's device: the full profile's
    `hw3lib.core.cost.COLOCATED_SHARE` (its evaluation-only engines take the profile's 0.85: no trainer beside
    them), the smoke profile's own value."""
    from hw3lib.core.cost import COLOCATED_SHARE

    return COLOCATED_SHARE if prof.name == "full" else prof.gpu_memory_utilization


@dataclass(frozen=True)
class RolloutRunConfig(RunConfig):
    """A run that samples groups of rollouts from a (possibly warm-started) policy: GRPO and expert iteration."""

    _SMOKE_MATH: ClassVar[dict] = {
        **RunConfig._SMOKE_MATH,
        # The warm start on the generated MATH-format task (its worked solutions): 200 steps leave the tiny model
        # at 64% of 256 held-out problems right (greedy); see hw3lib.tasks.math_synthetic.SMALL.
        "warm_start_steps": 200,
    }
    _SHORT: ClassVar[dict] = {
        **RunConfig._SHORT,
        # CI's short runs start from a shorter warm start (its own cache entry): the MATH task's 200 steps and the
        # neutral-format one the prompt grid builds were ~3 of CI's minutes; 60 steps already give the tiny model
        # some right answers, so GRPO's groups and expert iteration's filter have something to work with.
        "warm_start_steps": 60,
    }

    # --- optional SFT warm start (smoke profile: so the tiny model's reward is not always zero) ---
    warm_start_steps: int = 0
    """SFT steps on arithmetic solutions before the first step (0: start from `model` directly). Cached by its
    settings, so GRPO and expert iteration with the same settings start from one policy."""
    warm_start_lr: float = 1e-3
    """SFT learning rate of the warm start."""
    warm_start_batch_size: int = 32
    """SFT batch size of the warm start."""
    warm_start_examples: int = 2048
    """Problems the warm start trains on (a different seed from the run's questions): arithmetic, or the
    generated MATH-format task for a run on it (hw3lib.models.load.warm_start_records)."""
    warm_start_working_fraction: float = 1.0
    """Share of warm-start targets that show the working; the others give the bare answer."""
    warm_start_seed: int | None = None
    """Seed of the warm start (None: the run's `seed`). A grid's seed replicas keep their base's warm start: a
    replica is then the same start trained with other luck, as every comparison within a grid is. (With its own
    warm start, seed 2's tiny model began 12 points below seed 0's, and the smoke seed band came out ±41 points.)"""

    # --- rollouts --------------------------------------------------------------------------------
    group_size: int = 8
    """Responses sampled per question (G); GRPO normalizes advantages within each group."""
    sampling_temperature: float = 1.0
    """Rollout sampling temperature."""
    sampling_min_tokens: int = 4
    """Minimum response length (the course: 4, so no empty responses)."""

    def _check_common(self) -> None:
        super()._check_common()
        need = self._need
        need(isinstance(self.group_size, int) and self.group_size >= 1,
             f"group_size must be a positive int, got {self.group_size!r}")
        need(self.sampling_temperature > 0, f"sampling_temperature={self.sampling_temperature} must be > 0 "
             "(rollouts must be sampled; greedy rollouts would make the G samples of a question identical)")
        need(0 <= self.sampling_min_tokens <= self.sampling_max_tokens,
             f"sampling_min_tokens={self.sampling_min_tokens} must be between 0 and "
             f"sampling_max_tokens={self.sampling_max_tokens}")
        need(self.warm_start_steps >= 0, f"warm_start_steps={self.warm_start_steps} must be >= 0")
        need(0.0 <= self.warm_start_working_fraction <= 1.0,
             f"warm_start_working_fraction={self.warm_start_working_fraction} must be in [0, 1]")
