"""Disk before it runs out: what a plan's runs will write under runs/, checked against the free space, and the
optimizer state of finished runs, pruned only when asked.

What a run keeps (hw3lib.core.runs.save_checkpoint) is one checkpoint, `checkpoints/step_XXXXXX/`:

| part | full fine-tuning | LoRA of rank r (A adapter parameters) | source |
|---|---|---|---|
| `policy/` (save_pretrained) | float32 masters, 4 bytes x P | the adapter only, 4 bytes x A | measured 4.02 bytes/parameter (bench/results/rehearse.json) |
| `optimizer.pt` (AdamW's two moments) | 8 bytes x P | 8 bytes x A | measured 8.00 bytes/parameter (same file) |
| tokenizer, state, RNG, config, metrics copy | `CHECKPOINT_EXTRA_BYTES` | same | an estimate (Qwen's tokenizer files are ~16 MB) |

So a finished Qwen3-0.6B run keeps about 7.2 GB, a Qwen2.5-Math-1.5B run 18.5 GB. A new checkpoint is written
before the old one is removed, so the run being trained holds two for a moment (`DiskPlan.transient_bytes`).
Beside its checkpoint a run keeps `metrics.jsonl` and its validation samples (`RUN_EXTRA_BYTES`, an estimate).

- `checkpoint_bytes(shape, lora_rank, lora_targets)`, `disk_plan([bytes of each new run])`: the estimate;
- `check_disk(plan, what)`: raises `DiskSpaceError` (one line) when `shutil.disk_usage` of the runs folder (its
  nearest existing parent) cannot hold it; `disk_words(plan, free)` is the line a plan prints;
- `prunable(root, keep)` lists the finished runs whose `optimizer.pt` could go (a finished run is read back, never
  trained again, so its AdamW moments are dead weight -- unless a later grid or `--resume --steps N` extends it:
  the caller names those in `keep`); `prune(entries)` deletes them and leaves `optimizer.pruned.json` saying so.
  Nothing here deletes anything unless called with the list (`hw3 runs prune-optimizer --yes`).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hw3lib.core.devices import PreflightError
from hw3lib.core.memory import ADAM_BYTES, LORA_TARGETS, MASTER_BYTES, Shape, lora_params

MB = 10**6
CHECKPOINT_EXTRA_BYTES = 32 * MB  # estimate: tokenizer files (~16 MB for Qwen's), JSON state and the metrics copy
RUN_EXTRA_BYTES = 64 * MB  # estimate: metrics.jsonl and the validation samples beside the checkpoint
OPTIMIZER_FILE, PRUNED_FILE = "optimizer.pt", "optimizer.pruned.json"
# (config's total, state's counter) of each run kind: GRPOConfig, SFTConfig, EIConfig (TOTAL_FIELD, COUNTER;
# tests/core/test_disk.py checks them against the classes, which live above this layer).
RUN_COUNTERS = (("n_grpo_steps", "grpo_step"), ("n_sft_steps", "step"), ("n_ei_steps", "round"))
STOPPED_FILE = "stopped.json"  # hw3lib.grpo.loop.STOPPED_FILE: a diverged run, never trained again


class DiskSpaceError(PreflightError):
    """The runs folder's disk cannot hold what is about to be written (one line: how much, how much is free)."""


def checkpoint_bytes(shape: Shape, lora_rank: int = 0, lora_targets: tuple[str, ...] = LORA_TARGETS) -> int:
    """Bytes of one checkpoint of a run of `shape` (a LoRA run at `lora_rank` saves its adapter only)."""
    trained = lora_params(shape, lora_rank, tuple(t for t in lora_targets if t in LORA_TARGETS)) if lora_rank \
        else shape.params
    return (MASTER_BYTES + ADAM_BYTES) * trained + CHECKPOINT_EXTRA_BYTES


def optimizer_bytes(shape: Shape, lora_rank: int = 0, lora_targets: tuple[str, ...] = LORA_TARGETS) -> int:
    """The `optimizer.pt` part of `checkpoint_bytes`: what pruning a finished run frees."""
    trained = lora_params(shape, lora_rank, tuple(t for t in lora_targets if t in LORA_TARGETS)) if lora_rank \
        else shape.params
    return ADAM_BYTES * trained


@dataclass(frozen=True)
class DiskPlan:
    """What a plan's new runs write: each keeps one checkpoint; the one being trained holds a second for a moment."""

    runs: int
    kept_bytes: int
    """Every new run's checkpoint plus `RUN_EXTRA_BYTES`: what stays on disk once they finished."""
    transient_bytes: int
    """The largest checkpoint once more: written before the previous one is removed."""

    @property
    def needed(self) -> int:
        return self.kept_bytes + self.transient_bytes


def disk_plan(checkpoints: list[int]) -> DiskPlan:
    """The disk of runs whose checkpoints take `checkpoints` bytes each (runs already on disk left out)."""
    return DiskPlan(len(checkpoints), sum(checkpoints) + RUN_EXTRA_BYTES * len(checkpoints), max(checkpoints, default=0))


def existing_parent(path: Path) -> Path:
    """`path`, or its nearest parent that exists (a fresh runs folder is made by the first run)."""
    path = Path(path).resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path | None = None) -> int:
    """Free bytes on the disk of `path` (default: the runs folder)."""
    if path is None:
        from hw3lib.core.io import runs_dir

        path = runs_dir()
    return shutil.disk_usage(existing_parent(path)).free


def size(value: float) -> str:
    """Bytes in words, decimal units as disks are sold: 7.2 GB, 1.1 TB, 45 MB."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value / 1e6:.0f} MB"


def disk_words(plan: DiskPlan, free: int) -> str:
    """The line a plan prints: what its new runs' checkpoints take and what is free."""
    return (f"Disk: about {size(plan.needed)} for {plan.runs} new run(s)' checkpoints (one each once finished, "
            f"float32 weights and AdamW's moments; two while one is written), {size(free)} free under the runs "
            f"folder.")


def check_disk(plan: DiskPlan, what: str, path: Path | None = None,
               prunable_bytes: Callable[[], int] | None = None) -> int:
    """Raise `DiskSpaceError` (one line) when the disk of `path` (default: the runs folder) cannot hold `plan`;
    return the free bytes. `prunable_bytes()`: what `hw3 runs prune-optimizer` would free, named in the refusal
    (asked only then: it reads every run's checkpoint); None: the command is named without a figure."""
    free = free_bytes(path)
    if plan.needed > free:
        freeable = prunable_bytes() if prunable_bytes is not None else None
        if freeable is None:
            prune = ", or free finished runs' optimizer state (`hw3 runs prune-optimizer` lists it)"
        else:
            prune = (f", or free {size(freeable)} of finished runs' optimizer state with `hw3 runs "
                     f"prune-optimizer --yes`" if freeable else "")
        raise DiskSpaceError(
            f"not enough disk for {what}: its {plan.runs} new run(s)' checkpoints need about {size(plan.needed)} and "
            f"the runs folder's disk has {size(free)} free; free some space, point HW3_RUNS_DIR at a larger disk"
            f"{prune}, or run fewer runs at a time")
    return free


# ---- pruning the optimizer state of finished runs ---------------------------------------------------------------

@dataclass(frozen=True)
class Prunable:
    run: str
    """The run's name (its folder relative to the runs folder, e.g. `learning_rate/3e-06`)."""
    optimizer: Path
    bytes: int


def run_finished(checkpoint: Path) -> bool:
    """Whether the run whose latest checkpoint is `checkpoint` is done: its counter reached the config's total (or
    it diverged and was stopped there: a stopped run is never trained again)."""
    try:
        state = json.loads((checkpoint / "state.json").read_text())
        config = json.loads((checkpoint / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False  # half written: not ours to touch
    if state.get("partial_step"):
        return False  # interrupted mid-step: resumed later
    stopped = checkpoint.parent.parent / STOPPED_FILE
    try:  # as hw3lib.experiments.runner.read_stopped: only a stop at this very checkpoint (not one resumed past)
        if stopped.is_file() and json.loads(stopped.read_text()).get("grpo_step") == state.get("grpo_step"):
            return True
    except (OSError, json.JSONDecodeError):
        return False
    return any(total in config and counter in state and state[counter] >= config[total]
               for total, counter in RUN_COUNTERS)


def prunable(root: Path, keep: set[str] | frozenset[str] = frozenset()) -> list[Prunable]:
    """The finished runs under `root` whose latest checkpoint still holds AdamW's state, except those in `keep`
    (run names a later run will extend: it needs the moments to continue)."""
    found = []
    for pointer in sorted(Path(root).rglob("checkpoints/latest")):
        run_dir = pointer.parent.parent
        name = run_dir.relative_to(root).as_posix()
        if name.startswith(".") or name in keep:  # runs/.interrupted/ holds set-aside folders, not runs
            continue
        checkpoint = pointer.parent / pointer.read_text().strip()
        optimizer = checkpoint / OPTIMIZER_FILE
        if optimizer.is_file() and run_finished(checkpoint):
            found.append(Prunable(name, optimizer, optimizer.stat().st_size))
    return found


def prune(entries: list[Prunable]) -> int:
    """Delete each entry's `optimizer.pt`, leaving `optimizer.pruned.json` (when, how many bytes) so a later resume
    can say why it cannot continue; return the bytes freed."""
    freed = 0
    for entry in entries:
        note = {"pruned": time.strftime("%Y-%m-%dT%H:%M:%S"), "bytes": entry.bytes,
                "why": "hw3 runs prune-optimizer: the run had finished; it can be read back, not extended"}
        (entry.optimizer.parent / PRUNED_FILE).write_text(json.dumps(note, indent=2) + "\n")
        entry.optimizer.unlink()
        freed += entry.bytes
    return freed
