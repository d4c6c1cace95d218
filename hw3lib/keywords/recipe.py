"""Keyword inclusion: the dataset, a short SFT of hw3lib's own transformer, and its GRPO run.
(The task's records, split and reward live in hw3lib.tasks.keyword_data.)

Task: "Write a sentence that includes the words: apple, red." is answered correctly iff every
keyword occurs in the response as a whole word (`hw3lib.tasks.rewards.keyword_inclusion_reward_fn`).

- **Data** (`make_keyword_records`, `split_records`, `write_keyword_dataset`): records
  `{"prompt", "answer", "keywords", "source"}`, split 80/20 into `train.jsonl` / `validation.jsonl`
  with no keyword set shared between the splits. The keywords are 2 or 3 words drawn from word
  lists (an adjective and one or two nouns, in random order in the prompt). The answers come either
  from a **procedural generator** (`source: "procedural"`: sentence templates filled with the
  keywords; no model involved, for CPU/offline use) or from a real model through a rollout engine
  (`generate_answers`, `hw3 keyword data --generator MODEL`; `source: "generator:<model>"`), kept
  only when they contain every keyword.
- **Model**: a `hw3lib.models.nanogpt.GPT` with a word-level tokenizer built from the data's text.
- **SFT** (`keyword_sft`): the course's SFT loss (hw3lib.maths.sft) on prompt -> answer + EOS for a few
  steps, deliberately short so GRPO has room to improve; cached by its settings like the warm start.
- **GRPO** (`keyword_config`): `hw3lib.grpo.loop.train` unchanged, template `{question}\\n`, stop at a
  newline or EOS. The reward is the course's, `keyword_inclusion_reward_fn` (`reward="inclusion"`,
  prompt row `keyword`, the default); `reward="sentence"` (prompt row `keyword_sentence`) trains on
  `keyword_sentence_reward_fn` instead, which pays only a response that is one sentence.
- **Reward hacking** (hw3lib.keywords.hacking): inclusion alone pays any text that holds the words, and
  on this model GRPO drifts to run-on keyword lists cut off by the token budget; every validation
  response is saved, so the hacked share of each run (every keyword, not one sentence) is read back
  from its samples and the two rewards' runs compared from the same SFT start.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from hw3lib.core.io import atomic_write_json, atomic_write_jsonl, build_folder_once, cache_dir
from hw3lib.core.writeup_keys import config_settings
from hw3lib.tasks.keyword_data import (KEYWORD_REWARDS, PROMPT_KIND, SPLITS, make_keyword_records, read_split,
                                       split_records)

def generate_answers(records: Sequence[dict], engine, model_name: str, samples_per_prompt: int = 4,
                     max_tokens: int = 48, seed: int = 0) -> list[dict]:
    """Answers from a real model: `samples_per_prompt` samples per prompt from `engine` (the rollout
    engine), keeping the first one whose first line contains every keyword; prompts with none are dropped."""
    from hw3lib.generation import SamplingConfig
    from hw3lib.tasks.rewards import keyword_inclusion_reward_fn

    sampling = SamplingConfig(n=samples_per_prompt, temperature=1.0, max_tokens=max_tokens, stop=("\n",),
                              include_stop_str_in_output=False, seed=seed)
    prompts = [format_keyword_prompt(record["prompt"]) for record in records]
    kept = []
    for record, samples in zip(records, engine.generate(prompts, sampling)):
        for sample in samples:
            text = sample.text.strip().split("\n")[0].strip()
            if text and keyword_inclusion_reward_fn(text, record["keywords"])["reward"] == 1.0:
                kept.append({**record, "answer": text, "source": f"generator:{model_name}"})
                break
    return kept


def format_keyword_prompt(prompt: str) -> str:
    from hw3lib.tasks.data import format_prompt

    return format_prompt(PROMPT_KIND, prompt)


# ---- files -------------------------------------------------------------------------------------------

def write_keyword_dataset(out: str | Path, n: int = 2000, seed: int = 0, generator: str | None = None,
                          overwrite: bool = False, engine_kind: str = "transformers", device: str = "cpu") -> Path:
    """Write `train.jsonl` / `validation.jsonl` (80/20) and `dataset.json` (its settings) into `out`.

    Procedural answers by default; `generator` (a model name or folder) answers through the rollout
    engine instead. A folder holding a dataset with the same settings is reused; one with other
    contents is refused (`hw3lib.core.runs.RunExistsError`) unless `overwrite`.
    """
    from hw3lib.core.runs import RunExistsError

    out = Path(out)
    settings = {"n": n, "seed": seed, "generator": generator, "split": "80/20"}
    info = out / "dataset.json"
    if out.exists() and any(out.iterdir()) and not overwrite:
        if info.is_file() and json.loads(info.read_text()).get("settings") == settings:
            return out
        raise RunExistsError(f"{out} already holds files that are not a keyword dataset with these settings "
                             f"({settings}): choose another folder, or pass overwrite=True (--overwrite) to replace "
                             "its train.jsonl / validation.jsonl / dataset.json")
    records = make_keyword_records(n, seed=seed)
    if generator is not None:
        from hw3lib.generation import make_engine

        engine = make_engine(engine_kind, generator, device=device)
        try:
            records = generate_answers(records, engine, generator, seed=seed)
        finally:
            engine.close()
        if len(records) < 10:
            raise ValueError(f"generator {generator!r} answered only {len(records)} of {n} prompts with every "
                             "keyword: use a stronger (instruction-tuned) model, or the procedural generator")
    splits = split_records(records, seed=seed)
    for split in SPLITS:
        atomic_write_jsonl(out / f"{split}.jsonl", splits[split])
    atomic_write_json(info, {"settings": settings, "source": records[0]["source"],
                             **{f"n_{split}": len(splits[split]) for split in SPLITS}})
    return out


# ---- the model and its SFT ---------------------------------------------------------------------------

@dataclass(frozen=True)
class KeywordSFT:
    """The own model's shape and its short SFT (everything hashed into the cache key)."""

    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    block_size: int = 48
    steps: int = 400
    """Measured (2,000 procedural records, seed 0): greedy validation reward 0.00 after 200 steps, 0.39
    after 300, 0.59 after 400, 0.86 after 800 -- copying the keywords appears abruptly. 400 leaves it
    clearly below the ceiling for GRPO to show a rise."""
    lr: float = 3e-3
    batch_size: int = 32
    seed: int = 0


def new_model(records: Sequence[dict], settings: KeywordSFT):
    """A freshly initialised GPT and a word tokenizer built from the records' prompts and answers."""
    import torch

    from hw3lib.models.nanogpt import GPT, GPTConfig, WordTokenizer

    tokenizer = WordTokenizer.train([format_keyword_prompt(r["prompt"]) + r["answer"] for r in records])
    torch.manual_seed(settings.seed)
    model = GPT(GPTConfig(vocab_size=len(tokenizer), block_size=settings.block_size, n_layer=settings.n_layer,
                          n_head=settings.n_head, n_embd=settings.n_embd, eos_token_id=tokenizer.eos_token_id))
    return model, tokenizer


def keyword_sft(data: str | Path, settings: KeywordSFT = KeywordSFT(), out_dir: str | Path | None = None,
                verbose: bool = True) -> Path:
    """SFT a fresh own model on `<data>/train.jsonl` (prompt -> answer + EOS); the saved folder (cached).

    The tokenizer covers both splits' words (a word-level model cannot spell an unseen word). Each step
    is hw3lib's one SFT step (hw3lib.maths.sft_step.sft_optimizer_step: the course's
    `sft_microbatch_train_step`, normalised per token) on a random batch; AdamW with a linear decay to 10%.
    """
    train = read_split(data, "train")
    every = train + read_split(data, "validation")
    digest = hashlib.sha256(json.dumps([every, asdict(settings)], sort_keys=True).encode()).hexdigest()[:12]
    root = Path(out_dir) if out_dir is not None else cache_dir() / "keyword_sft"
    return build_folder_once(root / digest, lambda staging: _train_keyword_model(staging, data, train, every,
                                                                                settings, verbose))


def _train_keyword_model(out: Path, data, train: Sequence[dict], every: Sequence[dict], settings: KeywordSFT,
                         verbose: bool) -> None:
    """`keyword_sft`'s training, saved into `out` with `sft.json`."""
    import torch

    from hw3lib.maths.sft import tokenize_prompt_and_output
    from hw3lib.maths.sft_step import response_bounds, sft_optimizer_step
    from hw3lib.models.nanogpt import EOS_TOKEN

    started = time.perf_counter()
    model, tokenizer = new_model(every, settings)
    model.train()
    prompts = [format_keyword_prompt(r["prompt"]) for r in train]
    targets = [r["answer"] + EOS_TOKEN for r in train]
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=settings.lr, betas=(0.9, 0.95), weight_decay=0.0)
    generator = torch.Generator().manual_seed(settings.seed)
    losses = []
    for step in range(settings.steps):
        picks = torch.randint(len(train), (settings.batch_size,), generator=generator).tolist()
        batch = tokenize_prompt_and_output([prompts[i] for i in picks], [targets[i] for i in picks], tokenizer)
        start, batch["lengths"] = response_bounds(batch["response_mask"])
        # Log-probs of every label column (a start of 0 turns the step's response-only crop off): the
        # recipe was tuned that way, and the crop would change its float rounding.
        batch["response_start"] = torch.zeros_like(start)
        stats = sft_optimizer_step(model, optimizer, params, batch, range(settings.batch_size),
                                   micro_batch_size=settings.batch_size, dtype="float32", max_grad_norm=1.0,
                                   learning_rate=settings.lr * (1.0 - 0.9 * step / settings.steps))
        losses.append(stats["loss"])
        if verbose and (step + 1) % max(1, settings.steps // 4) == 0:
            print(f"  keyword SFT step {step + 1}/{settings.steps}: nll/token {losses[-1]:.3f}", flush=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    atomic_write_json(out / "sft.json", {"data": str(data), **asdict(settings), "n_train": len(train),
                                         "final_nll_per_token": losses[-1], "seconds": time.perf_counter() - started})


def keyword_result(cfg, policy, train_records: Sequence[dict], sft_dir: str | Path, result) -> dict:
    """The writeup's `keyword` result (hw3lib.core.writeup_keys) of a finished keyword GRPO run: the own
    model's shape, the data, the validation curve, the first and last sampled training reward, the
    largest engine/trainer log-prob mismatch, and up to 4 validation samples before and after GRPO.
    (The reward-hacking comparison with a second run adds hw3lib.keywords.hacking.hacking_result.)"""
    from hw3lib.grpo.results import load_samples
    from hw3lib.tasks.prompt_table import reward_fn_for

    evals, train_rows = result.eval_rows, result.train_rows
    first_reward = {}  # each GRPO step's sampled reward (on its first optimizer-step row)
    for row in train_rows:
        first_reward.setdefault(row["grpo_step"], row["train/reward"])
    steps = [int(row["grpo_step"]) for row in evals]
    before, after = load_samples(result.run_dir, min(steps)), load_samples(result.run_dir, max(steps))
    mismatches = [row["train/logprob_mismatch_mean_abs"] for row in train_rows
                  if row.get("train/logprob_mismatch_mean_abs") is not None]
    return {
        "profile": cfg.profile, "reward_fn": reward_fn_for(cfg.prompt).__name__,
        "model": f"hw3lib.models.nanogpt.GPT ({policy.config.n_layer} layers, "
        f"width {policy.config.n_embd}, {sum(p.numel() for p in policy.parameters())} parameters)",
        "data_source": sorted({r["source"] for r in train_records}), "n_train": len(train_records),
        "n_validation_used": cfg.n_eval_examples,
        "sft_steps": json.loads((Path(sft_dir) / "sft.json").read_text())["steps"], "grpo_steps": result.grpo_steps,
        "steps": steps, "eval_reward": [float(row["eval/reward"]) for row in evals],
        "eval_reward_start": float(evals[0]["eval/reward"]), "eval_reward_end": float(evals[-1]["eval/reward"]),
        "train_reward_first": float(first_reward[min(first_reward)]),
        "train_reward_last": float(first_reward[max(first_reward)]),
        "minutes": result.elapsed_s / 60, "max_logprob_mismatch": float(max(mismatches)) if mismatches else None,
        "examples": [{"prompt": b["question"], "before": b["response"], "before_reward": b["reward"],
                      "after": a["response"], "after_reward": a["reward"]} for b, a in zip(before, after)][:4],
        "settings": config_settings(cfg, model="hw3lib.models.nanogpt.GPT"),
    }


# ---- the GRPO run ----------------------------------------------------------------------------------

# The recipe (tuned by hand on 2 shared CPU cores: 15-30 s of GRPO on one thread). Rollouts of at most
# 12 tokens (the longest procedural answer is 9 tokens + EOS); 32 prompts x 8 samples per step, two
# epochs of two optimizer steps each (grpo_clip); lr 1e-3 (5e-4 and 7e-4 reached the same end point,
# more slowly). Measured with bench/bench_keyword_reward.py (seed s: data and 400-step SFT of seed s; greedy
# validation on 200 held-out prompts, standard error ~2-3 points), after SFT -> after 50 GRPO steps:
# - on the course's keyword_inclusion_reward_fn (the default): 0.585 -> 0.930, 0.735 -> 0.955, 0.705 -> 0.960
#   for seeds 0, 1, 2 -- and it hacks the reward in all three: the share of responses that hold every keyword
#   but are not one sentence (run-on keyword lists cut off by the budget, "There is A green cat cat and the
#   cat cat and the") goes from 0% after SFT to 23%, 29% and 87.5%;
# - on keyword_sentence_reward_fn (reward="sentence"): 0.585 -> 0.925, 0.735 -> 0.970, 0.705 -> 0.970, with
#   every final response one sentence (0% hacked). Its share of responses with every keyword, 0.955 +- 0.026
#   over seeds, matches the course run's 0.948 +- 0.016 (mean +- sd): the gate costs nothing on that measure.
KEYWORD_GRPO = {
    "name": "keyword_smoke",
    "prompt": PROMPT_KIND,
    "dtype": "float32",  # a 0.1M-parameter model: no point in mixed precision
    "engine": "transformers",  # the in-process engine kind; for an own model it is OwnModelEngine
    "warm_start_steps": 0,  # the keyword SFT (keyword_sft) is the warm start
    "n_train_examples": None,
    "generation_batch_size": 256,
    "n_grpo_steps": 50,
    "rollout_batch_size": 256,
    "group_size": 8,
    "train_batch_size": 128,
    "gradient_accumulation_steps": 1,
    "epochs_per_rollout_batch": 2,
    "loss_type": "grpo_clip",
    "sampling_max_tokens": 12,
    "sampling_min_tokens": 0,  # no EOS ban: engine and trainer log-probs then agree exactly (base.py)
    "learning_rate": 1e-3,
    "lr_warmup_steps": 4,
    "eval_every": 10,
    "n_eval_examples": 200,
    "n_eval_samples_saved": 200,  # every validation response: the reward-hacking rates are computed from them
    "checkpoint_every": 10,
}


# The run's default name per reward (the course's reward keeps the recipe's name).
RUN_NAMES = {"inclusion": KEYWORD_GRPO["name"], "sentence": "keyword_sentence_smoke"}


def keyword_prompt_for(reward: str) -> str:
    """The prompt row (hw3lib.tasks.prompt_table) of a `reward` choice: `inclusion` (the course's
    `keyword_inclusion_reward_fn`) -> `keyword`, `sentence` (`keyword_sentence_reward_fn`) -> `keyword_sentence`."""
    if reward not in KEYWORD_REWARDS:
        raise ValueError(f"reward={reward!r}: choose inclusion (the course's keyword_inclusion_reward_fn, the "
                         "default) or sentence (keyword_sentence_reward_fn: inclusion in one sentence)")
    return KEYWORD_REWARDS[reward]


def keyword_config(model: str | Path, data: str | Path, profile: str | None = None, reward: str = "inclusion",
                   **overrides):
    """The GRPOConfig of a keyword run: `KEYWORD_GRPO` on top of the profile's devices, trained on `reward`
    (`inclusion`: the course's reward, the default; `sentence`: the one-sentence gate), then `overrides`."""
    from hw3lib.grpo.config import GRPOConfig

    chosen = {"prompt": keyword_prompt_for(reward), "name": RUN_NAMES[reward]}
    return GRPOConfig.for_profile(profile, **{**KEYWORD_GRPO, **chosen, "model": str(model), "dataset": str(data),
                                              **overrides})


def default_data_dir(seed: int = 0) -> Path:
    """Where the procedural dataset of `prepare` lives (a cache: it is rebuilt identically from its seed)."""
    return cache_dir() / "keyword_data" / f"procedural_2000_seed{seed}"


def prepare_keyword_run(profile: str | None = None, data: str | Path | None = None,
                        sft: KeywordSFT = KeywordSFT(), verbose: bool = True, reward: str = "inclusion",
                        **overrides):
    """Dataset (procedural in `default_data_dir()` unless `data` names a folder) -> cached SFT -> the
    GRPOConfig that trains it on `reward` (see `keyword_config`; pass it to `hw3lib.grpo.loop.train`)."""
    keyword_prompt_for(reward)  # an unknown reward fails before the dataset and the SFT are built
    folder = Path(data) if data is not None else write_keyword_dataset(default_data_dir(sft.seed), seed=sft.seed)
    model = keyword_sft(folder, sft, verbose=verbose)
    return keyword_config(model, folder, profile, reward=reward, **overrides)
