"""Time of one GRPO optimizer step: hw3lib.grpo.loop's loop versus TRL's GRPOTrainer, on the tiny model, CPU.

Both do the same work per step: 8 arithmetic questions x 8 samples = a rollout batch of 64,
sampled at temperature 1 (top-p 1, no top-k) for up to 128 tokens (the untrained tiny model
rarely emits EOS, so most responses use the whole budget), scored with `r1_zero_reward_fn`,
group-normalized advantages with std scaling, and one optimizer step (fused AdamW, lr 1e-5,
betas 0.9/0.95, clipping at 1.0) over the 64 rollouts in 2 microbatches of 32. Loss: ours
`reinforce_with_baseline` with `masked_mean`; TRL `loss_type="grpo"` (per-sequence mean over
its tokens, then over sequences -- the same normalization), `scale_rewards="group"`, `beta=0`
(no reference model), `epsilon=0.2` with `num_iterations=1`, so its clipped ratio is exactly 1
and its gradient is reinforce_with_baseline's. TRL generates with transformers `generate` (no
vLLM) and needs no old log-probs (`steps_per_generation == gradient_accumulation_steps`). Gradient
checkpointing is off on both sides unless asked (TRL's GRPOConfig turns it on by default; both sides
then use a fused AdamW, TRL's default and ours).

Both sides train the same model object, loaded by `hw3lib.models.load.load_model_and_tokenizer` (on a
CPU with `hw3lib.models.attention`'s grouped-query attention), so the attention kernel is not part of the
difference; what differs is everything around the model: rollout generation (our shared-prompt
prefill, static KV cache and samplers), scoring, and the training forward/backward.

Each side runs in its own subprocess (same thread count) for `--steps` optimizer steps; the
first is a warm-up and the time per step is the median of the rest. Ours: the wall-clock
between consecutive optimizer-step rows of metrics.jsonl (generation through weight sync;
validation happens only before the first and after the last step). TRL: `on_step_begin` to
`on_step_end` of a TrainerCallback (generation happens inside the step).

**Real width** (`--real-width-layers 2,28`): the same comparison at Qwen3-0.6B's width and vocabulary
(`hw3lib.models.real_shape`: hidden 1,024, 151,936 entries, random weights) with 2 and 28 decoder layers,
in the full profile's precision on both sides (float32 masters, bf16 autocast: ours `dtype="bfloat16"`,
TRL `bf16=True`), microbatches of 2 sequences (the full profile's), a rollout batch of 8 (2 questions x 4)
of exactly `REAL.tokens` new tokens (min = max: a random model almost never samples EOS). Random weights
earn no reward, which would zero every advantage; both sides grade with the stand-in grader of
`hw3lib.models.real_shape` (a reward from a hash of the response). Each side also reports its peak
resident memory (VmHWM of its process). Then the machine's matmul peak (large float32 and bf16 matmuls
on the same threads) and our training phase's model FLOPs per second as a fraction of it: 6 FLOPs per
parameter per token through the decoder (all tokens, prompt included -- our shared-prefix pass executes
fewer) plus 6 per output-head weight per response token. Results: bench/results/train_step_real_width.json.

    .venv/bin/python bench/bench_train_step.py               # both, then the ratio
    .venv/bin/python bench/bench_train_step.py --only ours   # one side
    .venv/bin/python bench/bench_train_step.py --real-width-layers 2,28 --checkpointing-too
    .venv/bin/python bench/bench_train_step.py --profile  # where each side's tiny step goes
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from hw3lib.core.benchmark import peak_memory, record_header, run_child, write_json

ROOT = Path(__file__).resolve().parents[1]
LR = 1e-5
RESULTS = ROOT / "bench" / "results" / "train_step_real_width.json"
TINY_HISTORY = ROOT / "bench" / "results" / "train_step_tiny.jsonl"  # one line per run, with the commit


@dataclass(frozen=True)
class Setting:
    """What both sides run: the model, the batch, the precision."""

    model: str = "tiny"  # "tiny", or a checkpoint folder (real width)
    rollout_batch: int = 64
    group: int = 8
    tokens: int = 128  # the generation budget
    min_tokens: int = 4
    accumulation: int = 2
    dtype: str = "float32"  # "bfloat16": float32 masters under bf16 autocast on both sides
    gradient_checkpointing: bool = False  # on both sides (TRL's GRPOConfig turns it on by default: set explicitly)


TINY = Setting()
REAL = Setting(rollout_batch=8, group=4, tokens=64, min_tokens=64, accumulation=4, dtype="bfloat16")


def reward_function():
    """The tiny model's: the course's grader; a random real-width model's: the stand-in (a hash of the response)."""
    grader = os.environ.get("HW3_COURSE_GRADER")
    if not grader:
        from hw3lib.tasks.rewards import r1_zero_reward_fn

        return r1_zero_reward_fn
    spec = importlib.util.spec_from_file_location("stand_in_grader", grader)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.r1_zero_reward_fn


def run_ours(steps: int, setting: Setting) -> dict:
    from hw3lib.core.io import read_jsonl
    from hw3lib.grpo.loop import train
    from hw3lib.grpo.config import GRPOConfig

    cfg = GRPOConfig.for_profile(
        "smoke", name=f"bench_train_step_{Path(setting.model).name}{'_gc' if setting.gradient_checkpointing else ''}",
        warm_start_steps=0, model=setting.model, dtype=setting.dtype,
        n_grpo_steps=steps, rollout_batch_size=setting.rollout_batch, group_size=setting.group,
        train_batch_size=setting.rollout_batch, epochs_per_rollout_batch=1,
        gradient_accumulation_steps=setting.accumulation, sampling_max_tokens=setting.tokens,
        sampling_min_tokens=setting.min_tokens, learning_rate=LR, lr_warmup_steps=0,
        loss_type="reinforce_with_baseline", length_normalization="masked_mean", eval_every=10**6,
        n_eval_examples=1, checkpoint_every=0, monitor_kl=False, gradient_checkpointing=setting.gradient_checkpointing)
    result = train(cfg)
    rows = [row for row in read_jsonl(result.run_dir / "metrics.jsonl") if "train/loss" in row]
    ends = [row["time/elapsed_s"] for row in rows]
    phases = {p: statistics.mean(r[f"time/{p}_s"] for r in rows[1:]) for p in ("generation", "scoring", "train")}
    length = statistics.mean(r["train/response_length_mean"] for r in rows)
    print(f"ours: mean response length {length:.1f} tokens; "
          f"per step {', '.join(f'{p} {t:.2f} s' for p, t in phases.items())}", file=sys.stderr)
    return {"step_seconds": [b - a for a, b in zip(ends, ends[1:])],  # step k's end minus step k-1's end
            "train_seconds": [r["time/train_s"] for r in rows[1:]], "response_length": length,
            "generation_s": phases["generation"], "train_s": phases["train"],
            "peak_rss_bytes": peak_memory()}


def run_trl(steps: int, setting: Setting) -> dict:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    from hw3lib.tasks.data import format_prompt, make_arithmetic_problems
    from hw3lib.models.load import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(setting.model, dtype="float32")
    records = make_arithmetic_problems(4096, seed=0)
    dataset = Dataset.from_list([{"prompt": format_prompt("r1_zero", r["question"]), "gold": r["gold"]} for r in records])
    grade = reward_function()

    def reward(prompts, completions, gold, **kwargs):
        return [grade(c, g)["reward"] for c, g in zip(completions, gold)]

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self.started = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self.started)

    timer = StepTimer()
    generation_seconds = []  # per call of TRL's rollout phase (generation, scoring, advantages): once per step

    def timed(method):
        def wrapper(*a, **k):
            started = time.perf_counter()
            try:
                return method(*a, **k)
            finally:
                generation_seconds.append(time.perf_counter() - started)
        return wrapper

    GRPOTrainer._generate_and_score_completions = timed(GRPOTrainer._generate_and_score_completions)
    args = TRLConfig(
        output_dir=tempfile.mkdtemp(prefix="trl_bench_"), max_steps=steps, use_cpu=True,
        bf16=setting.dtype == "bfloat16", gradient_checkpointing=setting.gradient_checkpointing,
        per_device_train_batch_size=setting.rollout_batch // setting.accumulation,
        gradient_accumulation_steps=setting.accumulation, num_generations=setting.group,
        max_completion_length=setting.tokens, generation_kwargs={"min_new_tokens": setting.min_tokens},
        temperature=1.0, top_p=1.0, top_k=0, beta=0.0, loss_type="grpo", scale_rewards="group", num_iterations=1,
        epsilon=0.2, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, adam_beta1=0.9,
        adam_beta2=0.95, weight_decay=0.0, max_grad_norm=1.0, logging_steps=1, report_to="none",
        save_strategy="no", seed=0, disable_tqdm=True, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[timer])
    trainer.train()
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    print(f"trl: mean response length {statistics.mean(lengths):.1f} tokens; torch threads {torch.get_num_threads()}",
          file=sys.stderr)
    # its training phase: the step's time minus its rollout phase (both once per optimizer step here)
    generation_s = statistics.mean(generation_seconds[1:]) if len(generation_seconds) > 1 else None
    train_s = (statistics.mean(t - g for t, g in zip(timer.times[1:], generation_seconds[1:]))
               if generation_s is not None else None)
    return {"step_seconds": timer.times[1:], "response_length": statistics.mean(lengths),
            "generation_s": generation_s, "train_s": train_s, "peak_rss_bytes": peak_memory()}


def compare(steps: int, setting: Setting, env: dict) -> dict:
    """Both sides in their own subprocesses; prints and returns their numbers."""
    out = {}
    for side in ("ours", "trl"):
        out[side] = run_child([__file__, "--only", side, "--steps", steps, "--setting", json.dumps(asdict(setting))],
                              env=env, echo=f"{side}:")
        times = out[side]["step_seconds"]
        out[side]["median_step_s"] = statistics.median(times)
        print(f"{side}: {out[side]['median_step_s']:.2f} s per optimizer step (median of {len(times)}: "
              f"{', '.join(f'{t:.2f}' for t in times)}), peak {out[side]['peak_rss_bytes'] / 2**30:.2f} GiB"
              + (f"; generation {out[side]['generation_s']:.2f} s, training {out[side]['train_s']:.2f} s"
                 if out[side].get("generation_s") is not None else ""), flush=True)
    out["speed_ratio"] = out["trl"]["median_step_s"] / out["ours"]["median_step_s"]
    out["memory_ratio"] = out["ours"]["peak_rss_bytes"] / out["trl"]["peak_rss_bytes"]
    print(f"rollout batch {setting.rollout_batch} (group {setting.group}), up to {setting.tokens} new tokens, "
          f"{setting.accumulation} microbatches, {setting.dtype}: hw3lib is {out['speed_ratio']:.2f}x TRL's steps "
          f"per second at {out['memory_ratio']:.2f}x its peak memory")
    return out


def matmul_peak(size: int = 2048, repeats: int = 10) -> dict:
    """FLOP/s of large square matmuls on this process's threads, float32 and bf16 (the best of `repeats`)."""
    import torch

    peaks = {}
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - started)
        peaks[str(dtype).split(".")[1]] = 2 * size**3 / best
    return peaks


def real_width(layers: list[int], steps: int, env: dict, checkpointing_too: bool = False) -> None:

    import torch

    from hw3lib.core import cost
    from hw3lib.models.real_shape import real_shape_config, real_shape_path, write_stand_in_grader

    torch.set_num_threads(int(env.get("OMP_NUM_THREADS", torch.get_num_threads())))
    env = {**env, "HW3_COURSE_GRADER": str(write_stand_in_grader(tempfile.mkdtemp(prefix="bench_grader_")))}
    peak = matmul_peak()
    print(f"matmul peak on {torch.get_num_threads()} threads: float32 {peak['float32'] / 1e9:.0f} GFLOP/s, "
          f"bf16 {peak['bfloat16'] / 1e9:.0f} GFLOP/s")
    results = {**record_header("bench_train_step --real-width-layers"), "matmul_peak_flops": peak, "setting": asdict(REAL), "layers": {}}
    runs = [(depth, False) for depth in layers] + ([(max(layers), True)] if checkpointing_too else [])
    for depth, checkpointing in runs:
        setting = replace(REAL, model=str(real_shape_path("qwen3-0.6b", depth)), gradient_checkpointing=checkpointing)
        print(f"--- Qwen3-0.6B width, {depth} layers" + (", gradient checkpointing on both sides" if checkpointing
                                                          else ""), flush=True)
        out = compare(steps, setting, env)
        shape = cost.Shape.from_config("qwen3", real_shape_config("qwen3-0.6b", depth))
        responses = setting.rollout_batch * out["ours"]["response_length"]
        tokens = setting.rollout_batch * prompt_tokens(setting.model) + responses
        flops = 3 * cost.forward_flops(shape, round(tokens), round(responses))
        train_s = statistics.median(out["ours"]["train_seconds"])
        out["training_flops"], out["training_flops_per_s"] = flops, flops / train_s
        out["mfu_vs_bf16_matmul"] = flops / train_s / peak["bfloat16"]
        out["mfu_vs_float32_matmul"] = flops / train_s / peak["float32"]
        print(f"ours, training phase: {flops / 1e12:.2f} TFLOP in {train_s:.1f} s = {flops / train_s / 1e9:.0f} GFLOP/s: "
              f"{out['mfu_vs_bf16_matmul']:.0%} of the bf16 matmul peak ({out['mfu_vs_float32_matmul']:.0%} of "
              f"float32's)", flush=True)
        results["layers"][f"{depth}" + ("_checkpointing" if checkpointing else "")] = out
        write_json(RESULTS, results, indent=1)  # after every setting: a stopped run keeps its numbers
    print(f"wrote {RESULTS.relative_to(ROOT)}")


def prompt_tokens(model: str) -> float:
    """Mean length of the arithmetic prompts both sides train on, in the model's tokens."""
    from transformers import AutoTokenizer

    from hw3lib.tasks.data import format_prompt, make_arithmetic_problems

    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = [format_prompt("r1_zero", r["question"]) for r in make_arithmetic_problems(64, seed=0)]
    return statistics.mean(len(tokenizer(p)["input_ids"]) for p in prompts)


def git_commit() -> str:
    """The commit measured, `+dirty` when the working tree has uncommitted changes (the record says so)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def record_tiny(out: dict) -> None:
    """Append the tiny comparison to `TINY_HISTORY`, one JSON line per run with its commit: a regression of
    either phase shows up between two lines (the 2026-11 generation slowdown would have)."""
    phases = {side: {key: out[side][key] for key in ("median_step_s", "response_length", "peak_rss_bytes")}
              for side in ("ours", "trl")}
    for side in ("ours", "trl"):
        for key in ("generation_s", "train_s"):
            phases[side][key] = out[side].get(key)
    line = {**record_header("bench_train_step"), "commit": git_commit(), "speed_ratio": out["speed_ratio"],
            "memory_ratio": out["memory_ratio"], **phases}
    TINY_HISTORY.parent.mkdir(parents=True, exist_ok=True)
    with TINY_HISTORY.open("a") as history:
        history.write(json.dumps(line) + "\n")
    print(f"appended to {TINY_HISTORY.relative_to(ROOT)} (commit {line['commit']})")


PROFILE = ROOT / "bench" / "results" / "train_step_tiny_profile.json"


def profile_side(side: str, steps: int, top: int = 15) -> dict:
    """One side's tiny run under torch's profiler (self CPU time per op) and cProfile (Python time per function):
    where its step goes. Both profilers add a cost per op and per call, so read the shares, not the seconds."""
    import cProfile
    import pstats

    import torch

    python = cProfile.Profile()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as ops:
        python.enable()
        out = (run_ours if side == "ours" else run_trl)(steps, TINY)
        python.disable()
    events = sorted(ops.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    op_total = sum(e.self_cpu_time_total for e in events)
    stats = pstats.Stats(python)
    functions = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)  # by own (tottime) seconds
    python_total = sum(entry[2] for _, entry in functions)
    calls = sum(entry[1] for _, entry in functions)
    return {"step_seconds": out["step_seconds"],
            "torch_ops": [{"op": e.key, "self_cpu_share": e.self_cpu_time_total / op_total, "calls": e.count}
                          for e in events[:top]],
            "torch_op_calls": sum(e.count for e in events), "python_calls": calls,
            "python_functions": [{"function": f"{Path(file).name}:{line}:{name}", "own_share": entry[2] / python_total,
                                  "calls": entry[1]} for (file, line, name), entry in functions[:top]]}


def profile_tiny(steps: int, env: dict) -> None:
    """`--profile`: both sides' tiny runs profiled, each in its own process; written to `PROFILE`."""
    results = {**record_header("bench_train_step --profile"), "commit": git_commit(), "setting": asdict(TINY)}
    for side in ("ours", "trl"):
        results[side] = out = run_child([__file__, "--only", side, "--steps", steps, "--profile"], env=env,
                                        echo=f"{side}:")
        print(f"--- {side}: {len(out['step_seconds'])} profiled steps, {out['torch_op_calls']} torch op calls, "
              f"{out['python_calls']} Python calls in the run")
        for row in out["torch_ops"][:8]:
            print(f"  {row['self_cpu_share']:6.1%}  {row['calls']:8d}  {row['op']}")
        for row in out["python_functions"][:8]:
            print(f"  {row['own_share']:6.1%}  {row['calls']:8d}  {row['function']}")
    write_json(PROFILE, results, indent=1)
    print(f"wrote {PROFILE.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None,
                        help="optimizer steps per side, the first a warm-up (default 4; real width 3)")
    parser.add_argument("--only", choices=["ours", "trl"], default=None, help="run one side (in this process)")
    parser.add_argument("--real-width-layers", default=None,
                        help="comma-separated decoder-layer counts at Qwen3-0.6B's width, e.g. 2,28")
    parser.add_argument("--checkpointing-too", action="store_true",
                        help="real width: also compare at the deepest setting with gradient checkpointing on both sides "
                             "(TRL's default)")
    parser.add_argument("--profile", action="store_true",
                        help="tiny model: profile both sides (torch ops and Python functions) into "
                             "bench/results/train_step_tiny_profile.json instead of timing them")
    parser.add_argument("--setting", default=None, help=argparse.SUPPRESS)  # JSON of a Setting (--only)
    args = parser.parse_args()
    if args.only and args.profile:
        print(json.dumps(profile_side(args.only, args.steps or 4)))
        return
    if args.only:
        setting = Setting(**json.loads(args.setting)) if args.setting else TINY
        out = run_ours(args.steps or 4, setting) if args.only == "ours" else run_trl(args.steps or 4, setting)
        print(json.dumps(out))
        return
    runs = tempfile.mkdtemp(prefix="bench_runs_")
    env = {**os.environ, "HW3_RUNS_DIR": runs, "TOKENIZERS_PARALLELISM": "false"}
    try:
        if args.profile:
            profile_tiny(args.steps or 4, env)
        elif args.real_width_layers:
            real_width([int(n) for n in args.real_width_layers.split(",")], args.steps or 3, env,
                       args.checkpointing_too)
        else:
            record_tiny(compare(args.steps or 4, TINY, env))
    finally:
        shutil.rmtree(runs, ignore_errors=True)  # the runs' final checkpoints: 7 GB each at 28 layers


if __name__ == "__main__":
    main()
