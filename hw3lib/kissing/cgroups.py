"""A throw-away cgroup per evaluation: a memory cap and a process cap for the whole sandbox.

Two back ends, chosen by `create(memory_bytes, backend)`:

* "v2" (the unified hierarchy): a fresh cgroup with `memory.max`, `memory.swap.max` = 0 and
  `pids.max`; killed through `cgroup.kill` where the kernel has it. Where it goes is set by v2's
  "no internal processes" rule: a cgroup other than the root that holds processes (ours does: we
  run in it) cannot enable controllers for its children (writing `cgroup.subtree_control` fails
  with EBUSY). So the run's cgroup is a child of this process's cgroup only where that cgroup
  already enables memory and pids for its children or is the hierarchy's root (exempt from the
  rule); otherwise it is a *sibling*, a child of the parent cgroup, which already enables both
  (that is what makes them appear in our own `cgroup.controllers`). Moving the sandbox there needs
  write access to the parent's `cgroup.procs` (root, or a delegated subtree such as a systemd
  user session's app.slice). We never move the evaluator itself or anyone else's processes.
  One more case: when our cgroup holds *only this process* (a container's cgroup, a scope made for the
  evaluator) and has both controllers available, the evaluator moves itself into a leaf child
  `hw3_evaluator`, which empties our cgroup, enables memory and pids there, and makes the run's cgroups
  its children -- siblings of the leaf -- without needing the parent's files (the usual "leaf for the
  supervisor" layout of the no-internal-processes rule). It moves only itself, never other processes.
* "v1": a child in this process's cgroup of the `pids` hierarchy (`pids.max`) and, where mounted,
  the `memory` one (`memory.limit_in_bytes`).
* "systemd": where systemd runs (/run/systemd/system exists) and `systemd-run` works, a transient scope
  per run: the launcher is started as `systemd-run [--user] --scope --collect -p MemoryMax=... -p
  MemorySwapMax=0 -p TasksMax=... -- LAUNCHER ...`; systemd makes the cgroup (delegation, the
  no-internal-processes rule and clean-up are its business) and execs the launcher in it, in place, so
  the evaluator's process-group kill still applies; the scope goes away with its last process
  (`--collect`), and `systemctl stop` removes it after the run regardless. Non-root users get their
  user manager's scope (`--user`). One trial scope (`true`) decides whether it works here.

"auto" tries v2, then v1, then systemd. v1 and v2 need write access to this process's cgroup (root,
or a delegated subtree); without any, `create` returns None and the caller reports the sandbox as
uncapped. The environment variable HW3_KISSING_CGROUP (auto | v1 | v2 | systemd | off) overrides the
choice; "off" is how the tests simulate a host without a usable cgroup.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from functools import lru_cache
from itertools import count
from pathlib import Path

ENV = "HW3_KISSING_CGROUP"
BACKENDS = ("auto", "v1", "v2", "systemd", "off")
MOUNT_ROOT = Path("/sys/fs/cgroup")
PROC_SELF = Path("/proc/self")  # tests point this at a fake /proc/self (cgroup, mountinfo)
SYSTEMD_RUNTIME = Path("/run/systemd/system")  # exists iff systemd is the running init (sd_booted)
EVALUATOR_LEAF = "hw3_evaluator"  # the leaf this process moves into (v2, see the module docstring)
V2_CONTROLLERS = {"memory", "pids"}
_names = count()
# Indirections the tests replace with recording stand-ins (a fake cgroupfs, no systemd here):
_rmdir = os.rmdir
_mkdir = os.mkdir
_run = subprocess.run
_which = shutil.which


def _write(path: Path, text: str) -> None:
    """Write one cgroupfs file (a single write(2): the kernel acts on each write)."""
    Path(path).write_text(text)


def backend_setting(backend: str = "auto") -> str:
    """The back end to use: `backend`, or the environment's choice when it is "auto"."""
    if backend == "auto":
        backend = os.environ.get(ENV, "auto") or "auto"
    if backend not in BACKENDS:
        raise ValueError(f"cgroup back end {backend!r} (${ENV}): choose one of {', '.join(BACKENDS)}")
    return backend


class Cgroup:
    """The cgroup folders of one run; `memory` / `pids` say which caps they hold."""

    def __init__(self, version: str, dirs: list[Path], memory: bool, pids: bool, *,
                 prefix: list[str] | None = None, unit: str | None = None, user: bool = False):
        self.version, self.dirs, self.memory, self.pids = version, dirs, memory, pids
        self.prefix, self.unit, self.user = prefix or [], unit, user

    def procs_files(self) -> list[str]:
        """The files a process writes its PID to, to join (its children inherit the cgroups)."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def launch_prefix(self) -> list[str]:
        """The command the launcher is started under ([] except for systemd: `systemd-run --scope ... --`)."""
        return list(self.prefix)

    def launch_env(self) -> dict:
        """What `systemd-run --user` needs to reach the user manager (nothing for the other back ends)."""
        if not self.user:
            return {}
        return {k: os.environ[k] for k in ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS") if k in os.environ}

    def _systemctl(self, *args: str) -> None:
        systemctl = _which("systemctl")
        if systemctl is None:
            return
        try:
            _run([systemctl, *(["--user"] if self.user else []), *args], stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def members(self) -> list[int]:
        if not self.dirs:
            return []
        try:
            return [int(p) for p in (self.dirs[0] / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill_all(self, wait_s: float = 3.0) -> None:
        """SIGKILL every process in the cgroup and wait (bounded) until it is empty."""
        if self.version == "systemd":
            self._systemctl("kill", "--signal=SIGKILL", self.unit)
            return
        kill_file = self.dirs[0] / "cgroup.kill"
        if self.version == "v2" and kill_file.exists():
            try:
                _write(kill_file, "1")
            except OSError:
                pass
        deadline = time.monotonic() + wait_s
        while self.members() and time.monotonic() < deadline:
            for pid in self.members():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)

    def remove(self, wait_s: float = 2.0) -> None:
        """Delete the folders; one whose last task is still exiting is busy for a moment, so retry.
        (systemd: stop the scope; `--collect` has it garbage-collected even after a failure.)"""
        if self.version == "systemd":
            self._systemctl("stop", self.unit)
            return
        deadline = time.monotonic() + wait_s
        for path in self.dirs:
            while path.exists():
                try:
                    _rmdir(path)
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)


def create(memory_bytes: int, max_processes: int, backend: str = "auto") -> Cgroup | None:
    """A fresh capped cgroup, or None where none can be made (no write access, controllers missing, "off")."""
    backend = backend_setting(backend)
    if backend == "off":
        return None
    name = f"hw3_kissing_{os.getpid()}_{next(_names)}"
    writable = os.geteuid() == 0 or _delegated()
    for version in (("v2", "v1", "systemd") if backend == "auto" else (backend,)):
        if version == "systemd":
            made = _create_systemd(name, memory_bytes, max_processes)
        elif not writable:
            continue
        else:
            made = _create_v2(name, memory_bytes, max_processes) if version == "v2" else \
                _create_v1(name, memory_bytes, max_processes)
        if made is not None:
            return made
    return None


def _create_systemd(name: str, memory_bytes: int, max_processes: int) -> Cgroup | None:
    """A transient scope per run through `systemd-run --scope` (None without a working systemd)."""
    systemd_run = _which("systemd-run")
    if systemd_run is None or not SYSTEMD_RUNTIME.is_dir():
        return None
    user = os.geteuid() != 0
    if not _systemd_scope_works(systemd_run, user):
        return None
    unit = f"{name}.scope"
    prefix = [systemd_run, *(["--user"] if user else []), "--scope", "--quiet", "--collect", f"--unit={unit}",
              "-p", f"MemoryMax={memory_bytes}", "-p", "MemorySwapMax=0", "-p", f"TasksMax={max_processes}", "--"]
    return Cgroup("systemd", [], memory=True, pids=True, prefix=prefix, unit=unit, user=user)


@lru_cache(maxsize=4)
def _systemd_scope_works(systemd_run: str, user: bool) -> bool:
    """One trial scope running `true` with the same properties (cached per process)."""
    try:
        done = _run([systemd_run, *(["--user"] if user else []), "--scope", "--quiet", "--collect",
                     "-p", "MemoryMax=64M", "-p", "TasksMax=8", "--", "true"],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30,
                    check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _delegated() -> bool:
    """A non-root user may own (be delegated) a v2 subtree, e.g. a systemd user session's app.slice."""
    parent = _v2_parent()
    return parent is not None and os.access(parent / "cgroup.procs", os.W_OK)


def _own_path(hierarchy: str) -> str | None:
    """This process's cgroup path in the v1 hierarchy naming `hierarchy`, or in v2 for "" ."""
    try:
        lines = (PROC_SELF / "cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if (hierarchy == "" and number == "0" and controllers == "") or hierarchy in controllers.split(","):
            return path.lstrip("/")
    return None


def _v2_dirs() -> tuple[Path, Path] | None:
    """(the unified hierarchy's mount point, this process's folder in it), or None without v2."""
    path = _own_path("")
    if path is None:
        return None
    try:
        mounts = (PROC_SELF / "mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split(" - ")
        if len(fields) == 2 and fields[1].split()[0] == "cgroup2":
            root = Path(line.split()[4])
            own = root / path
            return (root, own) if own.is_dir() else None
    return None


def _controllers(path: Path, file: str) -> set[str]:
    try:
        return set((path / file).read_text().split())
    except OSError:
        return set()


def _v2_parent() -> Path | None:
    """The v2 cgroup under which the run's cgroup can get memory and pids caps (see the module docstring)."""
    dirs = _v2_dirs()
    if dirs is None:
        return None
    root, own = dirs
    if V2_CONTROLLERS <= _controllers(own, "cgroup.subtree_control"):
        return own
    if own == root and V2_CONTROLLERS <= _controllers(own, "cgroup.controllers"):
        try:  # the root is exempt from the no-internal-processes rule: enabling is allowed
            _write((own / "cgroup.subtree_control"), "+memory +pids")
            return own
        except OSError:
            return None  # e.g. a container's namespace root, which is not the host's root
    if own.name == EVALUATOR_LEAF and V2_CONTROLLERS <= _controllers(own.parent, "cgroup.subtree_control"):
        return own.parent  # we moved into our leaf earlier: runs go beside it
    if own != root and V2_CONTROLLERS <= _controllers(own, "cgroup.controllers"):
        if _only_us(own) and _move_into_leaf(own):
            return own  # we sit in own/hw3_evaluator now: own has no processes and enables both
        return own.parent  # our parent enables both for its children: a sibling of ours gets them
    return None


def _only_us(cgroup: Path) -> bool:
    """Whether this process is the only one in `cgroup` (then moving it empties the cgroup)."""
    try:
        return set((cgroup / "cgroup.procs").read_text().split()) == {str(os.getpid())}
    except OSError:
        return False


def _move_into_leaf(own: Path) -> bool:
    """Move this process into own/EVALUATOR_LEAF and enable memory and pids in `own` (the
    no-internal-processes rule then holds: own's processes all live in leaves). On failure, move back."""
    leaf = own / EVALUATOR_LEAF
    made = False
    try:
        if not leaf.is_dir():
            _mkdir(leaf)
            made = True
        _write((leaf / "cgroup.procs"), str(os.getpid()))
    except OSError:
        if made:
            _try_rmdir(leaf)
        return False
    try:
        _write((own / "cgroup.subtree_control"), "+memory +pids")
        return True
    except OSError:
        try:
            _write((own / "cgroup.procs"), str(os.getpid()))  # back where we were
        except OSError:
            pass
        if made:
            _try_rmdir(leaf)
        return False


def _try_rmdir(path: Path) -> None:
    try:
        _rmdir(path)
    except OSError:
        pass


def _create_v2(name: str, memory_bytes: int, max_processes: int) -> Cgroup | None:
    parent = _v2_parent()
    if parent is None:
        return None
    path = parent / name
    group = Cgroup("v2", [path], memory=True, pids=True)
    try:
        _mkdir(path)
        _write((path / "pids.max"), str(max_processes))
        _write((path / "memory.max"), str(memory_bytes))
        if (path / "memory.swap.max").exists():
            _write((path / "memory.swap.max"), "0")
    except OSError:
        group.remove()
        return None
    return group


def _create_v1(name: str, memory_bytes: int, max_processes: int) -> Cgroup | None:
    """The pids cap is the point: without a pids hierarchy, None (a memory cap alone is made by v2 only)."""
    dirs, memory = [], False
    for controller, key, value in (("pids", "pids.max", max_processes),
                                   ("memory", "memory.limit_in_bytes", memory_bytes)):
        own = _own_path(controller)
        base = MOUNT_ROOT / controller / own if own is not None else None
        if base is None or not base.is_dir() or not os.access(base, os.W_OK):
            if controller == "pids":
                return None
            continue
        try:
            _mkdir(base / name)
            dirs.append(base / name)
            _write((base / name / key), str(value))
        except OSError:
            Cgroup("v1", dirs, False, False).remove()
            return None
        memory = memory or controller == "memory"
    return Cgroup("v1", dirs, memory=memory, pids=True)
