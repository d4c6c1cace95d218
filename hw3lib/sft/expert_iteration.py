"""Expert iteration: sample, keep what is right, imitate it -- `expert_iteration(cfg)`, one explicit loop.

Per round (`n_ei_steps` of them):

    draw `questions_per_round` training questions (seeded, without replacement) -> sample
    `group_size` (G) rollouts per question from the current policy through the rollout engine ->
    grade them with the R1-Zero reward -> keep the rollouts with reward 1 (format and answer right)
    -> `sft_epochs` passes of SFT over the kept rollouts, starting from the current policy ->
    push the weights to the engine -> log -> validate every `eval_every` rounds -> checkpoint.

Variant implemented:

- **What is kept:** every rollout whose reward is exactly 1 (`keep_correct`), duplicates included
  (a question answered right by 5 of its G samples contributes 5 sequences); a round with none
  kept takes no optimizer step.
- **SFT step:** `hw3lib.sft.loop.sft_optimizer_step`, the SFT runner's step (NLL summed over each
  response, divided by the step's mean response length, averaged over the step's sequences), on
  the exact token ids the engine sampled (never a re-tokenization of the text), `train_batch_size`
  rollouts per step (a round's last step takes the remainder). One AdamW optimizer for the whole
  run (its moments carry over between rounds), constant learning rate, float32 master weights and
  bf16 autocast as in the SFT runner.
- **Entropy:** the mean per-token entropy of all the round's rollouts under the sampling policy (at
  the sampling temperature, one no-grad forward pass), also over correct and incorrect rollouts
  separately: `train/entropy`, `train/entropy_correct`, `train/entropy_incorrect`. SFT on the
  policy's own correct samples is expected to sharpen it round after round.
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

import numpy as np
import torch

from hw3lib.core.io import append_jsonl, atomic_write_json, atomic_write_jsonl, runs_dir
from hw3lib.maths.logprobs import autocast_for, response_log_probs, shared_prefix_length
from hw3lib.core.runs import (METRICS_FILE, SAMPLES_DIR, load_checkpoint, metrics_rows, rng_state, save_checkpoint,
                         seed_everything)
from hw3lib.maths.sft import masked_normalize, pack_prompt_and_output_ids
from hw3lib.sft.config import EIConfig
from hw3lib.sft.loop import (GENERATIONS_DIR, LoopResult, loop_result, open_loop_run, run_validation,
                              sft_optimizer_step, validation_logged)


def keep_correct(scores: Sequence[dict]) -> list[int]:
    """Indices of the rollouts to imitate: those whose reward is exactly 1 (right format and answer)."""
    return [i for i, score in enumerate(scores) if score["reward"] == 1.0]


def rollout_entropy(policy, batch: dict[str, torch.Tensor], micro_batch_size: int, shared_prefix: int,
                    temperature: float, dtype: str) -> torch.Tensor:
    """Mean token entropy of each response of a packed batch under `policy` at `temperature`: `[N]` (no grad)."""
    n = batch["labels"].shape[0]
    device = batch["labels"].device
    out = torch.zeros(n)
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
            out[rows] = (masked_normalize(entropy.float(), mask, dim=-1) / mask.sum(dim=-1).clamp(min=1)).cpu()
    policy.train(was_training)
    return out


def _mean(values) -> float | None:
    values = list(values)
    return float(np.mean(values)) if values else None


def expert_iteration(cfg: EIConfig, resume: bool = False, overwrite: bool = False,
                     callback: Callable[[dict], None] | None = None) -> LoopResult:
    """Run expert iteration as configured by `cfg` into `runs/<cfg.name>/` (see the module docstring).

    `callback` (optional) is called after each round's weight push with `{"policy", "round",
    "rollouts", "scores", "kept"}` (the round's samples, their rewards and the kept indices).
    """
    from hw3lib.tasks.data import format_prompt, load_task
    from hw3lib.generation import SamplingConfig, policy_weights_for_engine, training_engine
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.tasks.prompt_table import reward_fn_for, stop_strings_for
    from hw3lib.models.load import initial_policy_source

    run_dir = runs_dir() / cfg.name
    print(f"expert iteration '{cfg.name}' -> {run_dir}\n{cfg.describe()}", flush=True)
    checkpoint, finished = open_loop_run(run_dir, cfg, resume, overwrite, "round", cfg.n_ei_steps)
    if finished is not None:
        print(f"{run_dir} has finished all {cfg.n_ei_steps} rounds with these settings; reusing it", flush=True)
        return loop_result(run_dir, cfg, finished, "round")
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / "config.json", cfg.to_dict())
    train_records, eval_records = load_task(cfg)
    reward_fn = reward_fn_for(cfg.prompt)
    initial_model = initial_policy_source(cfg)  # cfg.model, or its SFT warm start (cached)
    policy, tokenizer = load_model_and_tokenizer(str(checkpoint / "policy" if checkpoint else initial_model),
                                                 device=cfg.policy_device, dtype="float32")
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay, betas=cfg.adam_betas)
    if checkpoint is None:
        state = {"round": 0, "step": 0, "rollouts": 0, "elapsed_s": 0.0}
        seed_everything(cfg.seed)
    else:
        state = load_checkpoint(checkpoint, optimizer, run_dir)
        print(f"resumed from {checkpoint} at round {state['round']}", flush=True)
    engine = training_engine(cfg, policy, tokenizer, initial_model)
    engine.load_weights(policy_weights_for_engine(policy, cfg.dtype))
    rows_so_far = metrics_rows(run_dir)
    loop_started = time.perf_counter() - state["elapsed_s"]
    device = cfg.policy_device

    def clock() -> float:
        return time.perf_counter() - loop_started

    def validation(round_: int) -> None:
        started = time.perf_counter()
        metrics, samples = run_validation(engine, policy, tokenizer, eval_records, cfg, reward_fn,
                                          run_dir / GENERATIONS_DIR / f"round_{round_:04d}.jsonl")
        atomic_write_jsonl(run_dir / SAMPLES_DIR / f"round_{round_:04d}.jsonl", samples)
        append_jsonl(run_dir / METRICS_FILE, {"round": round_, "step": state["step"], "rollouts": state["rollouts"],
                                              **metrics, "time/eval_s": time.perf_counter() - started,
                                              "time/elapsed_s": clock()})
        print(f"  eval @ round {round_}: answer {metrics['eval/answer_reward']:.3f} "
              f"format {metrics['eval/format_reward']:.3f} entropy {metrics['eval/entropy']:.3f}", flush=True)

    def due(round_: int) -> bool:
        return round_ == 0 or round_ % cfg.eval_every == 0 or round_ == cfg.n_ei_steps

    boundary = {"state": dict(state), "rng": rng_state(), "weights_changed": False}
    try:
        if due(state["round"]) and not validation_logged(rows_so_far, "round", state["round"]):
            validation(state["round"])
            if state["round"] == cfg.n_ei_steps:
                save_checkpoint(run_dir, policy, tokenizer, optimizer, state, rng_state(), step=state["round"])
        for round_ in range(state["round"] + 1, cfg.n_ei_steps + 1):
            # 1. Questions and G rollouts each from the current policy (sample j of question i is row i * G + j).
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

            # 2. Grade, keep the correct ones; entropy of all the round's rollouts.
            started = time.perf_counter()
            truths = [q["gold"] for q in questions for _ in range(cfg.group_size)]
            scores = [reward_fn(r.text, truth) for r, truth in zip(rollouts, truths)]
            kept = keep_correct(scores)
            prompt_ids = tokenizer([p for p in prompts for _ in range(cfg.group_size)],
                                   add_special_tokens=False)["input_ids"]
            packed = pack_prompt_and_output_ids(prompt_ids, [r.token_ids for r in rollouts], tokenizer.pad_token_id)
            batch = {key: packed[key].to(device) for key in ("input_ids", "labels", "response_mask")}
            batch.update(lengths=packed["lengths"], response_start=packed["response_start"])
            prefix = shared_prefix_length(prompt_ids)
            entropy = rollout_entropy(policy, batch, cfg.generation_batch_size, prefix, cfg.sampling_temperature,
                                      cfg.dtype).tolist()
            scoring_s = time.perf_counter() - started

            # 3. SFT on the kept rollouts, from the current policy.
            started = time.perf_counter()
            steps = []
            policy.train()
            for epoch in range(cfg.sft_epochs if kept else 0):
                order = [kept[i] for i in np.random.default_rng([cfg.seed, round_, epoch]).permutation(len(kept))]
                for first in range(0, len(order), cfg.train_batch_size):
                    steps.append(sft_optimizer_step(
                        policy, optimizer, params, batch, order[first:first + cfg.train_batch_size],
                        micro_batch_size=cfg.micro_train_batch_size, dtype=cfg.dtype,
                        max_grad_norm=cfg.max_grad_norm, learning_rate=cfg.learning_rate, shared_prefix=prefix))
                    boundary["weights_changed"] = True
            train_s = time.perf_counter() - started

            # 4. Push the weights to the engine.
            started = time.perf_counter()
            engine.load_weights(policy_weights_for_engine(policy, cfg.dtype))
            sync_s = time.perf_counter() - started

            # 5. Log one row for the round.
            correct = set(kept)
            solved = {i // cfg.group_size for i in kept}
            state.update(round=round_, step=state["step"] + len(steps), rollouts=state["rollouts"] + len(rollouts),
                         elapsed_s=clock())
            append_jsonl(run_dir / METRICS_FILE, {
                "round": round_, "step": state["step"], "rollouts": state["rollouts"],
                "train/reward": _mean(s["reward"] for s in scores),
                "train/format_reward": _mean(s["format_reward"] for s in scores),
                "train/answer_reward": _mean(s["answer_reward"] for s in scores),
                "ei/kept": len(kept), "ei/kept_fraction": len(kept) / len(rollouts),
                "ei/questions_solved_fraction": len(solved) / len(questions), "ei/sft_steps": len(steps),
                "train/entropy": _mean(entropy),
                "train/entropy_correct": _mean(h for i, h in enumerate(entropy) if i in correct),
                "train/entropy_incorrect": _mean(h for i, h in enumerate(entropy) if i not in correct),
                "train/response_length_mean": _mean(len(r.token_ids) for r in rollouts),
                "train/loss": _mean(s["loss"] for s in steps), "train/grad_norm": _mean(s["grad_norm"] for s in steps),
                "time/generation_s": generation_s, "time/scoring_s": scoring_s, "time/train_s": train_s,
                "time/weight_sync_s": sync_s, "time/elapsed_s": clock()})
            boundary = {"state": dict(state), "rng": rng_state(), "weights_changed": False}
            print(f"round {round_}/{cfg.n_ei_steps}: reward {_mean(s['reward'] for s in scores):.3f} kept "
                  f"{len(kept)}/{len(rollouts)} entropy {_mean(entropy):.3f} sft steps {len(steps)} "
                  f"gen {generation_s:.1f}s train {train_s:.1f}s", flush=True)
            if callback is not None:
                callback({"policy": policy, "round": round_, "rollouts": rollouts, "scores": scores, "kept": kept})
            if due(round_):
                validation(round_)
                boundary["state"]["elapsed_s"] = state["elapsed_s"] = clock()
            if round_ == cfg.n_ei_steps or (cfg.checkpoint_every and round_ % cfg.checkpoint_every == 0):
                save_checkpoint(run_dir, policy, tokenizer, optimizer, state, rng_state(), step=round_)
    except KeyboardInterrupt:
        # A round the interrupt cut short is redone on resume; updates it already made stay in the weights
        # (flagged as a partial step, as the GRPO loop does).
        saved = save_checkpoint(run_dir, policy, tokenizer, optimizer, boundary["state"], boundary["rng"],
                                partial_step=boundary["weights_changed"], step=boundary["state"]["round"])
        print(f"interrupted: checkpoint saved to {saved}; continue with resume=True", flush=True)
        raise
    finally:
        if cfg.engine == "vllm":
            engine.close()
    return loop_result(run_dir, cfg, state, "round")
