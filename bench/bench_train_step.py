"""Time of one GRPO optimizer step: hw3lib.grpo.loop's loop versus TRL's GRPOTrainer, on the tiny model, CPU.

Both do the same work per step: 8 arithmetic questions x 8 samples = a rollout batch of 64,
sampled at temperature 1 (top-p 1, no top-k) for up to 128 tokens (the untrained tiny model
rarely emits EOS, so most responses use the whole budget), scored with `r1_zero_reward_fn`,
group-normalized advantages with std scaling, and one optimizer step (AdamW, lr 1e-5,
betas 0.9/0.95, clipping at 1.0) over the 64 rollouts in 2 microbatches of 32. Loss: ours
`reinforce_with_baseline` with `masked_mean`; TRL `loss_type="grpo"` (per-sequence mean over
its tokens, then over sequences -- the same normalization), `scale_rewards="group"`, `beta=0`
(no reference model), `epsilon=0.2` with `num_iterations=1`, so its clipped ratio is exactly 1
and its gradient is reinforce_with_baseline's. TRL generates with transformers `generate` (no
vLLM) and needs no old log-probs (`steps_per_generation == gradient_accumulation_steps`).

Both sides train the same model object, loaded by `hw3lib.models.load.load_model_and_tokenizer` (on a
CPU with `hw3lib.models.attention`'s grouped-query attention), so the attention kernel is not part of the
difference; what differs is everything around the model: rollout generation (our shared-prompt
prefill, static KV cache and samplers), scoring, and the training forward/backward.

Each side runs in its own subprocess (same thread count) for `--steps` optimizer steps; the
first is a warm-up and the time per step is the median of the rest. Ours: the wall-clock
between consecutive optimizer-step rows of metrics.jsonl (generation through weight sync;
validation happens only before the first and after the last step). TRL: `on_step_begin` to
`on_step_end` of a TrainerCallback (generation happens inside the step).

    .venv/bin/python bench/bench_train_step.py               # both, then the ratio
    .venv/bin/python bench/bench_train_step.py --only ours   # one side
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ROLLOUT_BATCH, GROUP, MAX_TOKENS, MIN_TOKENS, ACCUMULATION, LR = 64, 8, 128, 4, 2, 1e-5


def run_ours(steps: int) -> list[float]:
    from hw3lib.core.io import read_jsonl
    from hw3lib.grpo.loop import train
    from hw3lib.grpo.config import GRPOConfig

    cfg = GRPOConfig.for_profile(
        "smoke", name="bench_train_step", warm_start_steps=0, model="tiny", n_grpo_steps=steps,
        rollout_batch_size=ROLLOUT_BATCH, group_size=GROUP, train_batch_size=ROLLOUT_BATCH, epochs_per_rollout_batch=1,
        gradient_accumulation_steps=ACCUMULATION, sampling_max_tokens=MAX_TOKENS, sampling_min_tokens=MIN_TOKENS,
        learning_rate=LR, lr_warmup_steps=0, loss_type="reinforce_with_baseline", length_normalization="masked_mean",
        eval_every=10**6, n_eval_examples=1, checkpoint_every=0, monitor_kl=False)
    result = train(cfg)
    rows = [row for row in read_jsonl(result.run_dir / "metrics.jsonl") if "train/loss" in row]
    ends = [row["time/elapsed_s"] for row in rows]
    phases = {p: statistics.mean(r[f"time/{p}_s"] for r in rows[1:]) for p in ("generation", "scoring", "train")}
    print(f"ours: mean response length {statistics.mean(r['train/response_length_mean'] for r in rows):.1f} tokens; "
          f"per step {', '.join(f'{p} {t:.2f} s' for p, t in phases.items())}", file=sys.stderr)
    return [b - a for a, b in zip(ends, ends[1:])]  # step k's time (k >= 2): its end minus step k-1's end


def run_trl(steps: int) -> list[float]:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    from hw3lib.tasks.data import format_prompt, make_arithmetic_problems
    from hw3lib.tasks.rewards import r1_zero_reward_fn
    from hw3lib.models.load import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer("tiny")
    records = make_arithmetic_problems(4096, seed=0)
    dataset = Dataset.from_list([{"prompt": format_prompt("r1_zero", r["question"]), "gold": r["gold"]} for r in records])

    def reward(prompts, completions, gold, **kwargs):
        return [r1_zero_reward_fn(c, g)["reward"] for c, g in zip(completions, gold)]

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self.started = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self.started)

    timer = StepTimer()
    args = TRLConfig(
        output_dir=tempfile.mkdtemp(prefix="trl_bench_"), max_steps=steps, use_cpu=True, bf16=False,
        per_device_train_batch_size=ROLLOUT_BATCH // ACCUMULATION, gradient_accumulation_steps=ACCUMULATION,
        num_generations=GROUP, max_completion_length=MAX_TOKENS, generation_kwargs={"min_new_tokens": MIN_TOKENS},
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
    return timer.times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per side (the first is a warm-up)")
    parser.add_argument("--only", choices=["ours", "trl"], default=None, help="run one side (in this process)")
    args = parser.parse_args()
    if args.only:
        times = run_ours(args.steps) if args.only == "ours" else run_trl(args.steps)
        print(json.dumps({"side": args.only, "step_seconds": times}))
        return
    env = {**os.environ, "HW3_RUNS_DIR": tempfile.mkdtemp(prefix="bench_runs_"), "TOKENIZERS_PARALLELISM": "false"}
    medians = {}
    for side in ("ours", "trl"):
        out = subprocess.run([sys.executable, __file__, "--only", side, "--steps", str(args.steps)], env=env,
                             capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{side} failed:\n{out.stderr[-4000:]}")
        for line in out.stderr.splitlines():
            if line.startswith(f"{side}:"):
                print(line)
        times = json.loads(out.stdout.strip().splitlines()[-1])["step_seconds"]
        medians[side] = statistics.median(times)
        print(f"{side}: {medians[side]:.2f} s per optimizer step (median of {len(times)}: "
              f"{', '.join(f'{t:.2f}' for t in times)})", flush=True)
    print(f"rollout batch {ROLLOUT_BATCH} (group {GROUP}), up to {MAX_TOKENS} new tokens, {ACCUMULATION} microbatches; "
          f"hw3lib is {medians['trl'] / medians['ours']:.2f}x TRL's steps per second")


if __name__ == "__main__":
    main()
