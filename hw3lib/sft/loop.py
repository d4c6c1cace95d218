"""The SFT runner: supervised fine-tuning on R1-Zero reasoning traces, one explicit loop (`train_sft(cfg)`).

**Traces.** Each training record becomes the completion of the R1-Zero prompt (which ends in
`<think>`), so prompt + trace reads `<think> steps </think> <answer> final </answer>`:

- GSM8K: the train split's worked solution, calculator annotations `<<48/2=24>>` removed, the
  `#### 72` line becoming the answer (`reasoning_trace`);
- MATH (`{problem, solution}` jsonl through `hw3lib.tasks.data.load_task`): the solution as the steps,
  the last `\\boxed{}` as the answer;
- the synthetic arithmetic task: its one-line working (the same text as the warm start's target);
- or, with `sft_file`, the course's own SFT file (`prompt`, `response`/`completion`, `ground_truth`
  per line; `read_sft_file`), used as written.

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
master weights and AdamW state; with `dtype="bfloat16"` forward and backward run through a bf16
working copy of the weights under autocast, refreshed once per optimizer step (hw3lib.core.precision),
as in the GRPO loop. Learning rate: linear warm-up, then linear decay
to 10% of the peak. Gradient clipping on the global norm; a non-finite step is skipped.

**Validation** (before the first step, every `eval_every` steps, after the last) runs
`hw3lib.evaluation.validate` -- the GRPO loop's evaluation (sampled as the courses do; greedy in smoke), on the same held-out
questions -- through the profile's rollout engine, and `log_generations` writes every response
with its prompt, ground truth, rewards, mean token entropy and length to
`generations/step_XXXX.jsonl`, plus length and entropy over all / correct / incorrect responses
into the validation row; `eval/trace_nll` is the NLL per token of the held-out questions' own
reference traces (`held_out_trace_nll`), a low-noise measure of generalization. Those two no-grad
passes run `micro_train_batch_size` rows at a time, as training does: at the full profile's 64 rows
their bf16 logits alone (vocabulary 151,936 x 1,024 tokens) would take ~18.5 GiB.

**The engine beside the trainer.** A vLLM engine colocated with the policy
(`hw3lib.generation.engine_colocated`) sleeps (level 2) except while it validates: put to sleep once
built, woken with the policy's weights before each validation (`push_weights`: vLLM's documented
sequence, hw3lib.generation) and put back to sleep right after its `generate`, before the no-grad
passes and the optimizer steps that follow. Other engines receive the weights with `load_weights`.

**Run folder** (`runs/<name>/`; the rules of hw3lib.core.runs): `config.json`, `traces.json`,
`metrics.jsonl`, `samples/`, `generations/`, `checkpoints/`. A finished run with the same settings
is read back, an interrupted one continues with `resume=True` (bit-equal to an uninterrupted run),
anything else is refused unless `overwrite=True`. Ctrl-C saves the last completed step.

The run's lifecycle (folder rules, state, validation and checkpoints when due, Ctrl-C) is every
run's: hw3lib.core.lifecycle. Expert iteration (hw3lib.sft.expert_iteration) reuses the step
(`sft_optimizer_step`) and the validation (`log_validation`).
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from hw3lib.core.io import atomic_write_json, atomic_write_jsonl, read_jsonl
from hw3lib.core.lifecycle import RunResult, TrainingRun, begin_run, policy_source, training_entry
from hw3lib.core.precision import MasterWeights
from hw3lib.evaluation.validate import save_validation
from hw3lib.maths.logprobs import autocast_for, response_log_probs, shared_prefix_length
from hw3lib.maths.sft import masked_normalize, tokenize_prompt_and_output
from hw3lib.maths.sft_step import response_bounds, sft_optimizer_step
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


def read_sft_file(path: str | Path) -> list[dict]:
    """The course's SFT file as traces: one `{"prompt", "response", "ground_truth"}` object per line
    (`completion` is accepted for `response`), each becoming `{"question", "prompt", "response", "gold"}`.

    Errors name the file and line. The prompt is used as written (it already holds the template).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"sft_file={path}: no such file; pass the course's SFT data (a .jsonl file)")
    traces = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}, line {number}: not JSON ({exc.msg})") from None
            response = row.get("response", row.get("completion")) if isinstance(row, dict) else None
            fields = (row.get("prompt"), response, row.get("ground_truth")) if isinstance(row, dict) else (None,) * 3
            if not all(isinstance(value, str) and value for value in fields[:2]) or fields[2] is None:
                raise ValueError(f"{path}, line {number}: each line needs non-empty \"prompt\" and \"response\" "
                                 "(or \"completion\") strings and a \"ground_truth\"")
            traces.append({"question": fields[0], "prompt": fields[0], "response": fields[1], "gold": str(fields[2])})
    if not traces:
        raise ValueError(f"{path} holds no SFT examples")
    return traces


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


# ---- the learning-rate schedule and the batches --------------------------------------------------------

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
    `(eval metrics, every question's scored rollout)`. A colocated engine is woken with the policy's weights for the
    generation and asleep again for the no-grad passes (see the module docstring)."""
    from hw3lib.tasks.data import format_prompt
    from hw3lib.generation import engine_colocated, policy_weights_for_engine, push_weights, sleep_for_training
    from hw3lib.evaluation.validate import validate

    colocated = engine_colocated(cfg)
    # Nothing is copied when the engine wraps the policy.
    push_weights(engine, policy_weights_for_engine(policy, cfg.dtype), colocated=colocated)
    metrics, examples = validate(engine, eval_records, cfg, reward_fn, seed=cfg.seed)
    sleep_for_training(engine, colocated=colocated)
    prompts = [format_prompt(cfg.prompt, r["question"]) for r in eval_records]
    metrics.update(log_generations(policy, tokenizer, prompts, examples, path,
                                   micro_batch_size=cfg.micro_train_batch_size, dtype=cfg.dtype))
    metrics["eval/trace_nll"] = held_out_trace_nll(policy, tokenizer, eval_records, dtype=cfg.dtype,
                                                   micro_batch_size=cfg.micro_train_batch_size, prompt=cfg.prompt)
    return metrics, examples


def log_validation(run: TrainingRun, engine, eval_records: Sequence[dict], reward_fn, **counters: int) -> None:
    """`run_validation` at the run's current step: every generation to `generations/<counter>_XXXX.jsonl`,
    a few to `samples/` with every question's outcome (`save_validation`), one `eval/...` row (with `counters` in
    front) to `metrics.jsonl`."""
    started = time.perf_counter()
    name = f"{run.counter}_{run.version:04d}"
    metrics, samples = run_validation(engine, run.policy, run.tokenizer, eval_records, run.cfg, reward_fn,
                                      run.run_dir / GENERATIONS_DIR / f"{name}.jsonl")
    save_validation(run.run_dir, name, samples, run.cfg.n_eval_samples_saved)
    run.log({**counters, **metrics, "time/eval_s": time.perf_counter() - started, "time/elapsed_s": run.clock()})
    print(f"  eval @ {run.counter} {run.version}: answer {metrics['eval/answer_reward']:.3f} "
          f"format {metrics['eval/format_reward']:.3f} entropy {metrics['eval/entropy']:.3f}", flush=True)


def trace_batch(traces: Sequence[dict], tokenizer, device: str) -> tuple[dict[str, torch.Tensor], int]:
    """`traces` tokenized as `sft_optimizer_step` takes them, and the length of their shared prompt prefix."""
    tokens = tokenize_prompt_and_output([t["prompt"] for t in traces], [t["response"] for t in traces], tokenizer)
    start, end = response_bounds(tokens["response_mask"])
    batch = {key: tokens[key].to(device) for key in ("input_ids", "labels", "response_mask")}
    batch.update(response_start=start, lengths=end)
    prefix = shared_prefix_length(tokenizer([t["prompt"] for t in traces], add_special_tokens=False)["input_ids"])
    return batch, prefix


# ---- the loop ----------------------------------------------------------------------------------------------

@training_entry  # on a GPU with vLLM: a process of its own; GPU memory handed back on return
def train_sft(cfg: SFTConfig, resume: bool = False, overwrite: bool = False,
              callback: Callable[[dict], None] | None = None) -> RunResult:
    """Run SFT as configured by `cfg` into `runs/<cfg.name>/` (see the module docstring).

    `callback` (optional) is called after each optimizer step with `{"policy", "optimizer", "step"}`
    (progress displays, fault injection in tests).
    """
    from tqdm.auto import tqdm

    from hw3lib.generation import engine_colocated, sleep_for_training, training_engine
    from hw3lib.models.load import load_training_policy
    from hw3lib.tasks.data import load_task
    from hw3lib.tasks.prompt_table import reward_fn_for

    run_dir, checkpoint, finished = begin_run("SFT", cfg, resume, overwrite)  # hw3lib.core.lifecycle
    if finished is not None:
        return finished

    # ---- data, policy (float32 masters) and its run, engine -----------------------------------------
    train_records, eval_records = load_task(cfg)
    reward_fn = reward_fn_for(cfg.prompt)
    pool = read_sft_file(cfg.sft_file) if cfg.sft_file else build_traces(train_records, cfg.prompt)
    traces, trace_info = select_traces(pool, cfg, reward_fn)
    policy, tokenizer = load_training_policy(policy_source(checkpoint, cfg.model), cfg, base=cfg.model)  # float32
    run = TrainingRun(cfg, run_dir, checkpoint, policy, tokenizer,
                      fresh_state={"step": 0, "skipped_steps": 0, "elapsed_s": 0.0})
    working = MasterWeights(policy, cfg.dtype)  # the bf16 working copy the microbatches run through
    atomic_write_json(run_dir / TRACES_FILE, {**trace_info, "examples": traces[:4]})
    print(f"traces: {trace_info}", flush=True)
    engine = training_engine(cfg, policy, tokenizer, cfg.model, records=[*train_records, *eval_records])
    sleep_for_training(engine, colocated=engine_colocated(cfg))  # each validation wakes it with the weights

    def validate() -> None:
        log_validation(run, engine, eval_records, reward_fn, step=run.version,
                       examples_seen=run.version * cfg.train_batch_size)

    try:
        run.catch_up(validate)
        policy.train()
        working.model.train()
        bar = tqdm(range(run.version + 1, cfg.n_sft_steps + 1), desc="sft", unit="step", leave=False)
        for step in bar:
            started = time.perf_counter()
            batch, prefix = trace_batch([traces[i] for i in batch_rows(cfg.seed, step, len(traces),
                                                                       cfg.train_batch_size)],
                                        tokenizer, cfg.policy_device)
            stats = sft_optimizer_step(policy, run.optimizer, run.params, batch, range(cfg.train_batch_size),
                                       micro_batch_size=cfg.micro_train_batch_size, dtype=cfg.dtype,
                                       max_grad_norm=cfg.max_grad_norm, learning_rate=learning_rate_at(cfg, step),
                                       shared_prefix=prefix, working=working)
            skipped = run.state["skipped_steps"] + (not stats["updated"])
            run.log({"step": step, "examples_seen": step * cfg.train_batch_size,
                     "epoch": step * cfg.train_batch_size / len(traces), "train/loss": stats["loss"],
                     "train/grad_norm": stats["grad_norm"], "train/entropy": stats["entropy"],
                     "train/lr": run.optimizer.param_groups[0]["lr"], "train/response_tokens": stats["tokens"],
                     "train/skipped_steps": skipped, "time/train_s": time.perf_counter() - started,
                     "time/elapsed_s": run.clock()})
            run.complete_step(step=step, skipped_steps=skipped)
            bar.set_postfix(loss=f"{stats['loss']:.3f}")
            if callback is not None:
                callback({"policy": policy, "optimizer": run.optimizer, "step": step})
            run.after_step(validate)
    except KeyboardInterrupt:
        run.save_interrupted()
        raise
    finally:
        run.close()
        if cfg.engine == "vllm":
            engine.close()
    return run.result()


def trace_summary(run_dir: str | Path) -> dict:
    """How a run's traces were chosen (`traces.json`, without the example traces)."""
    info = json.loads((Path(run_dir) / TRACES_FILE).read_text())
    info.pop("examples", None)
    return info


def load_generations(run_dir: str | Path, name: str) -> list[dict]:
    """The rows `log_generations` wrote for validation `name` (e.g. `step_0060`, `round_0003`)."""
    return read_jsonl(Path(run_dir) / GENERATIONS_DIR / f"{name}.jsonl")
