"""Run a command with every workbook output in a fresh temporary folder: what `make test` runs nbval in.

`python -m hw3lib.workbook.isolated COMMAND ...` makes a temporary folder, runs COMMAND with
`hw3lib.core.io.isolated_output_env(folder)` ($HW3_OUTPUT_DIR and $HW3_RUNS_DIR pointing into it), removes
the folder and exits with COMMAND's status. The notebooks' runs, figures and result files then land in that
folder, so a workbook's `runs/`, `figures/` and `writeup/` (hours of runs) are never touched, and tests
never read results that a different setting left behind (tests/workbook/test_isolation.py checks both).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from hw3lib.core.io import isolated_output_env


def run_isolated(command: Sequence[str], keep: bool = False, **popen_kwargs) -> int:
    """Run `command` with its outputs in a new temporary folder (removed afterwards unless `keep`);
    returns its exit status."""
    folder = tempfile.mkdtemp(prefix="hw3_test_outputs_")
    env = {**popen_kwargs.pop("env", os.environ), **isolated_output_env(folder)}
    try:
        return subprocess.call(list(command), env=env, **popen_kwargs)
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    command = list(sys.argv[1:] if argv is None else argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print(__doc__.strip().splitlines()[0] + "\nusage: python -m hw3lib.workbook.isolated COMMAND ...",
              file=sys.stderr)
        return 2
    try:
        return run_isolated(command)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
