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
* "v1": a child in this process's cgroup of the `pids` hierarchy (`pids.max`) and, where mounted,
  the `memory` one (`memory.limit_in_bytes`).

"auto" tries v2, then v1. Both need write access to this process's cgroup (root, or a delegated
subtree); without it `create` returns None and the caller reports the sandbox as uncapped. The
environment variable HW3_KISSING_CGROUP (auto | v1 | v2 | off) overrides the choice; "off" is how
the tests simulate a host without a usable cgroup.
"""

from __future__ import annotations

import os
import signal
import time
from itertools import count
from pathlib import Path

ENV = "HW3_KISSING_CGROUP"
BACKENDS = ("auto", "v1", "v2", "off")
MOUNT_ROOT = Path("/sys/fs/cgroup")
PROC_SELF = Path("/proc/self")  # tests point this at a fake /proc/self (cgroup, mountinfo)
V2_CONTROLLERS = {"memory", "pids"}
_names = count()


def backend_setting(backend: str = "auto") -> str:
    """The back end to use: `backend`, or the environment's choice when it is "auto"."""
    if backend == "auto":
        backend = os.environ.get(ENV, "auto") or "auto"
    if backend not in BACKENDS:
        raise ValueError(f"cgroup back end {backend!r} (${ENV}): choose one of {', '.join(BACKENDS)}")
    return backend


class Cgroup:
    """The cgroup folders of one run; `memory` / `pids` say which caps they hold."""

    def __init__(self, version: str, dirs: list[Path], memory: bool, pids: bool):
        self.version, self.dirs, self.memory, self.pids = version, dirs, memory, pids

    def procs_files(self) -> list[str]:
        """The files a process writes its PID to, to join (its children inherit the cgroups)."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def members(self) -> list[int]:
        try:
            return [int(p) for p in (self.dirs[0] / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill_all(self, wait_s: float = 3.0) -> None:
        """SIGKILL every process in the cgroup and wait (bounded) until it is empty."""
        kill_file = self.dirs[0] / "cgroup.kill"
        if self.version == "v2" and kill_file.exists():
            try:
                kill_file.write_text("1")
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
        """Delete the folders; one whose last task is still exiting is busy for a moment, so retry."""
        deadline = time.monotonic() + wait_s
        for path in self.dirs:
            while path.exists():
                try:
                    path.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)


def create(memory_bytes: int, max_processes: int, backend: str = "auto") -> Cgroup | None:
    """A fresh capped cgroup, or None where none can be made (no write access, controllers missing, "off")."""
    backend = backend_setting(backend)
    if backend == "off" or os.geteuid() != 0 and not _delegated():
        return None
    name = f"hw3_kissing_{os.getpid()}_{next(_names)}"
    for version in (("v2", "v1") if backend == "auto" else (backend,)):
        made = _create_v2(name, memory_bytes, max_processes) if version == "v2" else \
            _create_v1(name, memory_bytes, max_processes)
        if made is not None:
            return made
    return None


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
            (own / "cgroup.subtree_control").write_text("+memory +pids")
            return own
        except OSError:
            return None  # e.g. a container's namespace root, which is not the host's root
    if own != root and V2_CONTROLLERS <= _controllers(own, "cgroup.controllers"):
        return own.parent  # our parent enables both for its children: a sibling of ours gets them
    return None


def _create_v2(name: str, memory_bytes: int, max_processes: int) -> Cgroup | None:
    parent = _v2_parent()
    if parent is None:
        return None
    path = parent / name
    group = Cgroup("v2", [path], memory=True, pids=True)
    try:
        path.mkdir()
        (path / "pids.max").write_text(str(max_processes))
        (path / "memory.max").write_text(str(memory_bytes))
        if (path / "memory.swap.max").exists():
            (path / "memory.swap.max").write_text("0")
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
            (base / name).mkdir()
            dirs.append(base / name)
            (base / name / key).write_text(str(value))
        except OSError:
            Cgroup("v1", dirs, False, False).remove()
            return None
        memory = memory or controller == "memory"
    return Cgroup("v1", dirs, memory=memory, pids=True)
