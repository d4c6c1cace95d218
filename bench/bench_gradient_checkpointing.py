"""Peak memory and time of one training forward/backward with and without gradient checkpointing.

The model is Qwen3-0.6B's shape (hw3lib.models.tiny.qwen3_0p6b_config: width 1,024, 151,936-entry
vocabulary) with random weights and `--layers` decoder layers (the real model has 28; a CPU with
24 GB holds a few). One step: `--batch` sequences of `--tokens` tokens through
`hw3lib.maths.logprobs.response_log_probs` (the training loop's log-probs, logits for the response
half only), the summed log-prob backpropagated. Each setting runs in its own subprocess, so its peak
resident memory (CPU: VmHWM) or peak allocated memory (CUDA) is its own; the time is the
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
import time
from pathlib import Path

from hw3lib.core.benchmark import peak_memory, record_header, run_child, write_json

ROOT = Path(__file__).resolve().parents[1]


def measure(args) -> dict:
    """One setting, in this process: build the model, run the steps, report time and peak memory."""
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
    return {"checkpointing": args.checkpointing, "step_s": statistics.median(seconds[1:]),
            "peak_bytes": peak_memory(args.device)}


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
        command = [__file__, "--child", "--device", args.device, "--layers", args.layers, "--batch", args.batch,
                   "--tokens", args.tokens, "--repeats", args.repeats]
        results.append(run_child(command + (["--checkpointing"] if checkpointing else [])))
        row = results[-1]
        print(f"checkpointing={str(checkpointing):5}  step {row['step_s']:7.2f} s  peak {row['peak_bytes'] / 2**30:6.2f} GiB",
              flush=True)
    plain, checkpointed = results
    print(f"checkpointing: peak x{checkpointed['peak_bytes'] / plain['peak_bytes']:.2f}, "
          f"time x{checkpointed['step_s'] / plain['step_s']:.2f}")
    import torch

    record = {**record_header("gradient_checkpointing", args.device), "machine": platform.processor() or platform.machine(), "torch": torch.__version__,
              "shape": f"Qwen3-0.6B width, {args.layers} layers, {args.batch} x {args.tokens} tokens",
              "results": results}
    write_json(ROOT / "bench" / "results" / "bench_gradient_checkpointing.json", record)


if __name__ == "__main__":
    main()
