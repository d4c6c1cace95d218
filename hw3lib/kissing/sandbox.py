"""Run one untrusted Python script isolated, and read what it sends back through pipes.

Two back ends, picked by `resolve_mode`:

* "bwrap" (bubblewrap, the tool Flatpak uses): new user, PID, network, mount, IPC, UTS and cgroup
  namespaces; uid 1000 inside with no capabilities; a read-only root holding only /usr, the
  Python runtime, the virtual environment and numpy; a private size-capped tmpfs as working
  directory (/sandbox), /tmp and /dev/shm in a read-only /dev, nothing else writable; /proc of
  its own PID namespace only (the parent's environment and processes are invisible);
  `--die-with-parent`, `--new-session`, a cleared environment. On top of the namespaces:
  - a seccomp filter (`hw3lib.kissing.seccomp`) denies what reaches kernel state shared with the
    host: key rings, ptrace and other processes' memory, inotify and other per-user quotas, memfd
    and SysV/POSIX IPC (memory outside RLIMIT_AS), new namespaces and mounts;
  - the launcher (`_sandbox_launch.py`) gives bubblewrap a fresh anonymous session keyring and
    puts it in the run's cgroup (`hw3lib.kissing.cgroups`: v2 or v1; memory and pids caps) where
    this process may make one;
  - as root, the program runs as host uid HOST_UID rather than host root (a user namespace made
    here maps sandbox uid 1000 to it; `setpriv` drops to it inside), so RLIMIT_NPROC binds and
    per-user kernel quotas are not root's; HW3_KISSING_UID=root keeps host root;
  - after every run the sandbox's init is killed by its host PID (bubblewrap's `--info-fd`, held
    as a pidfd), taking the whole PID namespace with it.
  `containment()` says what bounds runs on this host; `Containment.gaps` names what does not.
* "process" (fallback, e.g. macOS or kernels without user namespaces): today's process sandbox,
  a new session, rlimits, a throw-away working directory and `unshare --net` where allowed.
  `FALLBACK_GAPS` lists what it does not isolate; `evaluate_program` warns with that list.

In both, the script gets two pipes the parent opened: stdout+stderr (read with a cap, the tail
kept for messages) and a result pipe (read with a cap). The parent never reads a file the
program could have written, and every failure -- timeout, flood, crash -- comes back as fields of
`SandboxRun`, never as an exception or a hang.
"""

from __future__ import annotations

import json
import os
import select
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
from pathlib import Path

from hw3lib.kissing import cgroups, seccomp

SANDBOX_UID = 1000  # a non-root uid inside the user namespace
WORKDIR = "/sandbox"  # the program's cwd and HOME inside bwrap
WORKDIR_BYTES = 96 * 2**20  # tmpfs size of /sandbox (bounds a disk bomb; above RLIMIT_FSIZE so that binds first)
TMP_BYTES = 16 * 2**20  # tmpfs size of /tmp
SHM_BYTES = 16 * 2**20  # tmpfs size of /dev/shm (bwrap's own /dev/shm would be an unsized tmpfs)
HOST_UID = 65534  # as root, the host uid the program runs as (an unprivileged one: RLIMIT_NPROC binds)
UID_ENV = "HW3_KISSING_UID"  # "auto" (default) or "root": keep the program at host root (tests, odd hosts)
LAUNCHER = Path(__file__).with_name("_sandbox_launch.py")
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
    mode: "bwrap" or "process". cgroup: "v1"/"v2"/"systemd" when a cgroup capped the sandbox, else "".
    host_uid: the host uid the program ran as.
    """

    returncode: int | None
    timed_out: bool
    result: bytes
    result_overflow: bool
    output_tail: bytes
    output_bytes: int
    output_overflow: bool
    mode: str
    cgroup: str
    host_uid: int


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


def bwrap_problem() -> str:
    """'' when a trivial Python run under the full bwrap command works, else why not (probed once)."""
    return _probe(None)


@lru_cache(maxsize=4)
def _probe(use_userns: bool | None) -> str:
    if shutil.which("bwrap") is None:
        return "no `bwrap` executable on PATH"
    with tempfile.TemporaryDirectory(prefix="kissing_probe_") as scratch:
        script = Path(scratch) / "probe.py"
        script.write_text("import numpy\n", encoding="utf-8")
        run = run_script(script, [], mode="bwrap", timeout_s=30, env=child_env(WORKDIR),
                         result_cap=16, output_cap=1 << 16, use_cgroup=False, use_userns=use_userns)
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


def bwrap_command(script: Path, program_fd: int | None, *, userns_fd: int | None = None,
                  seccomp_fd: int | None = None, info_fd: int | None = None) -> list[str]:
    """The bwrap argv (before the Python command) for running `script` with the program at /sandbox/program.py.

    userns_fd: a user namespace made by `_host_uid_userns` (root only): bubblewrap sets up as root
    there and `setpriv`, the first command inside (see `_bwrap_launch`), drops to SANDBOX_UID = host HOST_UID.
    """
    if userns_fd is not None:
        command = ["bwrap", "--userns", str(userns_fd), "--unshare-ipc", "--unshare-pid", "--unshare-net",
                   "--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL", "--cap-add", "CAP_SETUID",
                   "--cap-add", "CAP_SETGID"]
    else:
        command = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
                   "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    command += ["--die-with-parent", "--new-session", "--clearenv", "--hostname", "sandbox",
                "--tmpfs", "/", "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            command += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            command += ["--ro-bind", top, top]
    # /tmp's tmpfs first: a runtime or venv that lives under /tmp is then bound on top of it, not hidden by it.
    # The writable tmpfs folders are 1777: as root the program's uid is not the one that mounts them.
    command += ["--perms", "1777", "--size", str(TMP_BYTES), "--tmpfs", "/tmp"]
    roots = _readonly_roots()
    # bubblewrap makes missing parent folders 0700; the program (not root inside when it runs as HOST_UID)
    # must traverse them to reach the runtime, the venv and the runner.
    for parent in sorted({str(p) for r in [*roots, "/opt/hw3/runner.py"] for p in Path(r).parents} - {"/", "/tmp"}):
        command += ["--perms", "0755", "--dir", parent]
    for root in roots:
        command += ["--ro-bind", root, root]
    # A sized private /dev/shm in a read-only /dev: shared memory counts against a known size.
    command += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(SHM_BYTES), "--tmpfs",
                "/dev/shm", "--remount-ro", "/dev", "--perms", "1777", "--size", str(WORKDIR_BYTES), "--tmpfs",
                WORKDIR, "--ro-bind", str(script), "/opt/hw3/runner.py"]
    if program_fd is not None:
        command += ["--perms", "0644", "--file", str(program_fd), f"{WORKDIR}/program.py"]
    if seccomp_fd is not None:
        command += ["--seccomp", str(seccomp_fd)]
    if info_fd is not None:
        command += ["--info-fd", str(info_fd)]
    return command + ["--chdir", WORKDIR, "--remount-ro", "/"]


def uid_setting() -> str:
    """"auto" (root runs the program as host HOST_UID where it can) or "root" (keep host root), from UID_ENV."""
    value = os.environ.get(UID_ENV, "auto") or "auto"
    if value not in ("auto", "root"):
        raise ValueError(f"${UID_ENV}={value!r}: choose auto or root")
    return value


@lru_cache(maxsize=4)
def _host_uid_userns_works(setting: str) -> bool:
    """Whether root can run programs as HOST_UID here (a trial namespace under the probe)."""
    if os.geteuid() != 0 or setting == "root" or not (shutil.which("unshare") and shutil.which("setpriv")):
        return False
    return not _probe(use_userns=True)


def _host_uid_userns() -> int | None:
    """A user namespace mapping 0 -> host 0 (bubblewrap's set-up) and SANDBOX_UID -> HOST_UID (the program).

    Made by a short-lived `unshare --user` whose maps this (root) process writes; returns an fd to
    it for `bwrap --userns`, or None when that fails. A fresh one per run: RLIMIT_NPROC is counted
    per user namespace, so concurrent evaluations do not share their process cap.
    """
    try:
        holder = subprocess.Popen([shutil.which("unshare") or "unshare", "--user", "sleep", "30"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    try:
        mine = os.readlink("/proc/self/ns/user")
        deadline = time.monotonic() + 5
        while os.readlink(f"/proc/{holder.pid}/ns/user") == mine:
            if time.monotonic() > deadline or holder.poll() is not None:
                return None
            time.sleep(0.0005)
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{holder.pid}/{name}", "w") as handle:
                handle.write(f"0 0 1\n{SANDBOX_UID} {HOST_UID} 1\n")
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    finally:
        holder.kill()
        holder.wait()


@dataclass(frozen=True)
class Containment:
    """What bounds a bubblewrap run on this host (see `containment`)."""

    cgroup: str
    """"v1", "v2", "systemd" (a transient scope) or "" (no usable cgroup, or HW3_KISSING_CGROUP=off)."""
    memory_cap: bool
    """A memory cgroup caps the whole sandbox (else only RLIMIT_AS per process plus the tmpfs sizes)."""
    process_cap: bool
    """A pids cgroup, or RLIMIT_NPROC that binds because the program's host uid is not root."""
    host_uid: int
    """The host uid the program runs as."""
    seccomp: str
    """'' when the system-call filter applies, else why not."""

    def gaps(self, memory_mb: int) -> list[str]:
        """What is NOT bounded, in words (empty when everything is)."""
        gaps = []
        if not self.memory_cap:
            gaps.append("total memory (no memory cgroup: only RLIMIT_AS " + f"{memory_mb} MiB per process, "
                        + ("times up to " + str(MAX_PROCESSES) + " processes" if self.process_cap else
                           "times any number of processes") + ", plus the tmpfs sizes)")
        if not self.process_cap:
            gaps.append("the number of processes and threads (root without a pids cgroup: RLIMIT_NPROC does "
                        "not bind for host uid 0)")
        if self.seccomp:
            gaps.append("kernel state shared with the host (key rings, inotify and other per-user quotas, "
                        f"ptrace): {self.seccomp}")
        return gaps


def containment(memory_bytes: int = 2**30, cgroup_backend: str = "auto") -> Containment:
    """What the next bubblewrap run will be bounded by (probed once per setting: a trial cgroup, a trial run)."""
    return _containment(memory_bytes, cgroups.backend_setting(cgroup_backend), uid_setting())


@lru_cache(maxsize=16)
def _containment(memory_bytes: int, cgroup_backend: str, uid: str) -> Containment:
    group = cgroups.create(memory_bytes, MAX_PROCESSES, cgroup_backend)
    if group is not None:
        group.remove()
    host_uid = os.geteuid()
    if host_uid == 0 and _host_uid_userns_works(uid):
        host_uid = HOST_UID
    return Containment(group.version if group else "", bool(group and group.memory),
                       bool(group and group.pids) or host_uid != 0, host_uid, seccomp.filter_problem())


def process_cap_available() -> bool:
    """Whether bubblewrap runs get a binding process cap: a pids cgroup, or a program uid that is not root."""
    return containment().process_cap


def run_script(script: Path, args: list[str], *, mode: str, timeout_s: float, env: dict, cwd: Path | None = None,
               program_source: bytes | None = None, result_cap: int, output_cap: int,
               memory_bytes: int = 4 * 2**30, use_cgroup: bool = True, cgroup_backend: str = "auto",
               use_userns: bool | None = None) -> SandboxRun:
    """Run `python -B -s SCRIPT RESULT_FD *args` sandboxed; collect its pipes until it ends or `timeout_s` passes.

    In "bwrap" mode the script is bound at /opt/hw3/runner.py and `program_source` appears as
    /sandbox/program.py; in "process" mode the script runs from its own path in `cwd`.
    use_userns: run the program as host HOST_UID (root only; None: where the probe found it works).
    """
    result_r, result_w = os.pipe()
    output_r, output_w = os.pipe()
    fds: list[int] = [result_w]  # what the child inherits; closed here once it started
    info_r = cgroup = None
    host_uid = os.geteuid()
    try:
        if mode == "bwrap":
            command, popen_env, info_r, cgroup, host_uid = _bwrap_launch(
                script, args, env, program_source, result_w, fds, memory_bytes,
                cgroup_backend if use_cgroup else "off", use_userns)
        else:
            command = [sys.executable, "-B", "-s", str(script), str(result_w), *args]
            unshare = shutil.which("unshare")
            if unshare is not None and network_isolation_available():
                command = [unshare, "--net", *command]
            popen_env = env
        process = subprocess.Popen(command, cwd=cwd, env=popen_env, stdin=subprocess.DEVNULL, stdout=output_w,
                                   stderr=output_w, pass_fds=fds, start_new_session=True)
    except OSError as exc:
        for fd in {result_r, output_r, output_w, *fds} | ({info_r} if info_r is not None else set()):
            os.close(fd)
        if cgroup is not None:
            cgroup.remove()
        return SandboxRun(None, False, b"", False, f"could not start the sandbox: {exc}".encode(), 0, False,
                          mode, "", host_uid)
    for fd in {output_w, *fds}:
        os.close(fd)
    init = _SandboxInit(info_r)
    try:
        run = _collect(process, result_r, output_r, timeout_s, result_cap, output_cap, init)
    finally:
        _kill_group(process)
        init.kill()  # bubblewrap's init by its host PID: takes every process of the PID namespace with it
        if cgroup is not None:
            cgroup.kill_all()  # stragglers outside the process group (bwrap's PID namespace has none)
            cgroup.remove()
        for fd in (result_r, output_r):
            os.close(fd)
    returncode = process.returncode
    if run["killed"]:
        returncode = None
    return SandboxRun(returncode, run["timed_out"], bytes(run["result"]), run["result_overflow"], bytes(run["tail"]),
                      run["output_bytes"], run["output_overflow"], mode, cgroup.version if cgroup else "", host_uid)


def _bwrap_launch(script: Path, args: list[str], env: dict, program_source: bytes | None, result_w: int,
                  fds: list[int], memory_bytes: int, cgroup_backend: str, use_userns: bool | None):
    """(argv, environment, info pipe's read end, cgroup, host uid) for one bubblewrap run; adds child fds to `fds`."""
    if program_source is not None:
        program_fd = os.memfd_create("program.py")  # the parent's own memfd: not the sandbox's (denied there)
        fds.append(program_fd)
        os.write(program_fd, program_source)
        os.lseek(program_fd, 0, os.SEEK_SET)
    else:
        program_fd = None
    if use_userns is None:
        use_userns = _host_uid_userns_works(uid_setting())
    userns_fd = _host_uid_userns() if use_userns and os.geteuid() == 0 else None
    if userns_fd is not None:
        fds.append(userns_fd)
    seccomp_fd = seccomp.filter_fd()
    if seccomp_fd is not None:
        fds.append(seccomp_fd)
    info_r, info_w = os.pipe()
    fds.append(info_w)
    command = bwrap_command(script, program_fd, userns_fd=userns_fd, seccomp_fd=seccomp_fd, info_fd=info_w)
    for key, value in env.items():
        command += ["--setenv", key, value]
    if userns_fd is not None:  # the first command inside: drop from root-in-namespace to SANDBOX_UID (= HOST_UID)
        command += [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={SANDBOX_UID}",
                    f"--regid={SANDBOX_UID}", "--clear-groups", "--"]
    command += [sys.executable, "-B", "-s", "/opt/hw3/runner.py", str(result_w), *args]
    cgroup = cgroups.create(memory_bytes, MAX_PROCESSES, cgroup_backend)
    # systemd: `systemd-run --scope ... --` first; it makes the scope and execs the launcher in it (same PID)
    launcher = [*(cgroup.launch_prefix() if cgroup else []), sys.executable, "-I", "-S", "-B", str(LAUNCHER),
                str(_keyctl_number()), *(cgroup.procs_files() if cgroup else []), "--"]
    host_uid = HOST_UID if userns_fd is not None else os.geteuid()
    popen_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(cgroup.launch_env() if cgroup else {})}
    return launcher + command, popen_env, info_r, cgroup, host_uid


@lru_cache(maxsize=1)
def _keyctl_number() -> int:
    """keyctl's system-call number here (for the launcher's fresh session keyring), -1 if unknown."""
    try:
        import pyseccomp

        number = pyseccomp.resolve_syscall(pyseccomp.system_arch(), "keyctl")
    except (ImportError, OSError, RuntimeError, ValueError):
        return {"x86_64": 250, "aarch64": 219}.get(os.uname().machine, -1)
    return number if number >= 0 else -1


class _SandboxInit:
    """bubblewrap's init (PID 1 of the sandbox), found through `--info-fd` and held by a pidfd.

    Killing it kills every process of the PID namespace, whatever the program did to its parents
    (e.g. cleared the die-with-parent signal): the evaluator does so after every run.
    """

    def __init__(self, info_r: int | None):
        self.info_r, self.data, self.pidfd = info_r, b"", None

    def read(self, data: bytes) -> None:
        self.data += data
        if self.pidfd is None and b"}" in self.data:
            try:
                pid = int(json.loads(self.data.decode())["child-pid"])
                self.pidfd = os.pidfd_open(pid)  # a pidfd cannot be confused with a later process reusing the PID
            except (ValueError, KeyError, TypeError, OSError):
                pass

    def kill(self, wait_s: float = 3.0) -> None:
        if self.info_r is not None:
            os.set_blocking(self.info_r, False)
            try:
                while self.pidfd is None and (data := os.read(self.info_r, 4096)):
                    self.read(data)
            except BlockingIOError:
                pass
            os.close(self.info_r)
            self.info_r = None
        if self.pidfd is None:
            return
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            select.select([self.pidfd], [], [], wait_s)  # readable once the init has exited
        except (ProcessLookupError, OSError):
            pass
        finally:
            os.close(self.pidfd)
            self.pidfd = None


TAIL_BYTES = 8192


def _collect(process: subprocess.Popen, result_r: int, output_r: int, timeout_s: float,
             result_cap: int, output_cap: int, init: _SandboxInit) -> dict:
    """Read both pipes until EOF (or the child exited EXIT_GRACE_S ago), a cap or the deadline.

    bubblewrap's info pipe is read on the way, until it names the sandbox's init (`init`).
    """
    deadline = time.monotonic() + timeout_s
    selector = selectors.DefaultSelector()
    selector.register(result_r, selectors.EVENT_READ, "result")
    selector.register(output_r, selectors.EVENT_READ, "output")
    if init.info_r is not None:
        selector.register(init.info_r, selectors.EVENT_READ, "info")
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
                if key.data == "info":
                    init.read(data)
                    if not data or init.pidfd is not None:
                        selector.unregister(key.fd)  # init.kill closes it
                elif not data:
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
