"""The GRPO training loop: one function, `train(cfg)`, readable top to bottom.

Per GRPO step (one rollout batch):

    sample questions -> generate group_size rollouts each (the rollout engine) -> score ->
    group-normalized advantages -> [old log-probs, when needed; reference log-probs, only with
    KL monitoring] -> epochs_per_rollout_batch passes of optimizer steps (hw3lib.grpo.step),
    each accumulating its train_batch_size sequences' gradients in forwards sized by the memory model
    (the course's gradient_accumulation_steps microbatches or fewer, larger ones: the same update) -> push the
    weights to the engine -> log -> validate every eval_every steps -> checkpoint every checkpoint_every steps.

Variant implemented (see hw3lib.maths.grpo for the maths, hw3lib.grpo.step for the loss assembly):

- **No KL term in the loss.** KL(pi || pi_ref) to the frozen initial policy is only *monitored*
  (`monitor_kl`): k1 and k3 over the response tokens of the rollouts, at the sampling
  temperature (hw3lib.maths.logprobs.kl_estimates says on whose samples).
- **Advantages:** group mean baseline, divided by the group std + eps when `use_std_normalization`.
- **Loss:** `no_baseline`, `reinforce_with_baseline`, `grpo_clip` or `grpo_no_clip`, per token,
  then per sequence by `masked_mean` (each response's own length) or `constant` (the generation
  budget, Dr. GRPO); optionally weighted per token by truncated importance sampling (`tis_cap`).
  Beyond the handouts: `dapo_clip`, `gspo`, `cispo`, the `token_mean` normalization and masked
  importance sampling (`mis`); named recipes in hw3lib.grpo.config.ALGORITHMS.
- **Temperature-correct log-probs.** Every log-prob of a rollout (training, old, reference, the
  entropy) is taken from softmax(logits / sampling_temperature), the distribution the engine
  sampled from; the engine's own log-probs are kept with each rollout and the engine/trainer
  mismatch is logged per step (`train/logprob_mismatch_mean_abs`, `..._max_ratio`, and the mismatch
  KL(pi_engine || pi_trainer), `train/mismatch_kl` (k3) and `train/mismatch_kl_k1`).
- **Old log-probs** are computed once per rollout batch, under `torch.inference_mode()`, only
  when the policy changes between sampling and a gradient step of a ratio loss (or TIS). On-policy
  the sampling policy *is* the current one, so the current log-probs, detached, serve as old
  log-probs (ratio exactly 1, no extra forward pass).
- **Tokens:** the policy is trained on the exact token ids the engine sampled (prompt ids + the
  sample's `token_ids`, including a final EOS), never on a re-tokenization of the text.
- **Precision:** float32 master weights and AdamW state always; with `dtype="bfloat16"` the
  microbatches run through a bf16 working copy of the weights under autocast, refreshed once per
  optimizer step, their gradients accumulated into the masters in float32, and the engine receives
  that copy's bf16 tensors (hw3lib.core.precision; an update of lr 1e-5 applied to bf16 weights would
  mostly round away). Checkpoints hold the float32 masters.
- **Optimizer:** AdamW, constant learning rate after an optional linear warm-up; global grad-norm
  clipping; a step whose loss or gradient norm is not finite is skipped (no update, counted in
  `train/skipped_steps`).
- **Weight sync:** after all optimizer steps of a rollout batch (before the next generation). A
  vLLM engine colocated with the policy (`hw3lib.generation.engine_colocated`) follows vLLM's documented
  sequence (hw3lib.generation): `sleep(level=2)` right after sampling, so old/reference log-probs and the
  optimizer steps have its memory; then `gc.collect(); torch.cuda.empty_cache()`, `wake_up(tags=["weights"])`,
  the weight reload, `wake_up(tags=["kv_cache"])` and a prefix-cache reset (`push_weights`). On CPU the
  sleep/wake calls are no-ops, made in the same order.
- **LoRA** (beyond the handouts, `lora_rank` > 0; hw3lib.models.lora): only low-rank adapters are
  trained, the engine receives the merged weights under the base model's names, checkpoints hold the
  adapter, and KL monitoring's reference is the frozen base with the adapters disabled (no copy).
- **Validation:** every `eval_every` steps (and before the first and after the last) on held-out
  questions with `eval_temperature` (default 1.0, the courses' setting; the smoke profile uses 0, greedy),
  a few example rollouts saved to `samples/step_XXXX.jsonl`.

**Health warnings** (hw3lib.grpo.health): the truncated-rollout fraction, the zero-variance-group
fraction and the mismatch KL are logged every step; the first time one crosses its threshold the
loop prints a warning with the fix (once per run).

Outputs in `runs/<name>/`: `config.json`, `metrics.jsonl` (one row per optimizer step, plus one
row per validation; flat names `train/...`, `eval/...`, `time/...`), `samples/`, and
`checkpoints/` (hw3lib.core.runs: folder rules, checkpoints, wandb). An existing run is resumed
(`resume=True`), reused when finished, or refused -- never deleted unless `overwrite=True`.
Ctrl-C saves a checkpoint of the last completed GRPO step and re-raises; a validation it
interrupted is redone on resume. Reading runs back: hw3lib.grpo.results.

Timings per optimizer-step row: a rollout batch's `time/generation_s`, `time/scoring_s` and
`time/old_logprobs_s` (old and, with KL monitoring, reference log-probs) sit on its first row and
`time/weight_sync_s` on its last (the others carry 0), so summing a column over rows gives total
time; `time/train_s` is that optimizer step's own time and `time/tokens_per_s` the rollout batch's
generated tokens per second of its whole step (generation to sync).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hw3lib.core.io import atomic_write_json
from hw3lib.core.lifecycle import RunResult, TrainingRun, begin_run, policy_source, training_entry
from hw3lib.core.precision import MasterWeights
from hw3lib.evaluation.validate import save_validation, validate
from hw3lib.grpo.config import GRPOConfig
from hw3lib.grpo.health import health_warnings
from hw3lib.grpo.shaping import overlong_penalties, refill_uninformative
from hw3lib.grpo.memory_plan import planned, with_memory_plan
from hw3lib.grpo.step import logprob_mismatch, optimizer_step
from hw3lib.maths.grpo import CLIP_LOSSES, RATIO_LOSSES, compute_group_normalized_rewards
from hw3lib.maths.logprobs import batched_log_probs, pack_rollouts
from hw3lib.tasks.prompt_table import reward_fn_for, stop_strings_for

STOPPED_FILE = "stopped.json"  # written by `stop_when`: {"grpo_step", "reason"}
# hw3lib.grpo.step.logprob_mismatch's sums, in its order (optimizer_step returns them as `mismatch_<key>`).
MISMATCH_KEYS = ("abs", "tokens", "max_ratio", "kl_k1", "kl_k3")


@training_entry  # on a GPU with vLLM: a process of its own; GPU memory handed back on return
def train(cfg: GRPOConfig, resume: bool = False, overwrite: bool = False,
          callback: Callable[[dict], None] | None = None,
          stop_when: Callable[[list[dict]], str | None] | None = None) -> RunResult:
    """Run GRPO as configured by `cfg` into `runs/<cfg.name>/`.

    `resume=True` continues from the run's latest checkpoint (or starts it when the folder is
    empty); a finished run with the same settings is read back either way. A folder holding
    another run's outputs is refused (`hw3lib.core.runs.RunExistsError`) unless `overwrite=True`.

    `callback` (optional) is called once per optimizer step, after the microbatches' gradients
    are accumulated and before clipping and the update, with `{"policy", "optimizer", "engine",
    "step", "grpo_step", "epoch"}` -- for inspecting gradients or the engine's weights, progress
    displays, or fault injection.

    `stop_when` (optional) is called after each GRPO step is logged with that step's metric rows;
    a string it returns ends the run early: the step is validated and checkpointed, `stopped.json` records
    the step and the reason, and the partial result is
    returned (hw3lib.experiments.grids uses it to stop diverged runs).
    """
    from hw3lib.generation import engine_colocated, push_weights, sleep_for_training, training_engine

    # ---- set-up: the memory plan, the run folder, data, initial policy, (resumed) state, engine -------------
    cfg = with_memory_plan(cfg, "grpo", overwrite)  # rows per forward: the ones the preflight checks and prints
    run_dir, checkpoint, finished = begin_run("GRPO", cfg, resume, overwrite)  # hw3lib.core.lifecycle
    if finished is not None:
        return finished
    train_records, learner = start_run(run_dir, cfg, checkpoint, callback)
    engine = training_engine(cfg, learner.policy, learner.tokenizer, learner.initial_model,
                             records=[*train_records, *learner.eval_records])
    engine.load_weights(learner.weights_for_engine())  # a resumed run's engine needs them too
    colocated = engine_colocated(cfg)  # vLLM on the policy's device: asleep while the policy trains
    learner.start_clock()
    try:
        # A validation that was due at the step we start from and is missing (a fresh run's step 0,
        # or one a Ctrl-C interrupted) is run first.
        learner.catch_up_validation(engine)
        for grpo_step in range(learner.version + 1, cfg.n_grpo_steps + 1):
            step_started = time.perf_counter()
            batch = sample_rollout_batch(engine, cfg, train_records, learner.reward_fn, grpo_step, learner.version)
            started = time.perf_counter()
            sleep_for_training(engine, colocated=colocated)  # weights and KV cache dropped for the training half
            batch.generation_s += time.perf_counter() - started
            rows = learner.train_on(batch, engine=engine)

            # Push the new weights to the rollout engine (bf16 copies in mixed precision; nothing is
            # copied when the engine wraps the float32 policy itself); a colocated engine wakes up for them.
            started = time.perf_counter()
            push_weights(engine, learner.weights_for_engine(), colocated=colocated)
            rows[-1]["time/weight_sync_s"] = time.perf_counter() - started

            learner.finish_step(batch, rows, time.perf_counter() - step_started)
            reason = stop_when(rows) if stop_when is not None else None
            if reason is not None:
                learner.stop_early(engine, reason)
                break
            learner.validate_and_checkpoint(engine)
    except KeyboardInterrupt:
        learner.save_interrupted()
        raise
    finally:
        learner.close()
        if cfg.engine == "vllm":
            engine.close()
    return learner.result()


def start_run(run_dir: Path, cfg: GRPOConfig, checkpoint: Path | None,
              callback: Callable[[dict], None] | None = None) -> tuple[list[dict], "GRPOLearner"]:
    """Load the task and build the learner (which writes the run's `config.json`): `(training records, learner)`."""
    from hw3lib.tasks.data import load_task

    train_records, eval_records = load_task(cfg)
    return train_records, GRPOLearner(cfg, run_dir, checkpoint, eval_records, callback)


# ---- the two halves of a GRPO step: sampling (an engine) and learning (the policy) ----------------------

@dataclass
class RolloutBatch:
    """One GRPO step's scored rollouts, as the sampling side hands them to the learner (picklable).

    Sample j of question i is row `i * group_size + j` of `rollouts`, `advantages` and
    `raw_rewards`. `policy_version` is the number of GRPO steps of training the weights that
    sampled it had seen (the learner's `version` at the time); the learner treats a batch from an
    older version as off-policy (hw3lib.grpo.async_loop).
    """

    grpo_step: int
    policy_version: int
    prompts: list[str]  # one per question
    truths: list[str]  # one per rollout
    rollouts: list  # [N] hw3lib.generation.Sample
    advantages: torch.Tensor  # [N]
    raw_rewards: torch.Tensor  # [N]
    reward_stats: dict  # compute_group_normalized_rewards' statistics
    scores: list[dict]  # [N] the reward function's dict per rollout
    generation_s: float
    scoring_s: float
    generation_passes: int = 1  # > 1 with dynamic sampling (hw3lib.grpo.shaping)
    groups_replaced: int = 0  # uninformative groups dynamic sampling replaced

    def rollout_stats(self) -> dict[str, float]:
        """The per-batch `train/...` statistics logged with each of its optimizer steps."""
        lengths = [len(r.token_ids) for r in self.rollouts]
        return {
            "train/reward": self.reward_stats["reward_mean"],
            "train/reward_std": self.reward_stats["reward_std"],
            "train/format_reward": self.reward_stats.get("format_reward_mean", math.nan),
            "train/answer_reward": self.reward_stats.get("answer_reward_mean", math.nan),
            "train/response_length_mean": float(np.mean(lengths)),
            "train/response_length_max": max(lengths),
            "train/truncation_rate": float(np.mean([r.finish_reason == "length" for r in self.rollouts])),
            "train/zero_variance_group_fraction": self.reward_stats["frac_groups_zero_std"],
            "train/generation_passes": self.generation_passes,
            "train/groups_replaced": self.groups_replaced,
        }


def sample_groups(engine, cfg: GRPOConfig, questions: Sequence[dict], reward_fn, seed: int
                  ) -> tuple[list[dict], float, float]:
    """Sample `group_size` rollouts for each question and score them: `([{"prompt", "truth", "rollouts",
    "scores"}] per question, generation seconds, scoring seconds)`."""
    from hw3lib.tasks.data import format_prompt
    from hw3lib.generation import SamplingConfig

    prompts = [format_prompt(cfg.prompt, record["question"]) for record in questions]
    started = time.perf_counter()
    sampling = SamplingConfig(n=cfg.group_size, temperature=cfg.sampling_temperature, top_p=cfg.sampling_top_p,
                              max_tokens=cfg.sampling_max_tokens, min_tokens=cfg.sampling_min_tokens,
                              stop=stop_strings_for(cfg.prompt), include_stop_str_in_output=True, seed=seed)
    outputs = engine.generate(prompts, sampling)
    generation_s = time.perf_counter() - started
    started = time.perf_counter()
    groups = [{"prompt": prompt, "truth": record["gold"], "rollouts": list(samples),
               "scores": [reward_fn(sample.text, record["gold"]) for sample in samples]}
              for record, prompt, samples in zip(questions, prompts, outputs)]
    return groups, generation_s, time.perf_counter() - started


def sample_rollout_batch(engine, cfg: GRPOConfig, train_records: Sequence[dict], reward_fn, grpo_step: int,
                         policy_version: int) -> RolloutBatch:
    """Draw GRPO step `grpo_step`'s questions, sample `group_size` rollouts each, score them and
    compute the group-normalized advantages (with dynamic sampling and the overlong penalty when
    configured: hw3lib.grpo.shaping)."""
    # A fresh, seeded draw of questions each step (no state to checkpoint).
    picks = np.random.default_rng([cfg.seed, grpo_step]).choice(
        len(train_records), cfg.n_prompts_per_rollout_batch, replace=False)
    groups, generation_s, scoring_s = sample_groups(engine, cfg, [train_records[i] for i in picks], reward_fn,
                                                    rollout_seed(cfg.seed, grpo_step))
    passes, replaced = 1, 0
    if cfg.dynamic_sampling_passes:
        unused = np.setdiff1d(np.arange(len(train_records)), picks)

        def more(count: int, pass_number: int) -> list[dict]:
            nonlocal unused, generation_s, scoring_s
            chosen = np.random.default_rng([cfg.seed, grpo_step, pass_number]).choice(
                unused, min(count, len(unused)), replace=False)
            unused = np.setdiff1d(unused, chosen)
            fresh, seconds, scored_s = sample_groups(engine, cfg, [train_records[i] for i in chosen], reward_fn,
                                                     rollout_seed(cfg.seed, grpo_step) + 7919 * pass_number)
            generation_s, scoring_s = generation_s + seconds, scoring_s + scored_s
            return fresh

        groups, passes, replaced = refill_uninformative(
            groups, lambda group: [score["reward"] for score in group["scores"]], more, cfg.dynamic_sampling_passes)
    started = time.perf_counter()
    rollouts = [rollout for group in groups for rollout in group["rollouts"]]
    truths = [group["truth"] for group in groups for _ in group["rollouts"]]
    scores = [score for group in groups for score in group["scores"]]
    if cfg.overlong == "penalty":  # DAPO's soft overlong penalty, added to the reward before the advantages
        penalties = overlong_penalties([len(r.token_ids) for r in rollouts], cfg.sampling_max_tokens,
                                       cfg.overlong_ramp, cfg.overlong_penalty)
        scores = [{**score, "reward": score["reward"] + penalty} for score, penalty in zip(scores, penalties)]
    stored = iter(scores)  # the rewards are computed already: hand them over in order
    advantages, raw_rewards, reward_stats = compute_group_normalized_rewards(
        lambda response, truth: next(stored), [r.text for r in rollouts], truths, cfg.group_size, cfg.advantage_eps,
        cfg.use_std_normalization)
    return RolloutBatch(grpo_step, policy_version, [group["prompt"] for group in groups], truths, rollouts, advantages,
                        raw_rewards, reward_stats, scores, generation_s,
                        scoring_s + time.perf_counter() - started, passes, replaced)


class GRPOLearner(TrainingRun):
    """The training half of GRPO on top of the run's lifecycle (hw3lib.core.lifecycle.TrainingRun: the
    float32 policy and its optimizer, `metrics.jsonl`, validation and checkpoints when due): the frozen
    reference with KL monitoring and `train_on(batch)`.

    The synchronous loop (`train`) and the asynchronous ones (hw3lib.grpo.async_loop, inside a Ray
    actor) drive the same object: `train_on(batch)` -> `finish_step(...)` ->
    `validate_and_checkpoint(engine)` per GRPO step; `version` counts completed GRPO steps.
    """

    def __init__(self, cfg: GRPOConfig, run_dir: Path, checkpoint: Path | None, eval_records: Sequence[dict],
                 callback: Callable[[dict], None] | None = None) -> None:
        from hw3lib.models.load import initial_policy_source, load_model_and_tokenizer, load_training_policy

        self.eval_records, self.callback = eval_records, callback
        self.warned: set[str] = set()  # the health checks (hw3lib.grpo.health) that have warned in this process
        self.reward_fn = reward_fn_for(cfg.prompt)
        self.initial_model = initial_policy_source(cfg)  # cfg.model, or its SFT warm start (cached)
        # float32 master weights whatever cfg.dtype says; the microbatches run through `self.working`'s copy.
        policy, tokenizer = load_training_policy(policy_source(checkpoint, self.initial_model), cfg,
                                                 base=self.initial_model)
        self.reference = None
        # Only with KL monitoring: a second copy of the model costs memory (frozen, so low precision is fine).
        # LoRA needs no copy: its frozen base, adapters disabled, is the initial policy (`reference_log_probs`).
        if cfg.monitor_kl and not cfg.lora_rank:
            self.reference, _ = load_model_and_tokenizer(str(self.initial_model), device=cfg.policy_device,
                                                         dtype=cfg.dtype)
            self.reference.requires_grad_(False).eval()
        super().__init__(cfg, run_dir, checkpoint, policy, tokenizer,
                         fresh_state={"grpo_step": 0, "optimizer_step": 0, "skipped_steps": 0, "elapsed_s": 0.0})
        # The working copy the microbatches and no-grad passes run through (bf16 weights in mixed precision),
        # built after a resume has loaded the masters.
        self.working = MasterWeights(self.policy, cfg.dtype)
        # Sequences per training forward: the run's recorded plan (hw3lib.grpo.memory_plan; the course's microbatch or
        # more, the same update); a run made before plans were recorded chooses as the plan would.
        self.forward_rows = cfg.forward_rows or planned(cfg).forward_rows

    def weights_for_engine(self):
        """The policy's weights as a rollout engine takes them: the working copy's bf16 tensors in mixed
        precision (no cast), the float32 masters themselves otherwise, a LoRA policy's merged weights."""
        from hw3lib.generation import policy_weights_for_engine

        if not self.working.pairs:  # float32, or LoRA (merged under the base model's names)
            return policy_weights_for_engine(self.policy, self.cfg.dtype)
        return self.working.engine_weights()

    # ---- one rollout batch -----------------------------------------------------------------------------

    def train_on(self, batch: RolloutBatch, engine=None) -> list[dict]:
        """All optimizer steps of one rollout batch; returns their metric rows (not logged yet).

        A batch sampled by the current weights (`batch.policy_version == version`) is trained as
        the synchronous loop always does. A batch from older weights is off-policy: its behaviour
        log-probs are the engine's (the distribution it was sampled from), which the ratio loss
        needs, and the engine/trainer mismatch cannot be measured (the sampling weights are gone).
        `engine` is only handed to the callback.
        """
        cfg, policy, device = self.cfg, self.policy, self.cfg.policy_device
        stale = batch.policy_version != self.version

        # The rollouts as tensors: the exact token ids the engine sampled.
        started = time.perf_counter()
        tensors, prefix = pack_rollouts(self.tokenizer, [p for p in batch.prompts for _ in range(cfg.group_size)],
                                        [r.token_ids for r in batch.rollouts], device)
        if cfg.overlong == "mask":  # DAPO's overlong filtering: truncated rollouts leave the loss
            truncated = torch.tensor([r.finish_reason == "length" for r in batch.rollouts], device=device)  # [N]
            tensors["response_mask"] = tensors["response_mask"] & ~truncated.unsqueeze(1)  # [N, L-1]
        engine_log_probs = response_values(tensors, [r.logprobs for r in batch.rollouts]).to(device)  # [N, L-1]
        advantages = batch.advantages.to(device).unsqueeze(1)  # [N, 1]
        raw_rewards = batch.raw_rewards.to(device).unsqueeze(1)  # [N, 1]
        scoring_s = batch.scoring_s + time.perf_counter() - started

        started = time.perf_counter()
        old_log_probs, ref_log_probs, mismatch = self.fixed_log_probs(tensors, prefix, engine_log_probs, stale)
        old_logprobs_s = time.perf_counter() - started
        rollout_stats = batch.rollout_stats()

        # Epochs over the rollout batch, in optimizer steps of train_batch_size rollouts.
        rows, grpo_step = [], batch.grpo_step
        policy.train()
        self.working.model.train()
        for epoch in range(cfg.epochs_per_rollout_batch):
            order = torch.from_numpy(np.random.default_rng([cfg.seed, grpo_step, epoch]).permutation(
                cfg.rollout_batch_size))  # [N], on the CPU
            for first in range(0, cfg.rollout_batch_size, cfg.train_batch_size):
                started = time.perf_counter()
                measure_mismatch = not rows and old_log_probs is None  # the sampling weights, no old log-probs
                step_number = self.state["optimizer_step"] + 1

                def before_update(model, epoch=epoch, step_number=step_number):
                    if self.callback is not None:
                        self.callback({"policy": model, "optimizer": self.optimizer, "engine": engine,
                                       "step": step_number, "grpo_step": grpo_step, "epoch": epoch})

                stats = optimizer_step(
                    policy, self.optimizer, self.params, cfg, tensors, order[first:first + cfg.train_batch_size],
                    raw_rewards=raw_rewards, advantages=advantages, old_log_probs=old_log_probs,
                    ref_log_probs=ref_log_probs, engine_log_probs=engine_log_probs, shared_prefix=prefix,
                    learning_rate=learning_rate_at(cfg, step_number), measure_mismatch=measure_mismatch,
                    before_update=before_update, working=self.working, forward_rows=self.forward_rows)
                if stats["updated"]:
                    self.weights_changed()
                else:
                    self.state["skipped_steps"] += 1
                    print(f"  step {step_number}: non-finite loss {stats['loss']} or grad norm "
                          f"{stats['grad_norm']}; update skipped", flush=True)
                if measure_mismatch:
                    mismatch = {key: stats[f"mismatch_{key}"] for key in MISMATCH_KEYS}
                self.state["optimizer_step"] = step_number
                row = self.step_row(stats, grpo_step, epoch, ref_log_probs is not None, rollout_stats)
                first_row = not rows
                row.update({"time/generation_s": batch.generation_s if first_row else 0.0,
                            "time/scoring_s": scoring_s if first_row else 0.0,
                            "time/old_logprobs_s": old_logprobs_s if first_row else 0.0,
                            "time/train_s": time.perf_counter() - started, "time/weight_sync_s": 0.0})
                rows.append(row)
        if mismatch is not None:
            tokens = max(mismatch["tokens"], 1.0)
            for row in rows:
                row["train/logprob_mismatch_mean_abs"] = mismatch["abs"] / tokens
                row["train/logprob_mismatch_max_ratio"] = mismatch["max_ratio"]
                row["train/mismatch_kl"] = mismatch["kl_k3"] / tokens
                row["train/mismatch_kl_k1"] = mismatch["kl_k1"] / tokens
        return rows

    def fixed_log_probs(self, tensors: dict[str, torch.Tensor], prefix: int, engine_log_probs: torch.Tensor,
                        stale: bool) -> tuple[torch.Tensor | None, torch.Tensor | None, dict | None]:
        """Once per rollout batch, never differentiated: `(old log-probs, reference log-probs, mismatch)`.

        Old log-probs `[N, L-1]` exist when the policy moves before a ratio/TIS step (a stale batch's are
        the engine's own); reference log-probs only with KL monitoring. The engine/trainer mismatch is
        measured at the sampling weights: on all rows from the old log-probs when they exist (else on the
        rows of the batch's first optimizer step, later; None for a stale batch: those weights are gone).
        """
        cfg, micro = self.cfg, self.forward_rows  # no-grad passes hold less than a training forward
        old_log_probs = ref_log_probs = None
        if stale:
            old_log_probs = engine_log_probs  # [N, L-1] the behaviour policy's own
        elif cfg.needs_old_log_probs:
            old_log_probs = batched_log_probs(self.working.model, tensors, micro, prefix, cfg.sampling_temperature,
                                              cfg.dtype)  # [N, L-1]
        if cfg.monitor_kl:
            ref_log_probs = self.reference_log_probs(tensors, prefix)  # [N, L-1]
        mismatch = None if stale else {"abs": 0.0, "tokens": 0.0, "max_ratio": 1.0, "kl_k1": 0.0, "kl_k3": 0.0}
        if old_log_probs is not None and not stale:
            measured = torch.stack([t.float() for t in logprob_mismatch(old_log_probs, engine_log_probs,
                                                                        tensors["response_mask"])]).tolist()
            mismatch = dict(zip(MISMATCH_KEYS, measured))  # one host transfer
        return old_log_probs, ref_log_probs, mismatch

    def reference_log_probs(self, tensors: dict[str, torch.Tensor], prefix: int) -> torch.Tensor:
        """`[N, L-1]` log-probs under the frozen initial policy: the reference copy, or with LoRA the policy's
        own base with its adapters disabled (the base weights never change)."""
        cfg, micro = self.cfg, self.forward_rows  # no-grad passes hold less than a training forward
        if self.reference is not None:
            return batched_log_probs(self.reference, tensors, micro, prefix, cfg.sampling_temperature,
                                     cfg.dtype)  # [N, L-1]
        with self.policy.disable_adapter():
            return batched_log_probs(self.policy, tensors, micro, prefix, cfg.sampling_temperature,
                                     cfg.dtype)  # [N, L-1]

    def step_row(self, stats: dict, grpo_step: int, epoch: int, kl: bool, rollout_stats: dict) -> dict:
        """The metrics of one optimizer step (`optimizer_step`'s statistics): the loss table's extras only
        where the configured loss has them."""
        cfg = self.cfg
        row = {"step": self.state["optimizer_step"], "grpo_step": grpo_step, "epoch": epoch,
               "train/loss": stats["loss"], "train/grad_norm": stats["grad_norm"],
               "train/entropy": stats["entropy"], "train/lr": self.optimizer.param_groups[0]["lr"],
               "train/skipped_steps": self.state["skipped_steps"], **rollout_stats}
        if cfg.loss_type in CLIP_LOSSES:
            row["train/clip_fraction"] = stats["clip_fraction"]
        if cfg.loss_type in RATIO_LOSSES:
            row["train/ratio_mean"] = stats["ratio_mean"]
        if cfg.tis_cap is not None:
            row["train/tis_weight_mean"] = stats["tis_weight_mean"]
        if cfg.mis is not None:
            row["train/mis_dropped_fraction"] = stats["mis_dropped_fraction"]
        if kl:
            row["train/kl_k1"], row["train/kl_k3"] = stats["kl_k1"], stats["kl_k3"]
        return row

    def finish_step(self, batch: RolloutBatch, rows: list[dict], step_s: float, extra: dict | None = None) -> None:
        """Log the rollout batch's rows (with `extra` columns on each) and advance to its GRPO step."""
        tokens_per_s = sum(len(r.token_ids) for r in batch.rollouts) / step_s
        for row in rows:
            self.log({**row, **(extra or {}), "time/tokens_per_s": tokens_per_s, "time/elapsed_s": self.clock()})
        self.complete_step(grpo_step=batch.grpo_step)
        last = rows[-1]
        print(f"step {batch.grpo_step}/{self.cfg.n_grpo_steps}: reward {last['train/reward']:.3f} "
              f"answer {last['train/answer_reward']:.3f} loss {last['train/loss']:+.4f} "
              f"grad {last['train/grad_norm']:.3f} len {last['train/response_length_mean']:.1f} "
              f"gen {batch.generation_s:.1f}s train {sum(r['time/train_s'] for r in rows):.1f}s", flush=True)
        for row in rows:  # a run that silently stopped learning: warn once per kind, with the fix
            for message in health_warnings(row, self.warned):
                print(f"  {message}", flush=True)

    # ---- validation and checkpoints ----------------------------------------------------------------------

    def run_validation(self, engine) -> None:
        """Validate the engine's weights (the learner's current ones) and log the `eval/...` row."""
        started = time.perf_counter()
        grpo_step = self.version
        metrics, examples = validate(engine, self.eval_records, self.cfg, self.reward_fn, seed=self.cfg.seed)
        save_validation(self.run_dir, f"step_{grpo_step:04d}", examples, self.cfg.n_eval_samples_saved)
        self.log({"step": self.state["optimizer_step"], "grpo_step": grpo_step, **metrics,
                  "time/eval_s": time.perf_counter() - started, "time/elapsed_s": self.clock()})
        print(f"  eval @ step {grpo_step}: answer {metrics['eval/answer_reward']:.3f} "
              f"format {metrics['eval/format_reward']:.3f} length {metrics['eval/response_length']:.1f}", flush=True)

    def catch_up_validation(self, engine) -> None:
        """The validation due at the current step, if missing (see TrainingRun.catch_up)."""
        self.catch_up(lambda: self.run_validation(engine))

    def validate_and_checkpoint(self, engine) -> None:
        """After a GRPO step: validate when due (`engine` holds the current weights), checkpoint when due."""
        self.after_step(lambda: self.run_validation(engine))

    def stop_early(self, engine, reason: str) -> None:
        """End the run at the current GRPO step (`train`'s `stop_when`): validate it (so curves end at the
        stop), checkpoint, and record the step and `reason` in `stopped.json`."""
        self.run_validation(engine)
        self.save()
        atomic_write_json(self.run_dir / STOPPED_FILE, {"grpo_step": self.version, "reason": reason})
        print(f"stopped early at GRPO step {self.version}: {reason}", flush=True)


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


def learning_rate_at(cfg: GRPOConfig, optimizer_step: int) -> float:
    """The learning rate of optimizer step `optimizer_step` (1-based): linear warm-up, then constant."""
    if cfg.lr_warmup_steps and optimizer_step < cfg.lr_warmup_steps:
        return cfg.learning_rate * optimizer_step / cfg.lr_warmup_steps
    return cfg.learning_rate


def rollout_seed(seed: int, grpo_step: int) -> int:
    """The sampling seed of one GRPO step: reproducible, and the same after a resume."""
    return seed * 1_000_003 + grpo_step
