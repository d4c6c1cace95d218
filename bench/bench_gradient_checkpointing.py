"""Peak memory and time of one training forward/backward with and without gradient checkpointing.

The model is Qwen3-0.6B's shape (hw3lib.models.tiny.qwen3_0p6b_config: width 1,024, 151,936-entry
vocabulary) with random weights and `--layers` decoder layers (the real model has 28; a CPU with
24 GB holds a few). One step: `--batch` sequences of `--tokens` tokens through
`hw3lib.maths.logprobs.response_log_probs` (the training loop's log-probs, logits for the response
half only), the summed log-prob backpropagated. Each setting runs in its own subprocess, so its peak
resident memory (CPU: `ru_maxrss`) or peak allocated memory (CUDA) is its own; the time is the
median of `--repeats` steps after one warm-up.

    .venv/bin/python bench/bench_gradient_checkpointing.py                 # CPU, 4 layers, 2 x 1024 tokens
    .venv/bin/python bench/bench_gradient_checkpointing.py --device cuda --layers 28 --batch 8

Prints one line per setting and the ratios; writes bench/results/bench_gradient_checkpointing.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure(args) -> dict:
    """One setting, in this process: build the model, run the steps, report time and peak memory."""
    import resource

    import torch
    from transformers import Qwen3ForCausalLM

    from hw3lib.maths.logprobs import response_log_probs
    from hw3lib.models.load import enable_gradient_checkpointing
    from hw3lib.models.tiny import qwen3_0p6b_config

    torch.manual_seed(0)
    config = qwen3_0p6b_config()
    config.num_hidden_layers = args.layers
    model = Qwen3ForCausalLM(config).to(args.device)
    if args.checkpointing:
        enable_gradient_checkpointing(model)
    model.train()
    ids = torch.randint(0, config.vocab_size, (args.batch, args.tokens), device=args.device)
    half = args.tokens // 2
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    seconds = []
    for _ in range(args.repeats + 1):
        started = time.perf_counter()
        out = response_log_probs(model, ids[:, :-1], ids[:, -half:])  # the response half's log-probs
        out["log_probs"].sum().backward()
        model.zero_grad(set_to_none=True)
        if args.device == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
    peak = torch.cuda.max_memory_allocated() if args.device == "cuda" else \
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"checkpointing": args.checkpointing, "step_s": statistics.median(seconds[1:]), "peak_bytes": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--checkpointing", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args)))
        return
    results = []
    for checkpointing in (False, True):
        command = [sys.executable, __file__, "--child", "--device", args.device, "--layers", str(args.layers),
                   "--batch", str(args.batch), "--tokens", str(args.tokens), "--repeats", str(args.repeats)]
        output = subprocess.run(command + (["--checkpointing"] if checkpointing else []), check=True,
                                capture_output=True, text=True).stdout
        results.append(json.loads(output.strip().splitlines()[-1]))
        row = results[-1]
        print(f"checkpointing={str(checkpointing):5}  step {row['step_s']:7.2f} s  peak {row['peak_bytes'] / 2**30:6.2f} GiB",
              flush=True)
    plain, checkpointed = results
    print(f"checkpointing: peak x{checkpointed['peak_bytes'] / plain['peak_bytes']:.2f}, "
          f"time x{checkpointed['step_s'] / plain['step_s']:.2f}")
    import torch

    record = {"bench": "gradient_checkpointing", "command": " ".join(sys.argv), "device": args.device,
              "machine": platform.processor() or platform.machine(), "torch": torch.__version__,
              "shape": f"Qwen3-0.6B width, {args.layers} layers, {args.batch} x {args.tokens} tokens",
              "results": results}
    out = ROOT / "bench" / "results" / "bench_gradient_checkpointing.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
