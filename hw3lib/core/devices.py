"""The card a run is about to use: what it is, what precision it supports, what its datasheet says.

`detect_device()` reads torch.cuda's device 0 (name, total memory, compute capability) and the number of GPUs.
On a machine without one, `$HW3_SIMULATE_GPU` names a simulated card -- a key of `CARDS` (`H100-80GB`,
`A100-40GB`, `L4-24GB`, `RTX4090-24GB`, `T4-16GB`, ...) or `NAME:GiB:major.minor`, either with an optional `2x`
in front for two cards -- which is how CI rehearses the full profile's preflight on a CPU; else the CPU and its
memory. A real GPU wins over the variable. `supported_dtype` says which precision runs take there (bf16 from
compute capability 8.0: vLLM refuses it below), `accelerator_for` the card's datasheet peak and bandwidth for
the GPU-hour estimates (hw3lib.core.cost). hw3lib.core.preflight re-exports all of it and uses it first.

`CARDS`: dense bf16 (fp16 where there is no bf16) tensor-core peaks and memory bandwidths from each card's
datasheet or whitepaper (cited beside each row); the totals are what torch reports, approximately (public
nvidia-smi printouts), rounded down to 0.1 GiB.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
from dataclasses import dataclass

from hw3lib.core.cost import H100, Accelerator
from hw3lib.core.memory import GiB

SIMULATE_ENV = "HW3_SIMULATE_GPU"
BF16_MIN_CAPABILITY = (8, 0)


@dataclass(frozen=True)
class DeviceInfo:
    """The device runs will use: the first GPU (and how many there are), a simulated card, or the CPU."""

    kind: str  # "cuda" or "cpu"
    name: str
    total_bytes: int
    capability: tuple[int, int] | None
    count: int
    simulated: bool = False
    free_bytes: int = 0  # the memory free to this process: the driver's free bytes plus what it holds (0: all)

    @property
    def available_bytes(self) -> int:
        """What a run here may plan for: the free memory (`free_bytes`), else the whole card."""
        return self.free_bytes or self.total_bytes

    def describe(self) -> str:
        """`NVIDIA L4 (22.5 GiB, capability 8.9, simulated)`; `..., 61.0 GiB free` when others hold some."""
        bits = [f"{self.total_bytes / GiB:.1f} GiB"]
        if self.free_bytes and self.free_bytes < self.total_bytes:
            bits.append(f"{self.free_bytes / GiB:.1f} GiB free")
        if self.capability:
            bits.append(f"capability {self.capability[0]}.{self.capability[1]}")
        if self.count > 1:
            bits.append(f"{self.count} of them")
        if self.simulated:
            bits.append("simulated")
        return f"{self.name} ({', '.join(bits)})"


@dataclass(frozen=True)
class Card:
    """A known card: `key` names it in $HW3_SIMULATE_GPU; `pattern` finds it in a detected card's name."""

    key: str
    name: str  # as torch.cuda reports it
    gib: float  # total memory as torch reports it (approximate)
    capability: tuple[int, int]
    peak_flops: float  # dense bf16 tensor-core FLOP/s (fp16 on cards without bf16), from the datasheet
    bandwidth: float  # memory bytes/s, from the datasheet
    pattern: str


CARDS = (  # most specific pattern first
    # NVIDIA H100 datasheet: SXM 989 TFLOPS bf16 dense, 3.35 TB/s; PCIe 756 TFLOPS, 2.0 TB/s.
    Card("H100-PCIe", "NVIDIA H100 PCIe", 79.2, (9, 0), 756e12, 2.0e12, r"h100.*pcie"),
    Card("H100-80GB", "NVIDIA H100 80GB HBM3", 79.2, (9, 0), 989e12, 3.35e12, r"h100"),
    # NVIDIA H200 datasheet: 989 TFLOPS bf16 dense, 4.8 TB/s, 141 GB.
    Card("H200", "NVIDIA H200", 139.8, (9, 0), 989e12, 4.8e12, r"h200"),
    # NVIDIA A100 datasheet: 312 TFLOPS bf16 dense; 80 GB at 2,039 GB/s, 40 GB at 1,555 GB/s.
    Card("A100-80GB", "NVIDIA A100-SXM4-80GB", 79.2, (8, 0), 312e12, 2.039e12, r"a100.*80"),
    Card("A100-40GB", "NVIDIA A100-SXM4-40GB", 39.4, (8, 0), 312e12, 1.555e12, r"a100"),
    # NVIDIA L4 datasheet: 121 TFLOPS bf16 dense (242 with sparsity), 300 GB/s.
    Card("L4-24GB", "NVIDIA L4", 22.5, (8, 9), 121e12, 0.3e12, r"\bl4\b"),
    # NVIDIA A10 datasheet: 125 TFLOPS bf16 dense, 600 GB/s (AWS's A10G has no datasheet of its own: an upper bound).
    Card("A10G-24GB", "NVIDIA A10G", 22.5, (8, 6), 125e12, 0.6e12, r"\ba10g?\b"),
    # Ada whitepaper: RTX 4090 165.2 TFLOPS fp16/bf16 tensor with fp32 accumulate (dense), 1,008 GB/s.
    Card("RTX4090-24GB", "NVIDIA GeForce RTX 4090", 23.6, (8, 9), 165.2e12, 1.008e12, r"4090"),
    # Ampere GA102 whitepaper: RTX 3090 71 TFLOPS fp16/bf16 tensor with fp32 accumulate (dense), 936 GB/s.
    Card("RTX3090-24GB", "NVIDIA GeForce RTX 3090", 23.6, (8, 6), 71e12, 0.936e12, r"3090"),
    # NVIDIA T4 datasheet: 65 TFLOPS fp16 mixed precision, 320 GB/s; no bf16.
    Card("T4-16GB", "Tesla T4", 14.6, (7, 5), 65e12, 0.32e12, r"\bt4\b"),
    # NVIDIA V100 datasheet: SXM2 125 TFLOPS fp16 tensor, 900 GB/s; no bf16.
    Card("V100-16GB", "Tesla V100-SXM2-16GB", 15.8, (7, 0), 125e12, 0.9e12, r"v100"),
)


class PreflightError(ValueError):
    """The run cannot start on this device: one paragraph saying why and which settings would work."""

    def __init__(self, message: str, report=None, options: tuple[dict, ...] = ()) -> None:
        super().__init__(message)
        self.report = report  # hw3lib.core.preflight.PreflightReport, when the check got that far
        self.options = options  # the settings that fit, as dicts of config changes (`suggest`)

    @property
    def suggestions(self) -> tuple[str, ...]:
        return self.report.suggestions if self.report else ()


def simulated_device(value: str) -> DeviceInfo:
    """The card `$HW3_SIMULATE_GPU=value` names: a key of `CARDS` (any case) or `NAME:GiB:major.minor`, either
    with an optional `Nx` in front (N cards)."""
    text, count = value.strip(), 1
    counted = re.fullmatch(r"(\d+)\s*x\s*(.+)", text, flags=re.IGNORECASE)
    if counted:
        count, text = int(counted[1]), counted[2].strip()
    by_key = {card.key.lower(): card for card in CARDS}
    if text.lower() in by_key and count >= 1:
        card = by_key[text.lower()]
        return DeviceInfo("cuda", card.name, int(card.gib * GiB), card.capability, count, simulated=True)
    parts = text.split(":")
    custom = re.fullmatch(r"(\d+)\.(\d+)", parts[2].strip()) if len(parts) == 3 else None
    try:
        gib = float(parts[1]) if custom else 0.0
    except ValueError:
        gib = 0.0
    if not (custom and parts[0].strip() and gib > 0 and count >= 1):
        raise PreflightError(
            f"${SIMULATE_ENV}={value!r} names no card: use one of {', '.join(card.key for card in CARDS)}, or "
            "NAME:GiB:major.minor (e.g. 'MyCard:24:8.6' for 24 GiB at compute capability 8.6), optionally with "
            "'2x' in front for two cards; or unset it to check the real device")
    return DeviceInfo("cuda", parts[0].strip(), int(gib * GiB), (int(custom[1]), int(custom[2])), count,
                      simulated=True)


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system
        return 0


def cpu_threads() -> int:
    """The CPU threads this process should compute on: `$OMP_NUM_THREADS` when it is set to a number (`make test`
    sets 1 in each of the five jobs it runs at once, and a grid worker gets its share), else the cores this
    process may run on. More torch threads than that wait at thread barriers on each other: two walks of two
    threads each on 2 cores ran a 27-second SFT cell in 404 s (2026-11-29)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return max(1, min(cores, int(value))) if value.isdigit() else cores


def detect_device() -> DeviceInfo:
    """The first CUDA GPU (and how many there are); else the card `$HW3_SIMULATE_GPU` names; else the CPU."""
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return DeviceInfo("cuda", props.name, int(props.total_memory), (props.major, props.minor),
                          torch.cuda.device_count(), free_bytes=free_to_this_process(0))
    value = os.environ.get(SIMULATE_ENV, "").strip()
    if value:
        return simulated_device(value)
    return DeviceInfo("cpu", platform.processor() or platform.machine() or "cpu", _ram_bytes(), None, 1)


def free_to_this_process(index: int = 0) -> int:
    """Bytes of GPU `index` this process can plan for: what the driver reports free (`mem_get_info`: other
    processes' memory and a kept notebook kernel's are not free) plus what this process's caching allocator already
    reserves (its own earlier runs' blocks, reusable here), at most the card."""
    import torch

    free, total = torch.cuda.mem_get_info(index)
    return min(int(free) + int(torch.cuda.memory_reserved(index)), int(total))


def supported_dtype(info: DeviceInfo) -> tuple[str, str]:
    """`(dtype, reason)`: the precision runs take on this device."""
    if info.kind != "cuda":
        return "float32", "no GPU: float32 (the smoke profile's precision)"
    major, minor = info.capability or (0, 0)
    if (major, minor) >= BF16_MIN_CAPABILITY:
        return "bfloat16", (f"{info.name} has compute capability {major}.{minor} >= 8.0: bf16 autocast over float32 "
                            "masters, bf16 rollouts")
    return "float32", (f"{info.name} has compute capability {major}.{minor} < 8.0, without bf16 (vLLM refuses "
                       "bfloat16 below 8.0): dtype='float32', so the trainer trains in float32 without autocast "
                       "(about twice the activation memory, and slower) and the engine samples in float32")


def card_for(info: DeviceInfo) -> Card | None:
    """The entry of `CARDS` a detected card's name matches (an A100 without "80" in its name: by its memory)."""
    name = info.name.lower()
    for card in CARDS:
        if re.search(card.pattern, name):
            if card.key == "A100-40GB" and info.total_bytes > 60 * GiB:
                return next(c for c in CARDS if c.key == "A100-80GB")
            return card
    return None


def accelerator_for(info: DeviceInfo) -> Accelerator:
    """The card's datasheet peak and bandwidth for the GPU-hour estimates (hw3lib.core.cost); an H100's, with
    the name saying so, for a card not in `CARDS` (or no GPU)."""
    card = card_for(info) if info.kind == "cuda" else None
    if card is None:
        return dataclasses.replace(H100, name=f"{H100.name} (assumed: {info.name} is not in the card table)")
    return Accelerator(card.name, card.peak_flops, card.bandwidth)
