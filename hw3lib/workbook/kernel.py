"""The notebook kernels the workbook starts (papermill in `make workbook`, nbval in `make test`) talk over IPC.

jupyter_client starts a kernel on loopback TCP by default, and ipykernel then logs "Kernel is running over TCP
without encryption ..." into every `make` log (issue 46). The kernel and its client always share this machine, so
Unix domain sockets (zmq's `ipc` transport) carry the same messages without that warning and without a port.

Each kernel's sockets live in a private folder of its own (`hw3-kernel-*` in the temporary directory, mode 0700,
removed when the process that started the kernel exits). jupyter_client's own IPC default names the sockets after
the connection file, or `kernel-ipc-<n>` relative to the working directory when it has none yet; `make test` starts
kernels from two walks at once in the same notebooks/ folder, and two kernels that pick the same names do not
answer (seen: both walks stalled for 60 s). A folder per kernel makes the names unique whatever starts them.
jupyter_client also sends SIGINT before every shutdown request. The workbook shuts a kernel down only after its last
cell has finished, so that interrupt finds it idle and only makes ipykernel log "KeyboardInterrupt caught in
kernel" into the `make` log, now and then; `IPCKernelManager` skips it during a shutdown (a cell that times out is
still interrupted by nbclient first, and a kernel that ignores the shutdown request still gets SIGTERM, then SIGKILL).
`IPCKernelManager` is passed to papermill (hw3lib.workbook.run) and swapped into nbval by notebooks/conftest.py.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from jupyter_client.manager import KernelManager
from traitlets import CaselessStrEnum


class IPCKernelManager(KernelManager):
    """A KernelManager whose kernels listen on Unix domain sockets in a private folder instead of loopback TCP."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)

    def _ip_default(self) -> str:
        if self.transport != "ipc":
            return super()._ip_default()
        folder = tempfile.mkdtemp(prefix="hw3-kernel-")  # 0700, short enough for a socket path (< 108 bytes)
        # Not removed at the kernel's shutdown: a restarted kernel binds the same paths again.
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        return os.path.join(folder, "ipc")

    async def _async_interrupt_kernel(self) -> None:
        if self.shutting_down:  # see the module docstring: the kernel is idle, the interrupt would only be logged
            return
        await super()._async_interrupt_kernel()
