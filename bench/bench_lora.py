"""LoRA vs full fine-tuning at Qwen3-0.6B's real width: time and peak memory of one optimizer step, trainable
parameters, and the time to merge the adapters and push the weights to a rollout engine.

The model is Qwen3-0.6B's shape (hw3lib.models.tiny.qwen3_0p6b_config: width 1,024, 151,936-entry vocabulary,
tied embeddings) with random weights and `--layers` decoder layers (the real model has 28). One optimizer
step as the training loop takes it: float32 master weights, `--batch` sequences of `--tokens` tokens through
`hw3lib.maths.logprobs.response_log_probs` under `--dtype` autocast (logits for the response half only), the
summed log-prob backpropagated, then AdamW (betas 0.9/0.95). Settings: full fine-tuning (every weight
trained) or LoRA (`--rank`, alpha 2 x rank, every attention and MLP projection; hw3lib.models.lora), each
with and without gradient checkpointing (`--checkpointing-too`).

After the timed steps each setting pushes its weights into a bf16 copy of the model, as the GRPO loop does
after a step (hw3lib.generation.policy_weights_for_engine + the engines' copy): full fine-tuning casts and
copies the state dict; LoRA first merges W + (alpha / r) B A per target (`merge_s` is that merge alone). The
push is timed the second time (the first also faults in the engine copy's fresh memory pages).

Each setting runs in its own subprocess, so its peak resident memory (CPU: VmHWM, measured before the
push; the push's engine copy is `peak_after_push_bytes`) or peak allocated memory (CUDA) is its own; the
time is the median of `--repeats` steps after one warm-up.

    .venv/bin/python bench/bench_lora.py                                  # CPU: 2 and 4 layers, 2 x 256 tokens
    .venv/bin/python bench/bench_lora.py --device cuda --layers 28 --batch 8 --tokens 1024

Prints one line per setting and the ratios; writes bench/results/bench_lora.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from hw3lib.core.benchmark import peak_memory as peak_bytes
from hw3lib.core.benchmark import record_header, run_child, write_json

ROOT = Path(__file__).resolve().parents[1]


def measure(args) -> dict:
    """One setting, in this process: build the model, take the steps, push the weights; report times and memory."""
    import torch
    from transformers import Qwen3ForCausalLM

    from hw3lib.core.config import RunConfig
    from hw3lib.generation import policy_weights_for_engine
    from hw3lib.generation.base import copy_named_tensors
    from hw3lib.maths.logprobs import autocast_for, response_log_probs
    from hw3lib.models.load import enable_gradient_checkpointing
    from hw3lib.models.lora import apply_lora, merged_weights
    from hw3lib.models.tiny import qwen3_0p6b_config

    torch.manual_seed(0)
    config = qwen3_0p6b_config()
    config.num_hidden_layers = args.layers
    model = Qwen3ForCausalLM(config).to(args.device)
    if args.checkpointing:
        enable_gradient_checkpointing(model)
    if args.rank:
        model = apply_lora(model, RunConfig(lora_rank=args.rank, lora_alpha=2 * args.rank))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.95), weight_decay=0.0)
    model.train()
    ids = torch.randint(0, config.vocab_size, (args.batch, args.tokens), device=args.device)
    half = args.tokens // 2
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    seconds = []
    for _ in range(args.repeats + 1):
        started = time.perf_counter()
        with autocast_for(args.dtype, args.device):
            out = response_log_probs(model, ids[:, :-1], ids[:, -half:])  # the response half's log-probs
        out["log_probs"].sum().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if args.device == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
    peak = peak_bytes(args.device)

    with torch.device("meta"):  # the engine's bf16 copy, allocated without a random initialization
        engine = Qwen3ForCausalLM(config).to(torch.bfloat16)
    engine = engine.to_empty(device=args.device)
    merge_s = None
    if args.rank:
        started = time.perf_counter()
        for _ in merged_weights(model):
            pass
        merge_s = time.perf_counter() - started
    for _ in range(2):  # the first push also faults in the engine's fresh pages; the loop pushes into warm ones
        started = time.perf_counter()
        copy_named_tensors(engine, policy_weights_for_engine(model, "bfloat16"))
        push_s = time.perf_counter() - started
    return {"lora_rank": args.rank, "checkpointing": args.checkpointing, "layers": args.layers,
            "trainable_params": sum(p.numel() for p in params),
            "total_params": sum(p.numel() for p in model.parameters()),
            "step_s": statistics.median(seconds[1:]), "step_times_s": seconds[1:], "peak_bytes": peak,
            "merge_s": merge_s, "push_s": push_s, "peak_after_push_bytes": peak_bytes(args.device)}


def run_setting(args, layers: int, rank: int, checkpointing: bool) -> dict:
    command = [__file__, "--child", "--device", args.device, "--layers", layers, "--batch", args.batch,
               "--tokens", args.tokens, "--repeats", args.repeats, "--dtype", args.dtype, "--rank", rank]
    row = run_child(command + (["--checkpointing"] if checkpointing else []))
    label = (f"LoRA r={rank}" if rank else "full") + (" + checkpointing" if checkpointing else "")
    merge = f"  merge {row['merge_s']:5.2f} s" if row["merge_s"] is not None else " " * 15
    print(f"{layers} layers  {label:26}  trainable {row['trainable_params'] / 1e6:7.2f}M  step {row['step_s']:6.2f} s  "
          f"peak {row['peak_bytes'] / 2**30:5.2f} GiB{merge}  push {row['push_s']:5.2f} s", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dtype", default="bfloat16", help="autocast precision of the forward and backward")
    parser.add_argument("--rank", type=int, default=16, help="the LoRA rank compared with full fine-tuning")
    parser.add_argument("--checkpointing-too", action="store_true",
                        help="also each setting with gradient checkpointing")
    parser.add_argument("--checkpointing", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.layers = args.layers[0]
        print(json.dumps(measure(args)))
        return
    results = []
    for layers in args.layers:
        for checkpointing in (False, True) if args.checkpointing_too else (False,):
            full = run_setting(args, layers, 0, checkpointing)
            lora = run_setting(args, layers, args.rank, checkpointing)
            results += [full, lora]
            print(f"  LoRA / full: peak x{lora['peak_bytes'] / full['peak_bytes']:.2f}, "
                  f"step time x{lora['step_s'] / full['step_s']:.2f}, trainable "
                  f"{lora['trainable_params'] / full['trainable_params']:.2%}", flush=True)
    import os

    import torch

    record = {**record_header("lora", args.device), "machine": platform.processor() or platform.machine(), "torch": torch.__version__,
              "threads": os.environ.get("OMP_NUM_THREADS"),
              "shape": f"Qwen3-0.6B width, {'/'.join(map(str, args.layers))} layers, {args.batch} x {args.tokens} "
                       f"tokens, {args.dtype} autocast, LoRA rank {args.rank} alpha {2 * args.rank}",
              "results": results}
    write_json(ROOT / "bench" / "results" / "bench_lora.json", record)


if __name__ == "__main__":
    main()
