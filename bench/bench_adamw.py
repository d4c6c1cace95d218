"""AdamW's step: torch's default (multi-tensor "foreach"), single-tensor, and fused, as `hw3lib.core.lifecycle.adamw` picks.

The training loop's optimizer step on `--params` float32 parameters in three tensors (a Qwen3-0.6B-like split:
the 151,936 x 1,024 embedding and two large blocks) with gradients: time per step (the best of `--repeats`,
after one step that creates AdamW's moments) and the extra peak resident memory of those steps over the state
already held (`/proc/self/clear_refs`, each implementation in its own process). Prints the ratios against the
default, the reference.

    .venv/bin/python bench/bench_adamw.py                  # 215 M parameters (2 decoder layers' worth + the embedding)
    .venv/bin/python bench/bench_adamw.py --params 596e6   # Qwen3-0.6B's count
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from hw3lib.core.benchmark import run_child
from hw3lib.core.process_memory import status_bytes

IMPLEMENTATIONS = {"foreach": {"foreach": True}, "single-tensor": {"foreach": False}, "fused": {"fused": True}}


def measure(name: str, params: int, repeats: int, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    embedding = 151936 * 1024
    rest = max(0, params - embedding)
    tensors = [torch.nn.Parameter(torch.randn(n)) for n in (embedding, rest // 2, rest - rest // 2) if n]
    for tensor in tensors:
        tensor.grad = torch.randn_like(tensor)
    optimizer = torch.optim.AdamW(tensors, lr=1e-5, betas=(0.9, 0.95), **IMPLEMENTATIONS[name])
    optimizer.step()  # creates the moments
    Path("/proc/self/clear_refs").write_text("5")
    before = status_bytes("VmRSS")
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        optimizer.step()
        seconds.append(time.perf_counter() - started)
    return {"implementation": name, "step_s": min(seconds), "extra_peak_bytes": status_bytes("VmHWM") - before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=float, default=215e6, help="float32 parameters (default 215 M)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", choices=list(IMPLEMENTATIONS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        print(json.dumps(measure(args.only, int(args.params), args.repeats, args.threads)))
        return
    rows = {}
    for name in IMPLEMENTATIONS:
        rows[name] = run_child([__file__, "--only", name, "--params", args.params, "--repeats", args.repeats,
                                "--threads", args.threads])
    reference = rows["foreach"]
    for name, row in rows.items():
        print(f"{name:14s} {row['step_s']:.3f} s per step ({reference['step_s'] / row['step_s']:.1f}x the default's "
              f"speed), extra peak {row['extra_peak_bytes'] / 2**30:.2f} GiB")
    print(f"{args.params / 1e6:.0f} M float32 parameters, {args.threads} threads")


if __name__ == "__main__":
    main()
