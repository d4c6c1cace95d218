"""The GRPO training loop: one function, `train(cfg)`, readable top to bottom.

Per GRPO step (one rollout batch):

    sample questions -> generate group_size rollouts each (the rollout engine) -> score ->
    group-normalized advantages -> [old log-probs, only off-policy ratio losses; reference
    log-probs, only with KL monitoring] -> epochs_per_rollout_batch passes of optimizer steps,
    each accumulating gradient_accumulation_steps microbatches -> push the weights to the
    engine -> log -> validate every eval_every steps -> checkpoint every checkpoint_every steps.

Variant implemented (see hw3lib.grpo for the maths):

- **No KL term in the loss.** KL(pi || pi_ref) to the frozen initial policy is only *monitored*
  (`monitor_kl`): k1 = mean(logp - logp_ref) and k3 = mean(exp(logp_ref - logp) - (logp_ref -
  logp) - 1) over the response tokens of the rollouts (which pi sampled, so both estimate the KL).
- **Advantages:** group mean baseline, divided by the group std + eps when `use_std_normalization`.
- **Loss:** `no_baseline`, `reinforce_with_baseline`, `grpo_clip` or `grpo_no_clip`, per token,
  then per sequence by `masked_mean` (each response's own length) or `constant` (the generation
  budget, Dr. GRPO).
- **Old log-probs** are computed once per rollout batch, under `torch.inference_mode()`, only
  when a ratio loss is trained off-policy (several epochs, or several optimizer steps per rollout
  batch). On-policy the sampling policy *is* the current one, so the current log-probs, detached,
  serve as old log-probs (ratio exactly 1, no extra forward pass).
- **Tokens:** the policy is trained on the exact token ids the engine sampled (prompt ids + the
  sample's `token_ids`, including a final EOS), never on a re-tokenization of the text.
- **Optimizer:** AdamW, constant learning rate after an optional linear warm-up; global grad-norm clipping; a step whose loss
  or gradient norm is not finite is skipped (no update, counted in `train/skipped_steps`).
- **Weight sync:** after all optimizer steps of a rollout batch (before the next generation). A
  colocated vLLM engine sleeps during training where sleep mode exists (GPU).
- **Validation:** every `eval_every` steps (and before the first and after the last) on held-out
  questions with `eval_temperature` (default 0: greedy, a deterministic low-variance estimate),
  a few example rollouts saved to `samples/step_XXXX.jsonl`.

Outputs in `runs/<name>/`: `config.json`, `metrics.jsonl` (one row per optimizer step, plus one
row per validation; flat names `train/...`, `eval/...`, `time/...`), `samples/`, and
`checkpoints/step_XXXXXX/` (policy, optimizer, step counters, RNG states, metrics so far) named by
`checkpoints/latest`. Checkpoints are written to a temporary folder and renamed into place.
`train(cfg, resume=True)` continues from the latest one; Ctrl-C saves one and re-raises.

Timings per optimizer-step row: a rollout batch's `time/generation_s`, `time/scoring_s` and
`time/old_logprobs_s` (old and, with KL monitoring, reference log-probs) sit on its first row and
`time/weight_sync_s` on its last (the others carry 0), so summing a column over rows gives total
time; `time/train_s` is that optimizer step's own time and `time/tokens_per_s` the rollout batch's
generated tokens per second of its whole step (generation to sync).
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hw3lib.grpo import compute_group_normalized_rewards, grpo_microbatch_train_step
from hw3lib.io import append_jsonl, atomic_write_json, atomic_write_jsonl, atomic_write_text, read_jsonl, runs_dir
from hw3lib.sft import get_response_log_probs, masked_mean
from hw3lib.train_config import RATIO_LOSSES, GRPOConfig

METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_DIR = "checkpoints"


@dataclass
class RunResult:
    """What a finished (or resumed-and-finished) run leaves behind."""

    run_dir: Path
    config: GRPOConfig
    metrics: list[dict]
    """Every row of metrics.jsonl (training rows have `train/loss`; validation rows `eval/answer_reward`)."""
    grpo_steps: int
    optimizer_steps: int
    skipped_steps: int
    elapsed_s: float
    """Wall-clock seconds of the loop (across resumes; excludes model loading and the warm start)."""
    checkpoint: Path | None

    @property
    def train_rows(self) -> list[dict]:
        return [row for row in self.metrics if "train/loss" in row]

    @property
    def eval_rows(self) -> list[dict]:
        return [row for row in self.metrics if "eval/answer_reward" in row]


def train(cfg: GRPOConfig, resume: bool = False, callback: Callable[[dict], None] | None = None) -> RunResult:
    """Run GRPO as configured by `cfg`; `resume=True` continues from `runs/<name>`'s latest checkpoint.

    `callback` (optional) is called once per optimizer step, after the microbatches' gradients
    are accumulated and before clipping and the update, with `{"policy", "optimizer", "engine",
    "step", "grpo_step", "epoch"}` -- for inspecting gradients or the engine's weights, progress
    displays, or fault injection.
    """
    from hw3lib.data import format_prompt
    from hw3lib.generation import SamplingConfig
    from hw3lib.tiny import load_model_and_tokenizer

    run_dir = runs_dir() / cfg.name
    print(f"GRPO run '{cfg.name}' -> {run_dir}\n{cfg.describe()}", flush=True)

    # ---- set-up: data, initial policy, (resumed) state, engine, optimizer -----------------------
    train_records, eval_records = load_task(cfg)
    reward_fn = reward_fn_for(cfg.prompt)
    initial_model = initial_policy_source(cfg)  # cfg.model, or its SFT warm start (cached)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if resume and checkpoint is None:
        print(f"resume: no checkpoint in {run_dir / CHECKPOINTS_DIR}; starting from scratch", flush=True)
    if checkpoint is None:
        start_fresh_run_dir(run_dir)
    else:
        check_resumable(checkpoint, cfg)
        saved_state = json.loads((checkpoint / "state.json").read_text())
        if saved_state["grpo_step"] == cfg.n_grpo_steps and final_validation_logged(run_dir, cfg.n_grpo_steps):
            # Nothing left to do: read the run back without loading a model or starting an engine.
            print(f"resume: {run_dir} has finished all {cfg.n_grpo_steps} GRPO steps; reusing it", flush=True)
            return run_result(run_dir, cfg, saved_state)
    atomic_write_json(run_dir / "config.json", cfg.to_dict())

    policy, tokenizer = load_model_and_tokenizer(str(checkpoint / "policy" if checkpoint else initial_model),
                                                 device=cfg.policy_device, dtype=cfg.dtype)
    reference = None
    if cfg.monitor_kl:  # only then: a second copy of the model costs memory
        reference, _ = load_model_and_tokenizer(str(initial_model), device=cfg.policy_device, dtype=cfg.dtype)
        reference.requires_grad_(False).eval()
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay,
                                  betas=cfg.adam_betas)
    if checkpoint is None:
        state = {"grpo_step": 0, "optimizer_step": 0, "skipped_steps": 0, "elapsed_s": 0.0}
        seed_everything(cfg.seed)
    else:
        state = load_checkpoint(checkpoint, optimizer, run_dir)  # also restores RNGs and metrics.jsonl
        print(f"resumed from {checkpoint} at GRPO step {state['grpo_step']}", flush=True)
    engine = build_engine(cfg, policy, tokenizer, initial_model)
    engine.load_weights(policy.state_dict().items())  # a resumed run's engine needs the checkpoint's weights
    wandb_run = start_wandb(cfg, resume=checkpoint is not None)
    colocated = cfg.engine == "vllm" and torch.device(cfg.rollout_device) == torch.device(cfg.policy_device)
    ratio_loss = cfg.loss_type in RATIO_LOSSES
    group = cfg.group_size

    def log(row: dict) -> None:
        append_jsonl(run_dir / METRICS_FILE, row)
        if wandb_run is not None:
            wandb_run.log(row)

    def run_validation(grpo_step: int) -> None:
        started = time.perf_counter()
        metrics, examples = validate(engine, eval_records, cfg, reward_fn, seed=cfg.seed)
        atomic_write_jsonl(run_dir / "samples" / f"step_{grpo_step:04d}.jsonl", examples)
        log({"step": state["optimizer_step"], "grpo_step": grpo_step, **metrics,
             "time/eval_s": time.perf_counter() - started, "time/elapsed_s": clock()})
        print(f"  eval @ step {grpo_step}: answer {metrics['eval/answer_reward']:.3f} "
              f"format {metrics['eval/format_reward']:.3f} length {metrics['eval/response_length']:.1f}", flush=True)

    loop_started = time.perf_counter() - state["elapsed_s"]

    def clock() -> float:
        return time.perf_counter() - loop_started

    # The state at the last completed GRPO step: what a Ctrl-C checkpoint records.
    boundary = {"state": dict(state), "rng": rng_state(), "weights_changed": False}
    try:
        if state["grpo_step"] == 0:
            run_validation(0)
        elif state["grpo_step"] == cfg.n_grpo_steps:  # resumed after an interruption in the final validation
            run_validation(cfg.n_grpo_steps)
            save_checkpoint(run_dir, policy, tokenizer, optimizer, state, rng_state())
        for grpo_step in range(state["grpo_step"] + 1, cfg.n_grpo_steps + 1):
            step_started = time.perf_counter()
            # 1. A batch of questions: a fresh, seeded draw each step (no state to checkpoint).
            picks = np.random.default_rng([cfg.seed, grpo_step]).choice(
                len(train_records), cfg.n_prompts_per_rollout_batch, replace=False)
            questions = [train_records[i] for i in picks]
            prompts = [format_prompt(cfg.prompt, record["question"]) for record in questions]

            # 2. Rollouts: group_size samples per question; sample j of question i is row i * group + j.
            started = time.perf_counter()
            sampling = SamplingConfig(n=group, temperature=cfg.sampling_temperature, top_p=cfg.sampling_top_p,
                                      max_tokens=cfg.sampling_max_tokens, min_tokens=cfg.sampling_min_tokens,
                                      stop=stop_strings_for(cfg.prompt), include_stop_str_in_output=True,
                                      seed=rollout_seed(cfg.seed, grpo_step))
            rollouts = [sample for samples in engine.generate(prompts, sampling) for sample in samples]
            if colocated:
                engine.sleep()  # free the KV cache (and offload weights) for the training half
            generation_s = time.perf_counter() - started

            # 3. Rewards and group-normalized advantages.
            started = time.perf_counter()
            truths = [record["gold"] for record in questions for _ in range(group)]
            advantages, raw_rewards, reward_stats = compute_group_normalized_rewards(
                reward_fn, [r.text for r in rollouts], truths, group, cfg.advantage_eps, cfg.use_std_normalization)
            prompt_ids = tokenizer([p for p in prompts for _ in range(group)], add_special_tokens=False)["input_ids"]
            batch = rollout_tensors(prompt_ids, [r.token_ids for r in rollouts], tokenizer.pad_token_id)
            prefix = shared_prefix_length(prompt_ids)  # the prompt template: run once per microbatch
            batch = {key: value.to(cfg.policy_device) for key, value in batch.items()}
            advantages = advantages.to(cfg.policy_device).unsqueeze(1)  # [N, 1]
            raw_rewards = raw_rewards.to(cfg.policy_device).unsqueeze(1)  # [N, 1]
            scoring_s = time.perf_counter() - started

            # 4. Old log-probs (off-policy ratio losses only) and reference log-probs (KL monitoring only),
            #    once per rollout batch, never differentiated.
            started = time.perf_counter()
            micro = cfg.micro_train_batch_size
            old_log_probs = batched_log_probs(policy, batch, micro, prefix) if cfg.needs_old_log_probs else None  # [N, T]
            ref_log_probs = batched_log_probs(reference, batch, micro, prefix) if reference is not None else None  # [N, T]
            old_logprobs_s = time.perf_counter() - started

            rollout_stats = {
                "train/reward": reward_stats["reward_mean"],
                "train/reward_std": reward_stats["reward_std"],
                "train/format_reward": reward_stats.get("format_reward_mean", math.nan),
                "train/answer_reward": reward_stats.get("answer_reward_mean", math.nan),
                "train/response_length_mean": float(np.mean([len(r.token_ids) for r in rollouts])),
                "train/response_length_max": max(len(r.token_ids) for r in rollouts),
                "train/truncation_rate": float(np.mean([r.finish_reason == "length" for r in rollouts])),
                "train/zero_variance_group_fraction": reward_stats["frac_groups_zero_std"],
            }

            # 5. Epochs over the rollout batch, in optimizer steps of train_batch_size rollouts.
            rows = []
            policy.train()
            for epoch in range(cfg.epochs_per_rollout_batch):
                order = torch.from_numpy(np.random.default_rng([cfg.seed, grpo_step, epoch]).permutation(
                    cfg.rollout_batch_size)).to(cfg.policy_device)  # [N]
                for first in range(0, cfg.rollout_batch_size, cfg.train_batch_size):
                    started = time.perf_counter()
                    sums = defaultdict(float)
                    for start in range(first, first + cfg.train_batch_size, micro):
                        idx = order[start:start + micro]  # [b]
                        # Label columns from the earliest response token to the longest row's end.
                        cols = slice(int(batch["response_start"][idx].min()), int(batch["lengths"][idx].max()))
                        mask = batch["response_mask"][idx, cols]  # [b, T]
                        out = response_log_probs(policy, batch["input_ids"][idx, :cols.stop],
                                                 batch["labels"][idx, cols], return_token_entropy=True,
                                                 shared_prefix=prefix)
                        log_probs = out["log_probs"]  # [b, T]
                        if ratio_loss:
                            old = old_log_probs[idx, cols] if old_log_probs is not None else log_probs.detach()  # [b, T]
                        loss, stats = grpo_microbatch_train_step(
                            log_probs, mask, cfg.gradient_accumulation_steps, cfg.loss_type,
                            raw_rewards=raw_rewards[idx], advantages=advantages[idx],
                            old_log_probs=old if ratio_loss else None,
                            cliprange=cfg.cliprange if cfg.loss_type == "grpo_clip" else None,
                            length_normalization=cfg.length_normalization,
                            normalize_constant=cfg.length_normalizer)
                        share = 1.0 / cfg.gradient_accumulation_steps  # microbatch statistics are averaged
                        sums["loss"] += loss.item()  # already divided by gradient_accumulation_steps
                        sums["entropy"] += share * masked_mean(out["token_entropy"], mask).item()
                        if "clip_fraction" in stats:
                            sums["clip_fraction"] += share * stats["clip_fraction"].item()
                        if ratio_loss:  # over response tokens only (grpo's own stat also averages padding)
                            ratio = torch.exp(log_probs.detach() - old)  # [b, T]
                            sums["ratio_mean"] += share * masked_mean(ratio, mask).item()
                        if ref_log_probs is not None:
                            k1, k3 = kl_estimates(log_probs.detach(), ref_log_probs[idx, cols], mask)
                            sums["kl_k1"] += share * k1.item()
                            sums["kl_k3"] += share * k3.item()
                    if callback is not None:
                        callback({"policy": policy, "optimizer": optimizer, "engine": engine,
                                  "step": state["optimizer_step"] + 1, "grpo_step": grpo_step, "epoch": epoch})
                    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
                    for param_group in optimizer.param_groups:  # a function of the step count: nothing to checkpoint
                        param_group["lr"] = learning_rate_at(cfg, state["optimizer_step"] + 1)
                    if math.isfinite(sums["loss"]) and math.isfinite(grad_norm):
                        optimizer.step()
                        boundary["weights_changed"] = True
                    else:  # a NaN/inf would poison the weights and Adam's moments: skip the update entirely
                        state["skipped_steps"] += 1
                        print(f"  step {state['optimizer_step'] + 1}: non-finite loss {sums['loss']} or grad norm "
                              f"{grad_norm}; update skipped", flush=True)
                    optimizer.zero_grad(set_to_none=True)
                    state["optimizer_step"] += 1
                    row = {"step": state["optimizer_step"], "grpo_step": grpo_step, "epoch": epoch,
                           "train/loss": sums["loss"], "train/grad_norm": grad_norm,
                           "train/entropy": sums["entropy"], "train/lr": optimizer.param_groups[0]["lr"],
                           "train/skipped_steps": state["skipped_steps"], **rollout_stats}
                    if cfg.loss_type == "grpo_clip":
                        row["train/clip_fraction"] = sums["clip_fraction"]
                    if ratio_loss:
                        row["train/ratio_mean"] = sums["ratio_mean"]
                    if ref_log_probs is not None:
                        row["train/kl_k1"], row["train/kl_k3"] = sums["kl_k1"], sums["kl_k3"]
                    first_row = not rows
                    row.update({"time/generation_s": generation_s if first_row else 0.0,
                                "time/scoring_s": scoring_s if first_row else 0.0,
                                "time/old_logprobs_s": old_logprobs_s if first_row else 0.0,
                                "time/train_s": time.perf_counter() - started, "time/weight_sync_s": 0.0})
                    rows.append(row)

            # 6. Push the new weights to the rollout engine (a no-op copy when it wraps the policy).
            started = time.perf_counter()
            if colocated:
                engine.wake_up()
            engine.load_weights(policy.state_dict().items())
            rows[-1]["time/weight_sync_s"] = time.perf_counter() - started

            # 7. Log: one row per optimizer step.
            tokens_per_s = sum(len(r.token_ids) for r in rollouts) / (time.perf_counter() - step_started)
            for row in rows:
                log({**row, "time/tokens_per_s": tokens_per_s, "time/elapsed_s": clock()})
            state.update(grpo_step=grpo_step, elapsed_s=clock())
            boundary = {"state": dict(state), "rng": rng_state(), "weights_changed": False}
            last = rows[-1]
            print(f"step {grpo_step}/{cfg.n_grpo_steps}: reward {last['train/reward']:.3f} "
                  f"answer {last['train/answer_reward']:.3f} loss {last['train/loss']:+.4f} "
                  f"grad {last['train/grad_norm']:.3f} len {last['train/response_length_mean']:.1f} "
                  f"gen {generation_s:.1f}s train {sum(r['time/train_s'] for r in rows):.1f}s", flush=True)

            # 8. Validate and checkpoint.
            if grpo_step % cfg.eval_every == 0 or grpo_step == cfg.n_grpo_steps:
                run_validation(grpo_step)
                boundary["state"]["elapsed_s"] = state["elapsed_s"] = clock()
            if grpo_step == cfg.n_grpo_steps or (cfg.checkpoint_every and grpo_step % cfg.checkpoint_every == 0):
                save_checkpoint(run_dir, policy, tokenizer, optimizer, state, rng_state())
    except KeyboardInterrupt:
        # Record the last completed GRPO step; updates an unfinished rollout batch already made stay in
        # the weights (that batch is redone with fresh rollouts on resume).
        saved = save_checkpoint(run_dir, policy, tokenizer, optimizer, boundary["state"], boundary["rng"],
                                partial_step=boundary["weights_changed"])
        print(f"interrupted: checkpoint saved to {saved}; continue with resume=True", flush=True)
        raise
    finally:
        if wandb_run is not None:
            wandb_run.finish()
        if cfg.engine == "vllm":
            engine.close()

    return run_result(run_dir, cfg, state)


def run_result(run_dir: Path, cfg: GRPOConfig, state: dict) -> RunResult:
    """The RunResult of `run_dir` as its files and the step counters `state` describe it."""
    metrics = read_jsonl(run_dir / METRICS_FILE, allow_torn_tail=True)
    return RunResult(run_dir=run_dir, config=cfg, metrics=metrics, grpo_steps=state["grpo_step"],
                     optimizer_steps=state["optimizer_step"], skipped_steps=state["skipped_steps"],
                     elapsed_s=state["elapsed_s"], checkpoint=latest_checkpoint(run_dir))


def final_validation_logged(run_dir: Path, grpo_step: int) -> bool:
    """Whether metrics.jsonl ends with the validation after `grpo_step` (a run interrupted during
    its last validation has the step's checkpoint but not that row)."""
    rows = read_jsonl(run_dir / METRICS_FILE, allow_torn_tail=True) if (run_dir / METRICS_FILE).exists() else []
    return bool(rows) and "eval/answer_reward" in rows[-1] and rows[-1]["grpo_step"] == grpo_step


# ---- data, rewards, engines -----------------------------------------------------------------------

def load_task(cfg: GRPOConfig) -> tuple[list[dict], list[dict]]:
    """(training questions, held-out questions) as records with `question` and `gold`."""
    from hw3lib import data

    if cfg.dataset == "gsm8k":
        train_records = data.load_gsm8k("train", limit=cfg.n_train_examples)
        if cfg.eval_dataset is None:
            return train_records, data.load_gsm8k("test", limit=cfg.n_eval_examples)
        return train_records, read_questions(cfg.eval_dataset)[:cfg.n_eval_examples]
    if cfg.dataset == "arithmetic":
        train_records = data.make_arithmetic_problems(cfg.n_train_examples or 4096, seed=cfg.seed,
                                                      max_operand=cfg.arithmetic_max_operand)
        if cfg.eval_dataset is not None:
            return train_records, read_questions(cfg.eval_dataset)[:cfg.n_eval_examples]
        # Held out: fresh problems (another seed) whose question text never occurs in training.
        seen = {record["question"] for record in train_records}
        pool = data.make_arithmetic_problems(4 * cfg.n_eval_examples, seed=cfg.seed + 1_000_003,
                                             max_operand=cfg.arithmetic_max_operand)
        eval_records = [record for record in pool if record["question"] not in seen][:cfg.n_eval_examples]
        return train_records, eval_records
    rows = read_questions(cfg.dataset)
    if cfg.eval_dataset is not None:
        return rows[:cfg.n_train_examples], read_questions(cfg.eval_dataset)[:cfg.n_eval_examples]
    if len(rows) <= cfg.n_eval_examples:
        raise ValueError(f"{cfg.dataset} has {len(rows)} records, not enough to hold out n_eval_examples="
                         f"{cfg.n_eval_examples} for validation: lower n_eval_examples or pass eval_dataset")
    return rows[:-cfg.n_eval_examples][:cfg.n_train_examples], rows[-cfg.n_eval_examples:]


def read_questions(path: str | Path) -> list[dict]:
    """A MATH-style jsonl as records: `question` (or `problem`) and `gold` (or `answer`) per line."""
    from hw3lib.io import DataFileError

    records = []
    for number, row in enumerate(read_jsonl(path), start=1):
        question = row.get("question", row.get("problem"))
        gold = row.get("gold", row.get("answer"))
        if not isinstance(question, str) or gold is None:
            raise DataFileError(f"{path}:{number}: each line needs a 'question' (or 'problem') string and a "
                                f"'gold' (or 'answer') value; found keys {sorted(row)}")
        records.append({"question": question, "gold": str(gold), "answer": row.get("solution", str(gold))})
    if not records:
        raise DataFileError(f"{path}: no records")
    return records


def reward_fn_for(prompt: str) -> Callable[[str, str], dict]:
    """The reward function that matches a prompt template (r1_zero's tags, or a bare answer)."""
    from hw3lib import rewards

    return {"r1_zero": rewards.r1_zero_reward_fn, "question_only": rewards.question_only_reward_fn}[prompt]


def stop_strings_for(prompt: str) -> tuple[str, ...]:
    """R1-Zero responses end at `</answer>`; question-only responses run to EOS or the budget."""
    return ("</answer>",) if prompt == "r1_zero" else ()


def initial_policy_source(cfg: GRPOConfig) -> str:
    """Where the initial policy loads from: `cfg.model`, or its SFT warm start on arithmetic (cached)."""
    if not cfg.warm_start_steps:
        return cfg.model
    from hw3lib.data import make_arithmetic_problems
    from hw3lib.warmstart import sft_warm_start

    records = make_arithmetic_problems(cfg.warm_start_examples, seed=cfg.seed + 2_000_003,
                                       max_operand=cfg.arithmetic_max_operand)
    return str(sft_warm_start(cfg.model, records, steps=cfg.warm_start_steps, lr=cfg.warm_start_lr,
                              batch_size=cfg.warm_start_batch_size, seed=cfg.seed, prompt=cfg.prompt))


def build_engine(cfg: GRPOConfig, policy, tokenizer, initial_model: str):
    """The rollout engine: the transformers engine wraps the policy module itself when it shares its device."""
    from hw3lib.generation import make_engine

    if cfg.engine == "transformers":
        # On a CPU a preallocated KV cache beats a growing one (no concatenation per token).
        options = {"progress": False, "batch_size": cfg.generation_batch_size,
                   "static_cache": torch.device(cfg.rollout_device).type == "cpu"}
        if torch.device(cfg.rollout_device) == torch.device(cfg.policy_device):
            return make_engine("transformers", policy, tokenizer=tokenizer, **options)
        return make_engine("transformers", initial_model, device=cfg.rollout_device, dtype=cfg.dtype, **options)
    rollout = torch.device(cfg.rollout_device)
    if rollout.type == "cuda" and (rollout.index or 0) != 0:
        raise ValueError(f"rollout_device={cfg.rollout_device!r}: the in-process vLLM engine runs on the first "
                         "visible GPU; for two GPUs use rollout_device='cuda:0' and policy_device='cuda:1'")
    colocated = rollout == torch.device(cfg.policy_device)
    return make_engine("vllm", initial_model, device=rollout.type, dtype=cfg.dtype, seed=cfg.seed,
                       gpu_memory_utilization=cfg.gpu_memory_utilization, progress=False,
                       max_model_len=None if rollout.type == "cuda" else 1024,
                       enable_sleep_mode=None if colocated else False)


def start_wandb(cfg: GRPOConfig, resume: bool):
    """A wandb run when `cfg.wandb_project` is set (wandb is imported only then), else None."""
    if cfg.wandb_project is None:
        return None
    try:
        import wandb
    except ImportError:
        raise ImportError("wandb_project is set but wandb is not installed: pip install wandb, "
                          "or leave wandb_project=None") from None
    return wandb.init(project=cfg.wandb_project, name=cfg.name, config=cfg.to_dict(), resume="allow" if resume else None)


def learning_rate_at(cfg: GRPOConfig, optimizer_step: int) -> float:
    """The learning rate of optimizer step `optimizer_step` (1-based): linear warm-up, then constant."""
    if cfg.lr_warmup_steps and optimizer_step < cfg.lr_warmup_steps:
        return cfg.learning_rate * optimizer_step / cfg.lr_warmup_steps
    return cfg.learning_rate


def rollout_seed(seed: int, grpo_step: int) -> int:
    """The sampling seed of one GRPO step: reproducible, and the same after a resume."""
    return seed * 1_000_003 + grpo_step


# ---- tensors -------------------------------------------------------------------------------------------

def rollout_tensors(prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]],
                    pad_id: int) -> dict[str, torch.Tensor]:
    """Prompt + response token ids, right-padded, shifted by one like `sft.tokenize_prompt_and_output`.

    Returns `input_ids`, `labels`, `response_mask` (`[N, L - 1]`), `lengths` (`[N]`: each row's
    real length in these shifted tensors) and `response_start` (`[N]`: the label column of each
    row's first response token). Rows are left-aligned, so a subset of rows cut to the columns
    `[min response_start, max lengths)` keeps every response position where it was.
    """
    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(response_ids)} responses")
    totals = [len(p) + len(r) for p, r in zip(prompt_ids, response_ids)]
    full = torch.full((len(totals), max(totals)), pad_id, dtype=torch.long)  # [N, L]
    is_response = torch.zeros(full.shape, dtype=torch.bool)  # [N, L]
    for row, (prompt, response) in enumerate(zip(prompt_ids, response_ids)):
        full[row, :totals[row]] = torch.tensor([*prompt, *response], dtype=torch.long)
        is_response[row, len(prompt):totals[row]] = True
    return {"input_ids": full[:, :-1], "labels": full[:, 1:],  # [N, L-1]
            "response_mask": is_response[:, 1:],  # [N, L-1]: label j is token j + 1
            "lengths": torch.tensor(totals) - 1,  # [N]
            "response_start": torch.tensor([len(p) for p in prompt_ids]) - 1}  # [N]


def kl_estimates(log_probs: torch.Tensor, ref_log_probs: torch.Tensor,
                 mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Estimates of KL(pi || pi_ref) from per-token log-probs of tokens sampled from pi: `[B, T] x 3 -> [], []`.

    k1 = logp - logp_ref (unbiased, can be negative per token); k3 = exp(logp_ref - logp) -
    (logp_ref - logp) - 1 (unbiased and never negative, lower variance; Schulman's estimators).
    Both are means over the tokens `mask` keeps.
    """
    delta = ref_log_probs - log_probs  # [B, T]: log pi_ref - log pi
    return masked_mean(-delta, mask), masked_mean(torch.expm1(delta) - delta, mask)


def shared_prefix_length(prompt_ids: Sequence[Sequence[int]]) -> int:
    """Length of the token prefix every prompt shares (the template before the question), kept at
    least one token short of the shortest prompt."""
    shortest = min(len(ids) for ids in prompt_ids)
    length = 0
    while length < shortest - 1 and all(ids[length] == prompt_ids[0][length] for ids in prompt_ids):
        length += 1
    return length


def response_log_probs(model, input_ids: torch.Tensor, labels: torch.Tensor, return_token_entropy: bool = False,
                       shared_prefix: int = 0) -> dict[str, torch.Tensor]:
    """`sft.get_response_log_probs` for the LAST `labels.shape[1]` positions of `input_ids` only.

    `input_ids` `[b, L]`, `labels` `[b, T]` with T <= L - shared_prefix (the labels of the last T
    positions). Two savings, same numbers as a full forward (up to float rounding):

    - the model computes logits for those T positions only (`logits_to_keep`), so the lm_head and
      the entropy skip the prompt;
    - the first `shared_prefix` tokens, identical in every row (the prompt template), go through
      the model once (batch 1) and their keys/values are repeated for the rows, which attend to
      them as a KV cache. Gradients flow back through the shared pass, so the gradient is the
      full forward's. (The R1-Zero template is ~170 of ~235 tokens of a smoke-profile sequence.)

    Returns `[b, T]` tensors.
    """
    keep = labels.shape[1]
    if shared_prefix and not bool((input_ids[:, :shared_prefix] == input_ids[:1, :shared_prefix]).all()):
        raise ValueError(f"the rows do not share their first shared_prefix={shared_prefix} tokens")

    def last_positions(ids):
        if not shared_prefix:
            return model(ids, use_cache=False, logits_to_keep=keep)  # .logits: [b, T, V]
        cache = model(ids[:1, :shared_prefix], use_cache=True).past_key_values  # keys/values of [1, P]
        cache.batch_repeat_interleave(ids.shape[0])  # -> [b, P]: every row attends to the same prefix
        return model(ids[:, shared_prefix:], past_key_values=cache, use_cache=True, logits_to_keep=keep)

    return get_response_log_probs(last_positions, input_ids, labels, return_token_entropy=return_token_entropy)


def batched_log_probs(model, batch: dict[str, torch.Tensor], micro_batch_size: int,
                      shared_prefix: int = 0) -> torch.Tensor:
    """log p(label | prefix) of every response token of `batch` under `model`, in microbatches, no autograd.

    Returns `[N, L - 1]` float32 aligned with `batch["labels"]` (zeros outside the responses),
    cloned out of inference mode so the loss may use it as a constant.
    """
    n, width = batch["labels"].shape
    out = torch.zeros((n, width), dtype=torch.float32, device=batch["labels"].device)  # [N, L-1]
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for start in range(0, n, micro_batch_size):
            rows = slice(start, start + micro_batch_size)
            cols = slice(int(batch["response_start"][rows].min()), int(batch["lengths"][rows].max()))
            lp = response_log_probs(model, batch["input_ids"][rows, :cols.stop], batch["labels"][rows, cols],
                                    shared_prefix=shared_prefix)
            out[rows, cols] = lp["log_probs"].float()  # [b, T]
    model.train(was_training)
    return out.clone()


def validate(engine, records: Sequence[dict], cfg: GRPOConfig, reward_fn, seed: int) -> tuple[dict, list[dict]]:
    """Validation metrics (`eval/...`) on `records` and the first `cfg.n_eval_samples_saved` rollouts."""
    from hw3lib.data import format_prompt
    from hw3lib.generation import SamplingConfig

    prompts = [format_prompt(cfg.prompt, record["question"]) for record in records]
    sampling = SamplingConfig(n=1, temperature=cfg.eval_temperature, top_p=1.0, max_tokens=cfg.sampling_max_tokens,
                              min_tokens=0, stop=stop_strings_for(cfg.prompt), include_stop_str_in_output=True,
                              seed=seed)
    samples = [group[0] for group in engine.generate(prompts, sampling)]
    scores = [reward_fn(sample.text, record["gold"]) for sample, record in zip(samples, records)]
    metrics = {
        "eval/reward": float(np.mean([s["reward"] for s in scores])),
        "eval/format_reward": float(np.mean([s["format_reward"] for s in scores])),
        "eval/answer_reward": float(np.mean([s["answer_reward"] for s in scores])),
        "eval/response_length": float(np.mean([len(s.token_ids) for s in samples])),
        "eval/truncation_rate": float(np.mean([s.finish_reason == "length" for s in samples])),
        "eval/n": len(records),
    }
    examples = [{"question": record["question"], "gold": record["gold"], "response": sample.text,
                 "finish_reason": sample.finish_reason, **score}
                for record, sample, score in zip(records, samples, scores)][:cfg.n_eval_samples_saved]
    return metrics, examples


# ---- run directory, RNG, checkpoints -------------------------------------------------------------------

def start_fresh_run_dir(run_dir: Path) -> None:
    """Remove a previous run's outputs of the same name (metrics, samples, checkpoints)."""
    if (run_dir / METRICS_FILE).exists() or (run_dir / CHECKPOINTS_DIR).exists():
        print(f"starting fresh: replacing the previous outputs in {run_dir}", flush=True)
    (run_dir / METRICS_FILE).unlink(missing_ok=True)
    for folder in ("samples", CHECKPOINTS_DIR):
        shutil.rmtree(run_dir / folder, ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Python, numpy and torch (CPU and CUDA) RNG states as JSON-friendly lists."""
    np_state = np.random.get_state()
    state = {"python": _tuples_to_lists(random.getstate()),
             "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
             "torch": torch.get_rng_state().tolist()}
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(_lists_to_tuples(state["python"]))
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


def _tuples_to_lists(value):
    return [_tuples_to_lists(v) for v in value] if isinstance(value, (tuple, list)) else value


def _lists_to_tuples(value):
    return tuple(_lists_to_tuples(v) for v in value) if isinstance(value, list) else value


def save_checkpoint(run_dir: Path, policy, tokenizer, optimizer, state: dict, rng: dict,
                    partial_step: bool = False) -> Path:
    """Write `checkpoints/step_XXXXXX/` atomically (temporary folder + rename), point `latest` at it,
    and remove older checkpoints. Holds the policy (save_pretrained), optimizer, counters, RNG
    states and a copy of metrics.jsonl."""
    root = run_dir / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{state['grpo_step']:06d}"
    staging = root / f".tmp-{name}-{time.time_ns()}"
    policy.save_pretrained(staging / "policy")
    tokenizer.save_pretrained(staging / "policy")
    torch.save(optimizer.state_dict(), staging / "optimizer.pt")
    atomic_write_json(staging / "state.json", {**state, "partial_step": partial_step})
    atomic_write_json(staging / "rng.json", rng, indent=None)
    metrics = run_dir / METRICS_FILE
    if metrics.exists():
        shutil.copyfile(metrics, staging / METRICS_FILE)
    shutil.copyfile(run_dir / "config.json", staging / "config.json")
    target = root / name
    if target.exists():  # e.g. Ctrl-C right after a regular checkpoint of the same step
        target.rename(root / f".old-{name}-{time.time_ns()}")
    staging.rename(target)
    atomic_write_text(root / "latest", name + "\n")
    for old in root.iterdir():
        if old.name not in (name, "latest") and not old.name.startswith(".tmp-"):
            shutil.rmtree(old, ignore_errors=True)
    return target


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint `checkpoints/latest` names, or None when there is none."""
    pointer = run_dir / CHECKPOINTS_DIR / "latest"
    if not pointer.is_file():
        return None
    path = pointer.parent / pointer.read_text().strip()
    if not (path / "state.json").is_file():
        raise FileNotFoundError(f"{pointer} names {path.name}, which is missing or incomplete: "
                                "delete the checkpoints folder to start over")
    return path


def check_resumable(checkpoint: Path, cfg: GRPOConfig) -> None:
    """A run resumes only with the settings it was started with (n_grpo_steps may grow)."""
    saved = json.loads((checkpoint / "config.json").read_text())
    current = json.loads(json.dumps(cfg.to_dict()))  # tuples -> lists, as saved
    may_change = {"n_grpo_steps", "checkpoint_every", "eval_every", "wandb_project"}
    differing = sorted(k for k in set(saved) | set(current) if k not in may_change and saved.get(k) != current.get(k))
    if differing:
        details = ", ".join(f"{k}: saved {saved.get(k)!r} vs now {current.get(k)!r}" for k in differing)
        raise ValueError(f"cannot resume {checkpoint}: the config differs ({details}); use the saved "
                         "settings or a new run name")
    if json.loads((checkpoint / "state.json").read_text())["grpo_step"] > cfg.n_grpo_steps:
        raise ValueError(f"cannot resume {checkpoint}: it is past n_grpo_steps={cfg.n_grpo_steps}")


def load_checkpoint(checkpoint: Path, optimizer, run_dir: Path) -> dict:
    """Restore the optimizer, RNG states and metrics.jsonl (rows logged after the checkpoint are
    dropped: they will be redone); return the step counters. The policy is loaded by the caller."""
    optimizer.load_state_dict(torch.load(checkpoint / "optimizer.pt", weights_only=True))
    set_rng_state(json.loads((checkpoint / "rng.json").read_text()))
    saved_metrics = checkpoint / METRICS_FILE
    if saved_metrics.exists():
        atomic_write_text(run_dir / METRICS_FILE, saved_metrics.read_text())
    else:
        (run_dir / METRICS_FILE).unlink(missing_ok=True)
    state = json.loads((checkpoint / "state.json").read_text())
    state.pop("partial_step", None)
    return state


# ---- reading a run back (notebooks, writeup) -------------------------------------------------------------

TIME_PARTS = ("generation", "scoring", "old_logprobs", "train", "weight_sync")


def time_breakdown(metrics: Sequence[dict]) -> list[dict]:
    """Seconds per GRPO step by phase (`generation`, `scoring`, `old_logprobs`, `train`, `weight_sync`,
    `eval`): each rollout batch's optimizer-step rows summed, its validation (if any) added."""
    steps: dict[int, dict] = {}
    for row in metrics:
        step = row.get("grpo_step", 0)
        if step == 0:
            continue
        parts = steps.setdefault(step, {"grpo_step": step, **{part: 0.0 for part in (*TIME_PARTS, "eval")}})
        if "train/loss" in row:
            for part in TIME_PARTS:
                parts[part] += row[f"time/{part}_s"]
        if "time/eval_s" in row:
            parts["eval"] += row["time/eval_s"]
    return [steps[k] for k in sorted(steps)]


def run_summary(result: RunResult) -> dict:
    """Key numbers of a run for the writeup: validation before/after, rise, wall-clock, mean step time."""
    evals, rows = result.eval_rows, result.train_rows
    breakdown = time_breakdown(result.metrics)
    mean_parts = {part: float(np.mean([b[part] for b in breakdown])) if breakdown else 0.0
                  for part in (*TIME_PARTS, "eval")}
    return {
        "profile": result.config.profile, "model": result.config.model, "dataset": result.config.dataset,
        "loss_type": result.config.loss_type, "grpo_steps": result.grpo_steps,
        "optimizer_steps": result.optimizer_steps, "skipped_steps": result.skipped_steps,
        "eval_answer_reward_start": evals[0]["eval/answer_reward"] if evals else None,
        "eval_answer_reward_end": evals[-1]["eval/answer_reward"] if evals else None,
        "eval_answer_reward_rise": evals[-1]["eval/answer_reward"] - evals[0]["eval/answer_reward"] if evals else None,
        "eval_format_reward_end": evals[-1]["eval/format_reward"] if evals else None,
        "train_reward_first": rows[0]["train/reward"] if rows else None,
        "train_reward_last": rows[-1]["train/reward"] if rows else None,
        "wall_clock_s": result.elapsed_s,
        "mean_step_seconds_by_phase": mean_parts,
        "mean_tokens_per_s": float(np.mean([r["time/tokens_per_s"] for r in rows])) if rows else None,
    }


def load_samples(run_dir: str | Path, grpo_step: int) -> list[dict]:
    """The validation rollouts saved at `grpo_step` (samples/step_XXXX.jsonl)."""
    return read_jsonl(Path(run_dir) / "samples" / f"step_{grpo_step:04d}.jsonl")
