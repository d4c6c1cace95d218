"""hw3lib.core.stderr_filter: a line written to fd 2 (as C++ code writes it) is dropped by its marker; the
others come back in order, also when the block raises."""

import os
import sys

import pytest

from hw3lib.core.stderr_filter import MEMBIND_NOTICE, dropping_stderr_lines

NOTICE = ("[W1129 02:48:46.578238942 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy for memory "
          "allocation on the NUMA nodes (0). (function init_cpu_memory_env)\n")


def test_the_marked_line_is_dropped_and_the_rest_kept_in_order(capfd):
    with dropping_stderr_lines(MEMBIND_NOTICE):
        os.write(2, b"first line from C++\n")
        os.write(2, NOTICE.encode())
        print("a Python line", file=sys.stderr)
        os.write(2, b"last line\n")
    err = capfd.readouterr().err
    assert MEMBIND_NOTICE not in err and "a Python line" in err
    assert err.index("first line from C++") < err.index("last line")


def test_held_lines_come_back_when_the_block_raises_and_fd2_is_restored(capfd):
    with pytest.raises(RuntimeError, match="engine failed"):
        with dropping_stderr_lines(MEMBIND_NOTICE):
            os.write(2, b"why it failed\n")
            raise RuntimeError("engine failed")
    os.write(2, b"after the block\n")
    err = capfd.readouterr().err
    assert "why it failed" in err and "after the block" in err
