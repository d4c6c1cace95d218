"""The benchmarks' shared harness (bench/*.py): one record header, one way to run a measurement in a child
process, one peak-memory reading, one JSON writer.

- `record_header(bench)`: the fields every result file starts with -- `bench`, `command` (as typed, to
  rerun it), `date` (UTC), `device` (CPU model and threads, or the GPU) and `versions` (python, torch,
  transformers, trl, vllm where installed). A script adds its own fields after them.
- `run_child(argv)`: run `python <argv>` (usually the script itself with `--only`/`--child` flags) and return
  the JSON object on the last line of its stdout starting with `{` (after an optional `prefix`). A fresh
  process per measurement, so each peak memory is its own and no warm cache leaks from one setting into
  the next. A failing child stops the benchmark with the tail of its stderr.
- `peak_memory(device)`: the process's peak resident set (Linux VmHWM) on a CPU, or torch's peak allocated
  bytes on a CUDA device -- the two ways the scripts measured it before, now named once.
- `write_json(path, record)`: atomically (a stopped benchmark never leaves half a file), indented, ending
  in a newline.
"""

from __future__ import annotations

import datetime as _datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from hw3lib.core.process_memory import peak_rss

VERSIONED = ("torch", "transformers", "trl", "vllm")


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def device_info(device: str = "cpu") -> dict:
    """`{"kind", "name", "threads"}` (+ `"cores"`, `"memory_bytes"`, `"machine"` on a CPU): what the numbers were
    measured on."""
    import torch

    info = {"kind": "cpu", "name": cpu_name(), "threads": torch.get_num_threads(), "cores": os.cpu_count(),
            "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "machine": platform.machine()}
    if str(device).startswith("cuda") and torch.cuda.is_available():
        info = {"kind": "cuda", "name": torch.cuda.get_device_name(torch.device(device)),
                "threads": torch.get_num_threads()}
    return info


def versions(extra: Sequence[str] = ()) -> dict:
    """Python's and the installed ML packages' versions, plus `extra` packages' (absent packages left out)."""
    out = {"python": platform.python_version()}
    for package in (*VERSIONED, *extra):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that produced a record, e.g. `python bench/bench_train_step.py --steps 4`."""
    return " ".join(["python", *(sys.argv if argv is None else argv)])


def record_header(bench: str, device: str = "cpu", argv: Sequence[str] | None = None,
                  packages: Sequence[str] = ()) -> dict:
    """The first fields of every result record (see the module docstring); `packages`: more versions to record."""
    return {"bench": bench, "command": command_line(argv),
            "date": _datetime.datetime.now(_datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "device": device_info(device), "versions": versions(packages)}


def run_child(argv: Sequence[str], *, env: dict | None = None, prefix: str = "", echo: str | None = None) -> dict:
    """`python argv...` in a fresh process; the JSON object on the last stdout line starting with `prefix` + `{`.

    `echo`: print the child's stderr lines that start with it (a side's progress lines). Exits with the
    child's stderr tail when it fails.
    """
    run = subprocess.run([sys.executable, *map(str, argv)], env=env, capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"{' '.join(map(str, argv))} failed (exit {run.returncode}):\n{run.stderr[-4000:]}")
    if echo is not None:
        for line in run.stderr.splitlines():
            if line.startswith(echo):
                print(line, flush=True)
    lines = [line[len(prefix):] for line in run.stdout.splitlines() if line.startswith(prefix + "{")]
    if not lines:
        sys.exit(f"{' '.join(map(str, argv))} printed no JSON result:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    return json.loads(lines[-1])


def peak_memory(device: str = "cpu") -> int:
    """Peak memory of this process in bytes: resident set (VmHWM) on a CPU, torch's peak allocation on CUDA."""
    if str(device).startswith("cuda"):
        import torch

        return torch.cuda.max_memory_allocated(torch.device(device))
    return peak_rss()


def write_json(path: str | Path, record: dict, indent: int = 2) -> Path:
    """Write `record` to `path` atomically (a temporary file renamed over it); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=indent, default=str) + "\n")
    tmp.replace(path)
    return path
