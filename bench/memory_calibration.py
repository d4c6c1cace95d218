"""Activation memory of one training microbatch at the real width: the per-token terms of hw3lib.core.cost.

The memory model (`hw3lib.core.cost`) needs what a training forward/backward holds beyond the model's
static state (float32 masters, gradients, AdamW moments): autocast's bf16 copies of the weights, the
saved activations of every decoder layer, and the logits of the response positions. This script
measures that on the CPU, at Qwen3-0.6B's width and vocabulary (`hw3lib.models.real_shape`), through the
trainer's own function (`hw3lib.maths.logprobs.response_log_probs` under `autocast_for("bfloat16")`),
for two depths and two token counts, and fits

    bytes = static(L) + tokens x (logits_per_token + L x activation_per_token_per_layer)

to the bytes of every tensor autograd saves for the backward pass (`saved_tensors_hooks`, each storage
counted once, the parameters themselves left out: autocast's bf16 weight copies are the static part).
That count is exact and the same on a GPU. The peak resident set of the forward/backward is recorded
beside it (reset through `/proc/self/clear_refs` once the gradients are allocated, each point in its own
process) and fitted too, but it is noisy: the allocator reuses freed blocks. One response per row after
a 64-token prompt; `tokens` counts response tokens (the positions that get logits); each row's prompt
share is included in the layer term.

    .venv/bin/python bench/memory_calibration.py            # writes bench/results/memory_calibration.json
    .venv/bin/python bench/memory_calibration.py --gradient-checkpointing
    .venv/bin/python bench/memory_calibration.py --gpu-path   # bench/results/memory_calibration_gpu_path.json

`--gpu-path` measures the same forward/backward through the attention a GPU runs: transformers' own SDPA
(`attn_implementation="sdpa"`) with the loop's shared prompt prefix (`shared_prefix`: the prefix goes through once
and its keys/values are repeated for the rows), which makes transformers build an explicit mask -- and with a mask
its SDPA repeats each K/V head per query head (`repeat_kv`) and autograd keeps the copies. The difference of its
per-layer term from the plain one is what hw3lib.core.memory.kv_copy_bytes_per_token_layer predicts
(tests/core/test_cost.py checks it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hw3lib.core.benchmark import record_header, run_child, write_json
from hw3lib.core.process_memory import status_bytes

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "bench" / "results" / "memory_calibration.json"
GPU_PATH_RESULTS = ROOT / "bench" / "results" / "memory_calibration_gpu_path.json"
PROMPT_TOKENS = 64
POINTS = [(2, 256), (2, 768), (4, 256), (4, 768)]  # (decoder layers, response tokens per microbatch)


def measure(layers: int, tokens: int, rows: int, checkpointing: bool, gpu_path: bool = False) -> dict:
    """One point, in this process: extra peak bytes of a forward/backward over `rows` rows (`gpu_path`: through
    transformers' SDPA with the shared prompt prefix, see the module docstring)."""
    import torch
    from transformers import AutoModelForCausalLM

    from hw3lib.maths.logprobs import autocast_for, response_log_probs
    from hw3lib.models.real_shape import real_shape_path

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(real_shape_path("qwen3-0.6b", layers), dtype=torch.float32,
                                                 attn_implementation="sdpa")
    if checkpointing:
        from hw3lib.models.load import enable_gradient_checkpointing

        enable_gradient_checkpointing(model)
    model.train()
    per_row = tokens // rows
    ids = torch.randint(0, model.config.vocab_size, (rows, PROMPT_TOKENS + per_row))
    if gpu_path:
        ids[:, :PROMPT_TOKENS] = ids[0, :PROMPT_TOKENS]  # one shared prompt, as GRPO's group rows have

    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor):  # every tensor autograd keeps for the backward pass, counted once per storage
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    for parameter in model.parameters():  # the gradients belong to the static state: allocate them first
        parameter.grad = torch.zeros_like(parameter)
    # Measured on the first pass: a warm-up pass would leave freed memory in the allocator that the measured
    # pass reuses without raising the resident set.
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident set
    before = status_bytes("VmRSS")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), autocast_for("bfloat16", "cpu"):
        log_probs = response_log_probs(model, ids, ids[:, -per_row:],
                                       shared_prefix=PROMPT_TOKENS if gpu_path else 0)["log_probs"]
    log_probs.sum().backward()
    return {"layers": layers, "response_tokens": per_row * rows, "rows": rows, "prompt_tokens": PROMPT_TOKENS,
            "saved_bytes": sum(saved.values()), "extra_peak_bytes": status_bytes("VmHWM") - before,
            "parameters": sum(p.numel() for p in model.parameters())}


def fit(points: list[dict], key: str) -> dict:
    """Solve static(L) + tokens x (logits + L x per_layer) for `key` from the four points (two depths x two token
    counts). `tokens` are response tokens; each row's prompt rides along (a fixed share per response token)."""
    by = {(p["layers"], p["response_tokens"]): p[key] for p in points}
    (l1, l2), (t1, t2) = sorted({p["layers"] for p in points}), sorted({p["response_tokens"] for p in points})
    slope1 = (by[(l1, t2)] - by[(l1, t1)]) / (t2 - t1)  # bytes per response token at l1 layers
    slope2 = (by[(l2, t2)] - by[(l2, t1)]) / (t2 - t1)
    per_layer = (slope2 - slope1) / (l2 - l1)  # per response token and decoder layer (its prompt share included)
    return {"activation_bytes_per_token_per_layer": per_layer, "logits_bytes_per_token": slope1 - l1 * per_layer,
            "static_bytes": {str(l1): by[(l1, t1)] - t1 * slope1, str(l2): by[(l2, t1)] - t1 * slope2}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2, help="sequences per microbatch (the full profile's: 2)")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--gpu-path", action="store_true", help="through transformers' SDPA with the shared prefix")
    parser.add_argument("--point", default=None, help=argparse.SUPPRESS)  # "layers,tokens": run one, print JSON
    parser.add_argument("--output", type=Path, default=None, help="default: RESULTS, or GPU_PATH_RESULTS")
    args = parser.parse_args()
    if args.point:
        layers, tokens = (int(v) for v in args.point.split(","))
        print(json.dumps(measure(layers, tokens, args.rows, args.gradient_checkpointing, args.gpu_path)))
        return
    output = args.output or (GPU_PATH_RESULTS if args.gpu_path else RESULTS)
    points = []
    for layers, tokens in POINTS:
        command = [__file__, "--point", f"{layers},{tokens}", "--rows", args.rows]
        if args.gradient_checkpointing:
            command.append("--gradient-checkpointing")
        if args.gpu_path:
            command.append("--gpu-path")
        points.append(run_child(command))
        print(f"{layers} layers, {tokens} response tokens: saved for backward {points[-1]['saved_bytes'] / 2**20:.0f} "
              f"MiB, peak resident set +{points[-1]['extra_peak_bytes'] / 2**20:.0f} MiB", flush=True)
    result = {**record_header("memory_calibration"), "gradient_checkpointing": args.gradient_checkpointing,
              "gpu_path": args.gpu_path, "points": points, "fit": fit(points, "saved_bytes"),
              "fit_resident_set": fit(points, "extra_peak_bytes")}
    fitted = result["fit"]
    print(f"saved for backward: {fitted['activation_bytes_per_token_per_layer'] / 1024:.1f} KiB per token per layer; "
          f"logits {fitted['logits_bytes_per_token'] / 1024:.0f} KiB per response token")
    rss = result["fit_resident_set"]
    print(f"(the resident set's fit, noisier -- the allocator reuses freed blocks: "
          f"{rss['activation_bytes_per_token_per_layer'] / 1024:.1f} KiB per token per layer, logits "
          f"{rss['logits_bytes_per_token'] / 1024:.0f} KiB per response token)")
    write_json(output, result, indent=1)


if __name__ == "__main__":
    main()
