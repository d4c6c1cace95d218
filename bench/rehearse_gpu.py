"""The full profile's training path on one GPU at the course's sizes, measured against the memory model.

`bench/rehearse.py` rehearses the full profile at the real models' size on a CPU, with vLLM's CPU build. This
script runs the same code path on a GPU machine that has PyTorch and transformers but no vLLM (the device
machine lent to some sessions), so the rollout engine is the transformers one: its own bf16 copy of the
weights, `--generation-batch` rows per `generate` call. The model is the rehearsal's random-weight
Qwen3-0.6B-shaped checkpoint (`hw3lib.models.real_shape`: real widths, the real 151,936-entry vocabulary),
graded by its stand-in grader (random weights never answer right, so every advantage would be 0). Phases, in
one process, in this order:

| phase | what runs (the course's sizes unless stated) |
|---|---|
| `eval` | notebook 01's zero-shot evaluation: `--eval-questions` GSM8K test questions, one sample each at T=1 |
| `grpo` | 3 GRPO steps: 256 rollouts in groups of 8, up to 1,024 new tokens, 128 microbatches of 2 per optimizer step, bf16 autocast over float32 masters, KL monitoring; validation on `--val-questions` before and after; a checkpoint |
| `grpo_resume` | that run resumed from its checkpoint (every object built anew) for a 4th step |
| `sft` | 2 SFT steps at the course's batch (32 traces in 8 microbatches), validation before and after |

Random weights rarely emit the end-of-text token, so nearly every response runs the whole token budget: the
worst case for time and memory.

Per phase: seconds, the allocator's peak (`torch.cuda.max_memory_allocated`) and reserved bytes, the CUDA
context (the device's used memory less what the allocator reserved) and, per window -- each batch the engine
generates, each GRPO training half, each SFT optimizer step -- the measured peak beside the memory model's
prediction (`hw3lib.core.cost`: `trainer_parts`/`trainer_peak` for training, `transformers_engine_parts` for
generation) and their ratio. Allocator bytes leave the context out, so the predictions leave out
`GPU_RUNTIME_BYTES`. Results go to `bench/results/rehearse_gpu.json` (device, versions, command), rewritten
after every phase so a run cut short keeps what it measured.

    python3 bench/rehearse_gpu.py                          # on the GPU machine
    python3 bench/rehearse_gpu.py --small --device cpu --dtype bfloat16   # tiny model and counts: the path on a CPU
    python3 bench/rehearse_gpu.py --small --model real --layers 2 --device cpu   # ... at the real width and vocabulary
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

import rehearse  # bench/rehearse.py (this script's folder is on sys.path): the checkpoint timer, summaries, the grader

from hw3lib.core.benchmark import device_info, record_header, write_json

ROOT = rehearse.ROOT
RESULTS = ROOT / "bench" / "results" / "rehearse_gpu.json"
PHASES = ("eval", "grpo", "grpo_resume", "sft")


@dataclass(frozen=True)
class Sizes:
    """What the rehearsal runs; the defaults are the course's GRPO and SFT batches."""

    eval_questions: int = 64
    val_questions: int = 16
    max_tokens: int = 1024
    rollout_batch: int = 256
    group: int = 8
    accumulation: int = 128  # microbatches of 2
    generation_batch: int = 256  # rows per generate call: one call per GRPO step
    sft_batch: int = 32
    sft_accumulation: int = 8


SMALL = Sizes(eval_questions=2, val_questions=2, max_tokens=8, rollout_batch=4, group=2, accumulation=2,
              generation_batch=4, sft_batch=2, sft_accumulation=1)


# ---- GPU memory, per window -------------------------------------------------------------------------------

class MemoryWindows:
    """The allocator's peak inside named windows (a generated batch, a training half) and over the phase.

    Entering a window folds the peak so far into the phase's and resets the allocator's counter, so the
    window's peak is its own. On a CPU the byte counts are None (the code path still runs)."""

    def __init__(self, device: torch.device, shape) -> None:
        self.device, self.shape, self.cuda = device, shape, device.type == "cuda"
        self.windows: list[dict] = []
        self.phase_peak = 0
        self.resident_prediction = 0  # what the phase keeps between windows, by the model (set by the phase)

    def _peak(self) -> int | None:
        if not self.cuda:
            return None
        torch.cuda.synchronize(self.device)
        return torch.cuda.max_memory_allocated(self.device)

    @contextlib.contextmanager
    def window(self, kind: str, predicted: int, **info):
        start_peak = self._peak()
        if self.cuda:
            self.phase_peak = max(self.phase_peak, start_peak)
            torch.cuda.reset_peak_memory_stats(self.device)
        at_start = torch.cuda.memory_allocated(self.device) if self.cuda else None
        started = time.perf_counter()
        yield
        peak = self._peak()
        if self.cuda:
            self.phase_peak = max(self.phase_peak, peak)
        predicted += self.resident_prediction
        self.windows.append({"kind": kind, **info, "seconds": time.perf_counter() - started,
                             "allocated_at_start": at_start, "resident_predicted": self.resident_prediction,
                             "peak_allocated": peak, "peak_predicted": predicted,
                             "measured_over_predicted": None if peak is None else peak / predicted})


def patch_windows(probe: MemoryWindows):
    """Wrap the three heavy calls so each runs inside a window with its prediction; returns the undo."""
    from hw3lib.core import cost
    from hw3lib.generation.hf_engine import TransformersEngine
    from hw3lib.grpo.loop import GRPOLearner
    import hw3lib.sft.loop as sft_loop

    generate, train_on, sft_step = TransformersEngine._generate_batch, GRPOLearner.train_on, sft_loop.sft_optimizer_step

    def generate_batch(engine, rows, sampling, seed):
        prompt = max(len(row) for row in rows)
        parts = cost.transformers_engine_parts(probe.shape, len(rows), prompt, sampling.max_tokens)
        with probe.window("generate", parts["kv_cache"] + parts["sampling"], rows=len(rows), prompt_tokens=prompt,
                          max_tokens=sampling.max_tokens):
            return generate(engine, rows, sampling, seed)

    def grpo_train_on(learner, batch, engine=None):
        cfg = learner.cfg
        prompt = max(len(ids) for ids in learner.tokenizer(batch.prompts, add_special_tokens=False)["input_ids"])
        response = max(len(r.token_ids) for r in batch.rollouts)
        micro = cfg.micro_train_batch_size
        parts = cost.trainer_parts(probe.shape, micro * (prompt + response), micro * response, cfg.monitor_kl)
        first = learner.version == 0
        beyond_resident = cost.trainer_peak(parts, first_step=first) - trainer_resident(parts, first)
        with probe.window("grpo_train", beyond_resident, step=learner.version + 1, micro_batch=micro,
                          micro_tokens=micro * (prompt + response)):
            rows = train_on(learner, batch, engine)
        probe.resident_prediction = engine_weights(probe.shape) + trainer_resident(parts, False)  # moments exist now
        return rows

    def sft_optimizer_step(policy, optimizer, params, batch, rows, **kw):
        micro, width = kw["micro_batch_size"], batch["input_ids"].shape[1]
        response = width - int(batch["response_start"].min())
        parts = cost.trainer_parts(probe.shape, micro * width, micro * response, monitor_kl=False)
        first = not optimizer.state
        beyond_resident = cost.trainer_peak(parts, first_step=first) - trainer_resident(parts, first)
        with probe.window("sft_train", beyond_resident, micro_batch=micro, micro_tokens=micro * width):
            stats = sft_step(policy, optimizer, params, batch, rows, **kw)
        probe.resident_prediction = engine_weights(probe.shape) + trainer_resident(parts, False)
        return stats

    TransformersEngine._generate_batch, GRPOLearner.train_on = generate_batch, grpo_train_on
    sft_loop.sft_optimizer_step = sft_optimizer_step

    def undo() -> None:
        TransformersEngine._generate_batch, GRPOLearner.train_on, sft_loop.sft_optimizer_step = generate, train_on, sft_step
    return undo


def trainer_resident(parts: dict[str, int], first_step: bool) -> int:
    """The trainer's bytes that stay between windows: masters, the reference and (once a step has been taken)
    AdamW's moments (`hw3lib.core.cost.trainer_resident_between_steps`)."""
    from hw3lib.core import cost

    return cost.trainer_resident_between_steps(parts) - (parts["adam"] if first_step else 0)


def engine_weights(shape) -> int:
    """The transformers engine's own bf16 copy of the weights."""
    from hw3lib.core import cost

    return cost.LOW_COPY_BYTES * shape.params


def resident_before(shape, trainer: bool, monitor_kl: bool = False, moments: bool = False) -> int:
    """What a phase holds before its first window, by the model: the engine's weights, and a trainer's masters,
    reference and (a resumed run) moments."""
    from hw3lib.core import cost

    held = trainer_resident(cost.trainer_parts(shape, 0, 0, monitor_kl), first_step=not moments) if trainer else 0
    return engine_weights(shape) + held


# ---- the phases -------------------------------------------------------------------------------------------

def grpo_config(args, sizes: Sizes, steps: int):
    from hw3lib.grpo.config import GRPOConfig

    return GRPOConfig.for_profile(
        "full", name="rehearse_gpu_grpo", model=args.model, engine="transformers", policy_device=args.device,
        rollout_device=args.device, dtype=args.dtype, n_grpo_steps=steps, rollout_batch_size=sizes.rollout_batch,
        group_size=sizes.group, train_batch_size=sizes.rollout_batch, gradient_accumulation_steps=sizes.accumulation,
        sampling_max_tokens=sizes.max_tokens, generation_batch_size=sizes.generation_batch,
        n_eval_examples=sizes.val_questions, eval_every=3, checkpoint_every=3, monitor_kl=True)


def phase_eval(args, sizes: Sizes, probe: MemoryWindows) -> dict:
    """Notebook 01's zero-shot evaluation on the transformers engine."""
    from hw3lib.core.io import runs_dir
    from hw3lib.evaluation.evaluate import evaluate
    from hw3lib.generation import SamplingConfig, make_engine
    from hw3lib.tasks.data import load_gsm8k
    from hw3lib.tasks.rewards import r1_zero_reward_fn

    probe.resident_prediction = resident_before(probe.shape, trainer=False)
    examples = [{"question": r["question"], "gold": r["gold"]} for r in load_gsm8k("test", limit=sizes.eval_questions)]
    sampling = SamplingConfig(n=1, temperature=1.0, top_p=1.0, max_tokens=sizes.max_tokens, stop=("</answer>",),
                              include_stop_str_in_output=True, seed=0)
    engine = make_engine("transformers", args.model, device=args.device, dtype=args.dtype,
                         batch_size=sizes.generation_batch, progress=False)
    summary = evaluate(engine, r1_zero_reward_fn, examples, "r1_zero", sampling, runs_dir() / "rehearse_gpu_eval",
                       progress=False)
    tokens = summary["mean_response_tokens"] * summary["num_samples"]
    return {"samples": summary["num_samples"], "generation_s": summary["time"]["generation_s"],
            "tokens_per_s": tokens / summary["time"]["generation_s"], "mean_response_tokens":
            summary["mean_response_tokens"]}


def phase_grpo(args, sizes: Sizes, probe: MemoryWindows, resume: bool = False) -> dict:
    """3 GRPO steps and a checkpoint; with `resume`, the same run resumed for a 4th."""
    from hw3lib.grpo.loop import train

    checkpoints: list[dict] = []
    rehearse.timed_checkpoints(checkpoints)
    cfg = grpo_config(args, sizes, 4 if resume else 3)
    probe.resident_prediction = resident_before(probe.shape, trainer=True, monitor_kl=cfg.monitor_kl, moments=resume)
    result = train(cfg, resume=resume)
    rows = result.train_rows[3:] if resume else result.train_rows
    return {"steps": [row["grpo_step"] for row in result.train_rows], "checkpoints": checkpoints,
            "per_step": rehearse.train_summary(rows), "micro_batch": cfg.micro_train_batch_size,
            "microbatches_per_step": cfg.gradient_accumulation_steps, "loss_type": cfg.loss_type, "dtype": cfg.dtype}


def phase_sft(args, sizes: Sizes, probe: MemoryWindows) -> dict:
    """2 SFT steps at the course's batch, validation before and after."""
    from hw3lib.sft.config import SFTConfig
    from hw3lib.sft.loop import train_sft

    probe.resident_prediction = resident_before(probe.shape, trainer=True)
    cfg = SFTConfig.for_profile("full", name="rehearse_gpu_sft", model=args.model, engine="transformers",
                                policy_device=args.device, rollout_device=args.device, dtype=args.dtype,
                                n_sft_steps=2, train_batch_size=sizes.sft_batch,
                                gradient_accumulation_steps=sizes.sft_accumulation, n_train_examples=256,
                                n_eval_examples=sizes.val_questions, sampling_max_tokens=sizes.max_tokens,
                                generation_batch_size=sizes.generation_batch, eval_every=2, checkpoint_every=2)
    result = train_sft(cfg)
    return {"steps": len(result.train_rows), "train_s": [r["time/train_s"] for r in result.train_rows],
            "loss": [r["train/loss"] for r in result.train_rows], "eval_s": [r["time/eval_s"] for r in result.eval_rows],
            "micro_batch": cfg.micro_train_batch_size}


PHASE_FUNCTIONS = {"eval": phase_eval, "grpo": phase_grpo,
                   "grpo_resume": lambda args, sizes, probe: phase_grpo(args, sizes, probe, resume=True),
                   "sft": phase_sft}


def run_phase(name: str, args, sizes: Sizes, shape) -> dict:
    """One phase with its memory windows; a failure is recorded (with its message), not raised."""
    import traceback

    probe = MemoryWindows(torch.device(args.device), shape)
    if probe.cuda:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    undo = patch_windows(probe)
    started = time.perf_counter()
    try:
        record = {"result": PHASE_FUNCTIONS[name](args, sizes, probe)}
    except Exception as exc:  # the record says what broke; the next phases still run
        record = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    finally:
        undo()
    record.update(seconds=time.perf_counter() - started, windows=probe.windows)
    if probe.cuda:
        free, total = torch.cuda.mem_get_info()
        record.update(peak_allocated=max(probe.phase_peak, torch.cuda.max_memory_allocated()),
                      peak_reserved=torch.cuda.max_memory_reserved(),
                      context_bytes=total - free - torch.cuda.memory_reserved())
    return record


def window_summary(windows: list[dict]) -> dict:
    """Per window kind: the largest measured peak, its prediction and their ratio."""
    out = {}
    for kind in sorted({w["kind"] for w in windows}):
        measured = [w for w in windows if w["kind"] == kind and w["peak_allocated"] is not None]
        if measured:
            top = max(measured, key=lambda w: w["peak_allocated"])
            out[kind] = {"peak_allocated": top["peak_allocated"], "peak_predicted": top["peak_predicted"],
                         "measured_over_predicted": top["measured_over_predicted"], "count": len(measured)}
    return out


def summary_line(name: str, record: dict) -> str:
    if "error" in record:
        return f"{name:12s} FAILED after {record['seconds']:.0f} s: {record['error']}"
    line = f"{name:12s} {record['seconds']:7.1f} s"
    if "peak_allocated" in record:
        line += f"  peak allocated {record['peak_allocated'] / 2**30:6.2f} GiB"
    for kind, row in window_summary(record["windows"]).items():
        line += (f"  {kind} {row['peak_allocated'] / 2**30:.2f} vs predicted {row['peak_predicted'] / 2**30:.2f} GiB "
                 f"({row['measured_over_predicted']:.2f}x)")
    return line


# ---- the driver -------------------------------------------------------------------------------------------

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (the rehearsal) or cpu (with --small: the code path)")
    parser.add_argument("--small", action="store_true", help="tiny counts and (unless --model real) the tiny model")
    parser.add_argument("--model", choices=("real", "tiny"), default=None,
                        help="real: the random-weight Qwen3-0.6B-shaped checkpoint (default); tiny: hw3lib's tiny model")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated, from {', '.join(PHASES)}")
    parser.add_argument("--layers", type=int, default=None, help="Qwen3-0.6B decoder layers (default: all 28)")
    parser.add_argument("--max-tokens", type=int, default=None, help="new tokens per response (default 1,024)")
    parser.add_argument("--eval-questions", type=int, default=None)
    parser.add_argument("--generation-batch", type=int, default=None, help="rows per generate call (default 256)")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default=None,
                        help="default: bfloat16 on cuda (the full profile's), float32 on cpu; bfloat16 on a CPU runs the "
                             "GPU's path there (the engine's own bf16 copy and the weight push after each step)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    unknown = {p.strip() for p in args.phases.split(",")} - set(PHASES)
    if unknown:
        parser.error(f"unknown phases {sorted(unknown)}: choose from {', '.join(PHASES)}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no GPU is visible here; pass --small --device cpu to run the code path on a CPU")
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    args.model_kind = args.model or ("tiny" if args.small else "real")
    chosen = {"max_tokens": args.max_tokens, "eval_questions": args.eval_questions,
              "generation_batch": args.generation_batch}
    args.sizes = replace(SMALL if args.small else Sizes(), **{k: v for k, v in chosen.items() if v is not None})
    return args


def main(argv=None) -> None:
    from transformers import AutoConfig

    from hw3lib.core.cost import Shape
    from hw3lib.models.real_shape import real_shape_path
    from hw3lib.models.tiny import tiny_model_path

    args = parse_args(argv)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    workdir = Path(tempfile.mkdtemp(prefix="hw3_rehearse_gpu_"))
    args.threads = torch.get_num_threads()
    os.environ.update(rehearse.environment(args, workdir))  # the stand-in grader, runs under workdir, offline hub
    started = time.perf_counter()
    args.model = str(tiny_model_path() if args.model_kind == "tiny" else real_shape_path("qwen3-0.6b", args.layers))
    shape = Shape.from_config("rehearsal model", AutoConfig.from_pretrained(args.model))
    record = {**record_header("rehearse_gpu", args.device, packages=rehearse.PACKAGES),
              "device": gpu_device(args.device), "sizes": asdict(args.sizes), "model_params": shape.params,
              "layers": shape.layers, "vocab_size": shape.vocab, "build_s": time.perf_counter() - started, "phases": {}}
    out = Path(args.out)
    print(f"model {shape.params:,} parameters, {shape.layers} layers, vocabulary {shape.vocab:,} "
          f"(built in {record['build_s']:.0f} s); sizes {asdict(args.sizes)}", flush=True)
    try:
        for name in phases:
            record["phases"][name] = run_phase(name, args, args.sizes, shape)
            print(summary_line(name, record["phases"][name]), flush=True)
            record["total_s"] = time.perf_counter() - started
            write_json(out, record)  # after every phase: a cut run keeps them
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # the runs and checkpoints (gigabytes each): the JSON has the numbers
    print(f"total {time.perf_counter() - started:.0f} s; wrote {out}", flush=True)
    if any("error" in r for r in record["phases"].values()):
        sys.exit(1)


def gpu_device(device: str) -> dict:
    if not device.startswith("cuda"):
        return device_info(device)
    props = torch.cuda.get_device_properties(0)
    return {"gpu": props.name, "memory_bytes": props.total_memory, "multiprocessors": props.multi_processor_count,
            "torch_cuda": torch.version.cuda, "cpu_cores": os.cpu_count()}


if __name__ == "__main__":
    main()
