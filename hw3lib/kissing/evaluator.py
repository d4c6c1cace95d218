"""Evaluate a candidate kissing program the way the course does, in a separate limited process.

`evaluate_program(path_or_source)` runs the program with `sys.executable` on the small script
`_sandbox_runner.py`, reads back its points (JSON: integers arrive exactly, whatever their size)
and checks them here with the exact `verify`. It returns the course's metrics

    {"num_points", "dimension", "validity" (1.0 / 0.0), "eval_time", "combined_score"}

plus "message" (the verifier's verdict or the failure: timeout, memory, crash traceback tail,
missing function) and "status" (one word for code that branches on it: "valid", "invalid",
"timeout", "memory", "cpu", "crash", "exception", "exit", "no_points", "bad_points").

Limits on the child (each best effort, documented honestly):
- wall-clock `timeout_s`: the whole process group is killed;
- memory: RLIMIT_AS = `memory_mb` (virtual memory; MemoryError or a kill past it);
- CPU: RLIMIT_CPU = timeout + 1 s; output files: RLIMIT_FSIZE = 64 MiB; no core dumps
  (the runner sets these rlimits on itself before reading the program);
- files: the working directory and HOME are a fresh temporary directory, removed afterwards.
  The process runs as the same user, so it *can* still write elsewhere by absolute path; this
  is a guard against accidents and runaway programs, not a security boundary;
- network: `unshare --net` (a new, empty network namespace) when the kernel allows it (root or
  user namespaces; see `network_isolation_available()`), and the runner replaces the `socket`
  functions so they raise;
- environment: only PATH, HOME, LANG, PYTHONPATH (numpy's location) and single-threaded BLAS
  settings; nothing else (no tokens or keys) is inherited.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path

from hw3lib.kissing.verify import verify

RUNNER = Path(__file__).with_name("_sandbox_runner.py")
FILE_SIZE_LIMIT = 64 * 2**20
OUTPUT_TAIL = 1500  # characters of the program's stderr kept in error messages


def evaluate_program(path_or_source: str | os.PathLike, timeout_s: float = 60, memory_mb: int = 2048,
                     dimension: int = 11, return_points: bool = False) -> dict:
    """Run a candidate program in a limited subprocess and score its points; never raises for bad programs.

    path_or_source: a path to a .py file (str or Path) or the program's source text.
    timeout_s: wall-clock limit for the whole run. memory_mb: address-space limit of the child.
    dimension: the dimension a valid set must have (11 for the course's problem).
    return_points: also return the program's points under "points" (when it produced any), so
    callers that post-process them (the hybrid loop's local search) need not run it twice.
    """
    start = time.perf_counter()
    source = _read_source(path_or_source)
    workdir = Path(tempfile.mkdtemp(prefix="kissing_eval_"))
    try:
        outcome = _run_in_sandbox(source, workdir, timeout_s, memory_mb)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if not outcome.get("ok"):
        return _metrics(0, 0, False, start, outcome["error"], outcome["kind"])

    points = outcome["points"]
    declared = outcome.get("declared_dimension")
    result = verify(points, dimension=dimension)
    message = result.message
    valid = result.valid
    if valid and declared is not None and declared != result.dimension:
        valid = False
        message = f"the program declares dimension {declared} but its points have dimension {result.dimension}"
    metrics = _metrics(result.num_points, result.dimension or 0, valid, start, message, "valid" if valid else "invalid")
    if return_points:
        metrics["points"] = points
    return metrics


def _metrics(num_points: int, dimension: int, valid: bool, start: float, message: str, status: str) -> dict:
    return {
        "num_points": int(num_points),
        "dimension": int(dimension),
        "validity": 1.0 if valid else 0.0,
        "eval_time": time.perf_counter() - start,
        "combined_score": float(num_points) if valid else 0.0,
        "message": message,
        "status": status,
    }


def _read_source(path_or_source: str | os.PathLike) -> str:
    if isinstance(path_or_source, os.PathLike):
        path = Path(path_or_source)
        if not path.is_file():
            raise FileNotFoundError(f"evaluate_program: no such program file {path}")
        return path.read_text(encoding="utf-8")
    if not isinstance(path_or_source, str):
        raise TypeError(f"evaluate_program: expected a path or source text, got {type(path_or_source).__name__}")
    looks_like_path = "\n" not in path_or_source and path_or_source.strip().endswith(".py")
    if looks_like_path:
        path = Path(path_or_source.strip())
        if not path.is_file():
            raise FileNotFoundError(f"evaluate_program: no such program file {path} (pass source text or an existing path)")
        return path.read_text(encoding="utf-8")
    return path_or_source


def _run_in_sandbox(source: str, workdir: Path, timeout_s: float, memory_mb: int) -> dict:
    """Run the runner on `source` inside `workdir`; return its JSON payload or an error payload."""
    program_dir = workdir / "program"  # the program's cwd and HOME
    program_dir.mkdir()
    program = program_dir / "program.py"
    program.write_text(source, encoding="utf-8")
    result_path = workdir / "result.json"
    stderr_path = workdir / "stderr.txt"
    cpu_seconds = max(1, math.ceil(timeout_s) + 1)
    # The runner sets its own rlimits first thing: a preexec_fn is not safe in a parent that
    # has threads (torch, vLLM, a notebook kernel), and `unshare -n` execs into the runner.
    command = [sys.executable, "-B", str(RUNNER), str(program), str(result_path),
               str(memory_mb), str(cpu_seconds), str(FILE_SIZE_LIMIT)]
    if network_isolation_available():
        command = [shutil.which("unshare"), "--net", *command]
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(command, cwd=program_dir, env=_clean_env(program_dir), stdin=subprocess.DEVNULL,
                                   stdout=stderr, stderr=stderr, start_new_session=True)
        try:
            returncode = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            return {"ok": False, "kind": "timeout",
                    "error": f"timeout: the program ran longer than {timeout_s:g} s and was killed; make it faster"}
        finally:
            _kill_group(process)  # no grandchildren left behind
    if result_path.is_file():
        try:
            return json.loads(result_path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):  # torn file, or ints beyond Python's 4300-digit parse limit
            pass
    tail = _tail(stderr_path)
    if returncode == -signal.SIGXCPU or (returncode == -signal.SIGKILL and "MemoryError" not in tail):
        kind, why = ("cpu", f"CPU time limit ({cpu_seconds} s) exceeded") if returncode == -signal.SIGXCPU else (
            "crash", "the program was killed (SIGKILL), most likely for using too much memory")
    elif "MemoryError" in tail:
        kind, why = "memory", f"the program exceeded the memory limit ({memory_mb} MiB)"
    elif returncode == -signal.SIGXFSZ:
        kind, why = "crash", f"the program wrote a file larger than {FILE_SIZE_LIMIT // 2**20} MiB (output or points) and was killed"
    elif returncode < 0:
        kind, why = "crash", f"the program died from signal {signal.Signals(-returncode).name}"
    else:
        kind, why = "exit", f"the program exited (code {returncode}) without returning points"
    return {"ok": False, "kind": kind, "error": why + (f"; its output ends with:\n{tail}" if tail else "")}


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()[-OUTPUT_TAIL:]
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace").strip()


def _clean_env(home: Path) -> dict:
    """Only what the child needs: no inherited tokens, keys or proxies."""
    import numpy

    numpy_parent = str(Path(numpy.__file__).resolve().parent.parent)
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(home),
        "LANG": "C.UTF-8",
        "PYTHONPATH": numpy_parent,
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


@lru_cache(maxsize=1)
def network_isolation_available() -> bool:
    """Whether `unshare --net` works here (root, or unprivileged user namespaces); probed once."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        return subprocess.run([unshare, "--net", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
