"""This process's memory as Linux reports it in /proc/self/status (the benchmarks' peak and current RSS).

`status_bytes("VmHWM")` is the peak resident set since the process started, `status_bytes("VmRSS")` the current
one, both in bytes. Linux only: elsewhere the file is missing and the error says so.
"""

from __future__ import annotations

from pathlib import Path

STATUS = Path("/proc/self/status")


def status_bytes(field: str) -> int:
    """A `kB` field of /proc/self/status (VmHWM, VmRSS, ...) in bytes."""
    if not STATUS.is_file():
        raise RuntimeError(f"{STATUS} is missing: memory figures need Linux")
    for line in STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in {STATUS}")


def peak_rss() -> int:
    """This process's peak resident set (VmHWM), in bytes."""
    return status_bytes("VmHWM")
