"""Speed and memory of the training half of a GRPO step on a Qwen3-0.6B-shaped model (GPU).

What is timed is exactly what `hw3lib.grpo.loop.train` does after the rollouts are scored, for one
optimizer step over a rollout batch: `hw3lib.grpo.step.optimizer_step` (per microbatch the
log-probs with the per-token entropy the loop logs, the reinforce_with_baseline loss with
masked_mean length normalization, backward; then gradient clipping and an AdamW step), in the
loop's mixed precision on a GPU (float32 master weights and AdamW state, bf16 autocast). Sizes
(the course's): 256 sequences of `--prompt-tokens` prompt + 1,024 response tokens, with
microbatch sizes 2, 4 and 8 (gradient accumulation 128, 64, 32). The model is
`Qwen3ForCausalLM(qwen3_0p6b_config())` with random weights (no hub access needed); tokens are random.

Reported per microbatch size: seconds per optimizer step (median of `--repeats` after one
warm-up), tokens/s (all tokens the model processes, prompt + response; response tokens/s too),
model FLOPs utilisation MFU = 6 * n_params * tokens / time / peak, where n_params counts the
tied embedding once (it is the lm_head matmul) and attention's T^2 FLOPs are left out, so MFU
is slightly understated; two peaks: the bf16 matrix-product rate measured on this GPU first
(an 8192 x 8192 x 8192 product, the mean of 10 after 3 warm-ups: `mfu`) and the datasheet's
dense bf16 tensor-core peak (H100 SXM / H200: 989 TFLOP/s, H100 PCIe: 756, A100: 312; override
with --peak-tflops: `mfu_datasheet`), and peak memory (`torch.cuda.max_memory_allocated`).
The results (device, versions, command, rows) go to `--out` (on a GPU by default
bench/results/bench_train_gpu.json).

    python3 bench/bench_train_gpu.py                          # on a GPU machine
    .venv/bin/python bench/bench_train_gpu.py --small         # tiny sizes on CPU (a correctness run)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from hw3lib.core.benchmark import peak_memory, record_header, write_json
from hw3lib.core.precision import MasterWeights
from hw3lib.grpo.config import GRPOConfig
from hw3lib.grpo.step import optimizer_step

PEAK_BF16_TFLOPS = {"H100 PCIe": 756.0, "H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 70.0}


def peak_tflops(device: torch.device, override: float | None) -> tuple[float | None, str]:
    """The dense bf16 peak of this GPU (TFLOP/s) and where the number comes from."""
    if override:
        return override, "--peak-tflops"
    if device.type != "cuda":
        return None, "no peak for CPU"
    name = torch.cuda.get_device_name(device)
    for key, value in PEAK_BF16_TFLOPS.items():  # "H100 PCIe" is checked before "H100"
        if key in name:
            return value, f"{name}: dense bf16 datasheet peak"
    return None, f"{name}: unknown peak (pass --peak-tflops)"


def measured_bf16_peak(device: torch.device, size: int = 8192, repeats: int = 10) -> float | None:
    """This GPU's bf16 matrix-product rate (TFLOP/s): the mean of `repeats` products of two random
    `size` x `size` matrices after 3 warm-ups. None on a CPU."""
    if device.type != "cuda":
        return None
    a, b = (torch.randn(size, size, device=device, dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    torch.cuda.synchronize(device)
    return 2 * size**3 * repeats / (time.perf_counter() - started) / 1e12


def build_model(small: bool, device: torch.device, dtype: torch.dtype):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from hw3lib.models.tiny import qwen3_0p6b_config

    if small:
        config = Qwen3Config(vocab_size=1024, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                             num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=512,
                             tie_word_embeddings=True)
    else:
        config = qwen3_0p6b_config()
    config.use_cache = False  # training forward: no KV cache to build
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).to(device=device, dtype=dtype)
    model.train()
    return model


def make_batch(n: int, prompt_tokens: int, response_tokens: int, vocab: int, device: torch.device) -> dict:
    """Random token sequences in the loop's packed form; the response covers the last `response_tokens` labels."""
    generator = torch.Generator().manual_seed(0)
    full = torch.randint(0, vocab, (n, prompt_tokens + response_tokens), generator=generator)  # [N, L]
    mask = torch.zeros_like(full, dtype=torch.bool)  # [N, L]
    mask[:, prompt_tokens:] = True
    return {"input_ids": full[:, :-1].to(device), "labels": full[:, 1:].to(device),  # [N, L-1]
            "response_mask": mask[:, 1:].to(device),  # [N, L-1]
            "lengths": torch.full((n,), full.shape[1] - 1), "response_start": torch.full((n,), prompt_tokens - 1),
            "advantages": torch.randn(n, 1, generator=generator).to(device)}  # [N, 1]


def train_step(model, optimizer, batch: dict, micro: int, dtype: str, working: MasterWeights | None = None) -> float:
    """One optimizer step over the whole batch in microbatches of `micro`: the loop's own function (through the
    loop's bf16 working copy, `working`)."""
    n, response_tokens = batch["input_ids"].shape[0], int(batch["response_mask"][0].sum())
    cfg = GRPOConfig(rollout_batch_size=n, group_size=min(8, n), train_batch_size=n,
                     gradient_accumulation_steps=n // micro, sampling_max_tokens=response_tokens, dtype=dtype)
    stats = optimizer_step(model, optimizer, [p for p in model.parameters()], cfg, batch, torch.arange(n),
                           raw_rewards=batch["advantages"], advantages=batch["advantages"], old_log_probs=None,
                           ref_log_probs=None, engine_log_probs=torch.zeros_like(batch["labels"], dtype=torch.float32),
                           shared_prefix=0, learning_rate=1e-5, measure_mismatch=False, working=working)
    return stats["entropy"]


def measure(args, micro: int, device: torch.device, dtype: str, measured_peak: float | None) -> dict:
    model = build_model(args.small, device, torch.float32)  # float32 masters
    working = MasterWeights(model, dtype)  # the loop's bf16 working copy (hw3lib.core.precision)
    working.model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.0)
    batch = make_batch(args.sequences, args.prompt_tokens, args.response_tokens, model.config.vocab_size, device)
    n_params = sum(p.numel() for p in model.parameters())  # tied embedding counted once
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for repeat in range(1 + args.repeats):  # the first is a warm-up (allocator, kernels)
        sync()
        started = time.perf_counter()
        entropy = train_step(model, optimizer, batch, micro, dtype, working)
        sync()
        if repeat:
            times.append(time.perf_counter() - started)
    seconds = statistics.median(times)
    tokens = args.sequences * (args.prompt_tokens + args.response_tokens - 1)
    peak, peak_source = peak_tflops(device, args.peak_tflops)
    flops = 6 * n_params * tokens
    return {
        "micro_batch_size": micro, "gradient_accumulation_steps": args.sequences // micro,
        "seconds_per_step": seconds, "tokens_per_s": tokens / seconds,
        "response_tokens_per_s": args.sequences * args.response_tokens / seconds,
        "model_tflops_per_s": flops / seconds / 1e12,
        "mfu": None if measured_peak is None else flops / seconds / (measured_peak * 1e12),
        "mfu_datasheet": None if peak is None else flops / seconds / (peak * 1e12), "peak_tflops": peak,
        "peak_source": peak_source, "measured_peak_tflops": measured_peak,
        "peak_memory_gib": peak_memory(str(device)) / 2**30 if device.type == "cuda" else None,
        "n_params": n_params, "finite_entropy": bool(entropy == entropy),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="tiny model and sizes (runs on CPU in seconds)")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--micro", type=int, nargs="+", default=None, help="microbatch sizes (default 2 4 8)")
    parser.add_argument("--sequences", type=int, default=None, help="sequences per optimizer step (default 256)")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="prompt tokens per sequence (default 128)")
    parser.add_argument("--response-tokens", type=int, default=None, help="response tokens per sequence (default 1024)")
    parser.add_argument("--repeats", type=int, default=2, help="timed steps after the warm-up")
    parser.add_argument("--peak-tflops", type=float, default=None, help="datasheet bf16 TFLOP/s for mfu_datasheet")
    parser.add_argument("--out", default=None,
                        help="JSON results (default on a GPU: bench/results/bench_train_gpu.json; with --small: none)")
    args = parser.parse_args()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu" and not args.small:
        parser.error("the full-size benchmark needs a GPU; pass --small for the CPU correctness run")
    args.micro = args.micro or [2, 4, 8]
    args.sequences = args.sequences or (16 if args.small else 256)
    args.prompt_tokens = args.prompt_tokens or (16 if args.small else 128)
    args.response_tokens = args.response_tokens or (32 if args.small else 1024)
    bad = [m for m in args.micro if args.sequences % m]
    if bad:
        parser.error(f"--sequences {args.sequences} is not divisible by microbatch sizes {bad}")
    dtype = "bfloat16" if device.type == "cuda" else "float32"
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), "
          f"dtype {dtype}, {args.sequences} sequences x ({args.prompt_tokens} prompt + {args.response_tokens} "
          f"response) tokens, {'small' if args.small else 'Qwen3-0.6B'}-shaped model")
    measured_peak = measured_bf16_peak(device)
    if measured_peak is not None:
        print(f"measured bf16 matrix-product peak: {measured_peak:.0f} TFLOP/s", flush=True)
    results = []
    for micro in args.micro:
        result = measure(args, micro, device, dtype, measured_peak)
        results.append(result)
        mfu = "n/a" if result["mfu"] is None else f"{100 * result['mfu']:.1f}% of the measured peak"
        if result["mfu_datasheet"] is not None:
            mfu += f" ({100 * result['mfu_datasheet']:.1f}% of the datasheet's)"
        memory = "n/a" if result["peak_memory_gib"] is None else f"{result['peak_memory_gib']:.1f} GiB"
        print(f"micro {micro:2d} (accum {result['gradient_accumulation_steps']:3d}): "
              f"{result['seconds_per_step']:.3f} s/step, {result['tokens_per_s']:,.0f} tokens/s "
              f"({result['response_tokens_per_s']:,.0f} response tokens/s), "
              f"{result['model_tflops_per_s']:.1f} model TFLOP/s, MFU {mfu}, peak memory {memory}", flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print(f"datasheet peak: {results[0]['peak_source']}; n_params {results[0]['n_params']:,}")
    out = args.out or (None if args.small else str(Path(__file__).resolve().parent / "results" / "bench_train_gpu.json"))
    if out:
        record = {**record_header("bench_train_gpu", str(device)), "torch": torch.__version__, "cuda": torch.version.cuda, "sequences": args.sequences,
                  "prompt_tokens": args.prompt_tokens, "response_tokens": args.response_tokens,
                  "measured_peak_tflops": measured_peak, "rows": results}
        write_json(out, record)
        print(f"wrote {out}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
