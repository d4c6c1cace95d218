"""Steps per minute of synchronous GRPO vs asynchronous one-behind vs replay, tiny model, 2 CPU cores.

All three train the smoke profile's warm-started tiny model on the arithmetic task with the same
settings and the same total rollouts (`--steps` GRPO steps of `--rollouts` rollouts in groups of
8, `grpo_clip`, one optimizer step per rollout batch); only the schedule differs:

- sync: hw3lib.grpo.loop.train, generation then training in one process with both cores
  (`torch.set_num_threads(2)`);
- one_behind: hw3lib.grpo.async_loop, Generator and Learner actors with one core each, batch k+1
  generated while the learner trains on batch k (max_staleness 1);
- replay: the same actors with the staleness-bounded replay buffer (max_staleness 2, max_uses 1,
  a buffer of two rollout batches).

Steps per minute count the GRPO steps between the first and the last validation (validation,
Ray start-up and model loading excluded on both sides): sync from `time/elapsed_s` in
metrics.jsonl, async from the step windows in `async_timings.jsonl`. The settings are chosen so
generation and training take similar time (the script prints the sync run's split), and small: with
32 rollouts per step neither phase gains much from a second thread, which is the regime where giving
each phase its own core and overlapping them pays. (Measured here: with 64 rollouts one-behind was
1.23x, with 128 1.02x -- training then runs ~2x faster on two threads than on one, so the synchronous
loop already uses both cores well.) Batches this small do not teach the tiny model: the validation
reward drops in every schedule alike (measured: 0.328 -> 0.16 at the smoke recipe's lr 2e-4, which is
tuned for 256 rollouts per step; -> 0.23-0.31 at the default 5e-5), so the bench measures speed and
checks only that the schedules end within noise of each other; notebook 04 section 9 compares their
learning at the smoke recipe's batch size. Each variant runs in its own subprocess. Validation answer reward (greedy, `--eval`
held-out questions) before and after is printed with its binomial noise band (2 standard errors of
the difference).

    .venv/bin/python bench/bench_async.py                  # all three (about 2 minutes here)
    .venv/bin/python bench/bench_async.py --steps 6         # a quick look
Writes bench/results/bench_async.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
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

        acfg = AsyncConfig(mode=mode, max_staleness=1 if mode == "one_behind" else 2, max_uses=1, buffer_batches=2)
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
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--rollouts", type=int, default=32)
    parser.add_argument("--eval", type=int, default=128, help="held-out questions validated before and after")
    parser.add_argument("--lr", type=float, default=5e-5, help="learning rate (the smoke recipe's 2e-4 is tuned for 256 rollouts per step)")
    parser.add_argument("--only", choices=MODES, help="run one variant in this process (used internally)")
    args = parser.parse_args()
    if args.only:
        print("RESULT " + json.dumps(run_variant(args.only, args.steps, args.rollouts, args.eval, args.lr)), flush=True)
        return

    results = {}
    with tempfile.TemporaryDirectory() as runs:
        for mode in MODES:
            env = {**os.environ, "HW3_RUNS_DIR": str(Path(runs) / mode)}
            out = subprocess.run([sys.executable, __file__, "--only", mode, "--steps", str(args.steps),
                                  "--rollouts", str(args.rollouts), "--eval", str(args.eval), "--lr", str(args.lr)],
                                 env=env, capture_output=True, text=True, check=False)
            line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"{mode} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
            results[mode] = json.loads(line[len("RESULT "):])
            r = results[mode]
            print(f"{mode:11s} {r['steps_per_minute']:6.2f} GRPO steps/min ({r['seconds']:.0f} s for {r['steps']}); "
                  f"validation answer {r['eval_start']:.3f} -> {r['eval_end']:.3f}; time: "
                  + ", ".join(f"{k} {v:.0f}s" for k, v in r["time_parts_s"].items()), flush=True)

    sync = results["sync"]
    for mode in MODES[1:]:
        r = results[mode]
        ratio = r["steps_per_minute"] / sync["steps_per_minute"]
        p1, p2, n = sync["eval_end"], r["eval_end"], r["n_eval"]
        band = 2 * math.sqrt((p1 * (1 - p1) + p2 * (1 - p2)) / n)
        verdict = "within" if abs(p2 - p1) <= band else "outside"
        r.update(speedup_vs_sync=ratio, eval_end_difference=p2 - p1, noise_band=band)
        print(f"{mode}: {ratio:.2f}x the synchronous loop's steps per minute; final validation "
              f"{p2:.3f} vs {p1:.3f} (difference {p2 - p1:+.3f}, {verdict} the noise band +-{band:.3f})")

    import torch

    record = {"bench": "bench_async", "command": " ".join([Path(sys.executable).name, *sys.argv]),
              "device": f"CPU ({os.cpu_count()} cores, {platform.processor() or platform.machine()})",
              "torch": torch.__version__, "settings": vars(args), "results": results}
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    from hw3lib.core.io import atomic_write_json

    atomic_write_json(out_dir / "bench_async.json", record)
    print(f"written: {out_dir / 'bench_async.json'}")


if __name__ == "__main__":
    main()
