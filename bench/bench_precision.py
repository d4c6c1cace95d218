"""One GRPO optimizer step at Qwen3-0.6B's width, bf16: autocast over the float32 masters (the path before
hw3lib.core.precision) versus the bf16 working copy refreshed once per step, in the same process.

Both sides run `hw3lib.grpo.step.optimizer_step` -- the loop's own function -- on the same random-weight model
(`hw3lib.models.real_shape`, `--layers` decoder layers, 151,936-entry tied vocabulary) and the same batch:
`--sequences` sequences of `--prompt-tokens` + `--response-tokens` in microbatches of `--micro` (the real-width
benchmark's 8 sequences of ~130 + 64 tokens in 4 microbatches of 2), fused AdamW. The sides alternate
(`--repeats` timed steps each after one warm-up), so load from other work on the machine hits both alike; the
ratio of their medians is the number to read. Then one step of each under torch's profiler: the top operators
by self CPU time (`aten::copy_`: autocast's weight casts and the bf16 gradients' conversions on their way into
the float32 accumulators; `aten::fill_`: the dense embedding gradient's zero-fill),
and the training FLOP rate against the measured bf16 matmul peak (bench/bench_train_step.py's definition).

    python bench/bench_precision.py                 # 28 layers (about 12 GB)
    python bench/bench_precision.py --layers 2      # quick
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from hw3lib.core.benchmark import peak_memory, record_header, write_json
from hw3lib.core.precision import MasterWeights

RESULTS = Path(__file__).resolve().parent / "results" / "bench_precision.json"


class AutocastOverMasters:
    """The path before hw3lib.core.precision: microbatches through the float32 policy under autocast."""

    def __init__(self, policy):
        self.model, self.pairs = policy, []

    def refresh(self):
        pass


def make_batch(sequences: int, prompt_tokens: int, response_tokens: int, vocab: int) -> dict:
    """Random sequences in the loop's packed form sharing a `prompt_tokens // 2`-token template."""
    generator = torch.Generator().manual_seed(0)
    full = torch.randint(0, vocab, (sequences, prompt_tokens + response_tokens), generator=generator)  # [N, L]
    full[:, :prompt_tokens // 2] = full[0, :prompt_tokens // 2]
    mask = torch.zeros_like(full, dtype=torch.bool)  # [N, L]
    mask[:, prompt_tokens:] = True
    return {"input_ids": full[:, :-1], "labels": full[:, 1:], "response_mask": mask[:, 1:],  # [N, L-1]
            "lengths": torch.full((sequences,), full.shape[1] - 1),
            "response_start": torch.full((sequences,), prompt_tokens - 1)}


def one_step(policy, optimizer, working, cfg, batch: dict, advantages: torch.Tensor, prefix: int) -> float:
    from hw3lib.grpo.step import optimizer_step

    started = time.perf_counter()
    optimizer_step(policy, optimizer, [p for p in policy.parameters()], cfg, batch, torch.arange(cfg.train_batch_size),
                   raw_rewards=advantages, advantages=advantages, old_log_probs=None, ref_log_probs=None,
                   engine_log_probs=torch.zeros_like(batch["labels"], dtype=torch.float32), shared_prefix=prefix,
                   learning_rate=1e-5, measure_mismatch=False, working=working)
    return time.perf_counter() - started


def top_operators(run, count: int = 8) -> list[dict]:
    """Self CPU time of the top `count` operators of `run()` under torch's profiler, with their shares."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        run()
    events = sorted(profile.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    return [{"op": e.key, "self_s": e.self_cpu_time_total / 1e6, "share": e.self_cpu_time_total / total}
            for e in events[:count]]


def main() -> None:
    from bench_train_step import matmul_peak

    from hw3lib.core import cost
    from hw3lib.grpo.config import GRPOConfig
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.models.real_shape import real_shape_config, real_shape_path

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--micro", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=130)
    parser.add_argument("--response-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="timed steps per side (after one warm-up each)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()

    policy, _ = load_model_and_tokenizer(str(real_shape_path("qwen3-0.6b", args.layers)))
    policy.train()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-5, betas=(0.9, 0.95), fused=True)
    cfg = GRPOConfig.for_profile("smoke", rollout_batch_size=args.sequences, group_size=args.sequences // 2,
                                 train_batch_size=args.sequences,
                                 gradient_accumulation_steps=args.sequences // args.micro, dtype="bfloat16",
                                 sampling_max_tokens=args.response_tokens, loss_type="reinforce_with_baseline")
    batch = make_batch(args.sequences, args.prompt_tokens, args.response_tokens, policy.config.vocab_size)
    advantages = torch.randn(args.sequences, 1, generator=torch.Generator().manual_seed(1))  # [N, 1]
    sides = {"autocast_over_masters": AutocastOverMasters(policy), "working_copy": MasterWeights(policy, "bfloat16")}
    for working in sides.values():
        working.model.train()
    prefix = args.prompt_tokens // 2
    times = {name: [] for name in sides}
    for repeat in range(args.repeats + 1):  # alternating; the first round warms both up
        for name, working in sides.items():
            seconds = one_step(policy, optimizer, working, cfg, batch, advantages, prefix)
            if repeat:
                times[name].append(seconds)
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, values in times.items():
        print(f"{name:22s} {medians[name]:.2f} s per optimizer step ({', '.join(f'{t:.2f}' for t in values)})",
              flush=True)
    speedup = medians["autocast_over_masters"] / medians["working_copy"]
    shape = cost.Shape.from_config("qwen3", real_shape_config("qwen3-0.6b", args.layers))
    tokens, responses = args.sequences * (args.prompt_tokens + args.response_tokens), args.sequences * args.response_tokens
    flops = 3 * cost.forward_flops(shape, tokens, responses)
    peak = matmul_peak()
    profiles = {name: top_operators(lambda w=working: one_step(policy, optimizer, w, cfg, batch, advantages, prefix))
                for name, working in sides.items()}
    record = {**record_header("bench_precision"), "settings": vars(args), "step_seconds": times,
              "median_step_s": medians, "speedup": speedup, "training_flops": flops,
              "flops_per_s": {name: flops / m for name, m in medians.items()},
              "fraction_of_bf16_matmul_peak": {name: flops / m / peak["bfloat16"] for name, m in medians.items()},
              "matmul_peak_flops": peak, "profile_top_ops": profiles, "peak_rss_bytes": peak_memory()}
    print(f"working copy: {speedup:.2f}x the speed of autocast over the masters; training "
          + ", ".join(f"{name} {v:.0%}" for name, v in record["fraction_of_bf16_matmul_peak"].items())
          + f" of the bf16 matmul peak ({peak['bfloat16'] / 1e9:.0f} GFLOP/s)")
    for name, ops in profiles.items():
        print(f"{name}: " + ", ".join(f"{o['op']} {o['share']:.0%}" for o in ops))
    print(f"wrote {write_json(args.out, record)}")


if __name__ == "__main__":
    main()
