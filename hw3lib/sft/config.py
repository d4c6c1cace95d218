"""Configs of the SFT runner (`SFTConfig`) and of expert iteration (`EIConfig`): frozen, a docstring per field.

Both follow `hw3lib.grpo.config.GRPOConfig`: the defaults are the `full` profile's settings
(Qwen3-0.6B on GSM8K on a GPU, bf16 autocast over float32 masters), `for_profile("smoke")` gives the
CPU settings that show the effect in seconds (the tiny model on the synthetic arithmetic task of
notebook 04, with the same held-out questions), derived values are computed once in
`__post_init__`, and every check names the values that clash.

The fields shared with `GRPOConfig` (model, data, precision, devices, optimizer, validation,
checkpoints, seed) live in `hw3lib.core.config.RunConfig`, documented once; EIConfig also shares
GRPO's warm start and group sampling (`RolloutRunConfig`). So `hw3lib.tasks.data.load_task`,
`hw3lib.generation.training_engine` and `hw3lib.evaluation.validate` take these configs as they are:
the same data, engine and evaluation code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from hw3lib.core.config import RolloutRunConfig, RunConfig


SFT_FILE_ENV = "HW3_SFT_FILE"


def course_sft_file() -> str | None:
    """The course's SFT file named by $HW3_SFT_FILE (notebook 05 passes it as `sft_file`), or None: traces are
    then built from the dataset's worked solutions. A name that is not a .jsonl file is refused here, by name."""
    value = os.environ.get(SFT_FILE_ENV, "").strip()
    if not value:
        return None
    path = Path(value).expanduser()
    if path.suffix != ".jsonl" or not path.is_file():
        raise FileNotFoundError(f"${SFT_FILE_ENV}={value}: no such .jsonl file; point it at the course's SFT data "
                                "(prompt, response, ground_truth per line) or unset it to build traces from the dataset")
    return str(path)


def _check_r1_zero(cfg: RunConfig) -> None:
    cfg._need(cfg.prompt == "r1_zero", f"prompt={cfg.prompt!r}: the SFT targets and kept rollouts are R1-Zero "
              "completions (reasoning </think> <answer> ... </answer>); use prompt='r1_zero'")


@dataclass(frozen=True)
class SFTConfig(RunConfig):
    # The shared fields are documented once in hw3lib.core.config.RunConfig; SFT's defaults:
    name: str = "sft"
    gpu_memory_utilization: float = 0.5  # the validation engine sits beside the policy being trained
    learning_rate: float = 2e-5
    train_batch_size: int = 32  # traces; batches run through seeded permutations of them, epoch after epoch
    gradient_accumulation_steps: int = 8
    eval_every: int = 50  # optimizer steps
    checkpoint_every: int = 100  # optimizer steps

    # --- data ---------------------------------------------------------------------------------
    n_examples: int | None = None
    """Unique examples trained on: the first `n_examples` of the pool (`n_train_examples`) after a seeded
    shuffle, so the sets of different sizes are nested (None: the whole pool)."""
    filter_correct: bool = False
    """Keep only the traces whose final answer the reward function grades correct (before `n_examples`)."""
    sft_file: str | None = None
    """The course's SFT data: a jsonl file with `prompt`, `response` (or `completion`) and `ground_truth` per
    line, the prompt already formatted (R1-Zero, ending in `<think>`). None: traces are built from the worked
    solutions of `dataset` (GSM8K, MATH or arithmetic). Validation always uses `dataset`'s held-out questions."""
    trace_noise: float = 0.0
    """Share of traces whose final answer is replaced by a wrong one (seeded), standing in for an imperfect
    teacher so that `filter_correct` has something to remove on data built from correct worked solutions.
    0 for real data; the smoke profile's filter experiment sets it and says so."""

    # --- optimisation -------------------------------------------------------------------------------
    n_sft_steps: int = 500
    """Optimizer steps."""
    lr_warmup_steps: int = 10
    """Linear warm-up steps from 0; afterwards the rate decays linearly to 10% of the peak at the last step."""

    COUNTER = "step"
    TOTAL_FIELD = "n_sft_steps"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_r1_zero(self)
        need = self._need
        need(isinstance(self.n_sft_steps, int) and self.n_sft_steps >= 1,
             f"n_sft_steps must be a positive int, got {self.n_sft_steps!r}")
        need(self.n_examples is None or (isinstance(self.n_examples, int) and self.n_examples >= 1),
             f"n_examples={self.n_examples!r}: pass None (all traces) or a positive int")
        need(0.0 <= self.trace_noise < 1.0, f"trace_noise={self.trace_noise} must be in [0, 1)")
        need(self.sft_file is None or (isinstance(self.sft_file, str) and self.sft_file.endswith(".jsonl")),
             f"sft_file={self.sft_file!r}: pass the path of the course's SFT .jsonl file, or None")
        need(self.lr_warmup_steps >= 0, f"lr_warmup_steps={self.lr_warmup_steps} must be >= 0")


@dataclass(frozen=True)
class EIConfig(RolloutRunConfig):
    # The shared fields (and the warm start and group sampling shared with GRPO) are documented once in
    # hw3lib.core.config; expert iteration's defaults:
    name: str = "expert_iteration"
    gpu_memory_utilization: float = 0.5  # the rollout engine sits beside the policy being trained
    learning_rate: float = 2e-5  # one optimizer across rounds: its moments carry over
    train_batch_size: int = 32  # kept rollouts per optimizer step (a round's last batch may be smaller)
    gradient_accumulation_steps: int = 8
    eval_every: int = 1  # rounds
    checkpoint_every: int = 1  # rounds

    # --- rounds -------------------------------------------------------------------------------------
    n_ei_steps: int = 5
    """Expert-iteration rounds: sample -> keep the correct rollouts -> SFT on them -> push weights."""
    questions_per_round: int = 512
    """Questions sampled (without replacement, seeded) each round."""
    sft_epochs: int = 1
    """Passes over the kept rollouts of a round."""

    # --- derived ----------------------------------------------------------------------------------
    rollouts_per_round: int = field(init=False)
    """questions_per_round * group_size."""

    COUNTER = "round"
    TOTAL_FIELD = "n_ei_steps"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_r1_zero(self)
        need = self._need
        for name in ("n_ei_steps", "questions_per_round", "sft_epochs"):
            value = getattr(self, name)
            need(isinstance(value, int) and value >= 1, f"{name} must be a positive int, got {value!r}")
        need(self.n_train_examples is None or self.questions_per_round <= self.n_train_examples,
             f"questions_per_round={self.questions_per_round} exceeds n_train_examples={self.n_train_examples}")
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
    "eval_temperature": 0.0,  # greedy in smoke (labelled), as the GRPO smoke runs it is compared with
}
SFTConfig._REHEARSAL = {
    **SFTConfig._REHEARSAL,
    # Two optimizer steps of 4 traces in 2 microbatches, validated before and after (see RunConfig._REHEARSAL).
    "train_batch_size": 4, "gradient_accumulation_steps": 2, "lr_warmup_steps": 0,
}
SFTConfig._REHEARSAL_CAPS = {**SFTConfig._REHEARSAL_CAPS, "n_sft_steps": 2, "n_examples": 64}
EIConfig._REHEARSAL = {
    **EIConfig._REHEARSAL,
    # One round: 4 questions x 4 rollouts, SFT on the kept ones in microbatches of 2.
    "group_size": 4, "train_batch_size": 4, "gradient_accumulation_steps": 2,
}
EIConfig._REHEARSAL_CAPS = {**EIConfig._REHEARSAL_CAPS, "n_ei_steps": 1, "questions_per_round": 4}
EIConfig._SMOKE = {
    "name": "ei_smoke", "model": "tiny", "dataset": "arithmetic", "arithmetic_max_operand": 4,
    "n_train_examples": 4096, "warm_start_steps": 125, "warm_start_lr": 3e-3, "warm_start_batch_size": 32,
    "warm_start_examples": 2048, "n_ei_steps": 8, "questions_per_round": 256, "group_size": 8,
    "sampling_max_tokens": 32, "sft_epochs": 1, "train_batch_size": 32, "gradient_accumulation_steps": 1,
    "learning_rate": 3e-4, "generation_batch_size": 256, "eval_every": 4, "n_eval_examples": 256,
    "checkpoint_every": 4, "eval_temperature": 0.0,  # greedy in smoke (labelled), as SFT and GRPO
}
