"""The system-call filter for sandboxed kissing programs, compiled with libseccomp (via `pyseccomp`).

bubblewrap's user namespace separates files, processes and the network, but some kernel state is
shared with the host no matter which namespace a process is in: the key rings (the evaluator's
session keyring and host users' keyrings), per-user quotas such as inotify instances, and
debugging interfaces that reach other processes of the same user (ptrace, process_vm_*). A program
that computes points needs none of that, so `filter_bytes()` builds a filter that allows every
system call except:

* `DENIED` -> EPERM: key management, tracing and other processes' memory, kernel-wide quotas and
  memory held outside the address-space limit (inotify/fanotify, memfd, SysV and POSIX IPC,
  io_uring, userfaultfd, bpf, perf), namespaces and mounts, and machine administration;
* `clone3` -> ENOSYS (its flags sit in memory a filter cannot read; the C library then falls back
  to `clone`), and `clone` with any namespace flag -> EPERM, so no new namespace is made inside.

System calls of other ABIs (32-bit `int 0x80`, x32) kill the caller: libseccomp's default for a
foreign architecture. The filter is the classic BPF program bubblewrap loads with `--seccomp FD`
just before it executes the runner; `filter_problem()` says why it cannot be built here ('' if
it can). Names this libseccomp does not know are skipped (the kernel it targets lacks them too).
"""

from __future__ import annotations

import errno
import os
import tempfile
from functools import lru_cache

DENIED = (
    # Key rings: the evaluator's session keyring and other users' keyrings are shared kernel state.
    "keyctl", "add_key", "request_key",
    # Other processes' memory and execution (bubblewrap's own init runs in the sandbox too).
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
    "migrate_pages", "move_pages", "perf_event_open",
    # Per-user kernel quotas shared with the host user, and memory outside RLIMIT_AS.
    "inotify_init", "inotify_init1", "fanotify_init", "memfd_create", "memfd_secret", "shmget", "shmat",
    "msgget", "semget", "mq_open", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "userfaultfd", "bpf",
    # Namespaces and mounts (the sandbox's own were set up before this filter applies).
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "name_to_handle_at", "open_by_handle_at",
    # Administration of the machine.
    "reboot", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "swapon",
    "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "sethostname", "setdomainname", "iopl", "ioperm", "lookup_dcookie", "vhangup", "uselib",
    "personality",
)
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x80)


@lru_cache(maxsize=1)
def _build() -> tuple[bytes, str]:
    try:
        import pyseccomp
    except (ImportError, OSError) as exc:  # the package, or the libseccomp.so.2 it loads, is missing
        return b"", (f"no seccomp filter ({type(exc).__name__}: {exc}); install it: `pip install pyseccomp` and "
                     "the system's libseccomp (Debian/Ubuntu: `apt-get install libseccomp2`)")
    try:
        syscall_filter = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
        native = pyseccomp.system_arch()
        for name in DENIED:
            if pyseccomp.resolve_syscall(native, name) < 0:
                continue  # unknown to this libseccomp: not a call this kernel/architecture has
            syscall_filter.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
        syscall_filter.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
        for flag in NAMESPACE_FLAGS:  # one rule per flag: a rule can only test (arg & mask) == value
            syscall_filter.add_rule(pyseccomp.ERRNO(errno.EPERM), "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag))
        return _export(syscall_filter), ""
    except (OSError, RuntimeError, ValueError) as exc:
        return b"", f"could not build the seccomp filter with libseccomp ({type(exc).__name__}: {exc})"


def _export(syscall_filter) -> bytes:
    """The filter as the BPF bytes bubblewrap reads (libseccomp writes them to a file descriptor)."""
    with tempfile.TemporaryFile() as handle:
        syscall_filter.export_bpf(handle)
        handle.seek(0)
        return handle.read()


def filter_bytes() -> bytes:
    """The compiled filter (b'' when it cannot be built: see `filter_problem`)."""
    return _build()[0]


def filter_problem() -> str:
    """'' when the filter builds here, else why not (and how to fix it)."""
    return _build()[1]


def filter_fd() -> int | None:
    """A fresh read-only descriptor holding the filter, for bubblewrap's `--seccomp` (None without one)."""
    data = filter_bytes()
    if not data:
        return None
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)  # a few KiB: fits the pipe buffer, so this never blocks
    finally:
        os.close(write_end)
    return read_end
