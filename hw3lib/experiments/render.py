"""The words of the grid reports, in one place: findings (numbers and verdicts) in, sentences out.

The findings come from `hw3lib.experiments.compare` (rows and their `Noise`), `hw3lib.experiments.trends` (trends,
stability, KL drift) and the answer builders; every verdict is worded by `hw3lib.core.stats.noise_words`. Numbers are
formatted here once (`pct`, `points`, `num`), so the table, the answers and the tests print them the same way.
"""

from __future__ import annotations

from hw3lib.core.stats import Noise, noise_words

# The bars the stability sentences name (hw3lib.experiments.trends decides with the same constants).
SPIKE_FACTOR = 5.0


def pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def points(diff: float) -> str:
    return f"{100 * diff:+.1f} points"


def noise(found: Noise | float, band: float | None = None) -> str:
    """`noise_words` of a `Noise`, or of a difference and its (unpaired) band."""
    return noise_words(found if isinstance(found, Noise) else Noise(found, band))


def compared(value: float, other: float) -> str:
    """`larger`, `smaller` or `about the same` (within 0.5% of `other`)."""
    if abs(value - other) <= 0.005 * abs(other):
        return "about the same"
    return "larger" if value > other else "smaller"


def num(value: float, digits: int = 3) -> str:
    return f"{value:.{digits}g}"


def times(ratio: float | None) -> str:
    return f"{ratio:.1f}x" if ratio is not None else "(median 0)"


# ---- trends -----------------------------------------------------------------------------------------------------

def trend_text(found: dict, what: str) -> str:
    """One metric's trend (`hw3lib.experiments.trends.trend`) in words: rose / fell beyond its band, else flat."""
    if "diff" not in found:
        return f"{what}: too few steps ({found['steps']} GRPO steps; each third needs at least 2)"
    first, last = num(found["first_third"]), num(found["last_third"])
    words = noise_words(Noise(found["diff"], found["band"]), unit="")
    if found["direction"] == "flat":
        return f"{what} flat ({words}): {first} -> {last}"
    return f"{what} {found['direction']}: {first} -> {last} ({found['diff']:+.3g}, {words})"


def trend_sentence(label: str, trends: dict[str, dict]) -> str:
    """One sentence: every logged metric's trend of config `label` (first vs last third of its GRPO steps)."""
    if not trends:
        return f"`{label}` logged none of the training metrics."
    if all("diff" not in t for t in trends.values()):
        steps = max(t["steps"] for t in trends.values())
        return f"`{label}`: too few GRPO steps ({steps}) for a trend: each third needs at least 2."
    return f"`{label}`: " + "; ".join(t["text"] for t in trends.values()) + "."


# ---- stability: rendered once, for the stability table and every answer that speaks of it ---------------------

def k3_tail(kl: dict) -> str:
    """At a k3 spike: do k1 and k3 (two estimators of the same KL) agree at that step? "" when they do."""
    if not kl.get("k3_tail"):
        return ""
    return (f" -- at that step k1 was {num(kl['k1'])} against k3 {num(kl['k3'])}: on tokens sampled from the policy "
            f"both estimate the same KL, so a k3 this far above k1 comes from a few tokens the policy now finds far "
            f"less likely than the reference did (k3 grows with the exponential of their log-ratio), not from a jump "
            f"of the KL itself")


def _stability_checks(s: dict) -> list[tuple[bool, str]]:
    """(a sign of instability?, its words) for each check of `trends.config_stability`'s findings."""
    kl, grad, drop, skipped = s["kl"], s["grad_norm"], s["reward_drop"], s["skipped_steps"]
    checks = [(skipped > 0, f"{skipped} optimizer steps skipped for a non-finite loss or gradient norm" if skipped
               else "no optimizer step skipped for a non-finite loss or gradient norm"),
              (s["diverged"], f"it diverged at GRPO step {s['stopped_at']} ({s['reason']})" if s["diverged"]
               else "no divergence")]
    if grad is not None:
        checks.append((grad["spike"], f"the gradient norm spiked to {num(grad['max'])} at GRPO step "
                                      f"{grad['grpo_step']} ({times(grad['ratio'])} the median; the bar: "
                                      f"{SPIKE_FACTOR:g}x)" if grad["spike"]
                       else f"no gradient-norm spike (largest {times(grad['ratio'])} the median)"))
    if drop is not None:
        fell = Noise(drop["drop"], drop["band"])
        checks.append((drop["beyond_noise"],
                       f"the training reward dropped {num(drop['from'])} -> {num(drop['to'])} at GRPO step "
                       f"{drop['grpo_step']}, {noise(fell)} (binomial, {drop['n']} rollouts per step)"
                       if drop["beyond_noise"] else "the training reward never fell from one GRPO step to the next"
                       if drop["drop"] <= 0 else f"no drop of the training reward beyond noise (largest "
                       f"{points(-drop['drop'])}, {noise(fell)})"))
    checks.append((kl is not None and kl["spike"],
                   "KL spikes: fewer than 3 GRPO steps with KL, too few to tell" if kl is None else
                   f"KL k3 spiked: +{num(kl['rise'])} to GRPO step {kl['grpo_step']} ({times(kl['ratio'])} the "
                   f"median one-step change){k3_tail(kl)}" if kl["spike"] else
                   f"no KL spike (largest one-step rise {times(kl['ratio'])} the median change)"))
    return checks


def render_stability(label: str, s: dict) -> str:
    """Does the run show instability -- skipped non-finite steps, divergence, a gradient-norm spike, a drop of the
    training reward beyond noise, a KL spike? The signs found, then what was checked and clear."""
    checks = _stability_checks(s)
    signs, clear = [w for bad, w in checks if bad], [w for bad, w in checks if not bad]
    head = f"Instability in `{label}`: " + "; ".join(signs) + "." if signs else f"No sign of instability in `{label}`."
    return head + (f" Checked and clear: {'; '.join(clear)}." if clear else "")


# ---- the grid's rows ---------------------------------------------------------------------------------------------

def band_kind(row: dict) -> str:
    """Where a row's bands come from, in words."""
    found = row["noise"]
    kind = "paired on the shared questions" if found["paired"] else f"unpaired binomial, {row['n']} questions"
    if row["seed_source"] == "repeats":
        return kind + ", and the seed repeats' spread"
    if row["seed_source"] == "base replicas":
        return kind + ", and the seed band measured on the base recipe's replicas (one seed per config here)"
    return kind + "; one seed per config and no seed band measured, so run-to-run variation is not counted"


def row_text(row: dict, reference: str) -> dict:
    """A `compare` row formatted for the table."""
    is_reference = row["label"] == reference
    return {"start": pct(row["start"]), "end": pct(row["end"]),
            "diff": "(reference)" if is_reference else f"{100 * row['diff']:+.1f} ± {100 * row['band']:.1f}",
            "beyond_noise": "-" if is_reference else ("yes" if row["beyond_noise"] else "no (within noise)"),
            "status": row["status"] if row["status"] != "diverged" else f"diverged @ {row['stopped_at']}"}


def noise_reading(rows: list[dict], reference: str, learn_points: float = 10.0, note: str = "") -> str:
    """In words, from `compare`'s rows: whether the reference learned (>= `learn_points` above its start), and for
    every other config its difference from the reference with its verdict; `note`: how the smoke setting's
    question differs from the handout's (`grids.smoke_note`), printed beside the verdicts."""
    from hw3lib.experiments.compare import row_noise

    ref = next(r for r in rows if r["label"] == reference)
    lines = [f"`{reference}` went from {pct(ref['start'])} to {pct(ref['end'])} "
             f"({100 * ref['rise']:+.1f} points: {'learned' if 100 * ref['rise'] >= learn_points else 'did not learn'} "
             f"by the {learn_points:g}-point bar)."]
    for row in rows:
        if row["label"] == reference:
            continue
        head = f"`{row['label']}` ends at {pct(row['end'])}, {points(row['diff'])} vs `{reference}`"
        if row["status"] == "diverged":
            head = (f"`{row['label']}` diverged at GRPO step {row['stopped_at']} ({row['reason']}); it ends at "
                    f"{pct(row['end'])}, {points(row['diff'])} vs `{reference}`")
        lines.append(f"{head}: {noise(row_noise(row))} ({band_kind(row)})"
                     + ("." if row["beyond_noise"] else ", so not distinguishable."))
    if note:
        lines.append(f"Smoke setting: {note}.")
    return "\n".join(f"- {line}" for line in lines)


# ---- KL drift ------------------------------------------------------------------------------------------------------

def render_kl_drift(found: dict) -> list[str]:
    """`trends.kl_drift`'s findings in words: the KL at the end against the reward's rise, and whether KL grew with
    reward (its correlation with the validation reward and Fisher interval)."""
    label = found["label"]
    if found["k3"] is None:
        return [f"`{label}` logged no KL (run it with `monitor_kl=True`)."]
    rise = Noise(**{k: found["rise"][k] for k in ("diff", "band", "paired", "seed_band", "p_value")})
    text = [f"`{label}`: at its last GRPO step the KL to the initial policy was k3 = {num(found['k3'])} and k1 = "
            f"{num(found['k1'])} nats/token (first step: k3 = {num(found['k3_first'])}, k1 = "
            f"{num(found['k1_first'])}); the validation answer reward went {pct(found['start'])} -> "
            f"{pct(found['end'])} ({points(rise.diff)}, {noise(rise)})."]
    grew = "grew" if found["grew"] else "did not grow"
    r, pairs = found["r"], found["pairs"]
    if pairs < 3:
        text.append(f"Too few validated steps with KL ({pairs}) to correlate KL with reward; k3 {grew} over the run.")
    elif r is None:
        text.append(f"Does KL grow with reward? Not measurable here: the validation reward (or KL) stayed constant "
                    f"across the {pairs} validated steps, while k3 {grew} over the run.")
    else:
        interval = (f", interval [{r['low']:+.2f}, {r['high']:+.2f}]" if r["low"] is not None
                    else " (too few steps for an interval)")
        text.append(f"Does KL grow with reward? {'Yes' if found['together'] else 'No'}: k3 {grew} over the run and its "
                    f"correlation with the validation reward across {pairs} validated steps (step 0 at KL 0) is "
                    f"r = {r['r']:+.2f}{interval}.")
    return text
