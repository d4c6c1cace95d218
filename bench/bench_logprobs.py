"""Peak memory and time of `hw3lib.maths.sft.get_response_log_probs` versus a naive full-vocabulary reference.

Shape: batch 4 x 512 tokens x Qwen3's vocabulary of 151,936 (one float32 copy of the logits is
1.24 GB). The "model" is an embedding to width 64 and an lm_head to the vocabulary, so the logits
are real and their forward/backward cost is small next to the log-prob computation.

Each configuration runs in a fresh subprocess. On CPU, peak memory is the process's peak resident
set (VmHWM, hw3lib.core.benchmark.peak_memory) during the first forward (and forward + backward of `log_probs.sum()`) minus the
resident set just before it; on CUDA it is `torch.cuda.max_memory_allocated` minus the allocation
before. Both include the model's own logits (one copy, in the model's dtype). Time is a second,
separate run.

    .venv/bin/python bench/bench_logprobs.py                      # CPU, float32
    .venv/bin/python bench/bench_logprobs.py --device cuda --dtype bfloat16
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from types import SimpleNamespace

import torch

from hw3lib.core.benchmark import peak_memory, run_child
from hw3lib.maths.sft import compute_entropy, get_response_log_probs

CONFIGS = [("naive", False), ("naive", True), ("chunked", False), ("chunked", True)]


class FakeLM(torch.nn.Module):
    """Embedding -> lm_head: the cheapest module whose forward returns real `[B, T, V]` logits."""

    def __init__(self, vocab: int, hidden: int = 64):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.lm_head = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids):
        return SimpleNamespace(logits=self.lm_head(self.embed(input_ids)))  # [B, T, V]


def naive_log_probs(model, input_ids, labels, return_token_entropy=False):
    """The reference: full log_softmax, gather, and entropy over the whole `[B, T, V]` tensor."""
    logits = model(input_ids).logits  # [B, T, V]
    log_p = torch.log_softmax(logits.float(), dim=-1)  # [B, T, V]
    result = {"log_probs": log_p.gather(-1, labels.unsqueeze(-1)).squeeze(-1)}  # [B, T]
    if return_token_entropy:
        with torch.no_grad():  # detached, like get_response_log_probs' entropy
            result["token_entropy"] = -(log_p.exp() * log_p).sum(-1)  # [B, T]
    return result


def current_bytes(device: str) -> int:
    if device == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def peak_bytes(device: str) -> int:
    if device == "cuda":
        torch.cuda.synchronize()
    return peak_memory(device)  # VmHWM on a CPU: a high-water mark since the process started


def child(args) -> None:
    """One configuration: measure peaks on the first run, time the second; print JSON."""
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    model = FakeLM(args.vocab).to(args.device, dtype)
    input_ids = torch.randint(0, args.vocab, (args.batch, args.seq), device=args.device)
    labels = torch.randint(0, args.vocab, (args.batch, args.seq), device=args.device)
    fn = naive_log_probs if args.impl == "naive" else get_response_log_probs
    with torch.no_grad():  # warm the kernels up on a small input without touching the peak much
        fn(model, input_ids[:1, :8], labels[:1, :8], return_token_entropy=args.entropy)
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    before, peak_before = current_bytes(args.device), peak_bytes(args.device)
    out = fn(model, input_ids, labels, return_token_entropy=args.entropy)
    peak_forward = peak_bytes(args.device)
    out["log_probs"].sum().backward()
    peak_backward = peak_bytes(args.device)
    del out
    model.zero_grad(set_to_none=True)

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize()

    sync()
    start = time.perf_counter()
    out = fn(model, input_ids, labels, return_token_entropy=args.entropy)
    sync()
    forward_s = time.perf_counter() - start
    out["log_probs"].sum().backward()
    sync()
    total_s = time.perf_counter() - start
    print(json.dumps({"before": before, "peak_before": peak_before, "peak_forward": peak_forward,
                      "peak_backward": peak_backward, "forward_s": forward_s, "total_s": total_s}))


def check_agreement(args) -> tuple[float, float]:
    """Max |difference| of our log-probs from the naive ones, and of our entropy from a float64 one."""
    torch.manual_seed(0)
    model = FakeLM(args.vocab).to(args.device, getattr(torch, args.dtype))
    ids = torch.randint(0, args.vocab, (2, 16), device=args.device)
    labels = torch.randint(0, args.vocab, (2, 16), device=args.device)
    with torch.no_grad():
        ours = get_response_log_probs(model, ids, labels, return_token_entropy=True)
        ref = naive_log_probs(model, ids, labels, return_token_entropy=True)
        entropy_ref = compute_entropy(model(ids).logits.double())
    return ((ours["log_probs"] - ref["log_probs"]).abs().max().item(),
            (ours["token_entropy"].double() - entropy_ref).abs().max().item())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--impl", default="chunked", help=argparse.SUPPRESS)
    parser.add_argument("--entropy", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    copy = args.batch * args.seq * args.vocab * 4
    print(f"logits [{args.batch}, {args.seq}, {args.vocab}] on {args.device} ({args.dtype} model); "
          f"one float32 copy = {copy / 1e9:.2f} GB; torch threads = {torch.get_num_threads()}")
    log_prob_gap, entropy_gap = check_agreement(args)
    print(f"on a 2x16 slice: max |log-prob ours - naive| = {log_prob_gap:.2e}, "
          f"max |entropy ours - float64| = {entropy_gap:.2e}")
    common = ["--batch", str(args.batch), "--seq", str(args.seq), "--vocab", str(args.vocab),
              "--device", args.device, "--dtype", args.dtype]
    rows = {}
    for impl, entropy in CONFIGS:
        rows[impl, entropy] = run_child([__file__, "--child", "--impl", impl, *common]
                                        + (["--entropy"] if entropy else []))
    print(f"{'implementation':<26}{'peak fwd (copies)':>18}{'peak fwd+bwd':>14}{'fwd s':>8}{'fwd+bwd s':>11}"
          f"{'time vs naive':>15}{'fwd mem vs naive':>18}")
    for (impl, entropy), r in rows.items():
        ref = rows["naive", entropy]
        fwd, bwd = r["peak_forward"] - r["before"], r["peak_backward"] - r["before"]
        label = f"{impl}{' + entropy' if entropy else ''}"
        print(f"{label:<26}{fwd / copy:>18.2f}{bwd / copy:>14.2f}{r['forward_s']:>8.2f}{r['total_s']:>11.2f}"
              f"{r['total_s'] / ref['total_s']:>14.2f}x{fwd / (ref['peak_forward'] - ref['before']):>17.2f}x")
        if r["peak_forward"] <= r["peak_before"]:  # VmHWM is a high-water mark since process start
            print(f"  (warning: an earlier peak of {(r['peak_before'] - r['before']) / copy:.2f} copies "
                  "hides this run's forward peak)")


if __name__ == "__main__":
    main()
