"""A training run's folder: what may happen to it, its checkpoints, RNG states and its wandb link.

Folder rules (nothing a user made is deleted implicitly). `runs/<name>/` holding metrics or
checkpoints is either

- resumed (`resume=True`: from `checkpoints/latest`, with the same settings),
- reused (a finished run with the same settings is read back, whatever `resume` says),
- or refused with `RunExistsError`, which names the folder and the choices: `resume=True`,
  another `name`, or an explicit `overwrite=True` (the only path that deletes outputs).

Checkpoints `checkpoints/step_XXXXXX/` hold the policy (its float32 master weights, via
`save_pretrained`; a LoRA run's adapter only, hw3lib.models.lora), the optimizer state, the step
counters, the RNG states, a copy of `metrics.jsonl` and `config.json`; each is written to a temporary
folder and renamed into place, then `checkpoints/latest` is pointed at it and older ones are removed.
A checkpoint resumes on another device: the optimizer state is read onto the CPU and moved to the
parameters' device, and CUDA RNG states are restored only on a machine with as many GPUs.

wandb (optional): the run's id is kept in `wandb.json` with how many metrics rows were sent, so a
resumed run continues the same wandb run and never sends a row twice (rows redone after a resume
are written to metrics.jsonl again but not re-sent).
"""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from hw3lib.core.config import PLAN_FIELDS
from hw3lib.core.io import atomic_write_json, atomic_write_text, read_jsonl

METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_DIR = "checkpoints"
SAMPLES_DIR = "samples"
WANDB_FILE = "wandb.json"
# Settings that may change when a run is resumed (they do not change what the run computes).
# gpu_memory_utilization sizes the engine's KV cache, not what it samples: a run that ran out of memory resumes
# with a smaller share.
RESUMABLE_CHANGES = frozenset({"n_grpo_steps", "checkpoint_every", "eval_every", "wandb_project",
                               "gpu_memory_utilization"})


class RunExistsError(FileExistsError):
    """A run folder already holds outputs and the call did not say what to do with them."""


def has_outputs(run_dir: Path) -> bool:
    """Whether `run_dir` holds anything a run produced (metrics, checkpoints or samples)."""
    return any((run_dir / name).exists() for name in (METRICS_FILE, CHECKPOINTS_DIR, SAMPLES_DIR))


def refuse_existing(run_dir: Path, why: str, resumable: bool = True) -> RunExistsError:
    """The error for an existing run folder: what is there and the ways forward (resume only where a checkpoint
    is there to continue from)."""
    resume = "resume=True (hw3 train --resume) to continue it, " if resumable else ""
    return RunExistsError(
        f"{run_dir} already holds a run ({why}). Choose: {resume}another name (name=... / --name) to keep it and "
        f"start a new one, or overwrite=True (--overwrite) to delete its outputs and start over.")


def delete_outputs(run_dir: Path) -> None:
    """Remove a run's outputs -- only ever called for an explicit `overwrite=True`."""
    print(f"overwrite=True: deleting the previous outputs in {run_dir}", flush=True)
    for name in (METRICS_FILE, WANDB_FILE, "config.json"):
        (run_dir / name).unlink(missing_ok=True)
    for name in (SAMPLES_DIR, CHECKPOINTS_DIR):
        shutil.rmtree(run_dir / name, ignore_errors=True)


def config_differences(saved: dict, current: dict, defaults: dict | None = None) -> list[str]:
    """`key: saved X vs now Y` for every setting that differs and may not change on resume.

    A setting missing from `saved` (a run made before hw3lib added it) counts as its value in
    `defaults`, the config class's defaults: an option added later, left at its default, does not
    make an older run unresumable. A memory-plan field (`PLAN_FIELDS`) left None now is to be chosen, and matches
    whatever the run recorded (hw3lib.grpo.memory_plan adopts it).
    """
    current = json.loads(json.dumps(current))  # tuples -> lists, as saved
    saved = json.loads(json.dumps({**(defaults or {}), **saved}))  # as JSON holds them, like `current`
    keys = sorted(k for k in set(saved) | set(current)
                  if k not in RESUMABLE_CHANGES and saved.get(k) != current.get(k)
                  and not (k in PLAN_FIELDS and current.get(k) is None))  # left to choose: the run's recorded plan
    return [f"{k}: saved {saved.get(k)!r} vs now {current.get(k)!r}" for k in keys]


# ---- RNG ---------------------------------------------------------------------------------------------

def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Python, numpy and torch (CPU and CUDA) RNG states as JSON-friendly lists."""
    np_state = np.random.get_state()
    state = {"python": _tuples_to_lists(random.getstate()),
             "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
             "torch": torch.get_rng_state().tolist()}
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict) -> None:
    """Restore `rng_state()`'s states. The CUDA ones (one per GPU) only where this machine has as many GPUs:
    torch refuses a list of another length, and a GPU run resumed on a CPU machine (or on another GPU count)
    continues with fresh CUDA generators (a printed note says so on a GPU machine; nothing to say on a CPU one)."""
    random.setstate(_lists_to_tuples(state["python"]))
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if "cuda" not in state or not torch.cuda.is_available():
        return
    if len(state["cuda"]) != torch.cuda.device_count():
        print(f"note: the checkpoint holds CUDA RNG states of {len(state['cuda'])} GPU(s), this machine has "
              f"{torch.cuda.device_count()}: CUDA RNGs not restored", flush=True)
        return
    torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


def _tuples_to_lists(value):
    return [_tuples_to_lists(v) for v in value] if isinstance(value, (tuple, list)) else value


def _lists_to_tuples(value):
    return tuple(_lists_to_tuples(v) for v in value) if isinstance(value, list) else value


# ---- checkpoints -------------------------------------------------------------------------------------

def save_checkpoint(run_dir: Path, policy, tokenizer, optimizer, state: dict, rng: dict,
                    partial_step: bool = False, step: int | None = None) -> Path:
    """Write `checkpoints/step_XXXXXX/` atomically (temporary folder + rename), point `latest` at it,
    and remove older checkpoints (see the module docstring for what it holds). The folder is named by
    `step`, by default `state["grpo_step"]` (the SFT and expert-iteration loops pass their own counter)."""
    root = run_dir / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{state['grpo_step'] if step is None else step:06d}"
    staging = root / f".tmp-{name}-{time.time_ns()}"
    # A LoRA policy (a peft model, hw3lib.models.lora) saves its adapter only: the base never changes. Not the
    # embeddings: peft's default would ask the hub whether the vocabulary was resized (it never is here).
    lora = {"save_embedding_layers": False} if hasattr(policy, "peft_config") else {}
    policy.save_pretrained(staging / "policy", **lora)
    tokenizer.save_pretrained(staging / "policy")
    torch.save(optimizer.state_dict(), staging / "optimizer.pt")
    atomic_write_json(staging / "state.json", {**state, "partial_step": partial_step})
    atomic_write_json(staging / "rng.json", rng, indent=None)
    metrics = run_dir / METRICS_FILE
    if metrics.exists():
        shutil.copyfile(metrics, staging / METRICS_FILE)
    shutil.copyfile(run_dir / "config.json", staging / "config.json")
    target = root / name
    if target.exists():  # e.g. Ctrl-C right after a regular checkpoint of the same step
        target.rename(root / f".old-{name}-{time.time_ns()}")
    staging.rename(target)
    atomic_write_text(root / "latest", name + "\n")
    for old in root.iterdir():
        if old.name not in (name, "latest") and not old.name.startswith(".tmp-"):
            shutil.rmtree(old, ignore_errors=True)
    return target


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint `checkpoints/latest` names, or None when there is none."""
    pointer = run_dir / CHECKPOINTS_DIR / "latest"
    if not pointer.is_file():
        return None
    path = pointer.parent / pointer.read_text().strip()
    if not (path / "state.json").is_file():
        raise FileNotFoundError(f"{pointer} names {path.name}, which is missing or incomplete: "
                                "delete the checkpoints folder to start over")
    return path


def load_checkpoint(checkpoint: Path, optimizer, run_dir: Path) -> dict:
    """Restore the optimizer, RNG states and metrics.jsonl (rows logged after the checkpoint are
    dropped: they will be redone); return the step counters. The policy is loaded by the caller."""
    if not (checkpoint / "optimizer.pt").is_file() and (checkpoint / "optimizer.pruned.json").is_file():
        # hw3lib.core.disk.prune: asked for by `hw3 runs prune-optimizer --yes` on a finished run
        raise ValueError(f"cannot resume {checkpoint}: its optimizer state was pruned (optimizer.pruned.json there), "
                         "so the run can be read back but not extended; start a new run (another name) instead")
    # Onto the CPU first: a GPU run's checkpoint then resumes on a CPU machine too (load_state_dict moves each
    # state tensor to its parameter's device).
    optimizer.load_state_dict(torch.load(checkpoint / "optimizer.pt", map_location="cpu", weights_only=True))
    set_rng_state(json.loads((checkpoint / "rng.json").read_text()))
    saved_metrics = checkpoint / METRICS_FILE
    if saved_metrics.exists():
        atomic_write_text(run_dir / METRICS_FILE, saved_metrics.read_text())
    else:
        (run_dir / METRICS_FILE).unlink(missing_ok=True)
    state = json.loads((checkpoint / "state.json").read_text())
    state.pop("partial_step", None)
    return state


def metrics_rows(run_dir: Path) -> list[dict]:
    """Every row of `metrics.jsonl` (a torn last line, from a crash mid-write, is ignored)."""
    path = run_dir / METRICS_FILE
    return read_jsonl(path, allow_torn_tail=True) if path.exists() else []


# ---- wandb ---------------------------------------------------------------------------------------------

class WandbLink:
    """The run's wandb run (imported only when a project is set): same id across resumes, each row sent once."""

    def __init__(self, project: str, run_dir: Path, name: str, config: dict) -> None:
        try:
            import wandb
        except ImportError:
            raise ImportError("wandb_project is set but wandb is not installed: pip install wandb, "
                              "or leave wandb_project=None") from None
        self.path = run_dir / WANDB_FILE
        saved = json.loads(self.path.read_text()) if self.path.is_file() else {}
        # wandb run ids may not contain "/" (grid runs are named <grid>/<config>).
        self.run_id = saved.get("id") or f"{name.replace('/', '-')}-{time.time_ns():x}"[-64:]
        self.sent_rows = int(saved.get("sent_rows", 0))
        self.run = wandb.init(project=project, name=name, id=self.run_id, config=config, resume="allow")
        self._save()

    def send(self, row_index: int, row: dict) -> None:
        """Send metrics row number `row_index` (0-based, as in metrics.jsonl) unless it was sent before."""
        if row_index < self.sent_rows:
            return
        self.run.log(row, step=row["step"])
        self.sent_rows = row_index + 1
        self._save()

    def finish(self) -> None:
        self.run.finish()

    def _save(self) -> None:
        atomic_write_json(self.path, {"id": self.run_id, "sent_rows": self.sent_rows})
