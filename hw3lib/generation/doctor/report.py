"""The doctor's report: one line per check as it is recorded, and errors shortened to their first line.

A check is `ok`, `FAIL` (what happened, and the fix where one is known: `HINTS`) or `skipped (reason)`; the
report prints each line as it is added, so it doubles as the progress display of a check that takes a minute.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

OK, FAIL, SKIPPED = "ok", "FAIL", "skipped"
GIB, MIB = 2**30, 2**20
# The advice for vLLM's sleep-mode singleton (hw3lib.generation.vllm_engine): what a student does about it.
SINGLETON_ADVICE = ("vLLM's sleep-mode allocator (CuMemAllocator) is one per process: build one sleep-mode engine "
                    "per process -- close an engine (engine.close()) before building the next, run each training "
                    "run in a process of its own, and build evaluation engines without sleep mode (make_engine "
                    "does); in a notebook, restart the kernel")
HINTS = (  # (text in an error, what to do): the fixes docs/gpu_first_session.md explains
    ("out of memory", "another process holds the GPU (nvidia-smi), or the model is too large: free it first"),
    ("no available memory", "another process holds the GPU (nvidia-smi): free it first"),
    ("bfloat16", "this GPU cannot run bf16 in vLLM: use dtype float32 (compute capability < 8.0)"),
    ("expandable", "unset PYTORCH_CUDA_ALLOC_CONF (expandable_segments) before starting Python"),
    ("installed vllm build runs on", "install the vLLM build for this device (pip install -e '.[gpu]' on a GPU)"),
    ("one instance per process", SINGLETON_ADVICE),
)


@dataclass
class Check:
    """One line of the doctor's report."""

    name: str
    status: str
    """`ok`, `FAIL` or `skipped`."""
    detail: str
    """What was measured, or why it failed / was skipped."""
    seconds: float
    """Time since the doctor started, when the check was recorded."""


class Report:
    """The checks so far; each is printed as it is recorded, so the report is the progress display."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        self.echo, self.checks, self.started = echo, [], time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def add(self, name: str, status: str, detail: str = "") -> None:
        check = Check(name, status, detail, round(self.elapsed(), 1))
        self.checks.append(check)
        shown = f"skipped ({detail})" if status == SKIPPED else f"{status:<8} {detail}"
        self.echo(f"[{check.seconds:6.1f}s] {name:<16} {shown}")

    def note(self, text: str) -> None:
        self.echo(f"[{self.elapsed():6.1f}s] {text}")

    def count(self, status: str) -> int:
        return sum(check.status == status for check in self.checks)


def explain(exc: BaseException) -> str:
    """The error's first line (vLLM's can run to pages), with the fix when a known one applies."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"
    hint = next((fix for key, fix in HINTS if key in str(exc).lower()), None)
    return f"{text} -> {hint}" if hint else text
