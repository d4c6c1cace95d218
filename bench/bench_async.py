"""Steps per minute of synchronous GRPO vs asynchronous one-behind vs replay, tiny model, 2 CPU cores.

All variants train the smoke profile's warm-started tiny model on the course's smoke task
(`--course`, default the MATH course's generated `\\boxed{}` problems) with the same settings and the
same fresh rollouts per step (`--steps` GRPO steps of `--rollouts` rollouts in groups of 8,
`grpo_clip`, one optimizer step per rollout batch at `--lr`); only the schedule differs:

- sync: hw3lib.grpo.loop.train, generation then training in one process with both cores
  (`torch.set_num_threads(2)`);
- one_behind: hw3lib.grpo.async_loop, Generator and Learner actors with one core each, batch k+1
  generated while the learner trains on batch k (max_staleness 1);
- replay: the same actors with the staleness-bounded replay buffer, each group trained up to twice
  (max_uses 2, max_staleness 2, a buffer of two rollout batches), so the learner need not wait for
  every fresh batch.

Steps per minute count the GRPO steps between the first and the last validation (validation,
Ray start-up and model loading excluded on both sides): sync from `time/elapsed_s` in
metrics.jsonl, async from the step windows in `async_timings.jsonl`. The default setting is one where
the synchronous loop learns (MATH task: 64 rollouts per step, lr 2e-4; measured 0.430 -> 0.545 in 200
steps and 0.605 in 400, sampled validation on 512 problems) and where generation and training take
similar time (the script prints the sync run's split): with 64 rollouts neither phase gains much from a
second thread, which is the regime where giving each phase its own core and overlapping them pays.
With large batches training runs ~2x faster on two threads, so the synchronous loop already uses both
cores well and overlap gains little. Each variant runs in its own subprocess. Validation answer
reward (the course's sampling settings, `--eval` held-out questions) before and after is printed with
its binomial noise band (2 standard errors of the difference).

    .venv/bin/python bench/bench_async.py                        # all three (about 20 minutes here)
    .venv/bin/python bench/bench_async.py --steps 6 --eval 64    # a quick look
    .venv/bin/python bench/bench_async.py --course gsm8k-qwen3   # the arithmetic task
Writes bench/results/bench_async_<course>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from hw3lib.core.benchmark import record_header, run_child, write_json

ROOT = Path(__file__).resolve().parents[1]
MODES = ("sync", "one_behind", "replay")


def config(steps: int, rollouts: int, n_eval: int, learning_rate: float):
    from hw3lib.grpo.config import GRPOConfig

    return GRPOConfig.for_profile(
        "smoke", name="bench_async", n_grpo_steps=steps, rollout_batch_size=rollouts, group_size=8,
        train_batch_size=rollouts, gradient_accumulation_steps=2, epochs_per_rollout_batch=1, loss_type="grpo_clip",
        eval_every=steps, n_eval_examples=n_eval, checkpoint_every=0, learning_rate=learning_rate)


def run_variant(mode: str, steps: int, rollouts: int, n_eval: int, learning_rate: float) -> dict:
    import torch

    from hw3lib.core.io import read_jsonl

    cfg = config(steps, rollouts, n_eval, learning_rate)
    if mode == "sync":
        from hw3lib.grpo.loop import train

        torch.set_num_threads(2)
        result = train(cfg)
        rows = read_jsonl(result.run_dir / "metrics.jsonl")
        first_eval = next(r for r in rows if "eval/answer_reward" in r)
        last_train = [r for r in rows if "train/loss" in r][-1]
        seconds = last_train["time/elapsed_s"] - first_eval["time/elapsed_s"]
        parts = {part: sum(r[f"time/{part}_s"] for r in rows if "train/loss" in r)
                 for part in ("generation", "scoring", "old_logprobs", "train", "weight_sync")}
    else:
        from hw3lib.grpo.async_loop import AsyncConfig, train_async

        acfg = (AsyncConfig(mode="one_behind", max_staleness=1) if mode == "one_behind" else
                AsyncConfig(mode="replay", max_staleness=2, max_uses=2, buffer_batches=2))
        result = train_async(cfg, acfg)
        timings = list(read_jsonl(result.run_dir / "async_timings.jsonl"))
        seconds = sum(t["step_s"] for t in timings)
        parts = {key: sum(t[key] for t in timings) for key in
                 ("generation_s", "train_s", "weight_sync_s", "generator_idle_s", "learner_idle_s")}
    evals = result.eval_rows
    return {"mode": mode, "steps": steps, "seconds": seconds, "steps_per_minute": 60 * steps / seconds,
            "eval_start": evals[0]["eval/answer_reward"], "eval_end": evals[-1]["eval/answer_reward"],
            "n_eval": evals[-1]["eval/n"], "time_parts_s": parts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--course", default="math-qwen2.5", help="course whose smoke task is trained (hw3lib.core.course)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rollouts", type=int, default=64)
    parser.add_argument("--eval", type=int, default=512, help="held-out questions validated before and after")
    parser.add_argument("--lr", type=float, default=2e-4, help="learning rate")
    parser.add_argument("--only", choices=MODES, help="run one variant in this process (used internally)")
    args = parser.parse_args()
    from hw3lib.core.course import COURSE_ENV, get_course

    course = get_course(args.course)  # a clear error for an unknown name
    os.environ[COURSE_ENV] = course.name  # the variants' subprocesses inherit it
    if args.only:
        print("RESULT " + json.dumps(run_variant(args.only, args.steps, args.rollouts, args.eval, args.lr)), flush=True)
        return

    results = {}
    with tempfile.TemporaryDirectory() as runs:
        for mode in MODES:
            env = {**os.environ, "HW3_RUNS_DIR": str(Path(runs) / mode)}
            results[mode] = run_child([__file__, "--only", mode, "--course", course.name, "--steps", args.steps,
                                       "--rollouts", args.rollouts, "--eval", args.eval, "--lr", args.lr],
                                      env=env, prefix="RESULT ")
            r = results[mode]
            print(f"{mode:11s} {r['steps_per_minute']:6.2f} GRPO steps/min ({r['seconds']:.0f} s for {r['steps']}); "
                  f"validation answer {r['eval_start']:.3f} -> {r['eval_end']:.3f}; time: "
                  + ", ".join(f"{k} {v:.0f}s" for k, v in r["time_parts_s"].items()), flush=True)

    from hw3lib.grpo.async_report import noise_band, overlap_ceiling

    sync = results["sync"]
    for mode in MODES[1:]:
        r = results[mode]
        ratio = r["steps_per_minute"] / sync["steps_per_minute"]
        p1, p2, n = sync["eval_end"], r["eval_end"], r["n_eval"]
        band = noise_band(p1, p2, n)
        verdict = "within" if abs(p2 - p1) <= band else "outside"
        r.update(speedup_vs_sync=ratio, eval_end_difference=p2 - p1, noise_band=band)
        print(f"{mode}: {ratio:.2f}x the synchronous loop's steps per minute; final validation "
              f"{p2:.3f} vs {p1:.3f} (difference {p2 - p1:+.3f}, {verdict} the noise band +-{band:.3f})")

    one = results["one_behind"]["time_parts_s"]  # totals over the run: the ratio is the same as per step
    ceiling = overlap_ceiling(sync["seconds"], one["generation_s"], one["train_s"])
    results["one_behind"]["overlap_ceiling_vs_sync"] = ceiling
    print(f"one_behind's ceiling here: {ceiling:.2f}x (sync's step time over the slower actor's busy time: "
          f"generation {one['generation_s']:.0f} s, training {one['train_s']:.0f} s on one core each)")

    import torch

    record = {**record_header("bench_async"), "course": course.name, "dataset": config(1, 8, 1, 1e-4).dataset,
              "torch": torch.__version__, "settings": vars(args), "results": results}
    out_file = write_json(ROOT / "bench" / "results" / f"bench_async_{course.name}.json", record)
    print(f"written: {out_file.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
