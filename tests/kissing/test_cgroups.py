"""Where the v2 back end puts a run's cgroup, against a fake cgroup file system.

This machine (and CI) mounts cgroup v1 for memory and pids, so the v2 path cannot run for real
here; these tests give `hw3lib.kissing.cgroups` a fake /proc/self and a fake unified hierarchy
and check the one rule that broke it before: a cgroup that holds processes (ours) cannot enable
controllers for its children, so the run's cgroup must not be made under it.
"""

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
