"""The GRPO training loop: one function, `train(cfg)`, readable top to bottom.

Per GRPO step (one rollout batch):

    sample questions -> generate group_size rollouts each (the rollout engine) -> score ->
    group-normalized advantages -> [old log-probs, when needed; reference log-probs, only with
    KL monitoring] -> epochs_per_rollout_batch passes of optimizer steps (hw3lib.train_step),
    each accumulating gradient_accumulation_steps microbatches -> push the weights to the
    engine -> log -> validate every eval_every steps -> checkpoint every checkpoint_every steps.

Variant implemented (see hw3lib.grpo for the maths, hw3lib.train_step for the loss assembly):

- **No KL term in the loss.** KL(pi || pi_ref) to the frozen initial policy is only *monitored*
  (`monitor_kl`): k1 and k3 over the response tokens of the rollouts, at the sampling
  temperature (hw3lib.logprobs.kl_estimates says on whose samples).
- **Advantages:** group mean baseline, divided by the group std + eps when `use_std_normalization`.
- **Loss:** `no_baseline`, `reinforce_with_baseline`, `grpo_clip` or `grpo_no_clip`, per token,
  then per sequence by `masked_mean` (each response's own length) or `constant` (the generation
  budget, Dr. GRPO); optionally weighted per token by truncated importance sampling (`tis_cap`).
- **Temperature-correct log-probs.** Every log-prob of a rollout (training, old, reference, the
  entropy) is taken from softmax(logits / sampling_temperature), the distribution the engine
  sampled from; the engine's own log-probs are kept with each rollout and the engine/trainer
  mismatch is logged per step (`train/logprob_mismatch_mean_abs`, `..._max_ratio`).
- **Old log-probs** are computed once per rollout batch, under `torch.inference_mode()`, only
  when the policy changes between sampling and a gradient step of a ratio loss (or TIS). On-policy
  the sampling policy *is* the current one, so the current log-probs, detached, serve as old
  log-probs (ratio exactly 1, no extra forward pass).
- **Tokens:** the policy is trained on the exact token ids the engine sampled (prompt ids + the
  sample's `token_ids`, including a final EOS), never on a re-tokenization of the text.
- **Precision:** float32 master weights and AdamW state always; with `dtype="bfloat16"` the
  forward and backward run under bf16 autocast and the engine receives bf16 copies (an update of
  lr 1e-5 applied to bf16 weights would mostly round away). Checkpoints hold the float32 masters.
- **Optimizer:** AdamW, constant learning rate after an optional linear warm-up; global grad-norm
  clipping; a step whose loss or gradient norm is not finite is skipped (no update, counted in
  `train/skipped_steps`).
- **Weight sync:** after all optimizer steps of a rollout batch (before the next generation). A
  colocated vLLM engine sleeps during training where sleep mode exists (GPU).
- **Validation:** every `eval_every` steps (and before the first and after the last) on held-out
  questions with `eval_temperature` (default 0: greedy, a deterministic low-variance estimate),
  a few example rollouts saved to `samples/step_XXXX.jsonl`.

Outputs in `runs/<name>/`: `config.json`, `metrics.jsonl` (one row per optimizer step, plus one
row per validation; flat names `train/...`, `eval/...`, `time/...`), `samples/`, and
`checkpoints/` (hw3lib.runs: folder rules, checkpoints, wandb). An existing run is resumed
(`resume=True`), reused when finished, or refused -- never deleted unless `overwrite=True`.
Ctrl-C saves a checkpoint of the last completed GRPO step and re-raises; a validation it
interrupted is redone on resume. Reading runs back: hw3lib.results.

Timings per optimizer-step row: a rollout batch's `time/generation_s`, `time/scoring_s` and
`time/old_logprobs_s` (old and, with KL monitoring, reference log-probs) sit on its first row and
`time/weight_sync_s` on its last (the others carry 0), so summing a column over rows gives total
time; `time/train_s` is that optimizer step's own time and `time/tokens_per_s` the rollout batch's
generated tokens per second of its whole step (generation to sync).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from hw3lib.grpo import LOSS_INPUTS, RATIO_LOSSES, compute_group_normalized_rewards
from hw3lib.io import append_jsonl, atomic_write_json, atomic_write_jsonl, runs_dir
from hw3lib.logprobs import batched_log_probs, shared_prefix_length
from hw3lib.results import RunResult, run_result, validation_logged
from hw3lib.runs import (METRICS_FILE, SAMPLES_DIR, WandbLink, check_resumable, config_differences,
                         delete_outputs, has_outputs, latest_checkpoint, load_checkpoint, metrics_rows, refuse_existing,
                         rng_state, save_checkpoint, seed_everything)
from hw3lib.sft import pack_prompt_and_output_ids
from hw3lib.train_config import GRPOConfig
from hw3lib.train_step import logprob_mismatch, optimizer_step


def train(cfg: GRPOConfig, resume: bool = False, overwrite: bool = False,
          callback: Callable[[dict], None] | None = None) -> RunResult:
    """Run GRPO as configured by `cfg` into `runs/<cfg.name>/`.

    `resume=True` continues from the run's latest checkpoint (or starts it when the folder is
    empty); a finished run with the same settings is read back either way. A folder holding
    another run's outputs is refused (`hw3lib.runs.RunExistsError`) unless `overwrite=True`.

    `callback` (optional) is called once per optimizer step, after the microbatches' gradients
    are accumulated and before clipping and the update, with `{"policy", "optimizer", "engine",
    "step", "grpo_step", "epoch"}` -- for inspecting gradients or the engine's weights, progress
    displays, or fault injection.
    """
    from hw3lib.data import format_prompt, load_task
    from hw3lib.generation import SamplingConfig, policy_weights_for_engine, training_engine
    from hw3lib.models import load_model_and_tokenizer
    from hw3lib.warmstart import initial_policy_source

    run_dir = runs_dir() / cfg.name
    print(f"GRPO run '{cfg.name}' -> {run_dir}\n{cfg.describe()}", flush=True)

    # ---- set-up: the run folder, data, initial policy, (resumed) state, engine, optimizer -------------
    checkpoint, finished_state = open_run(run_dir, cfg, resume, overwrite)
    if finished_state is not None:  # nothing left to do: read it back, no model, no engine
        print(f"{run_dir} has finished all {cfg.n_grpo_steps} GRPO steps with these settings; reusing it", flush=True)
        return run_result(run_dir, cfg, finished_state)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / "config.json", cfg.to_dict())
    train_records, eval_records = load_task(cfg)
    reward_fn = reward_fn_for(cfg.prompt)
    initial_model = initial_policy_source(cfg)  # cfg.model, or its SFT warm start (cached)
    # float32 master weights whatever cfg.dtype says: the low precision is autocast's (train_step).
    policy, tokenizer = load_model_and_tokenizer(str(checkpoint / "policy" if checkpoint else initial_model),
                                                 device=cfg.policy_device, dtype="float32")
    reference = None
    if cfg.monitor_kl:  # only then: a second copy of the model costs memory (frozen, so low precision is fine)
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
    engine = training_engine(cfg, policy, tokenizer, initial_model)
    engine.load_weights(policy_weights_for_engine(policy, cfg.dtype))  # a resumed run's engine needs them too
    wandb = WandbLink(cfg.wandb_project, run_dir, cfg.name, cfg.to_dict()) if cfg.wandb_project else None
    colocated = cfg.engine == "vllm" and torch.device(cfg.rollout_device) == torch.device(cfg.policy_device)
    group, device = cfg.group_size, cfg.policy_device
    rows_so_far = metrics_rows(run_dir)  # as the checkpoint restored them
    logged_rows = len(rows_so_far)

    def log(row: dict) -> None:
        nonlocal logged_rows
        append_jsonl(run_dir / METRICS_FILE, row)
        if wandb is not None:
            wandb.send(logged_rows, row)
        logged_rows += 1

    def run_validation(grpo_step: int) -> None:
        started = time.perf_counter()
        metrics, examples = validate(engine, eval_records, cfg, reward_fn, seed=cfg.seed)
        atomic_write_jsonl(run_dir / SAMPLES_DIR / f"step_{grpo_step:04d}.jsonl", examples)
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
        # A validation that was due at the step we start from and is missing (a fresh run's step 0,
        # or one a Ctrl-C interrupted) is run first.
        if validation_due(cfg, state["grpo_step"]) and not validation_logged(rows_so_far, state["grpo_step"]):
            run_validation(state["grpo_step"])
            if state["grpo_step"] == cfg.n_grpo_steps:
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

            # 3. Rewards, group-normalized advantages, and the rollouts as tensors.
            started = time.perf_counter()
            truths = [record["gold"] for record in questions for _ in range(group)]
            advantages, raw_rewards, reward_stats = compute_group_normalized_rewards(
                reward_fn, [r.text for r in rollouts], truths, group, cfg.advantage_eps, cfg.use_std_normalization)
            prompt_ids = tokenizer([p for p in prompts for _ in range(group)], add_special_tokens=False)["input_ids"]
            packed = pack_prompt_and_output_ids(prompt_ids, [r.token_ids for r in rollouts], tokenizer.pad_token_id)
            prefix = shared_prefix_length(prompt_ids)  # the prompt template: run once per microbatch
            engine_log_probs = response_values(packed, [r.logprobs for r in rollouts]).to(device)  # [N, L-1]
            batch = {key: packed[key].to(device) for key in ("input_ids", "labels", "response_mask")}
            batch.update(lengths=packed["lengths"], response_start=packed["response_start"])  # stay on the CPU
            advantages = advantages.to(device).unsqueeze(1)  # [N, 1]
            raw_rewards = raw_rewards.to(device).unsqueeze(1)  # [N, 1]
            scoring_s = time.perf_counter() - started

            # 4. Old log-probs (when the policy moves before a ratio/TIS step) and reference log-probs
            #    (KL monitoring only), once per rollout batch, never differentiated.
            started = time.perf_counter()
            micro = cfg.micro_train_batch_size
            old_log_probs = ref_log_probs = None
            if cfg.needs_old_log_probs:
                old_log_probs = batched_log_probs(policy, batch, micro, prefix, cfg.sampling_temperature,
                                                  cfg.dtype)  # [N, L-1]
            if reference is not None:
                ref_log_probs = batched_log_probs(reference, batch, micro, prefix, cfg.sampling_temperature,
                                                  cfg.dtype)  # [N, L-1]
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
            # The engine/trainer mismatch, at the sampling weights: all rows from the old log-probs when
            # they exist, else the rows of this batch's first optimizer step (the weights sampled them).
            mismatch = {"abs": 0.0, "tokens": 0.0, "max_ratio": 1.0}
            if old_log_probs is not None:
                measured = torch.stack([t.float() for t in logprob_mismatch(old_log_probs, engine_log_probs,
                                                                            batch["response_mask"])]).tolist()
                mismatch = dict(zip(("abs", "tokens", "max_ratio"), measured))  # one host transfer

            # 5. Epochs over the rollout batch, in optimizer steps of train_batch_size rollouts.
            rows = []
            policy.train()
            for epoch in range(cfg.epochs_per_rollout_batch):
                order = torch.from_numpy(np.random.default_rng([cfg.seed, grpo_step, epoch]).permutation(
                    cfg.rollout_batch_size))  # [N], on the CPU
                for first in range(0, cfg.rollout_batch_size, cfg.train_batch_size):
                    started = time.perf_counter()
                    sampling_weights = not rows  # no optimizer step of this batch has been taken yet
                    step_number = state["optimizer_step"] + 1

                    def before_update(model, epoch=epoch):
                        if callback is not None:
                            callback({"policy": model, "optimizer": optimizer, "engine": engine,
                                      "step": step_number, "grpo_step": grpo_step, "epoch": epoch})

                    stats = optimizer_step(
                        policy, optimizer, params, cfg, batch, order[first:first + cfg.train_batch_size],
                        raw_rewards=raw_rewards, advantages=advantages, old_log_probs=old_log_probs,
                        ref_log_probs=ref_log_probs, engine_log_probs=engine_log_probs, shared_prefix=prefix,
                        learning_rate=learning_rate_at(cfg, step_number),
                        measure_mismatch=sampling_weights and old_log_probs is None, before_update=before_update)
                    if stats["updated"]:
                        boundary["weights_changed"] = True
                    else:
                        state["skipped_steps"] += 1
                        print(f"  step {step_number}: non-finite loss {stats['loss']} or grad norm "
                              f"{stats['grad_norm']}; update skipped", flush=True)
                    if sampling_weights and old_log_probs is None:
                        mismatch = {"abs": stats["mismatch_abs"], "tokens": stats["mismatch_tokens"],
                                    "max_ratio": stats["mismatch_max_ratio"]}
                    state["optimizer_step"] = step_number
                    row = {"step": step_number, "grpo_step": grpo_step, "epoch": epoch,
                           "train/loss": stats["loss"], "train/grad_norm": stats["grad_norm"],
                           "train/entropy": stats["entropy"], "train/lr": optimizer.param_groups[0]["lr"],
                           "train/skipped_steps": state["skipped_steps"], **rollout_stats}
                    if "cliprange" in LOSS_INPUTS[cfg.loss_type]:
                        row["train/clip_fraction"] = stats["clip_fraction"]
                    if cfg.loss_type in RATIO_LOSSES:
                        row["train/ratio_mean"] = stats["ratio_mean"]
                    if cfg.tis_cap is not None:
                        row["train/tis_weight_mean"] = stats["tis_weight_mean"]
                    if ref_log_probs is not None:
                        row["train/kl_k1"], row["train/kl_k3"] = stats["kl_k1"], stats["kl_k3"]
                    first_row = not rows
                    row.update({"time/generation_s": generation_s if first_row else 0.0,
                                "time/scoring_s": scoring_s if first_row else 0.0,
                                "time/old_logprobs_s": old_logprobs_s if first_row else 0.0,
                                "time/train_s": time.perf_counter() - started, "time/weight_sync_s": 0.0})
                    rows.append(row)

            # 6. Push the new weights to the rollout engine (bf16 copies in mixed precision; nothing is
            #    copied when the engine wraps the float32 policy itself).
            started = time.perf_counter()
            if colocated:
                engine.wake_up()
            engine.load_weights(policy_weights_for_engine(policy, cfg.dtype))
            rows[-1]["time/weight_sync_s"] = time.perf_counter() - started

            # 7. Log: one row per optimizer step.
            tokens_per_s = sum(len(r.token_ids) for r in rollouts) / (time.perf_counter() - step_started)
            mismatch_stats = {"train/logprob_mismatch_mean_abs": mismatch["abs"] / max(mismatch["tokens"], 1.0),
                              "train/logprob_mismatch_max_ratio": mismatch["max_ratio"]}
            for row in rows:
                log({**row, **mismatch_stats, "time/tokens_per_s": tokens_per_s, "time/elapsed_s": clock()})
            state.update(grpo_step=grpo_step, elapsed_s=clock())
            boundary = {"state": dict(state), "rng": rng_state(), "weights_changed": False}
            last = rows[-1]
            print(f"step {grpo_step}/{cfg.n_grpo_steps}: reward {last['train/reward']:.3f} "
                  f"answer {last['train/answer_reward']:.3f} loss {last['train/loss']:+.4f} "
                  f"grad {last['train/grad_norm']:.3f} len {last['train/response_length_mean']:.1f} "
                  f"gen {generation_s:.1f}s train {sum(r['time/train_s'] for r in rows):.1f}s", flush=True)

            # 8. Validate and checkpoint.
            if validation_due(cfg, grpo_step):
                run_validation(grpo_step)
                boundary["state"]["elapsed_s"] = state["elapsed_s"] = clock()
            if grpo_step == cfg.n_grpo_steps or (cfg.checkpoint_every and grpo_step % cfg.checkpoint_every == 0):
                save_checkpoint(run_dir, policy, tokenizer, optimizer, state, rng_state())
    except KeyboardInterrupt:
        # Record the last completed GRPO step; updates an unfinished rollout batch already made stay in
        # the weights (that batch is redone with fresh rollouts on resume), and a validation this
        # interrupted is redone on resume.
        saved = save_checkpoint(run_dir, policy, tokenizer, optimizer, boundary["state"], boundary["rng"],
                                partial_step=boundary["weights_changed"])
        print(f"interrupted: checkpoint saved to {saved}; continue with resume=True", flush=True)
        raise
    finally:
        if wandb is not None:
            wandb.finish()
        if cfg.engine == "vllm":
            engine.close()

    return run_result(run_dir, cfg, state)


# ---- the run folder ----------------------------------------------------------------------------------------

def open_run(run_dir: Path, cfg: GRPOConfig, resume: bool, overwrite: bool) -> tuple[Path | None, dict | None]:
    """Apply the folder rules of hw3lib.runs: `(checkpoint to resume or None, state of a finished run to reuse or None)`."""
    if resume and overwrite:
        raise ValueError("resume=True and overwrite=True contradict each other: pick one")
    if overwrite:
        if has_outputs(run_dir):
            delete_outputs(run_dir)
        return None, None
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        if has_outputs(run_dir):
            raise refuse_existing(run_dir, "outputs but no checkpoint: it stopped before its first one, so "
                                           "resume=True has nothing to continue from")
        return None, None
    state = json.loads((checkpoint / "state.json").read_text())
    saved = json.loads((checkpoint / "config.json").read_text())
    finished = (state["grpo_step"] == cfg.n_grpo_steps
                and validation_logged(metrics_rows(run_dir), cfg.n_grpo_steps))
    differing = config_differences(saved, cfg.to_dict())
    if not resume and not (finished and not differing):
        why = f"checkpoint at GRPO step {state['grpo_step']} of {saved['n_grpo_steps']}"
        raise refuse_existing(run_dir, why + (f"; settings differ: {', '.join(differing)}" if differing else ""))
    check_resumable(checkpoint, cfg.to_dict(), cfg.n_grpo_steps)
    if finished:
        state.pop("partial_step", None)
        return checkpoint, state
    return checkpoint, None


def validation_due(cfg: GRPOConfig, grpo_step: int) -> bool:
    """Validation runs before the first step, every `eval_every` steps and after the last."""
    return grpo_step == 0 or grpo_step % cfg.eval_every == 0 or grpo_step == cfg.n_grpo_steps


# ---- rollouts --------------------------------------------------------------------------------------------

def response_values(packed: dict[str, torch.Tensor], values: Sequence[Sequence[float]]) -> torch.Tensor:
    """Per-token values of each response (e.g. the engine's log-probs) placed at its label columns: `[N, L-1]`.

    `packed` is `pack_prompt_and_output_ids`' output; row i's values fill columns
    `response_start[i] : response_start[i] + len(values[i])`, zeros elsewhere.
    """
    out = torch.zeros(packed["labels"].shape, dtype=torch.float32)  # [N, L-1]
    for row, (start, row_values) in enumerate(zip(packed["response_start"].tolist(), values)):
        out[row, start:start + len(row_values)] = torch.tensor(row_values, dtype=torch.float32)
    return out


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


def reward_fn_for(prompt: str) -> Callable[[str, str], dict]:
    """The reward function that matches a prompt template (r1_zero's tags, or a bare answer)."""
    from hw3lib import rewards

    return {"r1_zero": rewards.r1_zero_reward_fn, "question_only": rewards.question_only_reward_fn}[prompt]


def stop_strings_for(prompt: str) -> tuple[str, ...]:
    """R1-Zero responses end at `</answer>`; question-only responses run to EOS or the budget."""
    return ("</answer>",) if prompt == "r1_zero" else ()


def learning_rate_at(cfg: GRPOConfig, optimizer_step: int) -> float:
    """The learning rate of optimizer step `optimizer_step` (1-based): linear warm-up, then constant."""
    if cfg.lr_warmup_steps and optimizer_step < cfg.lr_warmup_steps:
        return cfg.learning_rate * optimizer_step / cfg.lr_warmup_steps
    return cfg.learning_rate


def rollout_seed(seed: int, grpo_step: int) -> int:
    """The sampling seed of one GRPO step: reproducible, and the same after a resume."""
    return seed * 1_000_003 + grpo_step
