"""Run one untrusted Python script isolated, and read what it sends back through pipes.

Two back ends, picked by `resolve_mode`:

* "bwrap" (bubblewrap, the tool Flatpak uses): new user, PID, network, mount, IPC, UTS and cgroup
  namespaces; uid/gid 1000 inside with no capabilities; a read-only root holding only /usr, the
  Python runtime, the virtual environment and numpy; a private size-capped tmpfs as working
  directory (/sandbox) and /tmp, nothing else writable; /proc of its own PID namespace only (the
  parent's environment and processes are invisible); `--die-with-parent`, `--new-session`, a
  cleared environment. When the run ends, the PID namespace dies and takes every process the
  program started with it. When this process is root, RLIMIT_NPROC does not bind (the sandbox
  uid maps to host root), so a pids cgroup (and a memory cgroup) caps the whole sandbox where
  the cgroup file system is writable; `SandboxRun.cgroup` says whether it was.
* "process" (fallback, e.g. macOS or kernels without user namespaces): today's process sandbox,
  a new session, rlimits, a throw-away working directory and `unshare --net` where allowed.
  `FALLBACK_GAPS` lists what it does not isolate; `evaluate_program` warns with that list.

In both, the script gets two pipes the parent opened: stdout+stderr (read with a cap, the tail
kept for messages) and a result pipe (read with a cap). The parent never reads a file the
program could have written, and every failure -- timeout, flood, crash -- comes back as fields of
`SandboxRun`, never as an exception or a hang.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from functools import lru_cache
from itertools import count
from pathlib import Path

SANDBOX_UID = 1000  # a non-root uid inside the user namespace
WORKDIR = "/sandbox"  # the program's cwd and HOME inside bwrap
WORKDIR_BYTES = 96 * 2**20  # tmpfs size of /sandbox (bounds a disk bomb; above RLIMIT_FSIZE so that binds first)
TMP_BYTES = 16 * 2**20  # tmpfs size of /tmp
MAX_PROCESSES = 64  # pids cgroup / RLIMIT_NPROC: threads and processes of one evaluation
EXIT_GRACE_S = 0.5  # after the child exits, how long to wait for pipes held by stragglers
MODE_ENV = "HW3_KISSING_SANDBOX"  # "auto" (default), "bwrap" or "process": overrides sandbox="auto"

FALLBACK_GAPS = (
    "processes started in a new session (or double-forked) can outlive the evaluation",
    "files anywhere this user can write (including the hw3lib package) can be changed",
    "the parent's environment is readable through /proc/<parent pid>/environ",
    "the program can signal (stop or kill) the evaluating process",
    "as root it can re-enter the parent's network namespace; without `unshare` there is no network isolation",
    "process count is limited by RLIMIT_NPROC only (not enforced for root), disk use only per file",
)


class SandboxUnavailable(RuntimeError):
    """strict mode was asked for but bubblewrap cannot run here."""


class SandboxWarning(UserWarning):
    """Evaluating without bubblewrap: the fallback does not isolate everything (see FALLBACK_GAPS)."""


@dataclass
class SandboxRun:
    """What came back from one run (never raised: the caller turns it into a result).

    returncode: the script's exit status (negative: killed by that signal); None when we killed it.
    timed_out: the wall-clock limit passed. result: bytes from the result pipe (capped).
    result_overflow / output_overflow: a pipe went past its cap and the run was killed.
    output_tail: the last bytes of stdout+stderr. output_bytes: how much it printed in total.
    mode: "bwrap" or "process". cgroup: a pids/memory cgroup capped the sandbox.
    """

    returncode: int | None
    timed_out: bool
    result: bytes
    result_overflow: bool
    output_tail: bytes
    output_bytes: int
    output_overflow: bool
    mode: str
    cgroup: bool


def resolve_mode(sandbox: str = "auto", strict: bool = False) -> str:
    """"bwrap" or "process" for a request; raises SandboxUnavailable when strict and bwrap fails."""
    if sandbox not in ("auto", "bwrap", "process"):
        raise ValueError(f"sandbox={sandbox!r}: choose 'auto', 'bwrap' or 'process'")
    if sandbox == "auto":
        sandbox = os.environ.get(MODE_ENV, "auto") or "auto"
        if sandbox not in ("auto", "bwrap", "process"):
            raise ValueError(f"${MODE_ENV}={sandbox!r}: choose auto, bwrap or process")
    if sandbox == "process":
        if strict:
            raise SandboxUnavailable("strict mode refuses the process fallback; drop strict=True / --strict, "
                                     f"or unset {MODE_ENV}=process")
        return "process"
    problem = bwrap_problem()
    if problem and (sandbox == "bwrap" or strict):
        raise SandboxUnavailable(f"bubblewrap sandbox unavailable: {problem}. Install it (Debian/Ubuntu: "
                                 "`apt-get install bubblewrap`) or run without strict mode (a weaker fallback)")
    return "process" if problem else "bwrap"


def warn_fallback() -> None:
    """The one warning the fallback gives: what it does not isolate."""
    why = bwrap_problem() or f"{MODE_ENV}=process or sandbox='process'"
    warnings.warn("evaluating WITHOUT bubblewrap (" + why + "); the process fallback does not stop: "
                  + "; ".join(FALLBACK_GAPS) + ". Install bubblewrap, or pass strict=True / --strict to refuse.",
                  SandboxWarning, stacklevel=3)


def bwrap_available() -> bool:
    """Whether the bubblewrap sandbox works here (probed once per process)."""
    return not bwrap_problem()


@lru_cache(maxsize=1)
def bwrap_problem() -> str:
    """'' when a trivial Python run under the full bwrap command works, else why not."""
    if shutil.which("bwrap") is None:
        return "no `bwrap` executable on PATH"
    with tempfile.TemporaryDirectory(prefix="kissing_probe_") as scratch:
        script = Path(scratch) / "probe.py"
        script.write_text("import numpy\n", encoding="utf-8")
        run = run_script(script, [], mode="bwrap", timeout_s=30, env=child_env(WORKDIR),
                         result_cap=16, output_cap=1 << 16, use_cgroup=False)
    if run.returncode != 0:
        tail = run.output_tail.decode("utf-8", "replace").strip()[-300:]
        return f"bwrap failed (exit {run.returncode}): {tail or 'no output'}"
    return ""


def child_env(home: str) -> dict:
    """Only what the child needs: no inherited tokens, keys or proxies."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": "/tmp" if home == WORKDIR else home,
        "LANG": "C.UTF-8",
        "PYTHONPATH": _numpy_parent(),
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _numpy_parent() -> str:
    import numpy

    return str(Path(numpy.__file__).resolve().parent.parent)


def _readonly_roots() -> list[str]:
    """Host folders the sandbox sees read-only: the Python runtime, the venv and numpy (not the repo)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, _numpy_parent(),
             str(Path(sys.executable).resolve().parent.parent), str(Path(sys.executable).parent.parent)}
    keep: list[str] = []
    for root in sorted({os.path.abspath(r) for r in roots} | {os.path.realpath(r) for r in roots}):
        if root == "/usr" or root.startswith("/usr/") or any(root.startswith(k + "/") for k in keep):
            continue  # /usr is bound whole; a folder inside a kept one comes with it
        keep.append(root)
    return keep


def bwrap_command(script: Path, program_fd: int | None) -> list[str]:
    """The bwrap argv (before the Python command) for running `script` with the program at /sandbox/program.py."""
    command = ["bwrap", "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
               "--cap-drop", "ALL", "--clearenv", "--hostname", "sandbox",
               "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--tmpfs", "/", "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            command += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            command += ["--ro-bind", top, top]
    # /tmp's tmpfs first: a runtime or venv that lives under /tmp is then bound on top of it, not hidden by it.
    command += ["--size", str(TMP_BYTES), "--tmpfs", "/tmp"]
    for root in _readonly_roots():
        command += ["--ro-bind", root, root]
    command += ["--proc", "/proc", "--dev", "/dev",
                "--size", str(WORKDIR_BYTES), "--tmpfs", WORKDIR,
                "--ro-bind", str(script), "/opt/hw3/runner.py"]
    if program_fd is not None:
        command += ["--perms", "0644", "--file", str(program_fd), f"{WORKDIR}/program.py"]
    return command + ["--chdir", WORKDIR, "--remount-ro", "/"]


_names = count()


def process_cap_available() -> bool:
    """Whether bubblewrap runs get a binding process cap: RLIMIT_NPROC (non-root) or a pids cgroup (root)."""
    if os.geteuid() != 0:
        return True
    cgroup = Cgroup.create(2**30)
    if cgroup is None:
        return False
    cgroup.remove()
    return True


class Cgroup:
    """A pids (+ memory) cgroup for one run, where this process may create one (root); else None."""

    def __init__(self, dirs: list[Path]):
        self.dirs = dirs

    @classmethod
    def create(cls, memory_bytes: int) -> Cgroup | None:
        """The process cap is the point: without a pids cgroup, return None (memory alone is not worth it)."""
        name = f"hw3_kissing_{os.getpid()}_{next(_names)}"
        dirs = []
        for controller, key, value in (("pids", "pids.max", MAX_PROCESSES),
                                       ("memory", "memory.limit_in_bytes", memory_bytes)):
            base = _v1_cgroup_dir(controller)
            if base is None:
                if controller == "pids":
                    return None
                continue
            try:
                path = base / name
                path.mkdir()
                dirs.append(path)
                (path / key).write_text(str(value))
            except OSError:
                cls(dirs).remove()
                return None
        return cls(dirs)

    def join_prefix(self) -> list[str]:
        """`sh` that moves itself into the cgroups and then execs the command (children inherit them)."""
        files = [str(d / "cgroup.procs") for d in self.dirs]
        return ["/bin/sh", "-c", 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"',
                "sh", *files, "--"]

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.dirs[0] / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill_all(self, wait_s: float = 3.0) -> None:
        deadline = time.monotonic() + wait_s
        while self.pids() and time.monotonic() < deadline:
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)

    def remove(self, wait_s: float = 2.0) -> None:
        """Delete the cgroups; a cgroup whose last task is still exiting is busy for a moment, so retry."""
        deadline = time.monotonic() + wait_s
        for path in self.dirs:
            while path.exists():
                try:
                    path.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)


def _v1_cgroup_dir(controller: str) -> Path | None:
    """This process's cgroup folder in the v1 hierarchy of `controller`, if mounted and writable."""
    if os.geteuid() != 0:
        return None
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            base = Path("/sys/fs/cgroup") / controller / path.lstrip("/")
            return base if base.is_dir() and os.access(base, os.W_OK) else None
    return None


def run_script(script: Path, args: list[str], *, mode: str, timeout_s: float, env: dict, cwd: Path | None = None,
               program_source: str | None = None, result_cap: int, output_cap: int,
               memory_bytes: int = 4 * 2**30, use_cgroup: bool = True) -> SandboxRun:
    """Run `python -B -s SCRIPT RESULT_FD *args` sandboxed; collect its pipes until it ends or `timeout_s` passes.

    In "bwrap" mode the script is bound at /opt/hw3/runner.py and `program_source` appears as
    /sandbox/program.py; in "process" mode the script runs from its own path in `cwd`.
    """
    result_r, result_w = os.pipe()
    output_r, output_w = os.pipe()
    program_fd = None
    cgroup = None
    try:
        if mode == "bwrap":
            if program_source is not None:
                program_fd = os.memfd_create("program.py")
                os.write(program_fd, program_source.encode("utf-8"))
                os.lseek(program_fd, 0, os.SEEK_SET)
            command = bwrap_command(script, program_fd)
            for key, value in env.items():
                command += ["--setenv", key, value]
            command += [sys.executable, "-B", "-s", "/opt/hw3/runner.py", str(result_w), *args]
            cgroup = Cgroup.create(memory_bytes) if use_cgroup else None
            if cgroup is not None:
                command = cgroup.join_prefix() + command
            popen_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        else:
            command = [sys.executable, "-B", "-s", str(script), str(result_w), *args]
            unshare = shutil.which("unshare")
            if unshare is not None and network_isolation_available():
                command = [unshare, "--net", *command]
            popen_env = env
        fds = [result_w] + ([program_fd] if program_fd is not None else [])
        process = subprocess.Popen(command, cwd=cwd, env=popen_env, stdin=subprocess.DEVNULL, stdout=output_w,
                                   stderr=output_w, pass_fds=fds, start_new_session=True)
    except OSError as exc:
        for fd in (result_r, result_w, output_r, output_w, program_fd):
            if fd is not None:
                os.close(fd)
        if cgroup is not None:
            cgroup.remove()
        return SandboxRun(None, False, b"", False, f"could not start the sandbox: {exc}".encode(), 0, False,
                          mode, False)
    os.close(result_w)
    os.close(output_w)
    if program_fd is not None:
        os.close(program_fd)
    try:
        run = _collect(process, result_r, output_r, timeout_s, result_cap, output_cap)
    finally:
        _kill_group(process)
        if cgroup is not None:
            cgroup.kill_all()  # stragglers outside the process group (bwrap's PID namespace has none)
            cgroup.remove()
        os.close(result_r)
        os.close(output_r)
    returncode = process.returncode
    if mode == "bwrap" and returncode is not None and returncode > 128:
        returncode = -(returncode - 128)  # bwrap reports a child killed by signal N as 128 + N
    if run["killed"]:
        returncode = None
    return SandboxRun(returncode, run["timed_out"], bytes(run["result"]), run["result_overflow"], bytes(run["tail"]),
                      run["output_bytes"], run["output_overflow"], mode, cgroup is not None)


TAIL_BYTES = 8192


def _collect(process: subprocess.Popen, result_r: int, output_r: int, timeout_s: float,
             result_cap: int, output_cap: int) -> dict:
    """Read both pipes until EOF (or the child exited EXIT_GRACE_S ago), a cap or the deadline."""
    deadline = time.monotonic() + timeout_s
    selector = selectors.DefaultSelector()
    selector.register(result_r, selectors.EVENT_READ, "result")
    selector.register(output_r, selectors.EVENT_READ, "output")
    state = {"result": bytearray(), "tail": bytearray(), "output_bytes": 0, "timed_out": False,
             "result_overflow": False, "output_overflow": False, "killed": False}
    exited_at = None
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and process.poll() is not None:
                exited_at = now
            if now >= deadline:
                state["timed_out"] = state["killed"] = exited_at is None
                break
            if exited_at is not None and (not selector.get_map() or now >= exited_at + EXIT_GRACE_S):
                break
            if not selector.get_map():
                try:
                    process.wait(timeout=max(0.0, deadline - now))
                except subprocess.TimeoutExpired:
                    pass
                continue
            for key, _ in selector.select(timeout=min(0.05, max(0.0, deadline - now))):
                data = os.read(key.fd, 1 << 16)
                if not data:
                    selector.unregister(key.fd)
                elif key.data == "result":
                    state["result"] += data
                    if len(state["result"]) > result_cap:
                        state["result_overflow"] = state["killed"] = True
                        return state
                else:
                    state["output_bytes"] += len(data)
                    state["tail"] = (state["tail"] + data)[-TAIL_BYTES:]
                    if state["output_bytes"] > output_cap:
                        state["output_overflow"] = state["killed"] = True
                        return state
    finally:
        selector.close()
    return state


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:  # unkillable (D state); do not hang the caller
        pass


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
