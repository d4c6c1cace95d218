"""Where the v2 back end puts a run's cgroup, against a fake cgroup file system.

This machine (and CI) mounts cgroup v1 for memory and pids, so the v2 path cannot run for real
here; these tests give `hw3lib.kissing.cgroups` a fake /proc/self and a fake unified hierarchy
and check the one rule that broke it before: a cgroup that holds processes (ours) cannot enable
controllers for its children, so the run's cgroup must not be made under it.
"""

import subprocess
from pathlib import Path

import pytest

from hw3lib.kissing import cgroups


def fake_v2_host(tmp_path: Path, monkeypatch, own: str, controllers: dict[str, tuple[str, str]]) -> Path:
    """A unified hierarchy at tmp/cg with `controllers[path] = (cgroup.controllers, cgroup.subtree_control)`."""
    root = tmp_path / "cg"
    for relative, (available, enabled) in controllers.items():
        folder = root / relative if relative else root
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cgroup.controllers").write_text(available + "\n")
        (folder / "cgroup.subtree_control").write_text(enabled + "\n")
        (folder / "cgroup.procs").write_text("")
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text(f"0::/{own}\n")
    (proc / "mountinfo").write_text(f"31 25 0:27 / {root} rw,nosuid,nodev - cgroup2 cgroup2 rw\n"
                                    "32 25 0:28 / /elsewhere rw - tmpfs tmpfs rw\n")
    monkeypatch.setattr(cgroups, "PROC_SELF", proc)
    monkeypatch.setattr(cgroups.os, "geteuid", lambda: 0)
    return root


def made_files(group: cgroups.Cgroup) -> dict[str, str]:
    return {name: (group.dirs[0] / name).read_text() for name in ("pids.max", "memory.max")}


def test_v2_under_a_cgroup_with_processes_makes_a_sibling_and_leaves_ours_alone(tmp_path, monkeypatch):
    root = fake_v2_host(tmp_path, monkeypatch, "user.slice/session-3.scope", {
        "": ("cpu memory pids", "cpu memory pids"),
        "user.slice": ("cpu memory pids", "memory pids"),
        "user.slice/session-3.scope": ("memory pids", ""),
    })
    group = cgroups.create(2**30, 64, backend="v2")
    assert group is not None and group.version == "v2"
    assert group.dirs[0].parent == root / "user.slice"  # a sibling of our own cgroup
    assert made_files(group) == {"pids.max": "64", "memory.max": str(2**30)}
    assert group.procs_files() == [str(root / "user.slice" / group.dirs[0].name / "cgroup.procs")]
    # Our own cgroup's subtree_control was never written (EBUSY on a real host).
    assert (root / "user.slice/session-3.scope/cgroup.subtree_control").read_text() == "\n"


def test_v2_uses_our_cgroup_where_it_already_enables_both(tmp_path, monkeypatch):
    root = fake_v2_host(tmp_path, monkeypatch, "delegated", {
        "": ("memory pids", "memory pids"),
        "delegated": ("memory pids", "memory pids"),
    })
    group = cgroups.create(2**29, 32, backend="v2")
    assert group is not None and group.dirs[0].parent == root / "delegated"
    assert made_files(group) == {"pids.max": "32", "memory.max": str(2**29)}


def test_v2_at_the_hierarchy_root_enables_the_controllers_there(tmp_path, monkeypatch):
    root = fake_v2_host(tmp_path, monkeypatch, "", {"": ("cpu memory pids", "cpu")})
    group = cgroups.create(2**30, 64, backend="v2")
    assert group is not None and group.dirs[0].parent == root
    assert (root / "cgroup.subtree_control").read_text() == "+memory +pids"


@pytest.mark.parametrize("available", ["memory", "pids", "cpu io"])
def test_v2_without_memory_and_pids_from_the_parent_gives_no_cgroup(tmp_path, monkeypatch, available):
    fake_v2_host(tmp_path, monkeypatch, "a/b", {"": (available, available), "a": (available, available),
                                                "a/b": (available, "")})
    assert cgroups.create(2**30, 64, backend="v2") is None
    assert sorted(p.name for p in (tmp_path / "cg" / "a").iterdir() if p.is_dir()) == ["b"]  # nothing made


def test_v2_not_mounted_gives_no_cgroup(tmp_path, monkeypatch):
    fake_v2_host(tmp_path, monkeypatch, "x", {"": ("memory pids", "memory pids"), "x": ("memory pids", "")})
    (tmp_path / "proc" / "mountinfo").write_text("32 25 0:28 / /elsewhere rw - tmpfs tmpfs rw\n")
    assert cgroups.create(2**30, 64, backend="v2") is None


def test_off_and_bad_settings(monkeypatch):
    monkeypatch.setenv(cgroups.ENV, "off")
    assert cgroups.create(2**30, 64) is None
    with pytest.raises(ValueError, match="HW3_KISSING_CGROUP"):
        cgroups.backend_setting("v3")


# ---------------------------------------------------------------------------------------------
# A fake cgroupfs with the kernel's rules that matter here: rmdir only of an empty cgroup (no
# processes, no children; the interface files go with it), cgroup.kill empties it, and the
# no-internal-processes rule: enabling controllers for children of a cgroup that holds processes fails.


class FakeKernel:
    """What cgroupfs does on mkdir, write and rmdir, for the files `hw3lib.kissing.cgroups` touches:

    - mkdir makes the interface files (cgroup.procs, cgroup.kill, memory.max, memory.swap.max, pids.max,
      cgroup.controllers = the parent's subtree_control, cgroup.subtree_control);
    - writing a PID to cgroup.procs *moves* it (out of every other cgroup);
    - writing "+memory +pids" to cgroup.subtree_control fails with EBUSY while the cgroup holds processes
      (the no-internal-processes rule; the root is exempt) or when `fail_enable` is set;
    - writing 1 to cgroup.kill kills (records) and removes every process of the cgroup;
    - rmdir fails with EBUSY while the cgroup has processes or children; the interface files go with it.
    """

    INTERFACE = ("cgroup.procs", "cgroup.kill", "memory.max", "memory.swap.max", "pids.max", "cgroup.subtree_control")

    def __init__(self, root: Path, monkeypatch, fail_enable: bool = False):
        self.root, self.killed, self.fail_enable = root, [], fail_enable
        monkeypatch.setattr(cgroups, "_rmdir", self.rmdir)
        monkeypatch.setattr(cgroups, "_mkdir", self.mkdir)
        monkeypatch.setattr(cgroups, "_write", self.write)
        monkeypatch.setattr(cgroups.os, "kill", lambda pid, sig: self.killed.append((pid, sig)))

    def procs(self, folder: Path) -> list[str]:
        file = folder / "cgroup.procs"
        return file.read_text().split() if file.exists() else []

    def mkdir(self, path):
        path = Path(path)
        path.mkdir()
        for name in self.INTERFACE:
            (path / name).write_text("")
        (path / "cgroup.controllers").write_text((path.parent / "cgroup.subtree_control").read_text())

    def write(self, path, text):
        path = Path(path)
        if path.name == "cgroup.procs":
            for pid in text.split():
                for other in self.root.rglob("cgroup.procs"):
                    other.write_text(" ".join(p for p in other.read_text().split() if p != pid))
                path.write_text(" ".join(self.procs(path.parent) + [pid]))
                if pid == str(cgroups.os.getpid()):  # /proc/self/cgroup follows the move
                    (cgroups.PROC_SELF / "cgroup").write_text(f"0::/{path.parent.relative_to(self.root)}\n")
        elif path.name == "cgroup.subtree_control":
            if self.fail_enable or (path.parent != self.root and self.procs(path.parent)):
                raise OSError(16, "Device or resource busy", str(path))
            path.write_text(" ".join(word.lstrip("+") for word in text.split()))  # read back as "memory pids"
        elif path.name == "cgroup.kill":
            self.killed += [(int(p), 9) for p in self.procs(path.parent)]
            (path.parent / "cgroup.procs").write_text("")
            path.write_text(text)
        else:
            path.write_text(text)

    def rmdir(self, path):
        path = Path(path)
        if self.procs(path) or any(p.is_dir() for p in path.iterdir()):
            raise OSError(16, "Device or resource busy", str(path))
        for file in path.iterdir():
            file.unlink()
        path.rmdir()


def test_v2_alone_in_our_cgroup_moves_into_a_leaf_and_caps_runs_beside_it(tmp_path, monkeypatch):
    me = str(cgroups.os.getpid())
    root = fake_v2_host(tmp_path, monkeypatch, "container", {
        "": ("memory pids", "memory pids"),
        "container": ("cpu memory pids", ""),  # we are its only process; it enables nothing yet
    })
    (root / "container" / "cgroup.procs").write_text(me + "\n")
    kernel = FakeKernel(root, monkeypatch)
    group = cgroups.create(2**30, 64, backend="v2")
    own = root / "container"
    assert kernel.procs(own) == []  # we left it: the no-internal-processes rule allowed enabling
    assert group is not None and group.dirs[0].parent == own  # not a sibling: the parent is not needed
    assert (own / cgroups.EVALUATOR_LEAF / "cgroup.procs").read_text() == me  # we moved into the leaf
    assert (own / "cgroup.subtree_control").read_text() == "memory pids"
    assert (cgroups.PROC_SELF / "cgroup").read_text() == f"0::/container/{cgroups.EVALUATOR_LEAF}\n"
    assert made_files(group) == {"pids.max": "64", "memory.max": str(2**30)}
    # a run: the launcher joins, the program forks; then kill and clean-up
    for pid in ("424242", "424243"):
        kernel.write(group.procs_files()[0], pid)
    assert group.members() == [424242, 424243]
    with pytest.raises(OSError):
        kernel.rmdir(group.dirs[0])  # busy while processes are in it
    group.kill_all(wait_s=1.0)
    assert (group.dirs[0] / "cgroup.kill").read_text() == "1"
    assert sorted(kernel.killed) == [(424242, 9), (424243, 9)] and group.members() == []
    group.remove(wait_s=1.0)
    assert not group.dirs[0].exists()
    assert sorted(p.name for p in own.iterdir() if p.is_dir()) == [cgroups.EVALUATOR_LEAF]  # only the leaf stays
    # a second run reuses the leaf and needs no second move
    second = cgroups.create(2**29, 32, backend="v2")
    assert second is not None and second.dirs[0].parent == own and second.dirs[0] != group.dirs[0]
    assert not (own / cgroups.EVALUATOR_LEAF / cgroups.EVALUATOR_LEAF).exists()  # no leaf inside the leaf
    second.remove(wait_s=1.0)


def test_v2_never_moves_when_others_share_our_cgroup(tmp_path, monkeypatch):
    me = str(cgroups.os.getpid())
    root = fake_v2_host(tmp_path, monkeypatch, "user.slice/session.scope", {
        "": ("memory pids", "memory pids"),
        "user.slice": ("memory pids", "memory pids"),
        "user.slice/session.scope": ("memory pids", ""),
    })
    (root / "user.slice/session.scope/cgroup.procs").write_text(f"1 {me}\n")  # a shell beside us
    group = cgroups.create(2**30, 64, backend="v2")
    assert group is not None and group.dirs[0].parent == root / "user.slice"  # the sibling route
    assert not (root / "user.slice/session.scope" / cgroups.EVALUATOR_LEAF).exists()


def test_v2_leaf_move_is_undone_when_enabling_fails(tmp_path, monkeypatch):
    me = str(cgroups.os.getpid())
    root = fake_v2_host(tmp_path, monkeypatch, "a/b", {
        "": ("memory pids", "memory pids"), "a": ("memory pids", "memory pids"), "a/b": ("memory pids", ""),
    })
    own = root / "a/b"
    (own / "cgroup.procs").write_text(me)
    kernel = FakeKernel(root, monkeypatch, fail_enable=True)
    group = cgroups.create(2**30, 64, backend="v2")
    assert group is not None and group.dirs[0].parent == root / "a"  # fell back to the sibling route
    assert not (own / cgroups.EVALUATOR_LEAF).exists() and kernel.procs(own) == [me]  # moved back, leaf gone


# ---------------------------------------------------------------------------------------------
# systemd-run --scope, with a recording stand-in for the subprocess call


class Recorder:
    def __init__(self, returncode: int = 0):
        self.calls, self.returncode = [], returncode

    def __call__(self, argv, **kwargs):
        self.calls.append(list(argv))
        return subprocess.CompletedProcess(argv, self.returncode)


@pytest.fixture
def fake_systemd(tmp_path, monkeypatch):
    runtime = tmp_path / "run-systemd-system"
    runtime.mkdir()
    monkeypatch.setattr(cgroups, "SYSTEMD_RUNTIME", runtime)
    monkeypatch.setattr(cgroups, "_which", lambda name: f"/usr/bin/{name}")
    recorder = Recorder()
    monkeypatch.setattr(cgroups, "_run", recorder)
    cgroups._systemd_scope_works.cache_clear()
    yield recorder
    cgroups._systemd_scope_works.cache_clear()


@pytest.mark.parametrize("uid, user_flag", [(0, []), (1000, ["--user"])])
def test_systemd_scope_prefix_probe_and_cleanup(fake_systemd, monkeypatch, uid, user_flag):
    monkeypatch.setattr(cgroups.os, "geteuid", lambda: uid)
    group = cgroups.create(2**30, 64, backend="systemd")
    assert group is not None and group.version == "systemd" and group.memory and group.pids
    probe = fake_systemd.calls[0]
    assert probe[:1 + len(user_flag)] == ["/usr/bin/systemd-run", *user_flag] and probe[-2:] == ["--", "true"]
    prefix = group.launch_prefix()
    assert prefix[:2 + len(user_flag)] == ["/usr/bin/systemd-run", *user_flag, "--scope"] and prefix[-1] == "--"
    assert {"MemoryMax=1073741824", "MemorySwapMax=0", "TasksMax=64"} <= set(prefix)
    assert f"--unit={group.unit}" in prefix and "--collect" in prefix and group.procs_files() == []
    group.kill_all()
    group.remove()
    assert fake_systemd.calls[1:] == [["/usr/bin/systemctl", *user_flag, "kill", "--signal=SIGKILL", group.unit],
                                      ["/usr/bin/systemctl", *user_flag, "stop", group.unit]]
    cgroups.create(2**30, 64, backend="systemd")
    assert sum(1 for c in fake_systemd.calls if c[-1] == "true") == 1  # the trial scope runs once


def test_systemd_absent_or_failing_gives_no_cgroup(fake_systemd, monkeypatch):
    monkeypatch.setattr(cgroups.os, "geteuid", lambda: 1000)
    fake_systemd.returncode = 1  # e.g. no user manager
    assert cgroups.create(2**30, 64, backend="systemd") is None
    cgroups._systemd_scope_works.cache_clear()
    fake_systemd.calls.clear()
    cgroups.SYSTEMD_RUNTIME.rmdir()  # systemd is not the running init
    assert cgroups.create(2**30, 64, backend="systemd") is None and fake_systemd.calls == []


def test_auto_falls_back_to_systemd_for_a_user_without_a_delegated_cgroup(fake_systemd, monkeypatch, tmp_path):
    fake_v2_host(tmp_path, monkeypatch, "user.slice/s.scope", {"": ("memory pids", "memory pids"),
                                                               "user.slice": ("memory pids", "memory pids"),
                                                               "user.slice/s.scope": ("memory pids", "")})
    monkeypatch.setattr(cgroups.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(cgroups.os, "access", lambda path, mode: False)  # nothing delegated to us
    group = cgroups.create(2**30, 64)
    assert group is not None and group.version == "systemd"


def test_the_sandbox_starts_its_launcher_under_the_systemd_scope(fake_systemd, monkeypatch, tmp_path):
    from hw3lib.kissing import sandbox as sb

    monkeypatch.setattr(cgroups.os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    group = cgroups.create(2**30, 64, backend="systemd")
    monkeypatch.setattr(sb.cgroups, "create", lambda *a, **k: group)
    result_r, result_w = sb.os.pipe()
    fds = [result_w]
    command, env, info_r, made, _ = sb._bwrap_launch(tmp_path / "runner.py", [], {}, None, result_w, fds, 2**30,
                                                      "systemd", False)
    try:
        assert made is group and command[:len(group.launch_prefix())] == group.launch_prefix()
        assert command[len(group.launch_prefix())] == sb.sys.executable  # then the launcher, in the scope
        assert env["XDG_RUNTIME_DIR"] == "/run/user/1000"
    finally:
        for fd in {result_r, info_r, *fds}:
            sb.os.close(fd)
