"""hw3lib.workbook.kernel: the workbook's kernels talk over IPC, so no TCP-encryption warning reaches the logs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parents[2]
WARNING = "Kernel is running over TCP without encryption"


def _run_papermill(tmp_path: Path, manager: str | None) -> tuple[str, dict]:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source, out = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(notebook, source)
    extra = f", kernel_manager_class={manager!r}" if manager else ""
    code = (f"import papermill; papermill.execute_notebook({str(source)!r}, {str(out)!r}, kernel_name='python3', "
            f"progress_bar=False{extra})")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stderr, json.loads(out.read_text())


def test_papermill_with_the_ipc_manager_runs_the_notebook_without_the_warning(tmp_path):
    stderr, executed = _run_papermill(tmp_path, "hw3lib.workbook.kernel.IPCKernelManager")
    assert "".join(executed["cells"][0]["outputs"][0]["text"]) == "42\n"
    assert WARNING not in stderr
    assert not list(tmp_path.glob("kernel-*ipc*"))  # the sockets live in Jupyter's runtime folder, removed after


def test_the_default_tcp_manager_is_what_logged_the_warning(tmp_path):
    stderr, _ = _run_papermill(tmp_path, None)
    assert WARNING in stderr  # if this fails, jupyter stopped warning and hw3lib.workbook.kernel can go


def test_the_workbook_and_nbval_use_the_ipc_manager():
    assert 'kernel_manager_class="hw3lib.workbook.kernel.IPCKernelManager"' in (
        REPO_ROOT / "hw3lib" / "workbook" / "run.py").read_text()
    done = subprocess.run([sys.executable, "-c", "import runpy, nbval.kernel; "
                           "runpy.run_path('notebooks/conftest.py'); print(nbval.kernel.KernelManager.__name__, "
                           "nbval.kernel.KernelManager().transport)"],
                          capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert done.stdout.split() == ["IPCKernelManager", "ipc"], done.stderr
