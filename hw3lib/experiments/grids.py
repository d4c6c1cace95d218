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
in all). Where the smoke base makes a grid ask another question than the handout's (`GridSpec.smoke_differs`:
learning_rate, length_normalization and std_normalization on the off-policy base; the broad and focused off-policy
sweeps, which share their full-length runs), the reading prints how beside its verdicts (`smoke_note`).

Grids that pick up earlier results (`off_policy_focused`, `clip_ablation`, `leaderboard`) take them
as `choices`; `run_sweep` runs the grids they depend on first (finished ones are only read back), and
`hw3lib.experiments.seeds.sweep` the base recipe's seed replicas before those, since the winners are picked by
verdicts that count the seed band.

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

Noise (`hw3lib.experiments.compare`, every band from `hw3lib.core.stats`): the validation answer reward is a mean
of 0/1 grades over `n_eval_examples` questions shared by every run, so two runs are compared paired on those
questions when they saved every validation rollout, else with the unpaired band; a grid with one seed per config
also needs its differences to exceed the seed band measured on the base recipe's seed replicas
(`hw3lib.experiments.seeds`). `GRIDS` maps each grid's name to its `GridSpec`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hw3lib.experiments.compare import SEED_GRID, compare, pick_winner
# The runner's names stay importable from here (notebooks, tests and hw3lib.experiments.parallel use them).
from hw3lib.experiments.runner import (GRID_FILE, GRID_NAMES, NOT_COMPUTED, DivergenceCheck, Grid,  # noqa: F401
                                       GridResult, config_key, config_lock, read_stopped, run_config, run_grid,
                                       shared_run_name)
from hw3lib.grpo.config import GRPOConfig

# GRPO steps per run: the profile's own recipe length (`common_base`; full: the course's 200, smoke: 50, in which
# the validation reward rises by well over 10 points, 0.344 -> 0.535), so that the base is notebook 04's run.
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


# ---- the base and the grids ----------------------------------------------------------------------------

def common_base(profile: str | None = None, steps: int | None = None) -> GRPOConfig:
    """The profile's GRPO recipe for the course ($HW3_COURSE: its data and model), `steps` GRPO steps (default: the
    recipe's: full 200, smoke 50): notebook 04's run, which the grids then share (`shared_run_name`).
    See the module docstring for why the smoke base is off-policy."""
    cfg = GRPOConfig.for_profile(profile)
    return cfg.replace(name="base", n_grpo_steps=steps or cfg.n_grpo_steps)


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


# What the smoke profile's base changes in the handout's question (item of the reading printed beside the verdict).
_OFF_POLICY_BASE = ("smoke runs this on the smoke base: `grpo_clip`, 2 epochs of 4 optimizer steps per rollout batch "
                    "(off-policy), where the handout asks it on-policy with `reinforce_with_baseline`; the on-policy "
                    "schedule does not learn on 2 CPU cores in a usable time (module docstring)")


@dataclass(frozen=True)
class GridSpec:
    """One grid: what it asks, which config the others are compared with, how its configs are built, which grids
    must run first, how its winner is passed on, which answer builder reads it and, where the smoke profile asks
    a different question from the handout's, how it differs."""

    question: str
    """What the grid asks, in one sentence (for tables and the writeup)."""
    reference: str
    """The label the others are compared with (`{lr}`, `{rollout}`: filled in from the base)."""
    configs: Callable[[GRPOConfig, dict], dict[str, dict]]
    """(base, choices) -> {label: the settings that config changes from the base}."""
    needs: tuple[str, ...] = ()
    """The grids whose winners it takes (`run_sweep` runs them first; its run names hash the change)."""
    loss_only: bool = False
    """The winner passes on only its `loss_type`: the grid's other settings are the comparison's, not the choice's."""
    answer: str = "answer_generic"
    """The builder in hw3lib.experiments.answers that answers its written questions."""
    smoke_differs: str = ""
    """How the smoke setting's question differs from the handout's (printed beside the verdict in smoke); empty:
    the same question."""


GRIDS: dict[str, GridSpec] = {
    "learning_rate": GridSpec("Which learning rate learns fastest, and where does training diverge?", "{lr}",
                              _learning_rate, answer="answer_learning_rate", smoke_differs=_OFF_POLICY_BASE),
    "baselines": GridSpec("What does subtracting the group mean (the baseline) do?", "reinforce_with_baseline",
                          _baselines, loss_only=True, answer="answer_baselines"),
    "length_normalization": GridSpec(
        "Per-response (masked_mean) or constant (the generation budget) length normalization?", "masked_mean",
        lambda base, c: {"masked_mean": {}, "constant": {"length_normalization": "constant"}},
        answer="answer_length_normalization", smoke_differs=_OFF_POLICY_BASE),
    "std_normalization": GridSpec("Does dividing advantages by the group std help?", "std_on",
                                  lambda base, c: {"std_on": {}, "std_off": {"use_std_normalization": False}},
                                  answer="answer_std_normalization", smoke_differs=_OFF_POLICY_BASE),
    "off_policy": GridSpec("Broad sweep: how many epochs and optimizer steps per rollout batch pay off (short runs)?",
                           "e1_b{rollout}", _off_policy_broad, answer="answer_off_policy",
                           smoke_differs="smoke's broad runs are full length, not short (`BROAD_FRACTION`: the smoke "
                                         "recipe's validation reward is flat for its first ~30 steps)"),
    "off_policy_focused": GridSpec("The best two off-policy settings against on-policy, full length.", "e1_b{rollout}",
                                   _off_policy_focused, needs=("off_policy",), answer="answer_off_policy",
                                   smoke_differs="smoke's broad runs are already full length, so the focused runs "
                                                 "re-read the broad ones (shared runs), not a second, longer sweep"),
    "clip_ablation": GridSpec("At the best off-policy setting, what does clipping the ratio do?", "grpo_clip",
                              _clip_ablation, needs=("off_policy_focused",), loss_only=True,
                              answer="answer_clip_ablation"),
    "prompt": GridSpec("R1-Zero prompt and reward vs the question alone with its own reward.", "r1_zero", _prompt,
                       answer="answer_prompt"),
    "sync_strategy": GridSpec(
        "Colocated on one device: one optimizer step per rollout batch (A) or several epochs (B)?", "one_step",
        lambda base, c: {"one_step": off_policy_settings(base, 1, base.rollout_batch_size),
                         "multi_epoch": off_policy_settings(base, SYNC_EPOCHS[base.profile], base.train_batch_size)},
        answer="answer_sync_strategy"),
    "kl_drift": GridSpec("How far does the policy drift from the initial one (KL k1, k3) as reward rises?", "kl",
                         lambda base, c: {"kl": {"monitor_kl": True}}, answer="answer_kl_drift"),
    "leaderboard": GridSpec("The best settings the grids found, as one preset.", "best", _leaderboard,
                            needs=("learning_rate", "baselines", "length_normalization", "std_normalization",
                                   "off_policy_focused", "clip_ablation"), answer="answer_leaderboard"),
    "algorithms": GridSpec("Beyond the handouts: which of the 2025 GRPO variants learns best from the same start?",
                           "grpo", _algorithms),
}

# Run-to-run variation: the base recipe (the reference of learning_rate, length_normalization and
# std_normalization) repeated with `SEED_REPLICAS` seeds (`hw3lib.experiments.seeds`). Not one of `GRIDS`: it
# answers no handout question; it measures the seed band every one-seed grid's verdicts use.
SEED_SPEC = GridSpec("Run-to-run variation: the base recipe with several seeds, nothing else changed.", "base",
                     lambda base, c: {"base": {}})


GRID_NAMES.update(GRIDS, {SEED_GRID})


def smoke_note(name: str, profile: str) -> str:
    """`GridSpec.smoke_differs` of grid `name` in the smoke profile (how its question differs from the handout's);
    "" in the full profile or where the question is the same."""
    spec = GRIDS.get(name)
    return spec.smoke_differs if spec is not None and profile == "smoke" else ""


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
    (`GRIDS[grid].needs`: off_policy_focused, clip_ablation, leaderboard) `<grid>/<label>-<8 hex digits of the
    change>`. Other winners make a new run instead of resuming the run of an earlier derivation under the
    same label (which refused: "the config differs"); the same winners find the same run again. Only the
    change is hashed, so a run stays found when it is extended (more steps) or hw3lib adds a setting."""
    if grid not in GRIDS or not GRIDS[grid].needs:
        return f"{grid}/{label}"
    canonical = json.dumps(json.loads(json.dumps(change)), sort_keys=True)  # tuples -> lists, as in config.json
    return f"{grid}/{label}-{hashlib.sha1(canonical.encode()).hexdigest()[:8]}"


def shared_start(base: GRPOConfig) -> dict:
    """What a seed replica of `base` adds besides its seed: the base's own warm start (`warm_start_seed`), so that
    replicas differ in training luck only, as a grid's configs do; nothing for a run without a warm start. The
    replica's run name says `_shared_start` (earlier replicas, each from its own warm start, keep their folders)."""
    return {"warm_start_seed": base.seed} if base.warm_start_steps else {}


def build_grid(name: str, profile: str | None = None, steps: int | None = None, seeds: Sequence[int] | None = None,
               choices: dict | None = None) -> Grid:
    """The grid `name` in `profile` (default: $HW3_PROFILE / GPU present), `steps` GRPO steps per run
    (default: the profile's; broad off-policy runs a fraction of it), repeated for each of `seeds`
    (default: the profile's seed only). `choices` carries what dependent grids pick up from earlier ones."""
    if name not in GRIDS and name != SEED_GRID:
        raise ValueError(f"unknown grid {name!r}: choose one of {', '.join(GRIDS)}")
    spec = GRIDS.get(name, SEED_SPEC)
    base = grid_base(name, profile, steps)
    changes = spec.configs(base, choices or {})
    reference = spec.reference.format(rollout=base.rollout_batch_size, lr=lr_label(base.learning_rate))
    seeds = list(seeds) if seeds else [base.seed]
    configs, all_changes, groups = {}, {}, {}
    for label, change in changes.items():
        groups[label] = []
        for i, seed in enumerate(seeds):
            seeded = change if seed == base.seed else {**change, "seed": seed, **shared_start(base)}
            run_label = label if i == 0 else f"{label}_seed{seed}" + ("_shared_start" if shared_start(base) else "")
            configs[run_label] = base.replace(name=grid_run_name(name, run_label, seeded), **seeded)
            all_changes[run_label] = dict(seeded)
            groups[label].append(run_label)
    rationale = (off_policy_rationale(name, base, changes, common_base(profile, steps).n_grpo_steps)
                 if name in ("off_policy", "off_policy_focused") else "")
    return Grid(name, base.profile, base, configs, all_changes, reference, spec.question, groups, rationale)


def run_sweep(name: str, profile: str | None = None, steps: int | None = None, seeds: Sequence[int] | None = None,
              check: Callable[[], DivergenceCheck] = DivergenceCheck) -> GridResult:
    """Run grid `name` after the grids it needs (finished ones are only read back), with the choices they lead
    to (`choices_from`). The winners are picked by verdicts that count the base recipe's seed band when it is
    measured: `hw3lib.experiments.seeds.sweep` measures it first (the CLI and the parallel workers call that)."""
    if name not in GRIDS:
        raise ValueError(f"unknown grid {name!r}: choose one of {', '.join(GRIDS)}")
    earlier = {needed: choices_from(run_sweep(needed, profile, steps, seeds, check)) for needed in GRIDS[name].needs}
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


def winner_settings(name: str, changes: dict, loss_type: str) -> dict:
    """The settings a grid's winner passes on: its changes, or only its loss type (`GridSpec.loss_only`)."""
    return {"loss_type": loss_type} if name in GRIDS and GRIDS[name].loss_only else dict(changes)


def choices_from(result: GridResult) -> dict:
    """What later grids take from a finished one.

    `settings`: the changes of the winner (`hw3lib.experiments.compare.pick_winner`: the best-ending run that did
    not diverge if it beats the reference beyond noise, else the reference; `GridSpec.loss_only`: only its
    `loss_type`). The broad off-policy grid adds `top` (the two best off-policy settings), the focused one
    `off_policy` (the best off-policy setting).
    """
    grid = result.grid
    pick = pick_winner(compare(result), grid.reference)
    winner = pick.winner["label"]
    choices = {"settings": winner_settings(grid.name, grid.changes[winner], result.results[winner].config.loss_type),
               "reference_won": pick.reference_won}
    off_policy = [grid.changes[r["label"]] for r in pick.ranked if r["label"] != grid.reference]  # reference: on-policy
    if grid.name == "off_policy":
        choices["top"] = off_policy[:2]
    if grid.name == "off_policy_focused":
        if not off_policy:
            raise ValueError(f"grid {grid.name}: every off-policy run diverged, so there is no setting to ablate")
        choices["off_policy"] = off_policy[0]
    return choices
