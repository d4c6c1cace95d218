"""One sleep-mode vLLM engine per process: a run that builds one trains in a fresh process of its own.

vLLM 0.32's sleep mode allocates through a process-global `CuMemAllocator`, and `Worker.load_model` asserts
"CuMem allocator can only be used for one instance per process" when a second engine loads while any memory of
the first is still tracked; vLLM's own sleep-mode tests therefore run one process per test. hw3lib's loops build
such an engine for every run on a GPU (colocated with the trainer: `hw3lib.generation.engine_colocated`), and a
notebook kernel or a grid worker runs many runs, so on CUDA with vLLM each run trains in a child process:

- `needs_own_process(cfg)`: the run's rollout engine is vLLM on a CUDA device (its colocated engine enables sleep
  mode; an engine on a second GPU does not, but vLLM does not hand all of an engine's memory back in-process
  either). On CPU, where sleep mode is a no-op, runs stay in the calling process, unchanged;
- `run_in_own_process(fn, *args, **kwargs)`: `fn(*args, **kwargs)` in `python -m hw3lib.core.own_process`, its
  picklable result returned, its output forwarded line by line to this process's `sys.stdout`/`sys.stderr` (so a
  notebook cell shows the run's log), its exception re-raised here with the same type and message (the child's
  traceback added as a note). `fn` must be importable by name (a module-level function), and so must every
  argument: a callback defined in a notebook cannot cross the boundary and is refused with a `TypeError` naming
  it before anything starts; a module-level callback runs in the child, so what it records stays there.

Ctrl-C: the first `KeyboardInterrupt` here is passed to the child as one SIGINT (the child ignores any second one
that the terminal or Jupyter sent to the whole process group), the child checkpoints its last completed step as the
loops do, and `KeyboardInterrupt` is raised here once it has exited; `resume=True` then starts a new process. A
second Ctrl-C while it saves kills it. A child whose parent dies (a restarted kernel) interrupts itself the same way,
so it never trains on, holding the GPU, for nobody.
"""

from __future__ import annotations

import codecs
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

MODULE = "hw3lib.core.own_process"
_RUN_HERE: object | None = None
"""In a run's own process: the config it was started for (its entry point then runs here, not in yet another)."""
_interrupted = False  # in a child: a SIGINT has been turned into KeyboardInterrupt already


def is_cuda(device) -> bool:
    """Whether a device name (`cuda`, `cuda:1`, a torch device) names a CUDA device."""
    return str(device).split(":", 1)[0] == "cuda"


def needs_own_process(cfg) -> bool:
    """Whether a run of `cfg` must train in a process of its own: its rollout engine is vLLM on a CUDA device (see
    the module docstring); False inside the process already started for it."""
    if cfg is _RUN_HERE:
        return False
    return getattr(cfg, "engine", None) == "vllm" and is_cuda(getattr(cfg, "rollout_device", "cpu"))


class OwnProcessError(RuntimeError):
    """A run's own process ended without a result (killed, crashed, or its exception could not be sent back)."""


def check_picklable(fn, args: tuple, kwargs: dict) -> bytes:
    """The pickled call, or a TypeError naming the argument that cannot be sent to another process."""
    named = [("the function", fn)] + [(f"argument {i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    for name, value in named:
        try:
            pickle.dumps(value)
        except Exception as exc:  # pickle raises PicklingError, AttributeError or TypeError
            raise TypeError(
                f"{name} ({value!r:.80}) cannot be sent to the run's own process ({type(exc).__name__}: {exc}): on a "
                "GPU with vLLM every run trains in a fresh process (hw3lib.core.own_process); pass a module-level "
                "function (its side effects stay in that process), or none") from None
    return pickle.dumps((fn, args, kwargs))


def run_in_own_process(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` in a fresh Python process; its result, or its exception raised here (module docstring)."""
    call = check_picklable(fn, args, kwargs)
    folder = tempfile.mkdtemp(prefix="hw3-own-process-")
    call_file, result_file = os.path.join(folder, "call.pkl"), os.path.join(folder, "result.pkl")
    try:
        with open(call_file, "wb") as handle:
            pickle.dump(list(sys.path), handle)  # the child finds what this process imports (tests, notebooks)
            handle.write(call)
        process = subprocess.Popen([sys.executable, "-m", MODULE, call_file, result_file],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
        forwarders = [_forward(process.stdout, sys.stdout), _forward(process.stderr, sys.stderr)]
        interrupted = _wait(process)
        for thread in forwarders:
            thread.join()
        return _outcome(result_file, process.returncode, interrupted)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _forward(pipe, stream) -> threading.Thread:
    """Copy a child's pipe to `stream` (the caller's stdout or stderr, as it was at the call) as it arrives."""
    def copy() -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while chunk := os.read(pipe.fileno(), 65536):
            stream.write(decoder.decode(chunk))
            stream.flush()
        pipe.close()

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread


def _wait(process: subprocess.Popen) -> bool:
    """Wait for the child; whether it was interrupted (a Ctrl-C here: passed on as SIGINT; a second one kills it)."""
    interrupted = False
    while True:
        try:
            process.wait()
            return interrupted
        except KeyboardInterrupt:
            if interrupted:
                process.kill()
                process.wait()
                raise
            interrupted = True
            process.send_signal(signal.SIGINT)
            print("interrupted: the run's own process is saving its checkpoint (Ctrl-C again kills it)",
                  file=sys.stderr, flush=True)


def _outcome(result_file: str, returncode: int, interrupted: bool):
    """The child's result, or its exception re-raised (a KeyboardInterrupt when it was interrupted)."""
    outcome = None
    if os.path.isfile(result_file):
        with open(result_file, "rb") as handle:
            outcome = pickle.load(handle)
    if interrupted or (outcome is not None and outcome[0] == "interrupted"):
        raise KeyboardInterrupt
    if outcome is None:
        raise OwnProcessError(f"the run's own process exited with status {returncode} without a result "
                              "(killed or crashed: its output is above)")
    if outcome[0] == "ok":
        return outcome[1]
    error, where, by_hw3lib = outcome[1], outcome[2], outcome[3]
    error.add_note(f"raised in the run's own process (hw3lib.core.own_process):\n{where}")
    if by_hw3lib:
        raise error
    # hw3lib.cli shows one line for an error whose innermost frame is a `raise` in hw3lib (a refusal) and the
    # traceback for any other (a bug): raised from outside hw3lib's files, the child's bug stays a bug there.
    exec("raise error", {"error": error})


# ---- the child --------------------------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    """Run the call in `argv[0]`, write its outcome to `argv[1]`: ("ok", value), ("error", exception, traceback,
    whether hw3lib raised it) or ("interrupted",)."""
    global _RUN_HERE
    call_file, result_file = argv
    with open(call_file, "rb") as handle:
        sys.path[:0] = [entry for entry in pickle.load(handle) if entry not in sys.path]
        fn, args, kwargs = pickle.load(handle)
    _RUN_HERE = args[0] if args else None
    signal.signal(signal.SIGINT, _on_sigint)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    try:
        outcome, status = ("ok", fn(*args, **kwargs)), 0
    except KeyboardInterrupt:
        outcome, status = ("interrupted",), 130
    except BaseException as exc:  # noqa: BLE001 -- every error goes back to the caller
        outcome, status = ("error", exc, traceback.format_exc(), raised_by_hw3lib(exc)), 1
    _write_outcome(result_file, outcome)
    return status


def raised_by_hw3lib(exc: BaseException) -> bool:
    """Whether the innermost frame of `exc`'s traceback is a `raise` statement in hw3lib's source (hw3lib.cli's
    rule for a refusal, as opposed to a bug; kept across the boundary by `_outcome`)."""
    import linecache

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    filename = tb.tb_frame.f_code.co_filename
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # hw3lib/
    inside = os.path.abspath(filename).startswith(package + os.sep)
    return inside and linecache.getline(filename, tb.tb_lineno).lstrip().startswith("raise")


def _write_outcome(path: str, outcome: tuple) -> None:
    """Write `outcome` (atomically); one that does not survive pickling (a result, or an exception whose class
    cannot be rebuilt from its arguments) is sent back as an OwnProcessError in words."""
    try:
        data = pickle.dumps(outcome)
        pickle.loads(data)
    except Exception as exc:  # noqa: BLE001
        if outcome[0] == "error":
            words, where = f"{type(outcome[1]).__name__}: {outcome[1]}", outcome[2]
        else:
            words, where = f"the run's result cannot be sent back ({type(exc).__name__}: {exc})", ""
        data = pickle.dumps(("error", OwnProcessError(words), where, False))
    with open(path + ".tmp", "wb") as handle:
        handle.write(data)
    os.replace(path + ".tmp", path)


def _on_sigint(signum, frame) -> None:
    """The first SIGINT stops the run (KeyboardInterrupt: the loop checkpoints); later ones -- the same Ctrl-C
    delivered to the whole process group and forwarded by the parent -- must not cut that checkpoint short."""
    global _interrupted
    if not _interrupted:
        _interrupted = True
        raise KeyboardInterrupt


def _watch_parent(parent: int, poll_s: float = 1.0) -> None:
    """Interrupt this run (it checkpoints, then exits) when the process that started it has gone."""
    import _thread

    while os.getppid() == parent:
        time.sleep(poll_s)
    _thread.interrupt_main(signal.SIGINT)


if __name__ == "__main__":
    # Run as the importable module, not as `__main__`: entry points check `_RUN_HERE` there, and the pickled
    # function and results name their modules.
    from hw3lib.core import own_process

    sys.exit(own_process.main(sys.argv[1:]))
