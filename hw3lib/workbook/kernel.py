"""The notebook kernels the workbook starts (papermill in `make workbook`, nbval in `make test`) talk over IPC.

jupyter_client starts a kernel on TCP by default, and ipykernel then logs "Kernel is running over TCP without
encryption ..." into every `make` log (issue 46). The kernel and its client always share this machine, so Unix
domain sockets (zmq's `ipc` transport, files next to the kernel's connection file in Jupyter's runtime folder,
removed at shutdown) carry the same messages without that warning and without any port on loopback.
`IPCKernelManager` is passed to papermill (hw3lib.workbook.run) and swapped into nbval by notebooks/conftest.py.
"""

from __future__ import annotations

from jupyter_client.manager import KernelManager
from traitlets import CaselessStrEnum


class IPCKernelManager(KernelManager):
    """A KernelManager whose kernels listen on Unix domain sockets instead of loopback TCP."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)
