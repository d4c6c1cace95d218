"""The answers to each grid's written questions, one builder per grid (named by `GridSpec.answer`): each reads
the grid's findings (`Facts`: compare rows with their `Noise`, trends, stability, KL drift) and words them with
`hw3lib.experiments.render`, every verdict through `hw3lib.core.stats.noise_words`."""

from __future__ import annotations

from collections.abc import Callable

from hw3lib.core.stats import accuracy_interval
from hw3lib.experiments.compare import row_noise
from hw3lib.experiments.facts import Facts
from hw3lib.experiments.render import compared, noise, num, pct, points, render_kl_drift
from hw3lib.experiments.trends import METRIC_NAMES, kl_drift

# The learning-rate deliverable: the course handout asks for a model reaching at least 25% validation accuracy
# (stated for the full profile: MATH with the course's Qwen model; the smoke profile's tiny model on its toy task
# is not expected to meet it, but the sentence still says met / not met with the value).
VALIDATION_ACCURACY_TARGET = 0.25


def _versus_reference(facts: Facts, row: dict) -> str:
    return f"{points(row['diff'])} vs `{facts.grid.reference}`, {noise(row_noise(row))}"


def _contrast(facts: Facts, a: str, b: str, key: str, what: str, unit: str = "", digits: int = 3) -> str | None:
    """`what`: group a's mean over its GRPO steps (and last step) vs group b's, with their ratio; None if
    either did not log it."""
    mean_a, mean_b = facts.stat(a, key), facts.stat(b, key)
    if mean_a is None or mean_b is None:
        return None
    last_a, last_b = facts.stat(a, key, "last"), facts.stat(b, key, "last")
    unit = f" {unit}" if unit else ""
    if mean_b == 0:
        relation = "the same" if mean_a == 0 else "higher"
    else:
        ratio = mean_a / mean_b
        relation = f"{ratio:.2f}x, " + ("higher" if ratio > 1.005 else "lower" if ratio < 0.995 else "about the same")
    return (f"{what}: `{a}` averaged {num(mean_a, digits)}{unit} over its GRPO steps (last step "
            f"{num(last_a, digits)}) vs {num(mean_b, digits)}{unit} (last {num(last_b, digits)}) for `{b}` "
            f"({relation}).")


def _diverged_sentences(facts: Facts, name: Callable[[dict], str] = lambda r: f"`{r['label']}`") -> list[str]:
    return [f"{name(r)} diverged at GRPO step {r['stopped_at']} ({r['reason']}); it is kept in the table and "
            f"plots, ending at {pct(r['end'])}." for r in facts.diverged()]


def _ends(row: dict) -> str:
    return f"{pct(row['start'])} -> {pct(row['end'])}"


def answer_learning_rate(facts: Facts) -> list[str]:
    def lr(row: dict) -> str:
        return f"lr {facts.config(row['label']).learning_rate:g}"

    answers, ranked = [], facts.finished()
    if not ranked:
        answers.append("Every learning rate diverged, so none won.")
    else:
        best = ranked[0]
        sentence = f"Winner: {lr(best)} ended highest, at {pct(best['end'])} (from {pct(best['start'])})"
        if len(ranked) > 1:
            second = ranked[1]
            margin = facts.versus(best["label"], second["label"])
            sentence += (f"; its margin over the next best, {lr(second)} at {pct(second['end'])}, is "
                         f"{points(margin.diff)}, {noise(margin)}")
        answers.append(sentence + ".")
        if best["label"] == facts.grid.reference:
            answers.append(f"That is the base recipe's rate ({lr(best)}).")
        else:
            answers.append(f"Against the base rate ({lr(facts.ref)}, {pct(facts.ref['end'])}): "
                           f"{points(best['diff'])}, {noise(row_noise(best))}.")
    answers += _diverged_sentences(facts, lambda r: lr(r))
    if not facts.diverged():
        top = max(facts.rows.values(), key=lambda r: facts.config(r["label"]).learning_rate)
        sentence = f"No rate diverged within {facts.grid.base.n_grpo_steps} GRPO steps"
        if top is not facts.ref:
            sentence += f"; the largest, {lr(top)}, ended at {pct(top['end'])} ({_versus_reference(facts, top)})"
        answers.append(sentence + ".")
    by_rate = sorted(facts.rows.values(), key=lambda r: facts.config(r["label"]).learning_rate)
    answers.append("Rise of the validation answer reward by rate: " + ", ".join(
        f"{lr(r)}: {points(r['rise'])}" + (" (diverged)" if r["status"] == "diverged" else "") for r in by_rate) + ".")
    return answers + [_accuracy_target(facts, ranked, lr)] + _other_metrics(facts, ranked)


def _accuracy_target(facts: Facts, ranked: list[dict], name: Callable[[dict], str]) -> str:
    """The handout's learning-rate deliverable, `VALIDATION_ACCURACY_TARGET`, checked on the best finished run."""
    target = VALIDATION_ACCURACY_TARGET
    head = (f"The handout asks for a validation accuracy of at least {pct(target)} (stated for the full profile, "
            f"MATH with the course's model")
    head += ("; this is the smoke profile, a tiny model on its toy task, not expected to meet it)"
             if facts.grid.profile == "smoke" else ")")
    if not ranked:
        return head + ": every run diverged -> not met."
    best = ranked[0]
    interval = accuracy_interval(best["end"], best["n"] * best["seeds"])
    return (f"{head}: best run {name(best)} at {pct(best['end'])} (Wilson interval {pct(interval.low)} to "
            f"{pct(interval.high)}, 2 s.e.) -> "
            f"{'met' if best['end'] >= target else 'not met'}.")


def _other_metrics(facts: Facts, ranked: list[dict]) -> list[str]:
    """Entropy, gradient norm and response length of the winner against the reference (the runner-up when
    the reference won)."""
    if not ranked:
        return []
    best = ranked[0]
    other = facts.ref if best is not facts.ref else (ranked[1] if len(ranked) > 1 else None)
    if other is None:
        return []
    return _contrasts(facts, best["label"], other["label"], tuple(k for k, _, _ in CONTRASTED))


def _reward_answer(facts: Facts, row: dict) -> str:
    return (f"`{row['label']}` ended at {pct(row['end'])} vs {pct(facts.ref['end'])} for `{facts.grid.reference}` "
            f"({points(row['diff'])}): {noise(row_noise(row))}.")


CONTRASTED = (("train/entropy", "Entropy", "nats/token"), ("train/grad_norm", "Gradient norm", ""),
              ("train/response_length_mean", "Response length", "tokens"))


def _contrasts(facts: Facts, a: str, b: str, keys: tuple[str, ...]) -> list[str]:
    """`_contrast` of group a against b for each of `keys` (from `CONTRASTED`); "not logged" where missing."""
    return [_contrast(facts, a, b, key, what, unit) or f"{what}: not logged by these runs."
            for key, what, unit in CONTRASTED if key in keys]


def answer_baselines(facts: Facts) -> list[str]:
    answers = []
    for row in facts.others:
        answers.append(_reward_answer(facts, row))
        answers += _contrasts(facts, row["label"], facts.grid.reference, tuple(k for k, _, _ in CONTRASTED))
    return answers + _diverged_sentences(facts)


def answer_length_normalization(facts: Facts) -> list[str]:
    answers = [_reward_answer(facts, row) for row in facts.others]
    per_response = next((r["label"] for r in facts.rows.values()
                         if facts.config(r["label"]).length_normalization == "masked_mean"), None)
    constant = next((r["label"] for r in facts.rows.values()
                     if facts.config(r["label"]).length_normalization == "constant"), None)
    if per_response is None or constant is None:
        return answers + _diverged_sentences(facts)
    cfg = facts.config(constant)
    budget = cfg.length_normalization_constant or cfg.sampling_max_tokens
    length = {g: (facts.stat(g, "train/response_length_mean", "first"), facts.stat(g, "train/response_length_mean"),
                  facts.stat(g, "train/response_length_mean", "last")) for g in (per_response, constant)}
    grad = {g: facts.stat(g, "train/grad_norm") for g in (per_response, constant)}
    if None in (*length[per_response], *length[constant], *grad.values()):
        return answers + ["Response lengths or gradient norms were not logged, so the trade-off is not measured."]
    answers.append(
        f"`{per_response}` (each response's loss divided by its own length): pro -- every response counts the same "
        f"whatever its length, so the update's size does not depend on how long the responses are (mean gradient "
        f"norm {num(grad[per_response])}); con -- a token of a long response weighs less than a token of a short one, "
        f"so a long wrong response is penalised less per token (a length bias): its mean response length went "
        f"{num(length[per_response][0])} -> {num(length[per_response][2])} tokens.")
    ratio = length[constant][1] / budget
    answers.append(
        f"`{constant}` (the token sum divided by the budget, {budget:g} tokens): pro -- every token weighs the same, "
        f"with no length bias (Dr. GRPO); con -- the update shrinks by the mean length over the budget: at "
        f"{num(length[constant][1])} tokens on average that is {ratio:.2f} of the budget, and its mean gradient norm "
        f"was {num(grad[constant])} vs {num(grad[per_response])} ({grad[constant] / grad[per_response]:.2f}x), so its "
        f"effective step size is {compared(grad[constant], grad[per_response])} and "
        f"changes as responses lengthen (its mean length went {num(length[constant][0])} -> "
        f"{num(length[constant][2])} tokens).")
    return answers + _diverged_sentences(facts)


def answer_std_normalization(facts: Facts) -> list[str]:
    answers = []
    for row in facts.others:
        answers.append(_reward_answer(facts, row))
        for key, what, unit in (("train/grad_norm", "Gradient norm", ""), ("train/entropy", "Entropy", "nats/token")):
            sentence = _contrast(facts, row["label"], facts.grid.reference, key, what, unit)
            if sentence:
                answers.append(sentence)
    answers.append("Dividing by the group std gives every group unit spread: a question whose rollouts nearly all "
                   "agree (almost all right or all wrong) is pushed as hard as a contested one, which is what the "
                   "gradient norms above measure.")
    return answers + _diverged_sentences(facts)


def answer_off_policy(facts: Facts) -> list[str]:
    ref, answers = facts.ref, []
    ranked = facts.finished()
    if not ranked:
        return ["Every setting diverged."] + _diverged_sentences(facts)
    best = ranked[0]
    if best is ref:
        runner_up = next((r for r in ranked if r is not ref), None)
        answers.append(f"Per GRPO step the on-policy run `{ref['label']}` ended highest, at {pct(ref['end'])}"
                       + (f"; the best off-policy setting, `{runner_up['label']}`, ended at {pct(runner_up['end'])} "
                          f"({points(runner_up['diff'])}, {noise(row_noise(runner_up))})."
                          if runner_up else "."))
    else:
        answers.append(f"Per GRPO step `{best['label']}` ended highest, at {pct(best['end'])}: "
                       f"{_versus_reference(facts, best)}.")
    horizon = facts.wall_clock_s(ref["label"])
    reached = {r["label"]: facts.reward_at(r["label"], horizon) for r in ranked}
    fastest = max(reached, key=reached.get)
    ref_reached = reached.get(ref["label"], ref["end"])
    answers.append(f"Per wall-clock second, at the on-policy run's end ({horizon / 60:.1f} minutes) the runs had "
                   f"reached: " + ", ".join(f"`{label}` {pct(value)}" for label, value in reached.items()) + ".")
    if fastest == ref["label"]:
        answers.append(f"So per wall-clock second the on-policy run is best ({pct(ref_reached)} by then).")
    else:
        ahead = facts.unpaired(reached[fastest], ref_reached)
        answers.append(f"So per wall-clock second `{fastest}` is best: {points(ahead.diff)} vs "
                       f"on-policy at the same time, {noise(ahead)}.")
    def per_minute(row: dict) -> float:
        return 100 * row["rise"] / max(facts.wall_clock_s(row["label"]) / 60, 1e-9)

    answers.append("Seconds per GRPO step and validation-reward rise per wall-clock minute: " + ", ".join(
        f"`{r['label']}` {facts.seconds(r['label'])['total']:.1f} s, {per_minute(r):+.1f} points/min"
        for r in facts.rows.values()) + ".")
    answers += [f"`{label}`, first vs last third of its GRPO steps (Welch band, Student's t): "
                f"{facts.trend_text(label, 'train/entropy')}; {facts.trend_text(label, 'train/response_length_mean')}."
                for label in facts.rows]
    return answers + _diverged_sentences(facts)


def answer_clip_ablation(facts: Facts) -> list[str]:
    answers = []
    for row in facts.rows.values():
        label = row["label"]
        clip, ratio = facts.stat(label, "train/clip_fraction"), facts.stat(label, "train/ratio_mean")
        if clip is not None:
            answers.append(f"`{label}` clipped {pct(clip)} of the tokens' ratios on average over its GRPO steps "
                           f"(last step {pct(facts.stat(label, 'train/clip_fraction', 'last'))}); it ended at "
                           f"{pct(row['end'])}.")
        else:
            answers.append(f"`{label}` does not clip (no clip fraction); mean importance ratio "
                           f"{num(ratio) if ratio is not None else 'not logged'}; it ended at {pct(row['end'])}.")
    for row in facts.others:
        answers.append(_reward_answer(facts, row))
        answers += _contrasts(facts, row["label"], facts.grid.reference,
                              ("train/grad_norm", "train/entropy", "train/response_length_mean"))
    return answers + _diverged_sentences(facts)


def answer_prompt(facts: Facts) -> list[str]:
    from hw3lib.tasks.prompt_table import reward_fn_for

    answers = []
    for row in facts.rows.values():
        prompt = facts.config(row["label"]).prompt
        answers.append(f"`{row['label']}` (prompt `{prompt}`, trained and validated with its own "
                       f"`{reward_fn_for(prompt).__name__}`): {_ends(row)} ({points(row['rise'])}).")
    for row in facts.others:
        answers.append(f"The end values differ by {points(row['diff'])} (`{row['label']}` minus "
                       f"`{facts.grid.reference}`), {noise(row_noise(row))}; each is measured with its own "
                       "reward function, so this compares each prompt by its own yardstick, not the same grading.")
        answers += _contrasts(facts, row["label"], facts.grid.reference,
                              ("train/response_length_mean", "train/entropy", "train/grad_norm"))
        answers.append(_prompt_explanation(facts, row))
    return answers + _diverged_sentences(facts)


EXPLAINING = ("train/response_length_mean", "train/entropy", "train/grad_norm", "train/format_reward")


def _format_rates(facts: Facts, label: str) -> str | None:
    """The validation format reward at the first and last validation, where logged."""
    evals = [e for e in facts.runs(label)[0].eval_rows if "eval/format_reward" in e]
    if not evals:
        return None
    return f"`{label}` {pct(evals[0]['eval/format_reward'])} -> {pct(evals[-1]['eval/format_reward'])}"


def _prompt_explanation(facts: Facts, row: dict) -> str:
    """An attempted explanation from the numbers: the logged metrics whose trends (first vs last third, beyond
    noise) differ between the two prompts' runs, and the validation format rates."""
    label, ref = row["label"], facts.grid.reference
    differing = []
    for key in EXPLAINING:
        mine, theirs = facts.trends(label).get(key), facts.trends(ref).get(key)
        if mine and theirs and "diff" in mine and "diff" in theirs and mine["direction"] != theirs["direction"]:
            differing.append(f"{METRIC_NAMES[key]} ({mine['direction']} for `{label}`: {num(mine['first_third'])} -> "
                             f"{num(mine['last_third'])}; {theirs['direction']} for `{ref}`: "
                             f"{num(theirs['first_third'])} -> {num(theirs['last_third'])})")
    gap = ("there is no gap beyond noise to explain" if not row["beyond_noise"]
           else f"the gap of {points(row['diff'])} goes with " + ("these differences" if differing else
                                                                  "no difference in the logged metrics' trends"))
    sentence = "Attempted explanation, from the logged metrics: "
    sentence += ("the runs moved differently in " + "; ".join(differing) if differing else
                 "no logged metric moved differently between the two runs beyond noise (first vs last third)")
    rates = [r for r in (_format_rates(facts, ref), _format_rates(facts, label)) if r]
    if rates:
        sentence += "; validation format reward " + ", ".join(rates)
    return f"{sentence}; {gap}."


def answer_sync_strategy(facts: Facts) -> list[str]:
    a = facts.ref
    answers = []
    for b in facts.others:
        ta, tb = facts.seconds(a["label"]), facts.seconds(b["label"])
        answers.append(f"Time per GRPO step: (A) `{a['label']}` {ta['total']:.1f} s (training {ta['train']:.1f} s, "
                       f"generation {ta['generation']:.1f} s) vs (B) `{b['label']}` {tb['total']:.1f} s (training "
                       f"{tb['train']:.1f} s, generation {tb['generation']:.1f} s): B takes "
                       f"{tb['total'] / ta['total']:.2f}x A's time per step.")
        wa, wb = facts.wall_clock_s(a["label"]), facts.wall_clock_s(b["label"])
        answers.append(f"At the end: A {pct(a['end'])} after {wa / 60:.1f} minutes, B {pct(b['end'])} after "
                       f"{wb / 60:.1f} minutes ({points(b['diff'])} for B, {noise(row_noise(b))}).")
        horizon = min(wa, wb)
        ra, rb = facts.reward_at(a["label"], horizon), facts.reward_at(b["label"], horizon)
        ahead = facts.unpaired(rb, ra)
        verdict = ("neither is ahead beyond noise" if not ahead.beyond
                   else f"{'B' if rb > ra else 'A'} is ahead per wall-clock second")
        answers.append(f"At the same wall-clock ({horizon / 60:.1f} minutes): A had {pct(ra)}, B {pct(rb)} "
                       f"({points(rb - ra)} for B, {noise(ahead)}): {verdict}.")
    tags = {a["label"]: "A", **{b["label"]: "B" for b in facts.others}}
    answers += [f"Stability of ({tag}) `{label}`: " + " ".join(facts.stability(label)["text"])
                for label, tag in tags.items()]
    return answers + _diverged_sentences(facts)


def answer_kl_drift(facts: Facts) -> list[str]:
    """Per config: `trends.kl_drift`'s findings in words, then its stability (rendered once, as everywhere)."""
    answers = []
    for row in facts.rows.values():
        found = kl_drift(facts, row)
        answers += render_kl_drift(found)
        if found["k3"] is not None:
            answers.append(facts.stability(row["label"])["text"][0])
    return answers + _diverged_sentences(facts)


def answer_leaderboard(facts: Facts) -> list[str]:
    answers = []
    for row in facts.rows.values():
        changes = facts.grid.changes[row["label"]]
        cfg = facts.config(row["label"])
        settings = (", ".join(f"{key} = {value}" for key, value in changes.items()) if changes
                    else "none (how each grid's choice was kept or overridden: the selection steps)")
        rise = facts.rise(row["label"])
        answers.append(f"Settings changed from the base recipe: {settings}. With `{cfg.model}` on `{cfg.dataset}` for "
                       f"{cfg.n_grpo_steps} GRPO steps the validation answer reward went {_ends(row)} "
                       f"({points(row['rise'])}, {noise(rise)}) in "
                       f"{facts.wall_clock_s(row['label']) / 60:.1f} minutes.")
    return answers + _diverged_sentences(facts)


def answer_generic(facts: Facts) -> list[str]:
    return [_reward_answer(facts, row) for row in facts.others] + _diverged_sentences(facts)
