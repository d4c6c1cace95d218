"""Evaluate a candidate kissing program the way the course does, isolated, and score it here exactly.

`evaluate_program(path_or_source)` runs the program on the small script `_sandbox_runner.py`
inside the sandbox of `hw3lib.kissing.sandbox` (bubblewrap: own user/PID/network/mount
namespaces, read-only system, private size-capped tmpfs; or the process fallback, with a warning
that lists what it does not isolate; `strict=True` refuses the fallback). It reads the points
back through a pipe it opened (never a file the program could replace), size-capped and
schema-checked, and checks them with the exact `verify` imported here from the installed package
(the sandbox cannot write it). It returns the course's metrics

    {"num_points", "dimension", "validity" (1.0 / 0.0), "eval_time", "combined_score"}

plus "message" (the verifier's verdict or the failure: timeout, memory, crash traceback tail,
missing function), "status" (one word for code that branches on it: "valid", "invalid",
"timeout", "memory", "cpu", "crash", "exception", "exit", "no_points", "bad_points", "output")
and "sandbox" ("bwrap" or "process"). A failure of the child is always a result with validity 0,
never an exception or a hang.

Limits on the child:
- wall-clock `timeout_s`: the sandbox is killed (bubblewrap: with every process it started);
- memory: RLIMIT_AS = `memory_mb` per process; with bubblewrap as root also a memory cgroup;
- CPU: RLIMIT_CPU = timeout + 1 s; files: RLIMIT_FSIZE = 64 MiB, and under bubblewrap the only
  writable places are a 96 MiB /sandbox and a 16 MiB /tmp (tmpfs); no core dumps;
- processes: RLIMIT_NPROC and, as root under bubblewrap, a pids cgroup (64);
- output: more than 16 MiB printed kills the run (status "output");
- environment: only PATH, HOME, LANG, PYTHONPATH (numpy's location) and single-threaded BLAS
  settings; nothing else (no tokens or keys) is inherited.

Bounded verification: at most `max_points` points (default 10,000) with coordinates below
2^`max_coordinate_bits` (128), Python/numpy integers only (booleans, floats, strings and other
objects are refused by name), and the exact check must finish by the program's own deadline
(start + `timeout_s`, at least VERIFY_FLOOR_S after the program returned) or the result is
"timeout".
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import signal
import tempfile
import time
import tokenize
import warnings
from pathlib import Path

from hw3lib.kissing.messages import MESSAGE_LIMIT, clean_text
from hw3lib.kissing.sandbox import (WORKDIR, SandboxUnavailable, SandboxWarning, child_env, containment,
                                    network_isolation_available, resolve_mode, run_script, warn_fallback)
from hw3lib.kissing.verify import VerificationTimeout, verify

__all__ = ["evaluate_program", "network_isolation_available"]

RUNNER = Path(__file__).with_name("_sandbox_runner.py")
FILE_SIZE_LIMIT = 64 * 2**20
OUTPUT_LIMIT = 16 * 2**20  # bytes of stdout+stderr before the run is killed
OUTPUT_TAIL = 1500  # characters of the program's output kept in error messages
ERROR_LIMIT = 4000  # characters of a runner error message kept
MAX_POINTS = 10_000
MAX_COORDINATE_BITS = 128
MAX_PROCESSES = 64
VERIFY_FLOOR_S = 2.0  # verification always gets at least this long (capped by timeout_s)
RUNNER_KINDS = ("exception", "exit", "memory", "no_points", "bad_points")  # failure kinds the runner may send
RESULT_KEYS = {True: {"ok", "points", "declared_dimension", "run_time"}, False: {"ok", "kind", "error"}}


def evaluate_program(path_or_source: str | os.PathLike, timeout_s: float = 60, memory_mb: int = 2048,
                     dimension: int = 11, return_points: bool = False, *, strict: bool = False,
                     sandbox: str = "auto", max_points: int = MAX_POINTS,
                     max_coordinate_bits: int = MAX_COORDINATE_BITS) -> dict:
    """Run a candidate program sandboxed and score its points; never raises for bad programs.

    path_or_source: a path to a .py file (str or Path) or the program's source text.
    timeout_s: wall-clock limit for the whole run. memory_mb: address-space limit of the child.
    dimension: the dimension a valid set must have (11 for the course's problem).
    return_points: also return the program's points under "points" (when it produced any), so
    callers that post-process them (the hybrid loop's local search) need not run it twice.
    strict: refuse (SandboxUnavailable) instead of falling back when bubblewrap cannot run.
    sandbox: "auto" (bubblewrap when it works, else the fallback with a SandboxWarning; the
    environment variable HW3_KISSING_SANDBOX can set it), "bwrap" or "process".
    max_points, max_coordinate_bits: caps on the answer, each refused with a message naming it.
    """
    start = time.perf_counter()
    deadline = time.monotonic() + timeout_s
    source = _read_source(path_or_source)
    mode = resolve_mode(sandbox, strict)
    if mode == "process":
        warn_fallback()
    else:
        check_containment(memory_mb, strict)
    problem = source_problem(source)
    if problem:
        return _metrics(0, 0, False, start, problem, "exception", mode)
    outcome = _run_in_sandbox(source, mode, timeout_s, memory_mb, max_points, max_coordinate_bits, dimension)
    if not outcome.get("ok"):
        return _metrics(0, 0, False, start, outcome["error"], outcome["kind"], mode)

    points = outcome["points"]
    declared = outcome["declared_dimension"]
    verify_deadline = max(deadline, time.monotonic() + min(timeout_s, VERIFY_FLOOR_S))
    try:
        result = verify(points, dimension=dimension, deadline=verify_deadline)
    except VerificationTimeout:
        return _metrics(0, 0, False, start, f"timeout: verifying the {len(points)} returned points did not finish "
                        f"within the time limit ({timeout_s:g} s in all); return fewer points or finish sooner",
                        "timeout", mode)
    message = result.message
    valid = result.valid
    if valid and declared is not None and declared != result.dimension:
        valid = False
        message = f"the program declares dimension {declared} but its points have dimension {result.dimension}"
    metrics = _metrics(result.num_points, result.dimension or 0, valid, start, message,
                       "valid" if valid else "invalid", mode)
    if return_points:
        metrics["points"] = points
    return metrics


def check_containment(memory_mb: int, strict: bool) -> None:
    """Warn (SandboxWarning) naming what this host leaves unbounded; strict refuses when nothing caps
    memory and processes (or the system-call filter is missing)."""
    state = containment(_cgroup_bytes(memory_mb))
    gaps = state.gaps(memory_mb)
    if not gaps:
        return
    if strict and ((not state.memory_cap and not state.process_cap) or state.seccomp):
        raise SandboxUnavailable("strict mode refuses to run with these unbounded: " + "; ".join(gaps)
                                 + ". Run as root with a writable cgroup (v1 pids+memory, or v2 with the memory "
                                 "and pids controllers delegated), or drop strict=True / --strict")
    warnings.warn("the bubblewrap sandbox leaves unbounded: " + "; ".join(gaps), SandboxWarning, stacklevel=3)


def _cgroup_bytes(memory_mb: int) -> int:
    """The whole sandbox's memory cap: the process's limit, its tmpfs files, and slack for the runtime."""
    return memory_mb * 2**20 + 2 * FILE_SIZE_LIMIT + 2**28


def source_problem(source: bytes) -> str | None:
    """Why Python cannot read the program's bytes as source (undecodable text), or None."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    except SyntaxError:  # bad bytes in the first two lines, or an unknown coding name: try UTF-8 for the offset
        encoding = "utf-8"
    try:
        source.decode(encoding)
    except UnicodeDecodeError as exc:
        return (f"SyntaxError: the program file is not valid {encoding.upper()} text (byte {source[exc.start]:#04x} at "
                f"offset {exc.start}); save it as UTF-8 (or declare its encoding in a '# -*- coding: ... -*-' line)")
    return None


def _metrics(num_points: int, dimension: int, valid: bool, start: float, message: str, status: str,
             sandbox: str) -> dict:
    # Every message passes here: capped, printable, valid UTF-8 before it reaches logs, terminals or the LLM.
    message = clean_text(message, MESSAGE_LIMIT)
    return {
        "num_points": int(num_points),
        "dimension": int(dimension),
        "validity": 1.0 if valid else 0.0,
        "eval_time": time.perf_counter() - start,
        "combined_score": float(num_points) if valid else 0.0,
        "message": message,
        "status": status,
        "sandbox": sandbox,
    }


def _read_source(path_or_source: str | os.PathLike) -> bytes:
    """The program's bytes, exactly as stored: Python itself decodes them (PEP 263 coding lines included)."""
    if isinstance(path_or_source, os.PathLike):
        path = Path(path_or_source)
        if not path.is_file():
            raise FileNotFoundError(f"evaluate_program: no such program file {path}")
        return path.read_bytes()
    if not isinstance(path_or_source, str):
        raise TypeError(f"evaluate_program: expected a path or source text, got {type(path_or_source).__name__}")
    looks_like_path = "\n" not in path_or_source and path_or_source.strip().endswith(".py")
    if looks_like_path:
        path = Path(path_or_source.strip())
        if not path.is_file():
            raise FileNotFoundError(f"evaluate_program: no such program file {path} (pass source text or an existing path)")
        return path.read_bytes()
    # A lone surrogate cannot be UTF-8: passed through as invalid bytes, source_problem reports it.
    return path_or_source.encode("utf-8", "surrogatepass")


def result_cap_bytes(max_points: int, max_bits: int, dimension: int) -> int:
    """Largest result accepted: `max_points` rows of `dimension` max_bits-bit integers (~0.3 digits per bit,
    plus sign and separators) and room for an error message."""
    return max_points * (dimension + 1) * (max_bits * 3 // 10 + 4) + 2**16


def _run_in_sandbox(source: bytes, mode: str, timeout_s: float, memory_mb: int, max_points: int,
                    max_bits: int, dimension: int) -> dict:
    """Run the runner on `source`; return the checked payload or {"ok": False, "kind", "error"}."""
    cpu_seconds = max(1, math.ceil(timeout_s) + 1)
    limits = [str(memory_mb), str(cpu_seconds), str(FILE_SIZE_LIMIT), str(MAX_PROCESSES), str(max_points), str(max_bits)]
    result_cap = result_cap_bytes(max_points, max_bits, dimension)
    if mode == "bwrap":
        run = run_script(RUNNER, [f"{WORKDIR}/program.py", *limits], mode=mode, timeout_s=timeout_s,
                         env=child_env(WORKDIR), program_source=source, result_cap=result_cap,
                         output_cap=OUTPUT_LIMIT, memory_bytes=_cgroup_bytes(memory_mb))
    else:
        workdir = Path(tempfile.mkdtemp(prefix="kissing_eval_"))
        try:
            program_dir = workdir / "program"  # the program's cwd and HOME
            program_dir.mkdir()
            program = program_dir / "program.py"
            program.write_bytes(source)
            run = run_script(RUNNER, [str(program), *limits], mode=mode, timeout_s=timeout_s,
                             env=child_env(str(program_dir)), cwd=program_dir, result_cap=result_cap,
                             output_cap=OUTPUT_LIMIT)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    tail = clean_text(run.output_tail, 4 * OUTPUT_TAIL).strip()[-OUTPUT_TAIL:]
    if run.timed_out:
        return {"ok": False, "kind": "timeout",
                "error": f"timeout: the program ran longer than {timeout_s:g} s and was killed; make it faster"}
    if run.output_overflow:
        return {"ok": False, "kind": "output", "error": f"the program printed more than {OUTPUT_LIMIT // 2**20} MiB "
                "and was killed; print less (a summary, not every step)"}
    if run.result_overflow:
        return {"ok": False, "kind": "bad_points", "error": f"the result sent back is larger than {result_cap:,} "
                f"bytes (at most {max_points:,} points of {dimension} {max_bits}-bit integers fit); return fewer "
                "or smaller points"}
    if run.result:
        return parse_result(run.result, max_points, max_bits, dimension)
    kind, why = _exit_reason(run.returncode, run.mode, tail, cpu_seconds, memory_mb)
    return {"ok": False, "kind": kind, "error": why + (f"; its output ends with:\n{tail}" if tail else "")}


def _exit_reason(returncode: int | None, mode: str, tail: str, cpu_seconds: int, memory_mb: int) -> tuple[str, str]:
    """(kind, words) for a run that sent no result; any exit status, even one no signal explains."""
    if returncode is None:
        returncode = -signal.SIGKILL
    status = returncode
    if mode == "bwrap" and 128 < returncode < 128 + signal.NSIG:
        returncode = -(returncode - 128)  # bwrap reports a child killed by signal N as 128 + N (or an exit 128 + N)
    if returncode == -signal.SIGXCPU:
        return "cpu", f"CPU time limit ({cpu_seconds} s) exceeded"
    if "MemoryError" in tail:
        return "memory", f"the program exceeded the memory limit ({memory_mb} MiB)"
    if returncode == -signal.SIGKILL:
        return "crash", "the program was killed (SIGKILL), most likely for using too much memory"
    if returncode == -signal.SIGXFSZ:
        return "crash", f"the program wrote a file larger than {FILE_SIZE_LIMIT // 2**20} MiB and was killed"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:  # e.g. an exit status 200 read as 128 + 72: no such signal, so it was an exit
            return "exit", f"the program exited (code {status}) without returning points"
        return "crash", f"the program died from signal {name}" + (f" (exit status {status})" if status > 0 else "")
    return "exit", f"the program exited (code {returncode}) without returning points"


def parse_result(data: bytes, max_points: int = MAX_POINTS, max_bits: int = MAX_COORDINATE_BITS,
                 dimension: int | None = None) -> dict:
    """Decode and schema-check the result pipe's bytes (untrusted: the program can write them).

    Sized before parsing: at most one '[' per point plus a few, and one ',' per coordinate, so
    `json.loads` never builds more than (max_points x dimension) Python objects, however the
    bytes are nested. Returns {"ok": True, "points": [[int]], "declared_dimension": int | None}
    or {"ok": False, "kind": ..., "error": ...}; never raises.
    """
    def bad(why: str) -> dict:
        return {"ok": False, "kind": "bad_points", "error": f"the result sent back is malformed: {why}"}

    values = max_points * ((dimension or 64) + 1) + 64
    if data.count(b"[") + data.count(b"{") > max_points + 16 or data.count(b",") > values:
        return bad(f"more nested lists or values than {max_points:,} points of {dimension or 64} coordinates "
                   "can hold; return at most that many points as a list of integer lists")
    try:
        payload = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # torn, forged, too deep, ints past 4300 digits
        return bad(f"not one JSON document ({type(exc).__name__}: {str(exc)[:200]})")
    if not isinstance(payload, dict) or type(payload.get("ok")) is not bool:
        return bad('expected an object with a boolean "ok"')
    expected = RESULT_KEYS[payload["ok"]]
    if set(payload) != expected:
        names = sorted(str(k)[:40] for k in list(payload)[:20])
        return bad(f"{len(payload)} keys {names}{' ...' if len(payload) > 20 else ''}, expected {sorted(expected)}")
    if not payload["ok"]:
        if payload["kind"] not in RUNNER_KINDS or not isinstance(payload["error"], str):
            return bad(f"unknown failure kind {str(payload['kind'])[:40]!r} or a non-text error")
        return {"ok": False, "kind": payload["kind"], "error": payload["error"][-ERROR_LIMIT:]}
    declared = payload["declared_dimension"]
    if declared is not None and type(declared) is not int:
        return bad(f"the declared dimension is a {type(declared).__name__}, not an integer")
    problem = check_points(payload["points"], max_points, max_bits, dimension)
    if problem:
        return {"ok": False, "kind": problem[0], "error": problem[1]}
    return {"ok": True, "points": payload["points"], "declared_dimension": declared}


def check_points(points, max_points: int = MAX_POINTS, max_bits: int = MAX_COORDINATE_BITS,
                 dimension: int | None = None) -> tuple[str, str] | None:
    """(kind, why) when decoded points are not a list of at most `max_points` lists of `dimension`
    bounded ints, else None. Row lengths are checked before any value is looked at."""
    if not isinstance(points, list):
        return "bad_points", (f"the points are a {type(points).__name__}; return a list of integer lists or an "
                              "integer numpy array")
    if len(points) > max_points:
        return "bad_points", (f"{len(points)} points is more than the limit of {max_points:,}; return at most "
                              f"{max_points:,} points")
    for i, row in enumerate(points):
        if not isinstance(row, list):
            return "bad_points", f"point {i} is a {type(row).__name__}, not a vector of integers"
        if dimension is not None and len(row) != dimension:
            return "invalid", (f"point {i} has {len(row)} coordinates: points have dimension {len(row)}, expected "
                               f"{dimension}: every point needs exactly {dimension} integer coordinates")
    for i, row in enumerate(points):
        for j, value in enumerate(row):
            if type(value) is not int:  # bool is a subclass of int: refused here by the exact type
                what = {bool: "a boolean", float: "a float", str: "a string (not a number)"}.get(type(value),
                                                                                               type(value).__name__)
                return "bad_points", (f"point {i}, coordinate {j}: {str(value)[:40]} is {what}, not an integer; "
                                      "coordinates must be Python ints or a numpy integer array (e.g. "
                                      "np.asarray(points, dtype=np.int64))")
            if value.bit_length() > max_bits:
                return "bad_points", (f"point {i}, coordinate {j} has {value.bit_length()} bits; the limit is "
                                      f"{max_bits} bits (|x| < 2^{max_bits}): use smaller integers")
    return None
