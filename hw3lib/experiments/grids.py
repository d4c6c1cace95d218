"""The course's GRPO experiments as named grids, one runner for all of them, and their noise bands.

A grid is a list of configs that differ from a base in the settings the experiment is about
(`Grid.changes` names them per config). `build_grid(name, profile)` gives one (off-policy points
keep the base's microbatch: `gradient_accumulation_steps` scales with `train_batch_size`):

| grid | configs |
|---|---|
| `learning_rate` | the base learning rate x 0.3, 1, 3, 10, 100 (full: 3e-6 ... 1e-3; the top one diverges) |
| `baselines` | `reinforce_with_baseline` (the base) vs `no_baseline` |
| `length_normalization` | `masked_mean` (the base) vs `constant` (the generation budget, Dr. GRPO) |
| `std_normalization` | advantages divided by the group std (the base) vs not |
| `off_policy` | broad, short runs: `epochs_per_rollout_batch` x `train_batch_size` (rollout batch fixed), `grpo_clip` |
| `off_policy_focused` | the best two broad settings and the on-policy base, full length |
| `clip_ablation` | `grpo_clip` vs `grpo_no_clip` at the best focused off-policy setting |
| `prompt` | `r1_zero` vs `question_only`, each trained and validated with its own reward function, from one start that favours neither format |
| `sync_strategy` | colocated (one device): one optimizer step per rollout batch vs several epochs per batch |
| `kl_drift` | the base with `monitor_kl=True` (k1 and k3 to the frozen initial policy, logged per step) |
| `leaderboard` | the best settings the grids found, on the course's data and model (an extra where the handout has none) |
| `algorithms` | beyond the handouts: GRPO (clipped), Dr. GRPO, DAPO, GSPO, CISPO and GRPO with token-level MIS, from the same off-policy base (`hw3lib.grpo.config.ALGORITHMS`) |

The base (`common_base`) is the profile's recipe. Full: the course's baseline and sizes --
`reinforce_with_baseline`, std normalization, `masked_mean`, on-policy (one epoch, one optimizer
step of 256 rollouts per rollout batch), lr 1e-5, 200 GRPO steps. Smoke: the smoke recipe of
hw3lib.grpo.config (the warm-started tiny model on two-number arithmetic; `grpo_clip`, two epochs of
four optimizer steps per rollout batch, lr 2e-4 after a 10-step warm-up, 50 GRPO steps). The smoke
base is off-policy because on 2 CPU cores the on-policy schedule does not learn in a usable time:
one optimizer step per 256 rollouts moved the validation reward 0.344 -> 0.320 in 20 steps at lr
2e-4, and lr 1e-3 broke the warm start (0.344 -> 0.152 by step 10). Grids about a schedule
(`off_policy`, `sync_strategy`, `clip_ablation`) set it explicitly, and so does `baselines`: its two losses
(`reinforce_with_baseline`, `no_baseline`) have no importance ratio, so it runs them as the handout does, on-policy
(one optimizer step per rollout batch; in smoke batches of 64 rollouts for four times the steps, the same rollouts
in all). Every grid asks the same question in both profiles.

Grids that pick up earlier results (`off_policy_focused`, `clip_ablation`, `leaderboard`) take them
as `choices`; `run_sweep` runs the grids they depend on first (finished ones are only read back).

`run_grid` trains each config in turn into `runs/<grid>/<config>/` (run name `<grid>/<config>`; a grid that
picks up earlier results adds a hash of the config's changes, `runs/leaderboard/best-<8 hex>/`, so that other
winners make another run: `grid_run_name`):
finished runs are reused, interrupted ones resumed from their checkpoint, and a config identical to
a run of another grid (same settings but the name; e.g. the common base) is trained once, in the
first grid that needed it, and read from there (`grid.json` names where each config's run lives).
Each run is watched by a `DivergenceCheck` (via `train(..., stop_when=...)`): a non-finite loss or
gradient norm, or a collapsed training reward, stops it early; it is recorded as `diverged` (with
the reason and step) in `runs/<grid>/grid.json` and in the run's `stopped.json`, kept in every
table and plot, and never retrained.

Noise: the validation answer reward is a mean of 0/1 grades over `n_eval_examples` questions, so two
runs' final values differ by chance by about `difference_band` (two standard errors, Agresti-Caffo);
with seed repeats the spread of the repeats counts too. `compare` and `noise_reading` say, from the
numbers, which differences exceed that band.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from hw3lib.core.io import atomic_write_json, runs_dir
from hw3lib.core.lifecycle import RunResult, read_result
from hw3lib.core.runs import latest_checkpoint, metrics_rows
from hw3lib.grpo.loop import STOPPED_FILE
from hw3lib.grpo.config import GRPOConfig

FULL_STEPS = 200  # the course's GRPO steps per run
SMOKE_STEPS = 50  # the smoke recipe's validation reward rises by well over 10 points in them (0.344 -> 0.535)
# Broad off-policy runs are this fraction of a full-length run: full, 40 of 200 steps (one handout asks for
# fewer than 50). Smoke: full length, because the smoke recipe's validation reward is flat for its first ~30
# steps, so a shorter run ranks nothing; the broad runs are then the focused ones too (shared), and
# sync_strategy's two schedules are among them (e1_b256, e2_b64).
BROAD_FRACTION = {"full": 0.2, "smoke": 1.0}
LR_FACTORS = (0.3, 1.0, 3.0, 10.0, 100.0)  # learning-rate grid, as multiples of the base's
OFF_POLICY_EPOCHS = {"full": (1, 2, 4), "smoke": (1, 2)}
OFF_POLICY_BATCH_DIVISORS = {"full": (1, 2, 4), "smoke": (1, 4)}  # train_batch_size = rollout_batch_size // d
# sync_strategy (B): epochs per rollout batch, in optimizer batches of the base's size -- full: 4 epochs of one
# step of 256; smoke: the base's own schedule (2 epochs of 4 steps of 64), the one that learns on 2 cores.
SYNC_EPOCHS = {"full": 4, "smoke": 2}
# Config fields that do not change what a run computes: ignored when looking for a shared run.
NOT_COMPUTED = ("name", "checkpoint_every", "wandb_project")
GRID_FILE = "grid.json"


@dataclass(frozen=True)
class Grid:
    """One experiment: configs named `<grid>/<label>`, each `base` changed by `changes[label]`."""

    name: str
    profile: str
    base: GRPOConfig
    configs: dict[str, GRPOConfig]
    changes: dict[str, dict]
    """label -> the settings that config changes from `base` (empty: the base itself)."""
    reference: str
    """The label the others are compared with."""
    question: str
    """What the grid asks, in one sentence (for tables and the writeup)."""
    groups: dict[str, list[str]] = field(default_factory=dict)
    """label -> the labels of its seed repeats (itself first); filled by `build_grid`."""
    rationale: str = ""
    """Why the grid's ranges, in words computed from its configs (`off_policy_rationale`); empty for most grids."""

    @property
    def steps_per_run(self) -> int:
        """GRPO steps of each run: the base's, unless the grid changes them (`baselines` in smoke)."""
        return max(cfg.n_grpo_steps for cfg in self.configs.values())


# ---- the base and the grids ----------------------------------------------------------------------------

def common_base(profile: str | None = None, steps: int | None = None) -> GRPOConfig:
    """The profile's GRPO recipe for the course ($HW3_COURSE: its data and model), `steps` GRPO steps (default:
    full 200, smoke `SMOKE_STEPS`); see the module docstring for why the smoke base is off-policy."""
    cfg = GRPOConfig.for_profile(profile)
    return cfg.replace(name="base", n_grpo_steps=steps or (FULL_STEPS if cfg.profile == "full" else SMOKE_STEPS))


def off_policy_settings(base: GRPOConfig, epochs: int, train_batch_size: int) -> dict:
    """The settings of one off-policy point: `grpo_clip` (the on-policy point keeps the base's loss,
    whose gradient is the same there: the ratio is 1), the microbatch kept at the base's."""
    settings = {"epochs_per_rollout_batch": epochs, "train_batch_size": train_batch_size,
                "gradient_accumulation_steps": max(1, train_batch_size // base.micro_train_batch_size)}
    if epochs > 1 or train_batch_size < base.rollout_batch_size:
        settings["loss_type"] = "grpo_clip"
    return {key: value for key, value in settings.items() if getattr(base, key) != value}


def off_policy_label(settings: dict, base: GRPOConfig) -> str:
    epochs = settings.get("epochs_per_rollout_batch", base.epochs_per_rollout_batch)
    return f"e{epochs}_b{settings.get('train_batch_size', base.train_batch_size)}"


def lr_label(learning_rate: float) -> str:
    return f"lr_{learning_rate:.3g}"


def _learning_rate(base: GRPOConfig, choices: dict) -> dict[str, dict]:
    rates = [float(f"{base.learning_rate * f:.3g}") for f in LR_FACTORS]  # 3e-6, not 3.0000000000000004e-06
    return {lr_label(lr): ({} if lr == base.learning_rate else {"learning_rate": lr}) for lr in rates}


def _off_policy_broad(base: GRPOConfig, choices: dict) -> dict[str, dict]:
    points = [off_policy_settings(base, e, base.rollout_batch_size // d)
              for e in OFF_POLICY_EPOCHS[base.profile] for d in OFF_POLICY_BATCH_DIVISORS[base.profile]]
    return {off_policy_label(p, base): p for p in points}


def _same_point(base: GRPOConfig, settings: dict) -> dict:
    """An off-policy point chosen elsewhere, rebuilt on `base` (its epochs and optimizer batch; the
    accumulation follows from this base's microbatch)."""
    return off_policy_settings(base, settings.get("epochs_per_rollout_batch", base.epochs_per_rollout_batch),
                               settings.get("train_batch_size", base.train_batch_size))


def _off_policy_focused(base: GRPOConfig, choices: dict) -> dict[str, dict]:
    top = _need(choices, "top", "off_policy_focused", "the two best broad off-policy settings (dicts)")
    points = [off_policy_settings(base, 1, base.rollout_batch_size)] + [_same_point(base, p) for p in top]
    return {off_policy_label(p, base): p for p in points}


def off_policy_rationale(name: str, base: GRPOConfig, changes: dict[str, dict], full_steps: int) -> str:
    """Why the off-policy grids' ranges (the handout's experiment log), stated from the grid's own configs:
    the rollout batch is fixed and the sweep varies its reuse (epochs x optimizer batch), broad and short
    first (the handout: fewer than 50 GRPO steps), then the best two at full length against on-policy."""
    rollout, steps = base.rollout_batch_size, base.n_grpo_steps
    points = {label: (c.get("epochs_per_rollout_batch", base.epochs_per_rollout_batch),
                      c.get("train_batch_size", base.train_batch_size)) for label, c in changes.items()}
    on_policy = [label for label, (e, b) in points.items() if e == 1 and b == rollout]
    if name == "off_policy_focused":
        others = ", ".join(f"`{label}`" for label in points if label not in on_policy)
        return (f"The focused runs: the two best broad settings by final validation reward (diverged runs excluded), "
                f"{others}, against the on-policy reference {', '.join(f'`{o}`' for o in on_policy)}, each at the "
                f"full length of {steps} GRPO steps, as the handout's focused sweep asks.")
    epochs, batches = sorted({e for e, _ in points.values()}), sorted({b for _, b in points.values()}, reverse=True)
    reuse = sorted({e * rollout // b for e, b in points.values()})
    accumulation = sorted({max(1, b // base.micro_train_batch_size) for b in batches})

    def listed(values) -> str:
        return "{" + ", ".join(str(v) for v in values) + "}"

    length = (f"{steps} of the full {full_steps} GRPO steps" + (", under the handout's 50" if steps < 50 else "")
              if steps < full_steps else
              f"the full {steps} GRPO steps: the smoke recipe's validation reward is flat for its first ~30 "
              "steps, so a shorter run ranks nothing (`BROAD_FRACTION`)")
    return (f"The handout fixes the rollout batch and asks which reuse of it pays off: a broad sweep of short "
            f"runs, then a focused one at full length. The rollout batch stays {rollout} rollouts "
            f"({rollout // base.group_size} questions x {base.group_size} samples) per GRPO step; "
            f"epochs_per_rollout_batch takes {listed(epochs)} and train_batch_size {listed(batches)} (the rollout "
            f"batch / {listed(rollout // b for b in batches)}), so each optimizer batch divides the rollout batch and "
            f"every epoch uses every rollout once: {reuse[0]} to {reuse[-1]} optimizer steps per rollout batch "
            f"({listed(reuse)}), the on-policy point {', '.join(f'`{o}`' for o in on_policy)} (one step: the "
            f"reference) included. Every optimizer batch keeps the base's microbatch of "
            f"{base.micro_train_batch_size} (gradient accumulation {listed(accumulation)}), so only the reuse "
            f"changes, not the memory. At the top ({epochs[-1]} epochs, batches of {batches[-1]}) the policy moves "
            f"furthest from the one that sampled (the clip fraction shows how far) and training costs "
            f"{epochs[-1]}x the on-policy tokens per GRPO step. Runs are {length}.")


def _clip_ablation(base: GRPOConfig, choices: dict) -> dict[str, dict]:
    best = _same_point(base, _need(choices, "off_policy", "clip_ablation", "the best off-policy setting (a dict)"))
    best.pop("loss_type", None)
    return {"grpo_clip": {**best, **_loss(base, "grpo_clip")}, "grpo_no_clip": {**best, **_loss(base, "grpo_no_clip")}}


def _prompt(base: GRPOConfig, choices: dict) -> dict[str, dict]:
    """Both prompts from a start that favours neither format, as the handout's base model does. Full: the base
    model itself (`r1_zero` is then the base, shared with the other grids). Smoke: the warm start is SFT, so it
    teaches a format; here it is the `neutral` one (hw3lib.models.warmstart: each record under the R1-Zero or
    the question-only prompt, drawn at random), loaded by its (cached, built on first use) folder by both runs.
    (The base's R1-Zero warm start gave question_only a start already trained on the other format's tags;
    `tiny-sft`, 40 SFT steps, did not learn under r1_zero: 0.152 flat over 60 GRPO steps.)"""
    question_only = {"prompt": "question_only"}
    if not base.warm_start_steps:
        return {"r1_zero": {}, "question_only": question_only}
    from hw3lib.models.load import initial_policy_source

    neutral = {"model": initial_policy_source(base, warm_start_prompt="neutral"), "warm_start_steps": 0}
    return {"r1_zero": neutral, "question_only": {**question_only, **neutral}}


# Smoke: the baselines grid's rollouts per GRPO step, one optimizer step each (see `_baselines`).
SMOKE_ON_POLICY_ROLLOUTS = 64


def _baselines(base: GRPOConfig, choices: dict) -> dict[str, dict]:
    """The handout's two REINFORCE losses, compared as it does: on-policy, one optimizer step per rollout batch,
    each rollout used once (these losses have no ratio, so any later step on the same batch would follow stale
    rollouts uncorrected). Full: the base's schedule already is. Smoke: the base takes four optimizer steps per
    256 rollouts, so the grid runs batches of `SMOKE_ON_POLICY_ROLLOUTS` instead, one step each, for the same
    rollouts in all (four times the GRPO steps). Measured at lr 2e-4, 200 steps of 64: arithmetic task
    reinforce_with_baseline 0.344 -> 0.457, no_baseline 0.344 -> 0.246 (greedy, 256 questions); MATH task
    0.430 -> 0.545 and 0.430 -> 0.512 (sampled, 512 problems: within noise); on the base's four stale steps per batch
    reinforce_with_baseline collapsed instead (0.344 -> 0.0; MATH task 0.43 -> 0.30): its unit-spread advantages
    drove the uncorrected later steps, which is not the handout's question."""
    if base.epochs_per_rollout_batch == 1 and base.train_batch_size == base.rollout_batch_size:
        on_policy = {}
    else:
        rollouts = min(base.rollout_batch_size, SMOKE_ON_POLICY_ROLLOUTS)
        scale = base.rollout_batch_size // rollouts
        on_policy = {"epochs_per_rollout_batch": 1, "rollout_batch_size": rollouts, "train_batch_size": rollouts,
                     "gradient_accumulation_steps": max(1, rollouts // base.micro_train_batch_size),
                     "n_grpo_steps": base.n_grpo_steps * scale, "eval_every": base.eval_every * scale,
                     "checkpoint_every": base.checkpoint_every * scale}
        on_policy = {key: value for key, value in on_policy.items() if getattr(base, key) != value}
    return {loss: {**on_policy, **_loss(base, loss)} for loss in ("reinforce_with_baseline", "no_baseline")}


def _leaderboard(base: GRPOConfig, choices: dict) -> dict[str, dict]:
    settings = _need(choices, "settings", "leaderboard", "the winning settings (a dict)")
    # A winner that is some grid's reference (e.g. clip_ablation's grpo_clip, the smoke base's own loss) is no change.
    return {"best": {key: value for key, value in settings.items() if getattr(base, key) != value}}


def _loss(base: GRPOConfig, loss_type: str) -> dict:
    return {} if base.loss_type == loss_type else {"loss_type": loss_type}


def _algorithms(base: GRPOConfig, choices: dict) -> dict[str, dict]:
    """Each named recipe on the same base, and the course's clipped GRPO with masked importance sampling.
    `grpo` is the base itself when the base already holds that recipe (then its run is shared with the
    other grids' base runs)."""
    from hw3lib.grpo.config import ALGORITHMS

    points = {name: {"algorithm": name, **recipe} for name, recipe in ALGORITHMS.items()}
    if all(getattr(base, key) == value for key, value in ALGORITHMS["grpo"].items()):
        points["grpo"] = {}
    points["grpo_mis"] = {**points["grpo"], "mis": "token"}
    return {label: {k: v for k, v in change.items() if getattr(base, k) != v} for label, change in points.items()}


def _need(choices: dict, key: str, grid: str, what: str):
    if key not in choices:
        raise ValueError(f"grid {grid!r} needs choices[{key!r}]: {what}; run_sweep({grid!r}) finds it from the "
                         "grids it depends on")
    return choices[key]


# name -> (question, reference label, configs as {label: changes}, the grids it needs first)
GRIDS: dict[str, tuple[str, str, Callable[[GRPOConfig, dict], dict[str, dict]], tuple[str, ...]]] = {
    "learning_rate": ("Which learning rate learns fastest, and where does training diverge?", "{lr}",
                      _learning_rate, ()),
    "baselines": ("What does subtracting the group mean (the baseline) do?", "reinforce_with_baseline",
                  _baselines, ()),
    "length_normalization": ("Per-response (masked_mean) or constant (the generation budget) length normalization?",
                             "masked_mean", lambda base, c: {"masked_mean": {},
                                                             "constant": {"length_normalization": "constant"}}, ()),
    "std_normalization": ("Does dividing advantages by the group std help?", "std_on",
                          lambda base, c: {"std_on": {}, "std_off": {"use_std_normalization": False}}, ()),
    "off_policy": ("Broad sweep: how many epochs and optimizer steps per rollout batch pay off (short runs)?",
                   "e1_b{rollout}", _off_policy_broad, ()),
    "off_policy_focused": ("The best two off-policy settings against on-policy, full length.", "e1_b{rollout}",
                           _off_policy_focused, ("off_policy",)),
    "clip_ablation": ("At the best off-policy setting, what does clipping the ratio do?", "grpo_clip",
                      _clip_ablation, ("off_policy_focused",)),
    "prompt": ("R1-Zero prompt and reward vs the question alone with its own reward.", "r1_zero",
               _prompt, ()),
    "sync_strategy": ("Colocated on one device: one optimizer step per rollout batch (A) or several epochs (B)?",
                      "one_step", lambda base, c: {
                          "one_step": off_policy_settings(base, 1, base.rollout_batch_size),
                          "multi_epoch": off_policy_settings(base, SYNC_EPOCHS[base.profile], base.train_batch_size)},
                      ()),
    "kl_drift": ("How far does the policy drift from the initial one (KL k1, k3) as reward rises?", "kl",
                 lambda base, c: {"kl": {"monitor_kl": True}}, ()),
    "leaderboard": ("The best settings the grids found, as one preset.", "best", _leaderboard,
                    ("learning_rate", "baselines", "length_normalization", "std_normalization", "off_policy_focused",
                     "clip_ablation")),
    "algorithms": ("Beyond the handouts: which of the 2025 GRPO variants learns best from the same start?", "grpo",
                   _algorithms, ()),
}


def grid_base(name: str, profile: str | None = None, steps: int | None = None) -> GRPOConfig:
    """The config a grid's changes apply to: `common_base`, with the grid's own adjustments."""
    base = common_base(profile, steps)
    if name == "algorithms" and not base.off_policy:  # the ratio losses differ only off-policy (else r = 1)
        base = base.replace(**off_policy_settings(base, 2, base.rollout_batch_size // 4))
    if name == "off_policy":  # broad sweep: short runs
        base = base.replace(n_grpo_steps=max(1, round(base.n_grpo_steps * BROAD_FRACTION[base.profile])))
    # The leaderboard, like every grid, runs on the course's data and model (common_base follows $HW3_COURSE): a
    # MATH switch here stopped the GSM8K course's notebook 05 near its end without $HW3_MATH_DATA.
    return base.replace(name="base")


def grid_run_name(grid: str, label: str, change: dict) -> str:
    """The run name (folder under runs/) of config `label` of `grid`, which changes the grid's base by
    `change`: `<grid>/<label>`, and for a grid whose configs are derived from earlier grids' results
    (`GRIDS[grid][3]`: off_policy_focused, clip_ablation, leaderboard) `<grid>/<label>-<8 hex digits of the
    change>`. Other winners make a new run instead of resuming the run of an earlier derivation under the
    same label (which refused: "the config differs"); the same winners find the same run again. Only the
    change is hashed, so a run stays found when it is extended (more steps) or hw3lib adds a setting."""
    if not GRIDS[grid][3]:
        return f"{grid}/{label}"
    canonical = json.dumps(json.loads(json.dumps(change)), sort_keys=True)  # tuples -> lists, as in config.json
    return f"{grid}/{label}-{hashlib.sha1(canonical.encode()).hexdigest()[:8]}"


def build_grid(name: str, profile: str | None = None, steps: int | None = None, seeds: Sequence[int] | None = None,
               choices: dict | None = None) -> Grid:
    """The grid `name` in `profile` (default: $HW3_PROFILE / GPU present), `steps` GRPO steps per run
    (default: the profile's; broad off-policy runs a fraction of it), repeated for each of `seeds`
    (default: the profile's seed only). `choices` carries what dependent grids pick up from earlier ones."""
    if name not in GRIDS:
        raise ValueError(f"unknown grid {name!r}: choose one of {', '.join(GRIDS)}")
    question, reference, configs_of, _ = GRIDS[name]
    base = grid_base(name, profile, steps)
    changes = configs_of(base, choices or {})
    reference = reference.format(rollout=base.rollout_batch_size, lr=lr_label(base.learning_rate))
    seeds = list(seeds) if seeds else [base.seed]
    configs, all_changes, groups = {}, {}, {}
    for label, change in changes.items():
        groups[label] = []
        for i, seed in enumerate(seeds):
            run_label = label if i == 0 else f"{label}_seed{seed}"
            seeded = change if seed == base.seed else {**change, "seed": seed}
            configs[run_label] = base.replace(name=grid_run_name(name, run_label, seeded), **seeded)
            all_changes[run_label] = dict(seeded)
            groups[label].append(run_label)
    rationale = (off_policy_rationale(name, base, changes, common_base(profile, steps).n_grpo_steps)
                 if name in ("off_policy", "off_policy_focused") else "")
    return Grid(name, base.profile, base, configs, all_changes, reference, question, groups, rationale)


# ---- divergence ---------------------------------------------------------------------------------------

@dataclass
class DivergenceCheck:
    """`train(..., stop_when=DivergenceCheck())`: the reason to stop a diverged run, else None.

    Diverged: a non-finite loss or gradient norm in any optimizer step, or a collapsed reward -- the
    mean training reward of the last `window` GRPO steps below `collapse_fraction` of the mean of
    the first `window` (when that start is at least `min_start_reward`, so a run that never had
    reward is not called collapsed).
    """

    window: int = 5
    collapse_fraction: float = 0.25
    min_start_reward: float = 0.05
    rewards: list[float] = field(default_factory=list)
    """Training reward per GRPO step seen so far (`seed` fills it from a resumed run's metrics)."""

    def seed(self, rows: Sequence[dict], up_to_step: int) -> None:
        """Take the per-step rewards of a run's logged rows up to GRPO step `up_to_step` (a resume point)."""
        per_step = {row["grpo_step"]: row["train/reward"] for row in rows
                    if "train/loss" in row and row["grpo_step"] <= up_to_step}
        self.rewards = [per_step[k] for k in sorted(per_step)]

    def __call__(self, rows: Sequence[dict]) -> str | None:
        for row in rows:
            for key in ("train/loss", "train/grad_norm"):
                if not math.isfinite(row[key]):
                    return f"{key} = {row[key]} at optimizer step {row['step']} (GRPO step {row['grpo_step']})"
        self.rewards.append(rows[0]["train/reward"])
        if len(self.rewards) < 2 * self.window:
            return None
        start = sum(self.rewards[:self.window]) / self.window
        recent = sum(self.rewards[-self.window:]) / self.window
        if start >= self.min_start_reward and recent < self.collapse_fraction * start:
            return (f"training reward collapsed: {recent:.3f} over the last {self.window} GRPO steps vs "
                    f"{start:.3f} over the first {self.window} (below {self.collapse_fraction:g} x)")
        return None


# ---- the runner ---------------------------------------------------------------------------------------

@dataclass
class GridResult:
    """A grid's runs: `results[label]` (RunResult) and `records[label]` (status, run folder, reason)."""

    grid: Grid
    results: dict[str, RunResult]
    records: dict[str, dict]

    def diverged(self, label: str) -> bool:
        return self.records[label]["status"] == "diverged"


def config_key(config: dict) -> str:
    """The settings that determine what a run computes (JSON, name and bookkeeping fields dropped)."""
    config = json.loads(json.dumps(config))  # tuples -> lists, as saved in config.json
    return json.dumps({k: v for k, v in config.items() if k not in NOT_COMPUTED}, sort_keys=True)


def shared_run_name(cfg: GRPOConfig) -> str:
    """Where `cfg` runs: its own folder if that holds a run, else another grid's run with the same
    settings (the first in sorted order), else its own folder."""
    root = runs_dir()
    if (root / cfg.name / "config.json").is_file():
        return cfg.name
    key = config_key(cfg.to_dict())
    for path in sorted(root.glob("*/*/config.json")):
        if path.parent.parent.name in GRIDS or (path.parent.parent / GRID_FILE).is_file():
            try:
                if config_key(json.loads(path.read_text())) == key:
                    return f"{path.parent.parent.name}/{path.parent.name}"
            except (OSError, json.JSONDecodeError):
                continue  # a half-written folder of another run is not a match
    return cfg.name


def read_stopped(run_dir) -> dict | None:
    """The run's `stopped.json` if it describes the run's latest checkpoint (a run resumed by hand past
    its stop has moved on: the file is then stale and ignored)."""
    path, checkpoint = run_dir / STOPPED_FILE, latest_checkpoint(run_dir)
    if not path.is_file() or checkpoint is None:
        return None
    stopped = json.loads(path.read_text())
    return stopped if stopped["grpo_step"] == json.loads((checkpoint / "state.json").read_text())["grpo_step"] else None


def run_config(cfg: GRPOConfig, check: DivergenceCheck | None = None,
               callback: Callable[[dict], None] | None = None) -> tuple[RunResult, dict]:
    """Train (or reuse, or resume) one run, watched by `check`: `(result, record)`."""
    from hw3lib.grpo.loop import train

    run_dir = runs_dir() / cfg.name
    stopped = read_stopped(run_dir)
    if stopped is not None:  # diverged before: read it back, never train it again
        checkpoint = latest_checkpoint(run_dir)
        state = json.loads((checkpoint / "state.json").read_text())
        result = read_result(run_dir, cfg, state)
    else:
        check = check if check is not None else DivergenceCheck()
        checkpoint = latest_checkpoint(run_dir)
        if checkpoint is not None:  # a resumed run: the rewards before its checkpoint count
            check.seed(metrics_rows(run_dir), json.loads((checkpoint / "state.json").read_text())["grpo_step"])
        result = train(cfg, resume=True, callback=callback, stop_when=check)
        stopped = read_stopped(run_dir)
    record = {"run": cfg.name, "status": "diverged" if stopped else "finished", "grpo_steps": result.grpo_steps,
              "n_grpo_steps": cfg.n_grpo_steps, "wall_clock_s": result.elapsed_s}
    if stopped:
        record.update(reason=stopped["reason"], stopped_at=stopped["grpo_step"])
    return result, record


@contextmanager
def config_lock(cfg: GRPOConfig) -> Iterator[None]:
    """Held while one config's run is found and trained: two sweeps running at once (hw3lib.experiments.parallel)
    never train the same settings twice -- the second waits for the lock, then finds the first's run and
    reuses it. One lock file per set of settings under `runs/.locks/` (flock: released if a process dies)."""
    import fcntl

    locks = runs_dir() / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    path = locks / f"{hashlib.sha1(config_key(cfg.to_dict()).encode()).hexdigest()[:16]}.lock"
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_grid(grid: Grid, check: Callable[[], DivergenceCheck] = DivergenceCheck,
             callback: Callable[[dict], None] | None = None) -> GridResult:
    """Run every config of `grid` in turn (see the module docstring); `runs/<grid>/grid.json` records
    each config's run folder and status after each run, so an interrupted sweep keeps what it did."""
    from tqdm.auto import tqdm

    manifest_path = runs_dir() / grid.name / GRID_FILE
    manifest = {"grid": grid.name, "profile": grid.profile, "question": grid.question, "reference": grid.reference,
                "configs": {}}
    results, records = {}, {}
    for label, cfg in tqdm(grid.configs.items(), desc=f"grid {grid.name}", unit="run"):
        with config_lock(cfg):
            where = shared_run_name(cfg)
            if where != cfg.name:
                print(f"=== {grid.name}/{label}: same settings as {where}; using that run", flush=True)
            else:
                print(f"=== {grid.name}/{label}", flush=True)
            results[label], record = run_config(cfg.replace(name=where), check(), callback)
        records[label] = {**record, "shared": where != cfg.name, "changes": grid.changes[label]}
        manifest["configs"][label] = records[label]
        atomic_write_json(manifest_path, manifest)
    return GridResult(grid, results, records)


def run_sweep(name: str, profile: str | None = None, steps: int | None = None, seeds: Sequence[int] | None = None,
              check: Callable[[], DivergenceCheck] = DivergenceCheck) -> GridResult:
    """Run grid `name` after the grids it depends on (finished ones are only read back), with the
    choices they lead to (`choices_from`)."""
    if name not in GRIDS:
        raise ValueError(f"unknown grid {name!r}: choose one of {', '.join(GRIDS)}")
    earlier = {needed: choices_from(run_sweep(needed, profile, steps, seeds, check)) for needed in GRIDS[name][3]}
    if name == "leaderboard":
        settings = {}
        for needed, picked in earlier.items():
            if needed == "clip_ablation" and earlier["off_policy_focused"]["reference_won"]:
                continue  # on-policy won: the clip setting does not apply
            settings.update(picked["settings"])
        choices = {"settings": settings}
    else:
        choices = {key: value for picked in earlier.values() for key, value in picked.items()
                   if key not in ("settings", "reference_won")}
    return run_grid(build_grid(name, profile, steps, seeds, choices), check)


# Grids whose winner gives later grids only its loss: clip_ablation runs at the off-policy setting, baselines on the
# handout's one-epoch schedule -- settings of the comparison, not of the choice.
LOSS_ONLY_GRIDS = ("clip_ablation", "baselines")


def choices_from(result: GridResult) -> dict:
    """What later grids take from a finished one.

    `settings`: the changes of the winner -- the best-ending run that did not diverge if it beats the
    reference beyond noise, else the reference (clip_ablation and baselines: only its `loss_type`). The broad
    off-policy grid adds `top` (the two best off-policy settings), the focused one `off_policy` (the
    best off-policy setting).
    """
    grid, rows = result.grid, compare(result)
    ranked = sorted((r for r in rows if r["status"] != "diverged"), key=lambda r: -r["end"])
    winner = next((r["label"] for r in ranked if r["beyond_noise"] and r["diff"] > 0), grid.reference)
    settings = dict(grid.changes[winner])
    if grid.name in LOSS_ONLY_GRIDS:
        settings = {"loss_type": result.results[winner].config.loss_type}
    choices = {"settings": settings, "reference_won": winner == grid.reference}
    off_policy = [grid.changes[r["label"]] for r in ranked if r["label"] != grid.reference]  # reference: on-policy
    if grid.name == "off_policy":
        choices["top"] = off_policy[:2]
    if grid.name == "off_policy_focused":
        if not off_policy:
            raise ValueError(f"grid {grid.name}: every off-policy run diverged, so there is no setting to ablate")
        choices["off_policy"] = off_policy[0]
    return choices


# ---- noise -------------------------------------------------------------------------------------------

def binomial_band(p: float, n: int, z: float = 2.0) -> float:
    """z standard errors of an accuracy `p` measured on `n` questions (Agresti-Coull: one success and
    one failure added, so 0% and 100% still get a band)."""
    adjusted = (p * n + 1) / (n + 2)
    return z * math.sqrt(adjusted * (1 - adjusted) / (n + 2))


def difference_band(p1: float, n1: int, p2: float, n2: int, z: float = 2.0) -> float:
    """z standard errors of the difference of two accuracies (Agresti-Caffo: one success and one
    failure added to each), the noise a gap between two runs must exceed."""
    a1, a2 = (p1 * n1 + 1) / (n1 + 2), (p2 * n2 + 1) / (n2 + 2)
    return z * math.sqrt(a1 * (1 - a1) / (n1 + 2) + a2 * (1 - a2) / (n2 + 2))


def seed_band(values1: Sequence[float], values2: Sequence[float], z: float = 2.0) -> float | None:
    """z standard errors of the difference of two means over seed repeats (None with fewer than 2 each)."""
    if len(values1) < 2 or len(values2) < 2:
        return None

    def variance(v):
        mean = sum(v) / len(v)
        return sum((x - mean) ** 2 for x in v) / (len(v) - 1)

    return z * math.sqrt(variance(values1) / len(values1) + variance(values2) / len(values2))


def compare(result: GridResult, metric: str = "eval/answer_reward") -> list[dict]:
    """One row per config group: its final validation value (mean over seed repeats), start, rise, the
    difference from the reference, the noise band of that difference and whether it exceeds it."""
    grid = result.grid
    finals, rows = {}, []
    for group, labels in grid.groups.items():
        evals = [result.results[label].eval_rows for label in labels]
        finals[group] = {"end": [e[-1][metric] for e in evals], "start": [e[0][metric] for e in evals],
                         "n": evals[0][-1]["eval/n"]}
    ref = finals[grid.reference]
    ref_end = sum(ref["end"]) / len(ref["end"])
    for group, labels in grid.groups.items():
        mine = finals[group]
        end, start = sum(mine["end"]) / len(mine["end"]), sum(mine["start"]) / len(mine["start"])
        band = difference_band(end, mine["n"] * len(mine["end"]), ref_end, ref["n"] * len(ref["end"]))
        spread = seed_band(mine["end"], ref["end"])
        band = max(band, spread) if spread is not None else band
        record = result.records[labels[0]]
        rows.append({"label": group, "status": "diverged" if any(result.diverged(l) for l in labels) else "finished",
                     "reason": record.get("reason"), "stopped_at": record.get("stopped_at"), "start": start,
                     "end": end, "rise": end - start, "seeds": len(labels), "n": mine["n"],
                     "diff": end - ref_end, "band": band,
                     "beyond_noise": group != grid.reference and abs(end - ref_end) > band,
                     "wall_clock_s": sum(result.records[l]["wall_clock_s"] for l in labels) / len(labels)})
    return rows


def noise_reading(result: GridResult, rows: list[dict] | None = None, learn_points: float = 10.0) -> str:
    """In words, from the numbers: whether the reference learned (>= `learn_points` above its start), and
    for every other config whether its difference from the reference exceeds the noise band."""
    grid, rows = result.grid, rows if rows is not None else compare(result)
    ref = next(r for r in rows if r["label"] == grid.reference)
    band_kind = "seed repeats and binomial" if ref["seeds"] > 1 else f"binomial, {ref['n']} questions"
    lines = [f"`{grid.reference}` went from {ref['start']:.1%} to {ref['end']:.1%} "
             f"({100 * ref['rise']:+.1f} points: {'learned' if 100 * ref['rise'] >= learn_points else 'did not learn'} "
             f"by the {learn_points:g}-point bar)."]
    for row in rows:
        if row["label"] == grid.reference:
            continue
        head = f"`{row['label']}` ends at {row['end']:.1%}, {100 * row['diff']:+.1f} points vs `{grid.reference}`"
        if row["status"] == "diverged":
            head = f"`{row['label']}` diverged at GRPO step {row['stopped_at']} ({row['reason']}); it ends at " \
                   f"{row['end']:.1%}, {100 * row['diff']:+.1f} points vs `{grid.reference}`"
        verdict = ("beyond" if row["beyond_noise"] else "within") + \
                  f" the noise band of ±{100 * row['band']:.1f} points (2 s.e., {band_kind})"
        lines.append(f"{head}: {verdict}" + ("." if row["beyond_noise"] else ", so not distinguishable."))
    return "\n".join(f"- {line}" for line in lines)
