"""Expert iteration: sample, keep what is right, imitate it -- `expert_iteration(cfg)`, one explicit loop.

Per round (`n_ei_steps` of them):

    push the policy's weights to the engine -> draw `questions_per_round` training questions (seeded,
    without replacement) -> sample `group_size` (G) rollouts per question from the current policy
    through the rollout engine -> grade them with the R1-Zero reward -> keep the rollouts with reward 1
    (format and answer right) -> `sft_epochs` passes of SFT over the kept rollouts, starting from the
    current policy -> log -> validate every `eval_every` rounds -> checkpoint.

Variant implemented:

- **What is kept:** every rollout whose reward is exactly 1 (`keep_correct`), duplicates included
  (a question answered right by 5 of its G samples contributes 5 sequences); a round with none
  kept takes no optimizer step.
- **SFT step:** `hw3lib.maths.sft_step.sft_optimizer_step`, the SFT runner's step (NLL summed over each
  response, divided by the step's mean response length, averaged over the step's sequences), on
  the exact token ids the engine sampled (never a re-tokenization of the text), `train_batch_size`
  rollouts per step (a round's last step takes the remainder). One AdamW optimizer for the whole
  run (its moments carry over between rounds), constant learning rate, float32 master weights and
  a bf16 working copy under autocast as in the SFT runner (hw3lib.core.precision).
- **Entropy:** the mean per-token entropy of all the round's rollouts under the sampling policy (at
  the sampling temperature, one no-grad forward pass in microbatches of `micro_train_batch_size` rows:
  at 64 rows the full profile's bf16 logits alone would take ~18.5 GiB), also over correct and
  incorrect rollouts separately: `train/entropy`, `train/entropy_correct`, `train/entropy_incorrect`.
  SFT on the policy's own correct samples is expected to sharpen it round after round.
- **The engine beside the trainer:** a vLLM engine colocated with the policy
  (`hw3lib.generation.engine_colocated`) sleeps (level 2) except while it generates: put to sleep once
  built, woken with the weights before each round's sampling and each validation (`push_weights`:
  vLLM's documented sequence, hw3lib.generation), asleep again right after, so the entropy pass, the
  SFT steps and the validation's no-grad passes have its memory. Other engines receive the weights
  with `load_weights` at the same points.
- **Initial policy:** `model`, or the same cached SFT warm start GRPO uses for the same settings
  (`warm_start_steps`, hw3lib.models.load.initial_policy_source), so EI and GRPO can start from one
  policy and be compared on the same validation set, per optimizer step (`step`) and per rollout
  generated (`rollouts`).

Validation is the SFT runner's: `hw3lib.evaluation.validate` plus `log_generations`
(`generations/round_XXXX.jsonl`). One metrics row per round and one per validation, in
`runs/<name>/metrics.jsonl`; checkpoints and folder rules as the SFT runner (hw3lib.core.runs), counted
in rounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from hw3lib.core.lifecycle import RunResult, TrainingRun, begin_run, policy_source, training_entry
from hw3lib.core.precision import MasterWeights
from hw3lib.maths.logprobs import autocast_for, pack_rollouts, response_log_probs
from hw3lib.maths.sft import masked_normalize
from hw3lib.sft.config import EIConfig
from hw3lib.maths.sft_step import sft_optimizer_step
from hw3lib.sft.loop import log_validation


def keep_correct(scores: Sequence[dict]) -> list[int]:
    """Indices of the rollouts to imitate: those whose reward is exactly 1 (right format and answer)."""
    return [i for i, score in enumerate(scores) if score["reward"] == 1.0]


def rollout_entropy(policy, batch: dict[str, torch.Tensor], micro_batch_size: int, shared_prefix: int,
                    temperature: float, dtype: str) -> torch.Tensor:
    """Mean token entropy of each response of a packed batch under `policy` at `temperature`: `[N]` (no grad)."""
    n = batch["labels"].shape[0]
    device = batch["labels"].device
    out = torch.zeros(n, device=device)  # filled on the device, moved to the host once (no sync per microbatch)
    was_training = policy.training
    policy.eval()
    with torch.inference_mode(), autocast_for(dtype, device):
        for first in range(0, n, micro_batch_size):
            rows = slice(first, first + micro_batch_size)
            cols = slice(int(batch["response_start"][rows].min()), int(batch["lengths"][rows].max()))
            mask = batch["response_mask"][rows, cols]  # [b, T]
            entropy = response_log_probs(policy, batch["input_ids"][rows, :cols.stop], batch["labels"][rows, cols],
                                         return_token_entropy=True, shared_prefix=shared_prefix,
                                         temperature=temperature)["token_entropy"]  # [b, T]
            out[rows] = masked_normalize(entropy.float(), mask, dim=-1) / mask.sum(dim=-1).clamp(min=1)
    policy.train(was_training)
    return out.cpu()


def _mean(values) -> float | None:
    values = list(values)
    return float(np.mean(values)) if values else None


@dataclass
class Round:
    """One round's questions, their G rollouts each (sample j of question i is row i * G + j) and grades."""

    questions: list[dict]
    prompts: list[str]
    rollouts: list
    scores: list[dict]
    kept: list[int]
    generation_s: float
    grading_s: float


def sample_round(engine, cfg: EIConfig, train_records: Sequence[dict], reward_fn, round_: int) -> Round:
    """Draw the round's questions (seeded, without replacement), sample G rollouts each, grade, keep."""
    from hw3lib.generation import SamplingConfig
    from hw3lib.tasks.data import format_prompt
    from hw3lib.tasks.prompt_table import stop_strings_for

    started = time.perf_counter()
    picks = np.random.default_rng([cfg.seed, round_]).choice(len(train_records), cfg.questions_per_round,
                                                             replace=False)
    questions = [train_records[i] for i in picks]
    prompts = [format_prompt(cfg.prompt, q["question"]) for q in questions]
    sampling = SamplingConfig(n=cfg.group_size, temperature=cfg.sampling_temperature, top_p=1.0,
                              max_tokens=cfg.sampling_max_tokens, min_tokens=cfg.sampling_min_tokens,
                              stop=stop_strings_for(cfg.prompt), include_stop_str_in_output=True,
                              seed=cfg.seed * 1_000_003 + round_)
    rollouts = [s for samples in engine.generate(prompts, sampling) for s in samples]
    generation_s = time.perf_counter() - started
    started = time.perf_counter()
    truths = [q["gold"] for q in questions for _ in range(cfg.group_size)]
    scores = [reward_fn(r.text, truth) for r, truth in zip(rollouts, truths)]
    return Round(questions, prompts, rollouts, scores, keep_correct(scores), generation_s,
                 time.perf_counter() - started)


def sft_on_kept(run: TrainingRun, batch: dict, prefix: int, kept: Sequence[int], round_: int,
                working: MasterWeights | None = None) -> list[dict]:
    """`sft_epochs` passes of SFT over the kept rollouts (seeded order per epoch), in steps of
    `train_batch_size`; the steps' statistics (none when nothing was kept). `working`: the policy's
    working copy (hw3lib.core.precision), which the microbatches run through."""
    cfg, steps = run.cfg, []
    run.policy.train()
    if working is not None:
        working.model.train()
    for epoch in range(cfg.sft_epochs if kept else 0):
        order = [kept[i] for i in np.random.default_rng([cfg.seed, round_, epoch]).permutation(len(kept))]
        for first in range(0, len(order), cfg.train_batch_size):
            steps.append(sft_optimizer_step(
                run.policy, run.optimizer, run.params, batch, order[first:first + cfg.train_batch_size],
                micro_batch_size=cfg.micro_train_batch_size, dtype=cfg.dtype,
                max_grad_norm=cfg.max_grad_norm, learning_rate=cfg.learning_rate, shared_prefix=prefix,
                working=working))
            run.weights_changed()
    return steps


def round_row(cfg: EIConfig, state: dict, round_: Round, entropy: Sequence[float], steps: Sequence[dict],
              times: dict) -> dict:
    """The metrics row of one round (`state`: the counters after it)."""
    scores, kept, rollouts = round_.scores, round_.kept, round_.rollouts
    correct = set(kept)
    solved = {i // cfg.group_size for i in kept}
    return {
        "round": state["round"], "step": state["step"], "rollouts": state["rollouts"],
        "train/reward": _mean(s["reward"] for s in scores),
        "train/format_reward": _mean(s["format_reward"] for s in scores),
        "train/answer_reward": _mean(s["answer_reward"] for s in scores),
        "ei/kept": len(kept), "ei/kept_fraction": len(kept) / len(rollouts),
        "ei/questions_solved_fraction": len(solved) / len(round_.questions), "ei/sft_steps": len(steps),
        "train/entropy": _mean(entropy),
        "train/entropy_correct": _mean(h for i, h in enumerate(entropy) if i in correct),
        "train/entropy_incorrect": _mean(h for i, h in enumerate(entropy) if i not in correct),
        "train/response_length_mean": _mean(len(r.token_ids) for r in rollouts),
        "train/loss": _mean(s["loss"] for s in steps), "train/grad_norm": _mean(s["grad_norm"] for s in steps),
        **times}


@training_entry  # on a GPU with vLLM: a process of its own; GPU memory handed back on return
def expert_iteration(cfg: EIConfig, resume: bool = False, overwrite: bool = False,
                     callback: Callable[[dict], None] | None = None) -> RunResult:
    """Run expert iteration as configured by `cfg` into `runs/<cfg.name>/` (see the module docstring).

    `callback` (optional) is called after each round's SFT steps with `{"policy", "round",
    "rollouts", "scores", "kept"}` (the round's samples, their rewards and the kept indices).
    """
    from hw3lib.generation import (engine_colocated, policy_weights_for_engine, push_weights, sleep_for_training,
                                   training_engine)
    from hw3lib.models.load import initial_policy_source, load_training_policy
    from hw3lib.tasks.data import load_task
    from hw3lib.tasks.prompt_table import reward_fn_for

    run_dir, checkpoint, finished = begin_run("expert iteration", cfg, resume, overwrite)  # hw3lib.core.lifecycle
    if finished is not None:
        return finished
    train_records, eval_records = load_task(cfg)
    reward_fn = reward_fn_for(cfg.prompt)
    initial_model = initial_policy_source(cfg)  # cfg.model, or its SFT warm start (cached)
    policy, tokenizer = load_training_policy(policy_source(checkpoint, initial_model), cfg,
                                             base=initial_model)  # float32 masters
    run = TrainingRun(cfg, run_dir, checkpoint, policy, tokenizer,
                      fresh_state={"round": 0, "step": 0, "rollouts": 0, "elapsed_s": 0.0})
    working = MasterWeights(policy, cfg.dtype)  # the bf16 working copy the SFT microbatches run through
    engine = training_engine(cfg, policy, tokenizer, initial_model, records=[*train_records, *eval_records])
    colocated = engine_colocated(cfg)  # vLLM on the policy's device: asleep except while it generates
    sleep_for_training(engine, colocated=colocated)  # each round and validation wakes it with the weights

    def validate() -> None:
        log_validation(run, engine, eval_records, reward_fn, round=run.version, step=run.state["step"],
                       rollouts=run.state["rollouts"])

    try:
        run.catch_up(validate)
        for round_number in range(run.version + 1, cfg.n_ei_steps + 1):
            # 1. The current weights into the engine (a colocated one wakes up for them).
            started = time.perf_counter()
            push_weights(engine, working.engine_weights() if working.pairs else policy_weights_for_engine(
                policy, cfg.dtype), colocated=colocated)  # the working copy's bf16 tensors: no cast
            sync_s = time.perf_counter() - started
            # 2-3. G rollouts per question from the current policy, graded; their entropy under it.
            round_ = sample_round(engine, cfg, train_records, reward_fn, round_number)
            sleep_for_training(engine, colocated=colocated)
            started = time.perf_counter()
            batch, prefix = pack_rollouts(tokenizer, [p for p in round_.prompts for _ in range(cfg.group_size)],
                                          [r.token_ids for r in round_.rollouts], cfg.policy_device)
            entropy = rollout_entropy(working.model, batch, cfg.micro_train_batch_size, prefix, cfg.sampling_temperature,
                                      cfg.dtype).tolist()
            scoring_s = round_.grading_s + time.perf_counter() - started
            # 4. SFT on the kept rollouts, from the current policy.
            started = time.perf_counter()
            steps = sft_on_kept(run, batch, prefix, round_.kept, round_number, working)
            train_s = time.perf_counter() - started
            # 5. One row for the round.
            counters = {"round": round_number, "step": run.state["step"] + len(steps),
                        "rollouts": run.state["rollouts"] + len(round_.rollouts)}
            run.log(round_row(cfg, counters, round_, entropy, steps, {
                "time/generation_s": round_.generation_s, "time/scoring_s": scoring_s, "time/train_s": train_s,
                "time/weight_sync_s": sync_s, "time/elapsed_s": run.clock()}))
            run.complete_step(**counters)
            print(f"round {round_number}/{cfg.n_ei_steps}: reward {_mean(s['reward'] for s in round_.scores):.3f} "
                  f"kept {len(round_.kept)}/{len(round_.rollouts)} entropy {_mean(entropy):.3f} sft steps "
                  f"{len(steps)} gen {round_.generation_s:.1f}s train {train_s:.1f}s", flush=True)
            if callback is not None:
                callback({"policy": policy, "round": round_number, "rollouts": round_.rollouts,
                          "scores": round_.scores, "kept": round_.kept})
            run.after_step(validate)
    except KeyboardInterrupt:
        run.save_interrupted()  # a round the interrupt cut short is redone on resume (flagged partial)
        raise
    finally:
        run.close()
        if cfg.engine == "vllm":
            engine.close()
    return run.result()
