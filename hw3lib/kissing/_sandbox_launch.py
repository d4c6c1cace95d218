"""Start bubblewrap from a clean slate: join the run's cgroups, take a fresh session keyring, exec.

Usage: python -I -S _sandbox_launch.py KEYCTL_NR [CGROUP_PROCS_FILE ...] -- COMMAND [ARG ...]

Run by `hw3lib.kissing.sandbox` (stdlib only, as a script) between the evaluator and `bwrap`:

* it writes its own PID to each cgroup.procs file, so bubblewrap and everything the program
  starts are inside the run's cgroups from the first instruction (children inherit them);
* it replaces the session keyring inherited from the evaluator by a new anonymous one
  (keyctl JOIN_SESSION_KEYRING with no name; KEYCTL_NR is that system call's number here, -1 to
  skip), so no key the evaluator holds is "possessed" by the sandbox even before the seccomp
  filter applies;
* then it executes COMMAND in place (same PID: the evaluator's process group and kill still apply).

Any failure exits 125 with the reason on stderr (the evaluator reports it; it never runs the program
half set up).
"""

import ctypes
import os
import sys

KEYCTL_JOIN_SESSION_KEYRING = 1


def main(argv: list) -> int:
    try:
        split = argv.index("--")
    except ValueError:
        print(__doc__, file=sys.stderr)
        return 125
    keyctl_nr, files, command = int(argv[1]), argv[2:split], argv[split + 1:]
    try:
        for path in files:
            with open(path, "w") as handle:
                handle.write(str(os.getpid()))
    except OSError as exc:
        print(f"sandbox launcher: could not join the cgroup {path}: {exc}", file=sys.stderr)
        return 125
    if keyctl_nr >= 0:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(keyctl_nr, KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
            error = ctypes.get_errno()
            print(f"sandbox launcher: no fresh session keyring: {os.strerror(error)}", file=sys.stderr)
            return 125
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"sandbox launcher: cannot run {command[0]}: {exc}", file=sys.stderr)
    return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv))
