"""Drop one known, harmless line that a C++ library writes straight to file descriptor 2.

vLLM's CPU worker calls a torch extension that logs "NUMA binding: Using MEMBIND policy ..." through c10's
logger each time an engine starts: a one-node machine's memory policy, nothing the user can act on, in every
rehearsal log. It bypasses Python's `warnings` and `logging`, so it is filtered at the file descriptor: while
the engine starts, fd 2 goes to a temporary file, and afterwards every other line is written back to stderr, in
order. Used only on CPU (a crash inside would take the held lines with it; on a GPU nothing is held).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

MEMBIND_NOTICE = "NUMA binding: Using MEMBIND policy"


@contextmanager
def dropping_stderr_lines(marker: str) -> Iterator[None]:
    """Inside the block, lines written to fd 2 (by C++ or Python) that contain `marker` are dropped; the rest are
    written to `sys.stderr` when the block ends, also when it raises."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().decode(errors="replace").splitlines(keepends=True)
                    if marker not in line]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
