"""The one run lifecycle of GRPO, SFT and expert iteration: `open_run`, `TrainingRun`, `RunResult`.

Every training loop in hw3lib does the same things around its own step, in this order:

1. `begin_run` / `open_run`: the run folder by the rules of hw3lib.core.runs -- a finished run with the same settings
   is read back (no model is loaded), an interrupted one continues with `resume=True`, anything else is
   refused unless `overwrite=True`;
2. `TrainingRun(...)`: write `config.json`; take the float32 policy the loop loaded (from
   `policy_source(initial)`: the checkpoint's weights, or the initial model) and build its AdamW; a
   fresh run seeds every RNG, a resumed one restores the optimizer, the RNGs and `metrics.jsonl`;
3. `catch_up(validate)`: the validation due at the starting step, when it is missing (a fresh run's
   step 0, or one a Ctrl-C cut short);
4. per step: `log(row)` the metrics, `complete_step(...)` the counters, then `after_step(validate)`
   validates when due and checkpoints when due;
5. on Ctrl-C, `save_interrupted()` checkpoints the last completed step (updates an unfinished step
   already made are flagged as a partial step; that step is redone on resume);
6. `result()` / `read_result(...)`: one `RunResult` type for all three.

Every entry point (`train`, `train_sft`, `expert_iteration`) is wrapped by `training_entry`: on a GPU with vLLM a
run that will train runs in a process of its own (hw3lib.core.own_process: one sleep-mode engine per process), and
whatever the run held on the GPU is handed back when it returns (`release_memory`). `TrainingRun` creates AdamW's
moments on a GPU before the first forward (`materialize_adamw_state`), not inside the activations' freed blocks.

The loops stay explicit -- each calls these in its own `for` loop and passes its own validation
function in. Steps are counted by the config's `COUNTER` (`grpo_step`, `step`, `round`) up to
`cfg.total_steps`; checkpoints are named after it.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import inspect
import json
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hw3lib.core.config import PLAN_FIELDS
from hw3lib.core.io import append_jsonl, atomic_write_json, runs_dir, shown_model, shown_path
from hw3lib.core.own_process import needs_own_process, run_in_own_process
from hw3lib.core.runs import (METRICS_FILE, WandbLink, config_differences, delete_outputs, has_outputs,
                              latest_checkpoint, load_checkpoint, metrics_rows, refuse_existing, rng_state,
                              save_checkpoint, seed_everything)

COUNTER_WORDS = {"grpo_step": "GRPO step", "step": "step", "round": "round"}


@dataclass
class RunResult:
    """What a finished (or resumed-and-finished) GRPO, SFT or expert-iteration run leaves behind."""

    run_dir: Path
    config: Any
    metrics: list[dict]
    """Every row of metrics.jsonl (training rows have `train/loss`; validation rows `eval/answer_reward`)."""
    steps: int
    """Steps completed, counted by the config's COUNTER: GRPO steps, SFT optimizer steps or EI rounds."""
    optimizer_steps: int
    skipped_steps: int
    """Optimizer steps whose loss or gradient norm was not finite (no update)."""
    elapsed_s: float
    """Wall-clock seconds of the loop (across resumes; excludes model loading and the warm start)."""
    checkpoint: Path | None

    @property
    def grpo_steps(self) -> int:
        """`steps`, under the name GRPO readers use."""
        return self.steps

    @property
    def train_rows(self) -> list[dict]:
        return [row for row in self.metrics if "train/loss" in row]

    @property
    def eval_rows(self) -> list[dict]:
        return [row for row in self.metrics if "eval/answer_reward" in row]


def field_defaults(cfg) -> dict:
    """The defaults of `cfg`'s class, per settable field (for configs saved before a field existed)."""
    defaults = {}
    for f in dataclasses.fields(cfg):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
    return defaults


def read_result(run_dir: Path, cfg, state: dict) -> RunResult:
    """The RunResult of `run_dir` as its files and the step counters `state` describe it."""
    return RunResult(run_dir=run_dir, config=cfg, metrics=metrics_rows(run_dir), steps=state[cfg.COUNTER],
                     optimizer_steps=state.get("optimizer_step", state.get("step", 0)),
                     skipped_steps=state.get("skipped_steps", 0), elapsed_s=state["elapsed_s"],
                     checkpoint=latest_checkpoint(run_dir))


def validation_logged(rows: Sequence[dict], counter: str, value: int) -> bool:
    """Whether the validation at `counter == value` is among the metrics rows (a Ctrl-C during a
    validation leaves the step's checkpoint without its validation row)."""
    return any("eval/answer_reward" in row and row.get(counter) == value for row in rows)


def open_run(run_dir: Path, cfg, resume: bool, overwrite: bool) -> tuple[Path | None, dict | None]:
    """Apply the folder rules of hw3lib.core.runs: `(checkpoint to resume or None, state of a finished
    run to reuse or None)`. Settings that do not change what a run computes (`RESUMABLE_CHANGES`) may
    differ on resume; a run is finished when its counter reached `cfg.total_steps` and that validation
    is logged."""
    if resume and overwrite:
        raise ValueError("resume=True and overwrite=True contradict each other: pick one")
    if overwrite:
        if has_outputs(run_dir):
            delete_outputs(run_dir)
        return None, None
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        if has_outputs(run_dir):
            raise refuse_existing(run_dir, "outputs but no checkpoint: it stopped before its first one, so "
                                           "resume=True has nothing to continue from", resumable=False)
        return None, None
    state = json.loads((checkpoint / "state.json").read_text())
    saved = json.loads((checkpoint / "config.json").read_text())
    counter, total = cfg.COUNTER, cfg.total_steps
    finished = state[counter] == total and validation_logged(metrics_rows(run_dir), counter, total)
    differing = config_differences(saved, cfg.to_dict(), defaults=field_defaults(cfg))
    if not resume and not (finished and not differing):
        why = f"checkpoint at {COUNTER_WORDS[counter]} {state[counter]} of {saved.get(cfg.TOTAL_FIELD)}"
        raise refuse_existing(run_dir, why + (f"; settings differ: {', '.join(differing)}" if differing else ""))
    if differing:
        raise ValueError(f"cannot resume {checkpoint}: the config differs ({', '.join(differing)}); use the "
                         "saved settings, or a new run name")
    if state[counter] > total:
        raise ValueError(f"cannot resume {checkpoint}: it is past {cfg.TOTAL_FIELD}={total}")
    if finished:
        state.pop("partial_step", None)
        return checkpoint, state
    return checkpoint, None


def policy_source(checkpoint: Path | None, initial: str) -> str:
    """Where the policy loads from: the checkpoint's float32 weights (a LoRA run's: its adapter, which
    hw3lib.models.load.load_training_policy loads onto the initial model), or the initial model."""
    return str(checkpoint / "policy") if checkpoint is not None else str(initial)


def adamw(params: list, cfg) -> torch.optim.AdamW:
    """AdamW with the run's settings, fused (one kernel over all tensors) where torch has it for the parameters'
    device: at Qwen3-0.6B's size on 2 CPU cores 11.6x faster per step than the default multi-tensor ("foreach")
    version, which also allocates a float32 temporary the size of the model (sqrt of the second moment) at every
    step -- 2.2 GiB (bench/bench_adamw.py, hw3lib.core.cost). Same update up to float rounding."""
    fused = bool(params) and all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    return torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay, betas=cfg.adam_betas,
                             **({"fused": True} if fused else {}))


def materialize_adamw_state(optimizer: torch.optim.Optimizer) -> int:
    """Create the AdamW state of every parameter that has none yet, as `torch.optim.Adam._init_group` (torch 2.13)
    creates it lazily at the first `step()`: `step` a 0-d zero (float32 on the parameter's device when fused or
    capturable, else on the CPU), `exp_avg` and `exp_avg_sq` zeros like the parameter (`max_exp_avg_sq` too with
    amsgrad). The update is the same bit for bit (tests/core/test_adamw_state.py); returns how many were created.

    Why: created lazily, the moments (2 x 4 bytes per parameter) land in the activation blocks the first backward
    just freed; torch's caching allocator cannot return split blocks, so the first `wake_up(["kv_cache"])` of a
    colocated engine can fail to map its memory. Created before the first forward, they sit beside the weights."""
    from torch.optim.optimizer import _get_scalar_dtype

    created = 0
    for group in optimizer.param_groups:
        on_device = group.get("fused") or group.get("capturable")
        for p in group["params"]:
            state = optimizer.state[p]
            if len(state) != 0:
                continue  # a resumed run's loaded state, or one a step already made
            state["step"] = (torch.zeros((), dtype=_get_scalar_dtype(is_fused=group.get("fused")), device=p.device)
                             if on_device else torch.tensor(0.0, dtype=_get_scalar_dtype(), device="cpu"))
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if group.get("amsgrad"):
                state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            created += 1
    return created


def on_gpu(params: Sequence[torch.Tensor]) -> bool:
    """Whether any of `params` is on a CUDA device."""
    return any(p.device.type == "cuda" for p in params)


class TrainingRun:
    """One run being trained: its float32 policy and AdamW, the step counters (`state`), the clock,
    `metrics.jsonl` (and wandb), validation and checkpoints when due, the Ctrl-C checkpoint.

    `policy`/`tokenizer` are loaded by the caller from `policy_source(checkpoint, initial)`;
    `fresh_state` holds the counters of a new run (at least the config's COUNTER and `elapsed_s`).
    """

    def __init__(self, cfg, run_dir: Path, checkpoint: Path | None, policy, tokenizer, fresh_state: dict) -> None:
        self.cfg, self.run_dir, self.policy, self.tokenizer = cfg, run_dir, policy, tokenizer
        self.counter, self.total = cfg.COUNTER, cfg.total_steps
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(run_dir / "config.json", cfg.to_dict())
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.optimizer = adamw(self.params, cfg)
        if checkpoint is None:
            self.state = dict(fresh_state)
            seed_everything(cfg.seed)
        else:
            self.state = load_checkpoint(checkpoint, self.optimizer, run_dir)  # also restores RNGs and metrics.jsonl
            print(f"resumed from {checkpoint} at {COUNTER_WORDS[self.counter]} {self.state[self.counter]}",
                  flush=True)
        if on_gpu(self.params):  # CPU: lazy as ever (no allocator to fragment; checkpoints unchanged)
            materialize_adamw_state(self.optimizer)
        project = getattr(cfg, "wandb_project", None)
        self.wandb = WandbLink(project, run_dir, cfg.name, cfg.to_dict()) if project else None
        self.rows_so_far = metrics_rows(run_dir)  # as the checkpoint restored them
        self.logged_rows = len(self.rows_so_far)
        self.start_clock()
        # The state at the last completed step: what an interruption's checkpoint records.
        self.boundary = {"state": dict(self.state), "rng": rng_state(), "weights_changed": False}

    @property
    def version(self) -> int:
        """Completed steps (the config's COUNTER): the version of the policy's weights."""
        return self.state[self.counter]

    def start_clock(self) -> None:
        """(Re)start the run's wall clock, continuing from the checkpoint's elapsed time."""
        self.loop_started = time.perf_counter() - self.state["elapsed_s"]

    def clock(self) -> float:
        return time.perf_counter() - self.loop_started

    def log(self, row: dict) -> None:
        """Append one metrics row (and send it to wandb once)."""
        append_jsonl(self.run_dir / METRICS_FILE, row)
        if self.wandb is not None:
            self.wandb.send(self.logged_rows, row)
        self.logged_rows += 1

    def weights_changed(self) -> None:
        """The current (unfinished) step has updated the weights: an interruption now leaves a partial step."""
        self.boundary["weights_changed"] = True

    def complete_step(self, **counters: int) -> None:
        """The step is done and logged: advance the counters and the clock; Ctrl-C now keeps this state."""
        self.state.update(counters, elapsed_s=self.clock())
        self.boundary = {"state": dict(self.state), "rng": rng_state(), "weights_changed": False}

    def validation_due(self, value: int | None = None) -> bool:
        """Validation runs before the first step, every `eval_every` steps and after the last."""
        value = self.version if value is None else value
        return value == 0 or value % self.cfg.eval_every == 0 or value == self.total

    def catch_up(self, validate: Callable[[], None]) -> None:
        """Run the validation due at the current step if it is missing, and checkpoint a run this finishes."""
        if self.validation_due() and not validation_logged(self.rows_so_far, self.counter, self.version):
            validate()
            if self.version == self.total:
                self.save()

    def after_step(self, validate: Callable[[], None]) -> None:
        """After a completed step: validate when due (the clock then includes it), checkpoint when due."""
        if self.validation_due():
            validate()
            self.boundary["state"]["elapsed_s"] = self.state["elapsed_s"] = self.clock()
        if self.version == self.total or (self.cfg.checkpoint_every and self.version % self.cfg.checkpoint_every == 0):
            self.save()

    def save(self) -> Path:
        return save_checkpoint(self.run_dir, self.policy, self.tokenizer, self.optimizer, self.state, rng_state(),
                               step=self.version)

    def save_interrupted(self) -> Path:
        """Checkpoint the last completed step after an interruption (see the module docstring)."""
        saved = save_checkpoint(self.run_dir, self.policy, self.tokenizer, self.optimizer, self.boundary["state"],
                                self.boundary["rng"], partial_step=self.boundary["weights_changed"],
                                step=self.boundary["state"][self.counter])
        print(f"interrupted: checkpoint saved to {shown_path(saved)}; continue with resume=True", flush=True)
        return saved

    def close(self) -> None:
        if self.wandb is not None:
            self.wandb.finish()

    def result(self) -> RunResult:
        return read_result(self.run_dir, self.cfg, self.state)


# begin_run's kinds, as the preflight names them (hw3lib.core.preflight.KINDS).
PREFLIGHT_KINDS = {"GRPO": "grpo", "SFT": "sft", "expert iteration": "ei", "async GRPO": "async"}


def begin_run(kind: str, cfg, resume: bool, overwrite: bool) -> tuple[Path, Path | None, RunResult | None]:
    """Print the run's folder and config, then apply the folder rules (`open_run`): `(run folder,
    checkpoint to resume or None, the RunResult of a finished run to reuse or None)`. A run that will train
    is checked by the preflight first (`check_fits`), before any model is loaded."""
    run_dir = run_folder(cfg)
    start_message(kind, cfg, run_dir)
    checkpoint, finished = open_run(run_dir, cfg, resume, overwrite)
    if finished is None:
        check_fits(kind, cfg)
        return run_dir, checkpoint, None
    reuse_message(cfg, run_dir)  # nothing left to do: read it back, no model, no engine
    return run_dir, checkpoint, read_result(run_dir, cfg, finished)


def check_fits(kind: str, cfg) -> None:
    """The preflight of a run about to train (hw3lib.core.preflight): the card, the dtype it supports and the
    memory model for this config on it; prints the one-line report, or raises PreflightError naming settings
    that fit -- before the first byte is put on the GPU, never an out-of-memory error halfway through."""
    from hw3lib.core.preflight import preflight

    print(preflight(cfg, PREFLIGHT_KINDS[kind]).summary(shown_model(cfg.model)), flush=True)


def start_message(kind: str, cfg, run_dir: Path) -> None:
    """Print where the run goes and its whole config (every run starts with this)."""
    print(f"{kind} run '{cfg.name}' -> {shown_path(run_dir)} (whole config: config.json there)\n"
          f"{cfg.describe_changes()}", flush=True)


def reuse_message(cfg, run_dir: Path) -> None:
    print(f"{shown_path(run_dir)} has finished all {cfg.total_steps} {COUNTER_WORDS[cfg.COUNTER]}s with these settings; "
          "reusing it", flush=True)


def run_folder(cfg) -> Path:
    """`runs/<cfg.name>/`."""
    return runs_dir() / cfg.name


# ---- the entry points: their own process on a GPU with vLLM, the GPU's memory handed back after -----------------

def training_entry(loop: Callable[..., RunResult]) -> Callable[..., RunResult]:
    """Wrap a training loop (`train`, `train_sft`, `expert_iteration`: `loop(cfg, resume, overwrite, ...)`) into its
    entry point:

    - a run that will train and builds a sleep-mode vLLM engine on a GPU (`needs_own_process`) runs in a fresh
      process (`run_in_own_process`; a finished run is read back here: no engine, no process) -- so a notebook
      kernel, a grid worker or a resume after Ctrl-C never builds a second such engine in one process;
    - otherwise (CPU, the transformers engine) it runs here, as the loop always has, and when it returns or raises
      the memory it held on the GPU is handed back (`release_memory`): its frame is gone by then, so the policy,
      AdamW's moments and the working copy are garbage; after an exception on a GPU the frames of its traceback are
      cleared too (a notebook keeps the last traceback, and with it the run's tensors, alive).
    """
    signature = inspect.signature(loop)

    @functools.wraps(loop)
    def entry(cfg, *args, **kwargs) -> RunResult:
        if needs_own_process(cfg):
            bound = signature.bind(cfg, *args, **kwargs)
            bound.apply_defaults()
            if not run_finished(cfg, overwrite=bound.arguments["overwrite"]):
                return run_in_own_process(entry, *bound.args, **bound.kwargs)
        try:
            return loop(cfg, *args, **kwargs)
        except BaseException as exc:
            if cuda_in_use():
                traceback.clear_frames(exc.__traceback__)
            raise
        finally:
            release_memory()

    return entry


def run_finished(cfg, overwrite: bool = False) -> bool:
    """Whether `runs/<cfg.name>/` holds this run finished with these settings (the folder rules would read it back
    and load no model); False for anything else, errors included (the loop then reports them). A plan the run chose
    at its start and recorded (`PLAN_FIELDS`, left None in `cfg`) is the folder's, as the loop adopts it."""
    run_dir = run_folder(cfg)
    try:
        if overwrite or latest_checkpoint(run_dir) is None:
            return False
        saved = json.loads((run_dir / "config.json").read_text())
        plan = {key: saved[key] for key in PLAN_FIELDS if getattr(cfg, key, 0) is None and saved.get(key) is not None}
        return open_run(run_dir, cfg.replace(**plan) if plan else cfg, resume=True, overwrite=False)[1] is not None
    except (ValueError, OSError, KeyError, TypeError):
        return False


def cuda_in_use() -> bool:
    """Whether this process has initialized CUDA (nothing can be cached on a GPU otherwise)."""
    return torch.cuda.is_initialized()


def release_memory() -> None:
    """`gc.collect(); torch.cuda.empty_cache()` where this process has used CUDA: the blocks torch's caching allocator
    keeps after a run (its float32 masters, AdamW moments and working copy: 8-20 GiB for the course models) go back
    to the driver, so the next process or engine on the card finds them free. Nothing on CPU."""
    if cuda_in_use():
        gc.collect()
        torch.cuda.empty_cache()
