"""What the recording stand-in runs in a run's own process (tests/experiments/test_own_process_boundary.py): one
line per run, with the child's pid. Light on purpose (each child imports it): no torch, no hw3lib."""

from __future__ import annotations

import json
import os


def record_run(log: str, entry: str, run: str, resume: bool) -> int:
    """Record that `entry` ran `run` in this process; a run named `*interrupted*` started without `resume` is
    'interrupted' (Ctrl-C in the child: it checkpoints and stops)."""
    with open(log, "a") as handle:
        handle.write(json.dumps({"pid": os.getpid(), "entry": entry, "run": run, "resume": resume}) + "\n")
    if "interrupted" in run and not resume:
        raise KeyboardInterrupt
    return os.getpid()
