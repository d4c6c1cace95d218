"""The SFT runner: supervised fine-tuning on R1-Zero reasoning traces, one explicit loop (`train_sft(cfg)`).

**Traces.** Each training record becomes the completion of the R1-Zero prompt (which ends in
`<think>`), so prompt + trace reads `<think> steps </think> <answer> final </answer>`:

- GSM8K: the train split's worked solution, calculator annotations `<<48/2=24>>` removed, the
  `#### 72` line becoming the answer (`reasoning_trace`);
- MATH (`{problem, solution}` jsonl through `hw3lib.tasks.data.load_task`): the solution as the steps,
  the last `\\boxed{}` as the answer;
- the synthetic arithmetic task: its one-line working (the same text as the warm start's target).

`select_traces` then optionally corrupts a seeded share of final answers (`trace_noise`: a
stand-in for an imperfect teacher, off for real data), filters to traces whose final answer the
reward function grades correct (`filter_correct`), and takes the first `n_examples` of a seeded
shuffle (nested subsets across sizes). What was kept is written to `runs/<name>/traces.json`.

**Loss and precision.** Each optimizer step takes `train_batch_size` traces (seeded permutations,
epoch after epoch, a pure function of the step so a resume continues exactly), tokenizes them with
`hw3lib.maths.sft.tokenize_prompt_and_output`, and accumulates `sft_microbatch_train_step` over
`gradient_accumulation_steps` microbatches on log-probs from `get_response_log_probs` (through
`hw3lib.maths.logprobs.response_log_probs`: logits only for response positions, the shared prompt
template run once). The summed response NLL of each trace is divided by the step's mean response
length (a per-token scale, so the learning rate does not depend on answer length). float32
master weights and AdamW state; with `dtype="bfloat16"` forward and backward run under bf16
autocast (`autocast_for`), as in the GRPO loop. Learning rate: linear warm-up, then linear decay
to 10% of the peak. Gradient clipping on the global norm; a non-finite step is skipped.

**Validation** (before the first step, every `eval_every` steps, after the last) runs
`hw3lib.evaluation.validate` -- the GRPO loop's evaluation, greedy by default, on the same held-out
questions -- through the profile's rollout engine, and `log_generations` writes every response
with its prompt, ground truth, rewards, mean token entropy and length to
`generations/step_XXXX.jsonl`, plus length and entropy over all / correct / incorrect responses
into the validation row; `eval/trace_nll` is the NLL per token of the held-out questions' own
reference traces (`held_out_trace_nll`), a low-noise measure of generalization.

**Run folder** (`runs/<name>/`; the rules of hw3lib.core.runs): `config.json`, `traces.json`,
`metrics.jsonl`, `samples/`, `generations/`, `checkpoints/`. A finished run with the same settings
is read back, an interrupted one continues with `resume=True` (bit-equal to an uninterrupted run),
anything else is refused unless `overwrite=True`. Ctrl-C saves the last completed step.

Expert iteration (hw3lib.sft.expert_iteration) reuses the step (`sft_optimizer_step`), the run-folder
logic (`open_loop_run`) and `log_generations`.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hw3lib.core.io import append_jsonl, atomic_write_json, atomic_write_jsonl, read_jsonl, runs_dir
from hw3lib.maths.logprobs import autocast_for, response_log_probs, shared_prefix_length
from hw3lib.core.runs import (METRICS_FILE, SAMPLES_DIR, config_differences, delete_outputs, has_outputs,
                         latest_checkpoint, load_checkpoint, metrics_rows, refuse_existing, rng_state,
                         save_checkpoint, seed_everything)
from hw3lib.maths.sft import masked_normalize, sft_microbatch_train_step, tokenize_prompt_and_output
from hw3lib.sft.config import SFTConfig

GENERATIONS_DIR = "generations"
TRACES_FILE = "traces.json"
_ANNOTATION = re.compile(r"<<[^<>]*>>")


# ---- traces ------------------------------------------------------------------------------------------

def strip_calculator_annotations(text: str) -> str:
    """GSM8K's calculator annotations removed: "48/2 = <<48/2=24>>24 clips" -> "48/2 = 24 clips"."""
    return _ANNOTATION.sub("", text)


def reasoning_trace(record: dict) -> str:
    """The R1-Zero completion of a record with a worked solution: " steps </think> <answer> final </answer>".

    `record["answer"]` is the worked solution (GSM8K / arithmetic: `... #### final`, MATH: the solution
    text) and `record["gold"]` the final answer; the prompt supplies the opening `<think>`.
    """
    worked = record.get("answer")
    if not isinstance(worked, str) or not worked.strip():
        raise ValueError(f"record {record.get('question', '')[:60]!r} has no worked solution ('answer' field): "
                         "SFT traces need GSM8K answers, MATH solutions or arithmetic workings")
    steps = worked.rsplit("####", 1)[0] if "####" in worked else worked
    steps = strip_calculator_annotations(steps).strip()
    return f" {steps} </think> <answer> {record['gold']} </answer>"


def build_traces(records: Sequence[dict], prompt: str = "r1_zero") -> list[dict]:
    """`{"question", "prompt", "response", "gold"}` per record: the R1-Zero prompt and its trace."""
    from hw3lib.tasks.data import format_prompt

    return [{"question": r["question"], "prompt": format_prompt(prompt, r["question"]),
             "response": reasoning_trace(r), "gold": str(r["gold"])} for r in records]


def wrong_answer(gold: str, rng: random.Random) -> str:
    """A wrong final answer for `gold`: a nearby integer for numbers, else the gold with a digit appended."""
    try:
        value = int(gold)
    except ValueError:
        return gold + "1"
    return str(value + rng.choice([-3, -2, -1, 1, 2, 3]))


def select_traces(traces: Sequence[dict], cfg: SFTConfig, reward_fn: Callable[[str, str], dict]
                  ) -> tuple[list[dict], dict]:
    """The traces a run trains on and a summary of how they were chosen (see the module docstring).

    Order: `trace_noise` corrupts a seeded share of final answers (marked `noisy`); `filter_correct`
    keeps the traces the reward function grades reward 1; a seeded shuffle; the first `n_examples`.
    """
    rng = random.Random(cfg.seed)
    traces = [dict(t) for t in traces]
    n_noisy = 0
    for trace in traces:
        trace["noisy"] = rng.random() < cfg.trace_noise
        if trace["noisy"]:
            n_noisy += 1
            trace["response"] = trace["response"].replace(f"<answer> {trace['gold']} </answer>",
                                                          f"<answer> {wrong_answer(trace['gold'], rng)} </answer>")
    n_pool = len(traces)
    if cfg.filter_correct:
        traces = [t for t in traces if reward_fn(t["response"], t["gold"])["reward"] == 1.0]
    n_filtered = len(traces)
    order = np.random.default_rng([cfg.seed, 7]).permutation(len(traces))
    if cfg.n_examples is not None and cfg.n_examples > len(traces):
        raise ValueError(f"n_examples={cfg.n_examples} but only {len(traces)} traces are available "
                         f"(pool {n_pool}{', after filtering' if cfg.filter_correct else ''}): lower n_examples, "
                         "or raise n_train_examples")
    chosen = [traces[i] for i in order[:cfg.n_examples]]
    if not chosen:
        raise ValueError(f"no traces left to train on (pool {n_pool}, after filtering {n_filtered})")
    return chosen, {"n_pool": n_pool, "n_noisy": n_noisy, "filter_correct": cfg.filter_correct,
                    "n_after_filter": n_filtered, "n_used": len(chosen),
                    "n_noisy_used": sum(t["noisy"] for t in chosen)}


# ---- the run folder (shared with expert iteration) -------------------------------------------------------

@dataclass
class LoopResult:
    """What a finished SFT or expert-iteration run leaves behind (read back from its folder)."""

    run_dir: Path
    config: object
    metrics: list[dict]
    steps: int
    """Optimizer steps (SFT) or rounds (expert iteration) completed."""
    elapsed_s: float
    """Wall-clock seconds of the loop across resumes (excludes model loading)."""

    @property
    def train_rows(self) -> list[dict]:
        return [row for row in self.metrics if "train/loss" in row]

    @property
    def eval_rows(self) -> list[dict]:
        return [row for row in self.metrics if "eval/answer_reward" in row]


def validation_logged(rows: Sequence[dict], counter: str, value: int) -> bool:
    """Whether the validation at `counter == value` is among the metrics rows."""
    return any("eval/answer_reward" in row and row.get(counter) == value for row in rows)


def open_loop_run(run_dir: Path, cfg, resume: bool, overwrite: bool, counter: str, total: int,
                  resumable: frozenset = frozenset({"checkpoint_every", "eval_every"})
                  ) -> tuple[Path | None, dict | None]:
    """hw3lib.core.runs' folder rules for a loop counting `counter` up to `total`:
    `(checkpoint to resume or None, state of a finished run to reuse or None)`."""
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
    differing = [d for d in config_differences(saved, cfg.to_dict()) if d.split(":", 1)[0] not in resumable]
    finished = state[counter] == total and validation_logged(metrics_rows(run_dir), counter, total)
    if not resume and not (finished and not differing):
        why = f"checkpoint at {counter} {state[counter]} of {total}"
        raise refuse_existing(run_dir, why + (f"; settings differ: {', '.join(differing)}" if differing else ""))
    if differing:
        raise ValueError(f"cannot resume {checkpoint}: the config differs ({', '.join(differing)}); use the "
                         "saved settings, or a new run name")
    if finished:
        return checkpoint, state
    return checkpoint, None


def loop_result(run_dir: Path, cfg, state: dict, counter: str) -> LoopResult:
    return LoopResult(run_dir=run_dir, config=cfg, metrics=metrics_rows(run_dir), steps=state[counter],
                      elapsed_s=state["elapsed_s"])


# ---- one SFT optimizer step (shared with expert iteration) -------------------------------------------------

def response_bounds(response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the first response column and one past the last: `[N, T] -> [N], [N]` (CPU longs)."""
    mask = response_mask.bool().cpu()  # [N, T]
    start = mask.int().argmax(dim=1)  # [N]
    end = mask.shape[1] - mask.flip(1).int().argmax(dim=1)  # [N]
    return start, end


def sft_optimizer_step(policy, optimizer, params, batch: dict[str, torch.Tensor], rows: Sequence[int], *,
                       micro_batch_size: int, dtype: str, max_grad_norm: float, learning_rate: float,
                       shared_prefix: int = 0) -> dict:
    """One AdamW step of SFT on `rows` of `batch`, accumulated over microbatches of `micro_batch_size`.

    `batch`: `input_ids`, `labels`, `response_mask` on the policy's device and `response_start`,
    `lengths` (CPU). Each trace's summed response NLL is divided by the step's mean response length,
    averaged over the step's traces (`sft_microbatch_train_step` with `normalize_constant` and the
    number of microbatches as accumulation steps). Returns floats `loss` (NLL per response token),
    `grad_norm`, `entropy` (mean token entropy), `tokens`, and `updated` (False: skipped, non-finite).
    """
    rows = list(rows)
    n_micro = math.ceil(len(rows) / micro_batch_size)
    tokens = float(batch["response_mask"][rows].sum())
    normalize = max(tokens, 1.0) / len(rows)  # mean response length: a per-token scale
    nll_sum = torch.zeros((), dtype=torch.float32)
    entropy_sum = torch.zeros((), dtype=torch.float32)
    device = batch["labels"].device
    for first in range(0, len(rows), micro_batch_size):
        idx = torch.tensor(rows[first:first + micro_batch_size])  # [b]
        cols = slice(int(batch["response_start"][idx].min()), int(batch["lengths"][idx].max()))
        with autocast_for(dtype, device):
            out = response_log_probs(policy, batch["input_ids"][idx.to(device), :cols.stop],
                                     batch["labels"][idx.to(device), cols], return_token_entropy=True,
                                     shared_prefix=shared_prefix)
        mask = batch["response_mask"][idx.to(device), cols]  # [b, T]
        # Scaled so the microbatches of a step add up to the mean over its traces.
        _, stats = sft_microbatch_train_step(out["log_probs"], mask, n_micro,
                                             normalize_constant=normalize * len(idx) * n_micro / len(rows))
        nll_sum += masked_normalize(-out["log_probs"].detach(), mask).float().cpu()
        entropy_sum += masked_normalize(out["token_entropy"], mask).float().cpu()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
    for group in optimizer.param_groups:
        group["lr"] = learning_rate
    loss = float(nll_sum) / max(tokens, 1.0)
    updated = math.isfinite(loss) and math.isfinite(grad_norm)
    if updated:  # a NaN/inf would poison the weights and Adam's moments
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"loss": loss, "grad_norm": grad_norm, "entropy": float(entropy_sum) / max(tokens, 1.0),
            "tokens": tokens, "updated": updated}


def learning_rate_at(cfg: SFTConfig, step: int) -> float:
    """Optimizer step `step` (1-based): linear warm-up over `lr_warmup_steps`, then linear decay to 10%."""
    if cfg.lr_warmup_steps and step <= cfg.lr_warmup_steps:
        return cfg.learning_rate * step / cfg.lr_warmup_steps
    span = max(cfg.n_sft_steps - cfg.lr_warmup_steps, 1)
    return cfg.learning_rate * (1.0 - 0.9 * (step - cfg.lr_warmup_steps - 1) / span)


def batch_rows(seed: int, step: int, n_traces: int, batch_size: int) -> list[int]:
    """The trace indices of optimizer step `step` (1-based): consecutive slices of seeded permutations,
    one permutation per epoch; a pure function of its arguments, so a resumed run draws the same batches."""
    first = (step - 1) * batch_size
    rows = []
    for position in range(first, first + batch_size):
        epoch, offset = divmod(position, n_traces)
        rows.append(int(_epoch_order(seed, epoch, n_traces)[offset]))
    return rows


def _epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch, 11]).permutation(n)


# ---- validation and log_generations ----------------------------------------------------------------------

def log_generations(policy, tokenizer, prompts: Sequence[str], examples: Sequence[dict], path: Path, *,
                    micro_batch_size: int = 64, dtype: str = "float32") -> dict:
    """Write each validation response with its prompt, ground truth, rewards, mean token entropy and
    length to `path` (jsonl); return length and entropy over all / correct / incorrect responses.

    `examples` are `hw3lib.evaluation.validate`'s rows (question, gold, response, rewards). Entropy and
    length (in tokens) come from one no-grad forward pass of `policy` over prompt + response.
    """
    device = next(policy.parameters()).device
    batch = tokenize_prompt_and_output(prompts, [e["response"] for e in examples], tokenizer)
    start, end = response_bounds(batch["response_mask"])
    prefix = shared_prefix_length(tokenizer(list(prompts), add_special_tokens=False)["input_ids"])
    entropy = torch.zeros(len(examples))
    lengths = batch["response_mask"].sum(dim=1)  # [N]
    was_training = policy.training
    policy.eval()
    with torch.inference_mode(), autocast_for(dtype, device):
        for first in range(0, len(examples), micro_batch_size):
            rows = slice(first, first + micro_batch_size)
            cols = slice(int(start[rows].min()), int(end[rows].max()))
            mask = batch["response_mask"][rows, cols].to(device)  # [b, T]
            if not bool(mask.any()):
                continue
            out = response_log_probs(policy, batch["input_ids"][rows, :cols.stop].to(device),
                                     batch["labels"][rows, cols].to(device), return_token_entropy=True,
                                     shared_prefix=prefix)
            summed = masked_normalize(out["token_entropy"].float(), mask, dim=-1)  # [b]
            entropy[rows] = (summed / mask.sum(dim=-1).clamp(min=1)).cpu()
    policy.train(was_training)
    rows = [{"prompt": p, "response": e["response"], "ground_truth": e["gold"], "reward": e["reward"],
             "format_reward": e["format_reward"], "answer_reward": e["answer_reward"],
             "mean_token_entropy": float(h), "response_length": int(n), "finish_reason": e.get("finish_reason")}
            for p, e, h, n in zip(prompts, examples, entropy.tolist(), lengths.tolist())]
    atomic_write_jsonl(path, rows)

    def mean(values):
        return float(np.mean(values)) if values else None

    correct = [r for r in rows if r["reward"] == 1.0]
    wrong = [r for r in rows if r["reward"] != 1.0]
    return {"eval/entropy": mean([r["mean_token_entropy"] for r in rows]),
            "eval/response_length_correct": mean([r["response_length"] for r in correct]),
            "eval/response_length_incorrect": mean([r["response_length"] for r in wrong])}


def held_out_trace_nll(policy, tokenizer, records: Sequence[dict], *, micro_batch_size: int = 64,
                       dtype: str = "float32", prompt: str = "r1_zero") -> float | None:
    """NLL per token of the reference traces of held-out questions under `policy` (no grad); None when
    the records carry no worked solutions. Unlike accuracy it is not a 0/1 count over a few hundred
    questions, so it shows over- and under-fitting with little noise."""
    if not records or not all(isinstance(r.get("answer"), str) and r["answer"].strip() for r in records):
        return None
    traces = build_traces(records, prompt)
    device = next(policy.parameters()).device
    total, tokens = 0.0, 0.0
    was_training = policy.training
    policy.eval()
    with torch.inference_mode(), autocast_for(dtype, device):
        for first in range(0, len(traces), micro_batch_size):
            chunk = traces[first:first + micro_batch_size]
            batch = tokenize_prompt_and_output([t["prompt"] for t in chunk], [t["response"] for t in chunk], tokenizer)
            start, end = response_bounds(batch["response_mask"])
            cols = slice(int(start.min()), int(end.max()))
            prefix = shared_prefix_length(tokenizer([t["prompt"] for t in chunk], add_special_tokens=False)["input_ids"])
            mask = batch["response_mask"][:, cols].to(device)  # [b, T]
            log_probs = response_log_probs(policy, batch["input_ids"][:, :cols.stop].to(device),
                                           batch["labels"][:, cols].to(device), shared_prefix=prefix)["log_probs"]
            total += float(masked_normalize(-log_probs.float(), mask))
            tokens += float(mask.sum())
    policy.train(was_training)
    return total / max(tokens, 1.0)


def run_validation(engine, policy, tokenizer, eval_records, cfg, reward_fn, path: Path) -> tuple[dict, list[dict]]:
    """`hw3lib.evaluation.validate` (the GRPO loop's evaluation) plus `log_generations` to `path`:
    `(eval metrics, the saved sample rows)`."""
    from hw3lib.tasks.data import format_prompt
    from hw3lib.generation import policy_weights_for_engine
    from hw3lib.evaluation.validate import validate

    engine.load_weights(policy_weights_for_engine(policy, cfg.dtype))  # nothing is copied when it wraps the policy
    metrics, examples = validate(engine, eval_records, cfg.replace(n_eval_samples_saved=len(eval_records)),
                                 reward_fn, seed=cfg.seed)
    prompts = [format_prompt(cfg.prompt, r["question"]) for r in eval_records]
    metrics.update(log_generations(policy, tokenizer, prompts, examples, path,
                                   micro_batch_size=cfg.generation_batch_size, dtype=cfg.dtype))
    metrics["eval/trace_nll"] = held_out_trace_nll(policy, tokenizer, eval_records, dtype=cfg.dtype,
                                                   micro_batch_size=cfg.generation_batch_size, prompt=cfg.prompt)
    return metrics, examples[:cfg.n_eval_samples_saved]


# ---- the loop ----------------------------------------------------------------------------------------------

def train_sft(cfg: SFTConfig, resume: bool = False, overwrite: bool = False,
              callback: Callable[[dict], None] | None = None) -> LoopResult:
    """Run SFT as configured by `cfg` into `runs/<cfg.name>/` (see the module docstring).

    `callback` (optional) is called after each optimizer step with `{"policy", "optimizer", "step"}`
    (progress displays, fault injection in tests).
    """
    from tqdm.auto import tqdm

    from hw3lib.tasks.data import load_task
    from hw3lib.generation import training_engine
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.tasks.prompt_table import reward_fn_for

    run_dir = runs_dir() / cfg.name
    print(f"SFT run '{cfg.name}' -> {run_dir}\n{cfg.describe()}", flush=True)
    checkpoint, finished = open_loop_run(run_dir, cfg, resume, overwrite, "step", cfg.n_sft_steps)
    if finished is not None:
        print(f"{run_dir} has finished all {cfg.n_sft_steps} SFT steps with these settings; reusing it", flush=True)
        return loop_result(run_dir, cfg, finished, "step")
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / "config.json", cfg.to_dict())

    # ---- data: traces and held-out questions ---------------------------------------------------------
    train_records, eval_records = load_task(cfg)
    reward_fn = reward_fn_for(cfg.prompt)
    traces, trace_info = select_traces(build_traces(train_records, cfg.prompt), cfg, reward_fn)
    atomic_write_json(run_dir / TRACES_FILE, {**trace_info, "examples": traces[:4]})
    print(f"traces: {trace_info}", flush=True)

    # ---- policy (float32 masters), optimizer, state, engine ------------------------------------------
    policy, tokenizer = load_model_and_tokenizer(str(checkpoint / "policy" if checkpoint else cfg.model),
                                                 device=cfg.policy_device, dtype="float32")
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay, betas=cfg.adam_betas)
    if checkpoint is None:
        state = {"step": 0, "skipped_steps": 0, "elapsed_s": 0.0}
        seed_everything(cfg.seed)
    else:
        state = load_checkpoint(checkpoint, optimizer, run_dir)
        print(f"resumed from {checkpoint} at step {state['step']}", flush=True)
    engine = training_engine(cfg, policy, tokenizer, cfg.model)
    rows_so_far = metrics_rows(run_dir)
    loop_started = time.perf_counter() - state["elapsed_s"]

    def clock() -> float:
        return time.perf_counter() - loop_started

    def validation(step: int) -> None:
        started = time.perf_counter()
        metrics, samples = run_validation(engine, policy, tokenizer, eval_records, cfg, reward_fn,
                                          run_dir / GENERATIONS_DIR / f"step_{step:04d}.jsonl")
        atomic_write_jsonl(run_dir / SAMPLES_DIR / f"step_{step:04d}.jsonl", samples)
        append_jsonl(run_dir / METRICS_FILE, {"step": step, "examples_seen": step * cfg.train_batch_size, **metrics,
                                              "time/eval_s": time.perf_counter() - started, "time/elapsed_s": clock()})
        print(f"  eval @ step {step}: answer {metrics['eval/answer_reward']:.3f} "
              f"format {metrics['eval/format_reward']:.3f}", flush=True)

    def due(step: int) -> bool:
        return step == 0 or step % cfg.eval_every == 0 or step == cfg.n_sft_steps

    device = cfg.policy_device
    boundary = {"state": dict(state), "rng": rng_state()}
    try:
        if due(state["step"]) and not validation_logged(rows_so_far, "step", state["step"]):
            validation(state["step"])
            if state["step"] == cfg.n_sft_steps:
                save_checkpoint(run_dir, policy, tokenizer, optimizer, state, rng_state(), step=state["step"])
        policy.train()
        bar = tqdm(range(state["step"] + 1, cfg.n_sft_steps + 1), desc="sft", unit="step", leave=False)
        for step in bar:
            started = time.perf_counter()
            rows = batch_rows(cfg.seed, step, len(traces), cfg.train_batch_size)
            chosen = [traces[i] for i in rows]
            tokens = tokenize_prompt_and_output([t["prompt"] for t in chosen], [t["response"] for t in chosen],
                                                tokenizer)
            start, end = response_bounds(tokens["response_mask"])
            batch = {key: tokens[key].to(device) for key in ("input_ids", "labels", "response_mask")}
            batch.update(response_start=start, lengths=end)
            prefix = shared_prefix_length(tokenizer([t["prompt"] for t in chosen], add_special_tokens=False)["input_ids"])
            stats = sft_optimizer_step(policy, optimizer, params, batch, range(len(chosen)),
                                       micro_batch_size=cfg.micro_train_batch_size, dtype=cfg.dtype,
                                       max_grad_norm=cfg.max_grad_norm, learning_rate=learning_rate_at(cfg, step),
                                       shared_prefix=prefix)
            if not stats["updated"]:
                state["skipped_steps"] += 1
            state.update(step=step, elapsed_s=clock())
            append_jsonl(run_dir / METRICS_FILE, {
                "step": step, "examples_seen": step * cfg.train_batch_size,
                "epoch": step * cfg.train_batch_size / len(traces), "train/loss": stats["loss"],
                "train/grad_norm": stats["grad_norm"], "train/entropy": stats["entropy"],
                "train/lr": optimizer.param_groups[0]["lr"], "train/response_tokens": stats["tokens"],
                "train/skipped_steps": state["skipped_steps"], "time/train_s": time.perf_counter() - started,
                "time/elapsed_s": clock()})
            boundary = {"state": dict(state), "rng": rng_state()}  # step done and logged: what Ctrl-C keeps
            bar.set_postfix(loss=f"{stats['loss']:.3f}")
            if callback is not None:
                callback({"policy": policy, "optimizer": optimizer, "step": step})
            if due(step):
                validation(step)
                boundary["state"]["elapsed_s"] = state["elapsed_s"] = clock()
            if step == cfg.n_sft_steps or (cfg.checkpoint_every and step % cfg.checkpoint_every == 0):
                save_checkpoint(run_dir, policy, tokenizer, optimizer, state, rng_state(), step=step)
    except KeyboardInterrupt:
        saved = save_checkpoint(run_dir, policy, tokenizer, optimizer, boundary["state"], boundary["rng"],
                                step=boundary["state"]["step"])
        print(f"interrupted: checkpoint saved to {saved}; continue with resume=True", flush=True)
        raise
    finally:
        if cfg.engine == "vllm":
            engine.close()
    return loop_result(run_dir, cfg, state, "step")


def trace_summary(run_dir: str | Path) -> dict:
    """How a run's traces were chosen (`traces.json`, without the example traces)."""
    info = json.loads((Path(run_dir) / TRACES_FILE).read_text())
    info.pop("examples", None)
    return info


def load_generations(run_dir: str | Path, name: str) -> list[dict]:
    """The rows `log_generations` wrote for validation `name` (e.g. `step_0060`, `round_0003`)."""
    return read_jsonl(Path(run_dir) / GENERATIONS_DIR / f"{name}.jsonl")
