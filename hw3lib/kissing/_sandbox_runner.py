"""Child-process side of `hw3lib.kissing.evaluate_program` (stdlib only; run as a script).

Usage: python _sandbox_runner.py RESULT_FD PROGRAM.py MEMORY_MB CPU_SECONDS FILE_SIZE_BYTES MAX_PROCESSES
                                  MAX_POINTS MAX_COORDINATE_BITS

Sets its own resource limits (address space, CPU time, file size, processes, open files, no core
dumps), disables sockets, reads PROGRAM.py as bytes (Python decodes it, honouring a PEP 263 coding
line), executes PROGRAM.py as a module named ``candidate_program`` (so an
``if __name__ == "__main__":`` block does not run), finds its points and writes one JSON document
to the pipe RESULT_FD that the parent opened (never a file: the program could replace a file):

    {"ok": true, "points": [[...], ...], "declared_dimension": 11 | null, "run_time": seconds}
    {"ok": false, "error": "what went wrong", "kind": "exception" | "exit" | "no_points" | ...}

Integers are written as JSON integers, so coordinates of any size arrive exactly. Accepted
program shapes: ``run_code()`` returning ``(points,)``, ``(points, d)`` or ``points``;
``get_centers()`` returning the same; or a global ``points``.

More than MAX_POINTS points or a coordinate of more than MAX_COORDINATE_BITS bits is refused here
already (kind "bad_points"), so a well-meant oversized answer gets a clear message instead of
overflowing the pipe's cap.

This is not a security boundary against a hostile program (it runs in this interpreter, can undo
the socket patch and write to RESULT_FD itself); the parent treats the pipe's bytes as untrusted
(size cap, schema check, exact verification) and `hw3lib.kissing.sandbox` provides the isolation.
"""

import json
import os
import resource
import socket
import sys
import time
import traceback

TRACEBACK_TAIL = 2000  # characters of traceback kept for the error message
MAX_OPEN_FILES = 256  # per process


def _no_network(*args, **kwargs):
    raise OSError("network access is disabled while evaluating a kissing program")


def disable_network() -> None:
    class NoSocket(socket.socket):
        def __init__(self, *args, **kwargs):
            _no_network()

    socket.socket = NoSocket
    for name in ("create_connection", "create_server", "socketpair", "fromfd", "getaddrinfo", "gethostbyname"):
        if hasattr(socket, name):
            setattr(socket, name, _no_network)


def unwrap(result):
    """(points,) -> points; (points, d) -> points, d; points -> points, None."""
    if isinstance(result, tuple) and len(result) == 1:
        return result[0], None
    if isinstance(result, (tuple, list)) and len(result) == 2 and _is_int_scalar(result[1]):
        return result[0], int(result[1])
    return result, None


def _is_int_scalar(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0 and "int" in type(value).__name__


def to_jsonable(points):
    """Numpy arrays / scalars to plain lists and numbers (object arrays keep Python ints)."""
    if hasattr(points, "tolist"):
        points = points.tolist()
    if isinstance(points, (list, tuple)):
        return [to_jsonable(p) for p in points]
    if hasattr(points, "item") and not isinstance(points, (int, float)):
        return points.item()
    if isinstance(points, (int, float)) or points is None:
        return points
    return repr(points)  # a string: the verifier will name the point and coordinate


def find_points(namespace):
    if callable(namespace.get("run_code")):
        return namespace["run_code"](), "run_code()"
    if callable(namespace.get("get_centers")):
        return namespace["get_centers"](), "get_centers()"
    if "points" in namespace:
        return namespace["points"], "the global `points`"
    raise LookupError("the program defines none of run_code(), get_centers() or a global `points`; "
                      "define run_code() returning (points, 11)")


MEMORY_MB = [0]  # the address-space limit, for messages


def set_limits(memory_mb: int, cpu_seconds: int, file_size: int, max_processes: int) -> None:
    MEMORY_MB[0] = memory_mb
    memory = memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))  # not binding for host root
    # Open files bound what pipes and sockets can pin in kernel memory (each pipe holds up to 1 MiB).
    resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_OPEN_FILES, MAX_OPEN_FILES))


def oversized(points, max_points: int, max_bits: int) -> str | None:
    """Why `points` (already JSON-able) breaks the caps, or None."""
    if len(points) > max_points:
        return (f"{len(points)} points is more than the limit of {max_points:,}; return at most {max_points:,} points")
    for i, row in enumerate(points):
        for j, value in enumerate(row if isinstance(row, list) else ()):
            if isinstance(value, int) and value.bit_length() > max_bits:
                return (f"point {i}, coordinate {j} has {value.bit_length()} bits; the limit is {max_bits} bits "
                        f"(|x| < 2^{max_bits}): use smaller integers")
    return None


def close_other_fds(keep) -> None:
    """Close every file descriptor but `keep` (stdin, stdout/stderr and the result pipe).

    Whatever the launch chain left open -- bubblewrap's user-namespace fd (`--userns`), a seccomp or
    info pipe, anything a future back end passes -- must not reach the program. /proc/self/fd lists
    them (its own directory fd is closed again by the time we close the rest: EBADF is ignored);
    closerange up to the soft RLIMIT_NOFILE catches any the listing could miss.
    """
    keep = set(keep)
    listed = set()
    try:
        listed = {int(name) for name in os.listdir("/proc/self/fd")}
    except OSError:
        pass
    highest = max([resource.getrlimit(resource.RLIMIT_NOFILE)[0], *listed, *keep]) + 1
    start = 0
    for fd in sorted(keep) + [highest]:
        if start < fd:  # closerange(a, a) is not a no-op everywhere
            os.closerange(start, fd)
        start = fd + 1
    for fd in listed - keep:
        try:
            os.close(fd)
        except OSError:
            pass


def main(result_fd: int, program_path: str, max_points: int = 10_000, max_bits: int = 128) -> int:
    close_other_fds({0, 1, 2, result_fd})  # before any program code runs
    os.set_inheritable(result_fd, False)  # programs that start processes do not hand them the pipe

    def finish(payload) -> int:
        data = json.dumps(payload).encode("utf-8")
        view = memoryview(data)
        while view:
            view = view[os.write(result_fd, view):]
        os.close(result_fd)
        return 0 if payload.get("ok") else 1

    disable_network()
    # Imports resolve against the program's own folder, not this package's (sys.path[0]).
    sys.path[0] = os.path.dirname(os.path.abspath(program_path))
    with open(program_path, "rb") as handle:
        source = handle.read()
    namespace = {"__name__": "candidate_program", "__file__": program_path, "__builtins__": __builtins__}
    start = time.perf_counter()
    try:
        code = compile(source, "program.py", "exec")
        exec(code, namespace)
        result, origin = find_points(namespace)
    except SystemExit as exc:
        return finish({"ok": False, "kind": "exit", "error": f"the program called sys.exit({exc.code!r}) "
                       "before returning points; return the points instead of exiting"})
    except MemoryError:
        return finish({"ok": False, "kind": "memory",
                       "error": f"MemoryError: the program exceeded the memory limit ({MEMORY_MB[0]} MiB)"})
    except LookupError as exc:
        if "defines none of" in str(exc):
            return finish({"ok": False, "kind": "no_points", "error": str(exc)})
        return finish({"ok": False, "kind": "exception", "error": _traceback_tail()})
    except BaseException:  # the program's own bug: report its traceback, never crash the caller
        return finish({"ok": False, "kind": "exception", "error": _traceback_tail()})
    run_time = time.perf_counter() - start
    points, dimension = unwrap(result)
    if points is None:
        return finish({"ok": False, "kind": "no_points", "error": f"{origin} returned None instead of points"})
    if not hasattr(points, "tolist") and not isinstance(points, (list, tuple)):
        if isinstance(points, (str, bytes, dict, set, frozenset)) or not hasattr(points, "__iter__"):
            return finish({"ok": False, "kind": "bad_points", "error": f"{origin} returned a {type(points).__name__}; "
                           "return a list of integer lists or an integer numpy array [n, 11]"})
        points = list(points)  # a generator or other iterable of points
    try:
        if len(points) <= max_points:  # an oversized answer is refused by its length, unconverted
            points = to_jsonable(points)
        too_big = oversized(points, max_points, max_bits)
        if too_big:
            return finish({"ok": False, "kind": "bad_points", "error": f"{origin}: {too_big}"})
        payload = {"ok": True, "points": points, "declared_dimension": dimension, "run_time": run_time}
        return finish(payload)
    except (TypeError, ValueError, RecursionError) as exc:
        return finish({"ok": False, "kind": "bad_points", "error": f"{origin} returned points that cannot be "
                       f"serialised ({exc}); return a list of integer lists or an integer numpy array"})


def _traceback_tail() -> str:
    """The traceback from the program's first frame on (this runner's frames are noise to the author)."""
    exc = sys.exc_info()[1]
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != "program.py":
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
    return text[-TRACEBACK_TAIL:]


if __name__ == "__main__":
    if len(sys.argv) != 9:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    set_limits(*(int(a) for a in sys.argv[3:7]))
    sys.exit(main(int(sys.argv[1]), sys.argv[2], int(sys.argv[7]), int(sys.argv[8])))
