"""hw3lib.workbook.kernel: the workbook's kernels talk over IPC, so no TCP-encryption warning reaches the logs, and
two kernels started at once from the same folder (make test's parallel walks) both answer."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parents[2]
WARNING = "Kernel is running over TCP without encryption"


def _papermill(folder: Path, name: str, manager: str | None) -> tuple[subprocess.Popen, Path]:
    """A papermill process (not yet waited for) executing a one-cell notebook in `folder`."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source, out = folder / f"{name}.ipynb", folder / f"{name}.out.ipynb"
    nbformat.write(notebook, source)
    extra = f", kernel_manager_class={manager!r}" if manager else ""
    code = (f"import papermill; papermill.execute_notebook({str(source)!r}, {str(out)!r}, kernel_name='python3', "
            f"progress_bar=False{extra})")
    return subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True, cwd=folder), out


def _finish(process: subprocess.Popen, out: Path) -> str:
    _, stderr = process.communicate(timeout=180)
    assert process.returncode == 0, stderr
    executed = json.loads(out.read_text())
    assert "".join(executed["cells"][0]["outputs"][0]["text"]) == "42\n"
    return stderr


def test_two_ipc_kernels_started_at_once_in_one_folder_both_answer_without_the_warning(tmp_path):
    before = set(Path(tempfile.gettempdir()).glob("hw3-kernel-*"))
    started = [_papermill(tmp_path, name, "hw3lib.workbook.kernel.IPCKernelManager") for name in ("a", "b")]
    for stderr in [_finish(*pair) for pair in started]:
        assert WARNING not in stderr
    assert not list(tmp_path.glob("kernel-*ipc*"))  # nothing in the working folder
    assert set(Path(tempfile.gettempdir()).glob("hw3-kernel-*")) <= before  # the private folders are removed


def test_the_default_tcp_manager_is_what_logged_the_warning(tmp_path):
    assert WARNING in _finish(*_papermill(tmp_path, "tcp", None))  # if not, jupyter stopped warning: drop the module


def test_the_workbook_and_nbval_use_the_ipc_manager():
    assert 'kernel_manager_class="hw3lib.workbook.kernel.IPCKernelManager"' in (
        REPO_ROOT / "hw3lib" / "workbook" / "run.py").read_text()
    done = subprocess.run([sys.executable, "-c", "import runpy, nbval.kernel; "
                           "runpy.run_path('notebooks/conftest.py'); print(nbval.kernel.KernelManager.__name__, "
                           "nbval.kernel.KernelManager().transport)"],
                          capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert done.stdout.split() == ["IPCKernelManager", "ipc"], done.stderr


def test_a_shutdown_does_not_interrupt_the_idle_kernel_but_other_interrupts_go_through():
    import asyncio

    import pytest

    from hw3lib.workbook.kernel import IPCKernelManager

    manager = IPCKernelManager()  # no kernel started: jupyter_client's own interrupt refuses that
    with pytest.raises(RuntimeError, match="No kernel is running"):
        asyncio.run(manager._async_interrupt_kernel())  # a cell's timeout: delegated to jupyter_client
    manager.shutting_down = True
    asyncio.run(manager._async_interrupt_kernel())  # during a shutdown: skipped, nothing raised, nothing sent
