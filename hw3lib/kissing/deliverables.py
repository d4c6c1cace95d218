"""The kissing deliverables in data/kissing_number/: `program.py`, its `report.md` and, after a live
LLM conversation produced the best program, that conversation's `conversation_log.json`.

- `search_report(folder)`: re-runs the search that wrote `program.py`
  (`hw3lib.kissing.search.best_program_search`: deterministic for its iteration budget and seed)
  and refuses to go on unless the re-run writes the stored file byte for byte, so the report
  describes the search that really produced it. It then computes what the report states: the
  method, the compute (wall and CPU seconds per phase, iterations, candidates, sandboxed
  evaluations, LLM calls and tokens: 0 here), the score history of both searches, the largest free
  cap of the final set (`hw3lib.kissing.geometry.largest_free_cap`: an estimate with a certified
  lower bound), its shell neighbourhood, what limited the search, and a reflection.
- `conversation_report(folder)`: the same report for a program stored from a live conversation
  (method, compute and history read from its `conversation_log.json`).
- `report_data(folder)` picks whichever of the two (or the core search, `core_program`) produced
  `program.py`; `report_markdown(data)`
  renders it and `writeup_summary(data)` gives the writeup its content (notebook 06 computes both).
- `write_report(folder, overwrite=False)`: writes `report.md` atomically; refuses to replace an
  existing report unless `overwrite=True`.
- `promote_run(run_dir, folder, overwrite=False)`: stores a live run's best program, its
  `conversation_log.json`, its own report (`conversation_report.md` + plot) and a regenerated
  `report.md` in `folder`, only when the run beat the stored program. A run driven by recorded
  replies (`source: replay`, e.g. the test fixture) is refused: it is never a conversation.

Command line: `hw3 kissing report [--overwrite]` and `hw3 kissing promote RUN_DIR [--overwrite]`
(also `python -m hw3lib.kissing.deliverables report|promote ...`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import time
from fractions import Fraction
from pathlib import Path

from hw3lib.core.io import atomic_write_bytes, atomic_write_text, project_root, read_json
from hw3lib.kissing.constructions import DIMENSION, johnson_bound
from hw3lib.kissing.evaluator import evaluate_program
from hw3lib.kissing.orbit_search import summary as orbit_summary
from hw3lib.kissing.rational_forms import similarity_factor
from hw3lib.kissing.geometry import KISSING_ANGLE_DEG, largest_free_cap, shell_neighbourhood
from hw3lib.kissing.report import KNOWN_BOUNDS, REPLAY_LABEL, is_replay, load_log, reflection
from hw3lib.kissing.search import best_program_search, program_source
from hw3lib.kissing.records import records_markdown, verify_records
from hw3lib.kissing.verify import verify

CAP_STARTS = 2000
CONVERSATION_FILES = ("conversation_log.json", "conversation_report.md", "score_vs_iteration.png")
HEADINGS = ("Method", "Compute used", "Score history", "Largest free cap of the final set", "What limited it",
            "Orbit search beyond 582", "Core-and-remainder search", "Published records, verified here",
            "LLM conversation", "Reflection")
ORBIT_SEARCH_FILE = "orbit_search.json"  # the log of hw3lib.kissing.orbit_search, stored with --store


class ReplayRefused(ValueError):
    """A replayed (scripted) run was offered as a real conversation."""


def default_folder() -> Path:
    return project_root() / "data" / "kissing_number"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _machine() -> dict:
    return {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine()}


def _stored_points(program: Path) -> tuple[list, dict]:
    """The stored program's points and metrics, from the sandboxed evaluator (as the course scores it)."""
    metrics = evaluate_program(program, timeout_s=60, return_points=True)
    points = metrics.pop("points", None)
    if not metrics["validity"] or points is None:
        raise ValueError(f"{program}: not a valid program ({metrics['message']}); nothing to report on")
    return points, metrics


# ---------------------------------------------------------------------------------------------
# The final set: its largest free cap, its shell, what stopped growth


def final_set_analysis(points, cap_starts: int | None = None, seed: int = 0) -> dict:
    start, cpu = time.perf_counter(), time.process_time()
    cap = largest_free_cap(points, random_starts=CAP_STARTS if cap_starts is None else cap_starts, seed=seed).to_dict()
    shell = shell_neighbourhood(points)
    return {"cap": cap, "shell": shell,
            "analysis_s": {"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu}}


def _cap_sentence(cap: dict) -> str:
    where = (f"integer direction {tuple(cap['direction'])}, cos^2 = {cap['cos_sq']} exactly" if cap["exact"]
             else "a floating-point direction")
    verdict = (f"at least {KISSING_ANGLE_DEG:g} degrees: one more sphere fits there" if cap["fits_another"] else
               f"{KISSING_ANGLE_DEG - cap['angle_deg']:.3f} degrees short of the {KISSING_ANGLE_DEG:g} a new sphere "
               "needs, so as far as this search sees the set is saturated: no sphere can be added without moving "
               "the others")
    return (f"The largest free cap found has angular radius {cap['angle_deg']:.4f} degrees ({where}): "
            f"{verdict}.")


def _shell_sentence(shell: dict | None, iterations: int | None, found_at: int | None) -> str:
    if shell is None:
        return ("The final set mixes squared norms (or lies on a shell too large to enumerate), so its shell "
                "neighbourhood was not analysed.")
    counts = ", ".join(f"{v} conflict with {k}" for k, v in sorted(shell["conflicts"].items()))
    text = (f"In the norm-{shell['norm_sq']} shell ({shell['shell_size']} integer vectors, "
            f"{shell['conflict_edges']} conflicting pairs) {shell['free']} vectors are free to add; of the other "
            f"{shell['shell_size'] - shell['members']}, {counts} member(s). A (1,2)-swap (drop one, add two) "
            f"{'exists' if shell['swap_exists'] else 'does not exist'}")
    if shell["fewest_conflicts"]:
        text += f"; adding any shell vector means first removing at least {shell['fewest_conflicts']} members"
        if not shell["swap_exists"]:
            text += ", so the set is a local maximum for the search's moves"
    if iterations is not None:
        text += (f". {iterations} iterations of perturbation and swaps found no larger set (the best, "
                 f"{shell['members']} points, was already there at iteration {found_at})")
    return text + "."


def _bounds_sentence(num_points: int) -> str:
    gaps = ", ".join(f"{bound - num_points} short of {name} ({bound})" for name, bound in KNOWN_BOUNDS.items()
                     if bound > num_points)
    return f"{num_points} points is {gaps}." if gaps else f"{num_points} points reaches every known bound."


# ---------------------------------------------------------------------------------------------
# The report of the stored search


def _search_history(run) -> list[dict]:
    def phase(name: str, row: dict) -> str:
        return f"{name} (end)" if row.get("final") else name

    rows = [{"phase": phase("code search", r), "iteration": r["iteration"], "time_s": r["time_s"],
             "blocks": r["size"], "points": 2 * DIMENSION + 16 * r["size"]} for r in run.code_history]
    rows += [{"phase": phase("local search", r), "iteration": r["iteration"], "time_s": r["time_s"], "blocks": None,
              "points": r["size"]} for r in run.polished.history]
    return rows


def search_report(folder: str | Path | None = None, iterations: int = 5000, seed: int = 0,
                  cap_starts: int | None = None) -> dict:
    """Re-run the search behind `folder/program.py` and compute everything its report states (a dict)."""
    folder = Path(folder) if folder is not None else default_folder()
    program = folder / "program.py"
    if not program.is_file():
        raise FileNotFoundError(f"{program}: no stored program (write one with `python -m hw3lib.kissing.search "
                                "--write-program`)")
    wall, cpu = time.perf_counter(), time.process_time()
    run = best_program_search(iterations, seed)
    search_wall, search_cpu = time.perf_counter() - wall, time.process_time() - cpu
    if run.source != program.read_text(encoding="utf-8"):
        raise ValueError(f"{program} is not what `best_program_search(iterations={iterations}, seed={seed})` "
                         "writes: it was produced by another search or settings (pass the --iterations/--seed it "
                         "was written with), or by a conversation (`promote`)")
    _, metrics = _stored_points(program)
    points = run.points.tolist()
    blocks = len(run.code_blocks)
    found_at = next(r["iteration"] for r in run.polished.history if r["size"] == len(run.polished.points))
    return {
        "kind": "search", "generated": _now(), "program": "program.py",
        "program_sha256": hashlib.sha256(program.read_bytes()).hexdigest(), "reproduced": True,
        "num_points": len(points), "metrics": metrics, "seed": seed, "iterations": iterations,
        "code_blocks": blocks, "johnson_bound": johnson_bound(DIMENSION, 4, 2),
        "construction_points": run.construction_points, "polished_points": len(run.polished.points),
        "norm_sq": run.polished.extra["norm_sq"], "candidates": run.polished.extra["num_candidates"],
        "code_search_iterations": run.code_iterations, "search_iterations": run.polished.iterations,
        "found_at": found_at, "history": _search_history(run),
        "compute": {"wall_s": search_wall, "cpu_s": search_cpu, "phases": run.timings,
                    "sandboxed_evaluations": 1, "llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0,
                    "cost_usd": 0.0, "machine": _machine()},
        **final_set_analysis(points, cap_starts, seed), "conversation": _stored_conversation(folder),
    }


def _stored_conversation(folder: Path) -> dict | None:
    """What folder/conversation_log.json holds (None when absent); a replay there is an error."""
    path = folder / "conversation_log.json"
    if not path.is_file():
        return None
    log = load_log(folder)
    if is_replay(log):
        raise ReplayRefused(f"{path} records a replay ({REPLAY_LABEL}), not a conversation: remove it")
    return {"loop": log["loop"], "model": log.get("model"), "best": log.get("best"), "steps": len(log["steps"]),
            "usage": log.get("usage", {}), "reflection": reflection(log)}


def _search_method(d: dict) -> list[str]:
    return [
        f"`program.py` holds {d['num_points']} integer points in Z^11, all of squared norm {d['norm_sq']}. They were "
        "built, not searched for point by point: the 22 points ±2e_i plus all 16 sign vectors (±1, ±1, ±1, ±1) on "
        f"each block of a family of {d['code_blocks']} four-element subsets of {{0, ..., 10}} that pairwise share "
        "at most two elements (a binary constant-weight code of length 11, weight 4, distance 4). Every point "
        "then has squared norm 4 and every inner product is at most 2, so every pair is at squared distance "
        f">= 4: a valid kissing configuration of 22 + 16 x {d['code_blocks']} = {d['construction_points']} points.",
        "",
        f"1. The code was found by a seeded iterated local search for a maximum independent set in the graph of "
        f"4-subsets sharing 3 elements (`constructions.constant_weight_code`), which stops at the Johnson bound "
        f"({d['johnson_bound']} blocks); it took {d['code_search_iterations']} iterations.",
        f"2. The construction seeded `search.local_search` on the whole norm-{d['norm_sq']} shell "
        f"({d['candidates']} candidate vectors; valid sets are the independent sets of its conflict graph) for "
        f"{d['search_iterations']} iterations (seed {d['seed']}) of (1,2)-swaps, random perturbations and "
        f"restarts from the incumbent, to look for a larger set than the construction; it ended at "
        f"{d['polished_points']} points.",
        "3. The larger of the two sets was written as `program.py` and checked exactly (integer arithmetic).",
        "",
        "Why this way: structure beats blind search here. The code construction is the classical route to "
        "tau_11 >= 582, and a local search over the same shell can only confirm or improve it cheaply. No LLM "
        "wrote this program.",
        "",
        f"Reproduction: `python -m hw3lib.kissing.search --write-program --iterations {d['search_iterations']} "
        f"--seed {d['seed']}` rewrites the same file; generating this report re-ran that search and found its "
        f"output identical to the stored `program.py` (sha256 `{d['program_sha256'][:16]}...`).",
    ]


def _compute_lines(d: dict) -> list[str]:
    c = d["compute"]
    phases = ", ".join(f"{name.replace('_', ' ')} {t['wall_s']:.2f} s" for name, t in c["phases"].items())
    m = c["machine"]
    return [
        f"- Search (re-run while generating this report): {c['wall_s']:.2f} s wall, {c['cpu_s']:.2f} s CPU "
        f"on one core ({phases}).",
        f"- Work: {d['code_search_iterations']} code-search iterations, {d['search_iterations']} local-search "
        f"iterations over {d['candidates']} candidates; {c['sandboxed_evaluations']} sandboxed evaluation of "
        f"`program.py` ({d['metrics']['eval_time']:.2f} s).",
        f"- Final-set analysis (free cap, shell): {d['analysis_s']['wall_s']:.2f} s wall, "
        f"{d['cap']['random_starts']} random + {d['cap']['structured_directions']} structured directions.",
        f"- LLM: {c['llm_calls']} calls, {c['prompt_tokens'] + c['completion_tokens']} tokens, "
        f"${c['cost_usd']:.2f}.",
        f"- Machine: {m['platform']}, Python {m['python']}, {m['cpus']} CPU(s). The budget is an iteration "
        "count, not a time limit, so the program is the same on every machine; only the seconds differ.",
    ]


def _history_lines(d: dict) -> list[str]:
    rows = ["| phase | iteration | time (s) | blocks | points |", "|---|---|---|---|---|"]
    for r in d["history"]:
        rows.append(f"| {r['phase']} | {r['iteration']} | {r['time_s']:.3f} | "
                    f"{'-' if r['blocks'] is None else r['blocks']} | {r['points']} |")
    return ["One row per new best of each search, and its end (points = 22 + 16 x blocks during the code "
            "search).", "", *rows]


def _cap_lines(d: dict) -> list[str]:
    cap = d["cap"]
    return [
        "The largest free cap is the largest angular radius rho of a cap around some unit direction u that holds "
        "no point's direction in its interior: rho = max_u min_x angle(u, x). A new sphere fits iff rho >= 60 "
        "degrees.",
        "",
        f"- Estimate: **{cap['angle_deg']:.4f} degrees** (cos = {cap['cos']:.6f}), at "
        + (f"the integer direction {tuple(cap['direction'])} (cos^2 = {cap['cos_sq']}, exact)."
           if cap["exact"] else f"the unit direction {cap['direction']} (floating point)."),
        "- Bound: this is a certified *lower* bound (the direction above has this cap); no upper bound is "
        "proved, since finding the deepest hole of a spherical code exactly is hard.",
        f"- How: {cap['structured_directions']} integer directions of squared norm <= 3 and {cap['random_starts']} "
        f"random directions (seed {cap['seed']}), each refined by descent on a soft maximum of the cosines, "
        "then rounded to small integer directions and re-scored exactly. Random directions alone reach "
        f"{cap['best_random_unrefined_deg']:.2f} degrees before refinement and {cap['best_random_refined_deg']:.4f} "
        f"after; {cap['starts_near_best']} of them end within 0.1 degrees of the estimate.",
        f"- One more sphere fits: **{'yes' if cap['fits_another'] else 'no'}**.",
    ]


def _search_limits(d: dict) -> list[str]:
    blocks, bound = d["code_blocks"], d["johnson_bound"]
    code = (f"The code has {blocks} blocks, the Johnson bound for this code, so the construction cannot give "
            f"more than 22 + 16 x {bound} = {2 * DIMENSION + 16 * bound} points." if blocks >= bound else
            f"The code has {blocks} blocks, below the Johnson bound {bound}: a better code search could add "
            f"{16 * (bound - blocks)} points.")
    saturated = not d["cap"]["fits_another"] and d["shell"] is not None and not d["shell"]["swap_exists"]
    further = ("Going further needs a different configuration (moving points, other norms or non-integer "
               "coordinates), not growth of this one. " if saturated else "")
    return [code, _shell_sentence(d["shell"], d["search_iterations"], d["found_at"]), _cap_sentence(d["cap"]),
            further + _bounds_sentence(d["num_points"])]


def _structural_sentence(d: dict) -> str:
    shell, cap = d["shell"], d["cap"]
    facts = [text for holds, text in (
        (d["code_blocks"] >= d["johnson_bound"], "the construction sits at the Johnson bound"),
        (shell is not None and shell["free"] == 0 and not shell["swap_exists"],
         "the set is a local maximum of the shell search's moves"),
        (not cap["fits_another"], "as far as the cap search sees, no sphere fits anywhere")) if holds]
    if not facts:
        return "None of the structural limits above holds, so a longer or different search may well add points."
    return "The limit is structural: " + "; ".join(facts) + "."


def _search_reflection(d: dict) -> list[str]:
    gain = d["polished_points"] - d["construction_points"]
    total = d["compute"]["wall_s"]
    return [
        f"{d['construction_points']} of the {d['num_points']} points come from the construction; the "
        f"{d['search_iterations']}-iteration local search added {gain}, its best coming at iteration {d['found_at']}. "
        f"The whole search takes {total:.2f} s. A longer run of the same moves was not tried for this report; "
        "given the limits above (no free vector, no (1,2)-swap) it would have to get lucky with large "
        "perturbations.",
        _structural_sentence(d),
        "The LLM loops of `hw3lib.kissing.loops` would be the way to propose other configurations; "
        + ("a live conversation is stored beside this report (below)." if d["conversation"] else
           "none has been run live for this submission, and the recorded replies that notebook 06 replays without "
           f"an endpoint are a {REPLAY_LABEL}."),
    ]


def _conversation_lines(d: dict) -> list[str]:
    conv = d.get("conversation")
    if conv is None:
        return ["No live LLM conversation is stored here: `conversation_log.json` is written only from a live run "
                "(`hw3 kissing promote RUN_DIR`), and the replay fixture `tests/fixtures/kissing_replay.json` is a "
                f"{REPLAY_LABEL}, never stored as a conversation."]
    usage = conv["usage"]
    best = conv.get("best") or {}
    return [f"`conversation_log.json`: a live {conv['loop']} run of `{conv['model']}`, {conv['steps']} iterations, "
            f"best score {best.get('score', 0):g}; {usage.get('calls', 0)} calls, "
            f"{usage.get('prompt_tokens', 0) + usage.get('completion_tokens', 0)} tokens. Its own report is "
            "`conversation_report.md`" + (" (its reflection is below)." if d["kind"] == "conversation" else "."),
            *(["", *[f"- {line}" for line in conv["reflection"]]] if d["kind"] == "search" else [])]


def stored_orbit_search(folder: Path) -> dict | None:
    """The summary of the orbit search stored beside the program (its best set verified again), or None."""
    log = read_json(Path(folder) / ORBIT_SEARCH_FILE, "orbit-search log")
    return None if log is None else orbit_summary(log)


def _eisenstein_sentence() -> str:
    """Whether the Eisenstein frame's rational space has integer coordinates at all (computed, Hasse-Minkowski).

    In the basis (1, omega) of each complex coordinate, Re(z conj(w)) has Gram A2 / 2 = [[1, -1/2], [-1/2, 1]];
    the height axis has squared norm 1 (tropic points (w, +-1) with |w|^2 = 3)."""
    gram = [[Fraction(0)] * 11 for _ in range(11)]
    for k in range(5):
        gram[2 * k][2 * k] = gram[2 * k + 1][2 * k + 1] = Fraction(1)
        gram[2 * k][2 * k + 1] = gram[2 * k + 1][2 * k] = Fraction(-1, 2)
    gram[10][10] = Fraction(1)
    factor, why = similarity_factor(gram)
    if factor is None:
        return (f"`hw3lib.kissing.rational_forms` finds that space not similar to any multiple of I_11 ({why}), so "
                "a configuration spanning it has no integer coordinates: the course's checker could only take a "
                "rounded perturbation of it (AlphaEvolve's route), never the exact set.")
    return (f"`hw3lib.kissing.rational_forms` finds it similar to {factor} * I_11 ({why}), so such configurations "
            "could be carried to integer coordinates by an explicit rational similarity, which is not built yet.")


def _orbit_search_lines(summary: dict | None) -> list[str]:
    if summary is None:
        return [f"Not run yet: `python -m hw3lib.kissing.orbit_search --log runs/kissing/orbit_search.json` and then "
                f"`--store data/kissing_number/{ORBIT_SEARCH_FILE}` put its log here."]
    cfg = summary["config"]
    families = ", ".join(f"{n} {f}" for f, n in summary["families"].items())
    lines = [
        "The layered frame: the poles ±2e_11, an equator set E of squared norm 4 in R^10 (inner products <= 2) and "
        "tropic points (w, ±1) with w of squared norm 3 (inner products <= 1 within W, <= 2 against E): "
        "2 + |E| + 2|W| points. E and W are unions of whole orbits of a finite group of rational orthogonal "
        "matrices, taken from pools of rational vectors with denominator 1 or 2; one representative against each "
        "whole orbit decides every pair, in integers, and a maximum-weight independent set of the orbit graph picks "
        "the union (`hw3lib.kissing.layered`, `hw3lib.kissing.orbit_search`). Rational to begin with, so integer "
        "coordinates need only a common denominator.",
        "",
        f"- Groups: {families} groups, each on the pools {', '.join(summary['pools'])}: {summary['entries']} of the "
        f"{summary['planned']} planned (group, pool) pairs searched"
        + ("." if summary["complete"] else " (the run stopped at its budget; the same command resumes it).")
        + f" {summary['skipped']} of them were skipped for having more than {cfg['max_orbits']} self-compatible "
        "orbits.",
        f"- Compute: {summary['wall_s'] / 60:.1f} min wall, {summary['cpu_s'] / 60:.1f} min CPU on {summary['machine']}; "
        f"{cfg['deadline_s']:g} s per independent-set step.",
        "",
        "| family | pool | pairs | searched | proved optimal | best | best group |",
        "|---|---|---|---|---|---|---|",
        *[f"| {r['family']} | {r['pool']} | {r['groups']} | {r['searched']} | {r['optimal']} | {r['best'] or '-'} | "
          f"{r['best_group'] or '-'} |" for r in summary["rows"]],
        "",
        f"- Best: **{summary['best_size']}** points ({summary['best_group']}, {summary['best_pool']}): "
        + ("above the stored 582." if summary["beats_base"] else "not above the classical 582."),
        f"- What limited it: on the integer pool the best union has {summary['integer_best']} points. Of the "
        f"{summary['searched_fractional_pools']} searched (group, half-integer pool) pairs, "
        f"{summary['with_fractional_points']} used a point with a half-integer coordinate in their best union"
        + (f" (at most {summary['fractional_best']} points)" if summary["fractional_best"] else "")
        + f"; {summary['max_orbits_skips']} pairs had too many orbits to search. A sign change that flips only "
        "coordinates equal to ±1/2, fewer than four of them, moves a vector too close to itself (the inner product "
        "drops by half the number flipped), so groups rich in sign changes keep few half-integer orbits, and groups "
        "poor in them have many small orbits.",
        f"- Not searched: groups over the Eisenstein integers (Ganzhinov's route to 592). Their frame spans the "
        f"rational space (A2/2)^5 + <1>; {_eisenstein_sentence()}",
    ]
    return lines


# ours: the recipe without the 3 W axes, grown from an empty remainder; ours_cavity: a larger cavity (10 supports
# left out too), grown from empty; station_core: our optimizer on Station's published 496-row core (an experiment)
CORE_REMAINDER_FILES = ("core_remainder_ours.json", "core_remainder_ours_cavity.json",
                        "core_remainder_station_core.json")


def stored_core_remainder(folder: Path) -> list[dict]:
    """Summaries of the core-and-remainder growth logs stored beside the program (best sets verified again)."""
    from hw3lib.kissing.core_remainder import summary

    out = []
    for name in CORE_REMAINDER_FILES:
        log = read_json(Path(folder) / name, "core-and-remainder log")
        if log is not None:
            out.append({"file": name, **summary(log)})
    return out


def _core_remainder_lines(rows: list[dict] | None) -> list[str]:
    intro = ("`hw3lib.kissing.core_remainder`, written from the published description: a fixed core on the norm-4 "
             "shell (axis rows and sign patterns on the supports of a constant-weight code), a remainder of unit "
             "directions equilibrated against it (annealed hinge on the pair angles plus a smooth maximum of the "
             "cosines), a Chebyshev LP (scipy HiGHS) for strict slack, rounding at denominator 100000 and the exact "
             "check; one seed row at a time at the deepest hole. The 35-support recipe reproduces 582 exactly.")
    if not rows:
        return [intro, "", "No growth log stored yet: `python -m hw3lib.kissing.core_remainder --log "
                "runs/kissing/core_remainder.json`, then copy it to data/kissing_number/core_remainder_ours.json."]
    lines = [intro, "", "| log | core | start | best (verified) | attempts (valid) | CPU total | CPU per attempt "
             "(equilibrate / LP) | stopped because |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['file']}` | {r['core']} | {'empty remainder' if r['start_empty'] else 'the recipe'} "
                     f"({r['first_size']}) | **{r['best_size']}** ({'yes' if r['verified'] else 'NO'}) | "
                     f"{r['attempts']} ({r['valid_attempts']}) | {r['cpu_s'] / 60:.1f} min | "
                     f"{r['cpu_per_attempt_s']:.1f} s ({r['cpu_equilibrate_s']:.1f} / {r['cpu_lp_s']:.1f}) | "
                     f"{r['reason']} |")
    return lines


def stored_records() -> list[dict] | None:
    """The published records verified by `hw3lib.kissing.records` (None when their files are not here)."""
    try:
        return verify_records()
    except FileNotFoundError:
        return None


def _records_lines(rows: list[dict] | None) -> list[str]:
    if rows is None:
        return ["Not verified: the record files are missing (data/kissing_number/records/ or $HW3_DATA_DIR/kissing_records)."]
    return [
        "Each published configuration is checked by our own exact verifier (`hw3lib.kissing.verify.verify_form`, "
        "`hw3 kissing verify FILE --form ...`) in the form it was published in: integers (Python ints where the "
        "squares pass int64), the angle form cos <= 1/2 for mixed norms (2<u,v> <= |u||v| decided by squaring "
        "where <u,v> > 0), and Z[sqrt2] coordinates (exact sign of p + q sqrt2). No floating point decides. The "
        "angle form is the course's min-distance form when all norms are equal; station600's norms^2 are 4 and "
        "~1e10, so it is valid by angle only, and its core rows times 50001 (`equalize_norms`) give the "
        "min-distance copy (slack 0). Times are this machine's, verification only (JSON loading excluded).",
        "", *records_markdown(rows)]


def report_markdown(d: dict) -> str:
    """report.md from `search_report` or `conversation_report` data (every number from `d`)."""
    search = d["kind"] == "search"
    sections = {
        "Method": _search_method(d) if search else d["method"],
        "Compute used": _compute_lines(d) if search else d["compute_lines"],
        "Score history": _history_lines(d) if search else d["history_lines"],
        "Largest free cap of the final set": _cap_lines(d),
        "What limited it": [f"- {line}" for line in (_search_limits(d) if search else d["limits"])],
        "Orbit search beyond 582": _orbit_search_lines(d.get("orbit_search")),
        "Core-and-remainder search": _core_remainder_lines(d.get("core_remainder")),
        "Published records, verified here": _records_lines(d.get("records")),
        "LLM conversation": _conversation_lines(d),
        "Reflection": [f"- {line}" for line in (_search_reflection(d) if search else d["reflection"])],
    }
    lines = [f"# Kissing number in dimension 11: how `program.py` ({d['num_points']} points) was found", "",
             f"Generated by `hw3 kissing report` on {d['generated']} from a re-run of the search (or the stored "
             "log), not written by hand; regenerate it rather than editing it.", ""]
    for heading in HEADINGS:
        lines += [f"## {heading}", "", *sections[heading], ""]
    return "\n".join(lines)


def writeup_summary(d: dict) -> dict:
    """The report's content as plain values for the writeup's `kissing.deliverable` (JSON-ready)."""
    cap, search = d["cap"], d["kind"] == "search"
    summary = {
        "kind": d["kind"], "num_points": d["num_points"], "method": _search_method(d)[0] if search else d["method"][0],
        "limits": _search_limits(d) if search else d["limits"],
        "reflection": _search_reflection(d) if search else d["reflection"],
        "cap_deg": cap["angle_deg"], "cap_exact": cap["exact"], "cap_cos_sq": cap["cos_sq"],
        "cap_direction": cap["direction"], "fits_another": cap["fits_another"],
        "cap_random_starts": cap["random_starts"], "cap_structured": cap["structured_directions"],
        "conversation": None if d["conversation"] is None else {
            k: d["conversation"][k] for k in ("loop", "model", "best", "steps")},
        "orbit_search": None if d.get("orbit_search") is None else {
            k: d["orbit_search"][k] for k in ("best_size", "best_group", "best_pool", "entries", "skipped", "wall_s",
                                              "cpu_s", "rows", "beats_base")},
    }
    if search:
        c = d["compute"]
        summary.update({
            "reproduced": d["reproduced"], "construction_points": d["construction_points"],
            "code_blocks": d["code_blocks"], "johnson_bound": d["johnson_bound"], "norm_sq": d["norm_sq"],
            "candidates": d["candidates"], "search_iterations": d["search_iterations"], "seed": d["seed"],
            "code_search_iterations": d["code_search_iterations"], "polished_points": d["polished_points"],
            "found_at": d["found_at"], "wall_s": c["wall_s"], "cpu_s": c["cpu_s"], "llm_calls": c["llm_calls"],
            "llm_tokens": c["prompt_tokens"] + c["completion_tokens"],
            "history": [{k: r[k] for k in ("phase", "iteration", "points")} for r in d["history"]]})
    return summary


# ---------------------------------------------------------------------------------------------
# The report of a program stored from a live conversation


def conversation_report(folder: str | Path | None = None, cap_starts: int | None = None, seed: int = 0) -> dict:
    """Report data for `folder/program.py` stored by `promote_run` from a live conversation."""
    from hw3lib.kissing.report import _methodology, _table

    folder = Path(folder) if folder is not None else default_folder()
    conv = _stored_conversation(folder)
    if conv is None:
        raise FileNotFoundError(f"{folder}: no conversation_log.json")
    log = load_log(folder)
    points, metrics = _stored_points(folder / "program.py")
    usage = log.get("usage", {})
    steps = log["steps"]
    d = {"kind": "conversation", "generated": _now(), "num_points": len(points), "metrics": metrics,
         **final_set_analysis(points, cap_starts, seed), "conversation": conv}
    d["method"] = [f"`program.py` is the best program of a live LLM {log['loop']} run (iteration "
                   f"{(log.get('best') or {}).get('iteration')}), stored by `hw3 kissing promote`.", "",
                   *_methodology(log)]
    d["compute_lines"] = [
        f"- LLM: {usage.get('calls', 0)} calls, {usage.get('prompt_tokens', 0)} prompt + "
        f"{usage.get('completion_tokens', 0)} completion tokens, ${usage.get('cost_usd', 0.0):.4f}, "
        f"{usage.get('retries', 0)} retried requests.",
        f"- Run wall time {usage.get('wall_s', 0.0):.1f} s; {len(steps)} sandboxed evaluations "
        f"({sum(s['evaluation']['eval_time'] for s in steps):.2f} s).",
        f"- Final-set analysis: {d['analysis_s']['wall_s']:.2f} s. Machine: {_machine()['platform']}."]
    d["history_lines"] = _table(log)
    d["limits"] = [_shell_sentence(d["shell"], None, None), _cap_sentence(d["cap"]), _bounds_sentence(len(points))]
    d["reflection"] = conv["reflection"]
    return d


# ---------------------------------------------------------------------------------------------
# The report of a program written from the core search


def _records_sentence(num_points: int) -> str:
    """Where a set beyond 593 stands among the published records (KNOWN_BOUNDS stops at 593)."""
    known = {"the classical 582": 582, "Ganzhinov's 592": 592, "AlphaEvolve's 593": 593, "EinsteinArena's 594": 594,
             "the best integer set known (600)": 600, "the record 604 (Z[sqrt2])": 604}
    above = [name for name, bound in known.items() if bound <= num_points]
    short = [f"{bound - num_points} short of {name}" for name, bound in known.items() if bound > num_points]
    if not short:
        return f"{num_points} points: at or above every published record ({', '.join(above)})."
    return f"{num_points} points: at or above {', '.join(above) or 'none of them'}; {', '.join(short)}."


def core_search_report(folder: str | Path, cap_starts: int | None = None, seed: int = 0) -> dict:
    """Report data for folder/program.py written by `core_program.write_program` (rendered like a conversation's:
    method, compute, history, limits and reflection lines)."""
    from hw3lib.kissing.core_program import SEARCH_FOLDER, search_log

    folder = Path(folder)
    log = search_log(folder / SEARCH_FOLDER)
    points, metrics = _stored_points(folder / "program.py")
    best = log["best"]
    entry = next(e for e in log["pool"] if e["index"] == best["index"])
    rows = entry["composition"]["rows"]
    # "reproduced": program.py is byte for byte what the stored log writes (`is_core_program`), not a re-run
    d = {"kind": "core_search", "generated": _now(), "num_points": len(points), "metrics": metrics,
         "reproduced": True, "reproduced_from": "core_search/core_search.json (byte for byte; the search not re-run)",
         **final_set_analysis(points, cap_starts, seed), "conversation": _stored_conversation(folder)}
    d["method"] = [
        f"`program.py` holds {len(points)} integer points found by our own core search "
        f"(`hw3lib.kissing.core_search`, log `core_search/core_search.json`): a core of {rows} rows on the norm-4 "
        f"shell (`{entry['spec']}`, frame {entry['frame']}) and {len(points) - rows} remainder rows optimized "
        "against it by `hw3lib.kissing.core_remainder` (annealed hinge and smooth maximum, Chebyshev LP, rounding "
        "to 1/100000, exact check). The search space was guided by the published composition of the 600-point "
        "core; the search read no stored configuration. See `core_search/README.md` for the pool, the finalists and "
        "the comparison with the published core.", "",
        "Reproduction: `python -m hw3lib.kissing.core_search --out data/kissing_number/core_search --full-cpu-s "
        f"{log['config']['full_cpu_s']:g}` (resumes the stored log), then `python -m hw3lib.kissing.core_program "
        "--write`; generating this report checked that the stored `program.py` (sha256 "
        f"`{hashlib.sha256((folder / 'program.py').read_bytes()).hexdigest()[:16]}...`) is byte for byte what that "
        "log writes."]
    d["compute_lines"] = [
        f"- Core search: {log['cpu_s']:.0f} CPU s in all ({log['proposal_cpu_s']:.0f} s proposing "
        f"{len(log['proposals'])} cores, {sum(e['cpu_s'] for e in log['pool']):.0f} s scoring {len(log['pool'])}, "
        f"{sum(f['cpu_s'] for f in log['finalists']):.0f} s for the finalists) on {log['machine']}.",
        "- Sandboxed evaluations of the best set: 1 in the search, 1 of `program.py` here "
        f"({metrics['eval_time']:.2f} s). LLM: 0 calls.",
        f"- Final-set analysis: {d['analysis_s']['wall_s']:.2f} s. Machine: {_machine()['platform']}."]
    d["history_lines"] = ["| candidate | frame | core rows | short score | full score |", "|---|---|---|---|---|"] + [
        f"| {e['index']} | {e['frame']} | {e['composition']['rows']} | {e['score']} | "
        f"{next((f['score'] for f in log['finalists'] if f['index'] == e['index']), '-')} |"
        for e in sorted(log["pool"], key=lambda e: -e["score"])]
    final = next((f for f in log["finalists"] if f["index"] == best["index"]), {})
    d["limits"] = [f"The growth stopped: {final.get('growth_reason', 'no finalist')}.",
                   _shell_sentence(d["shell"], None, None), _cap_sentence(d["cap"]), _records_sentence(len(points))]
    d["reflection"] = [
        "The core decides the count: random trims of maximal support families (the first version of this search) "
        f"reached 538; the heaviest family of frame {entry['frame']} ({rows} rows) left a cavity that took "
        f"{len(points) - rows} remainder rows, and the same optimizer reaches 596 on the published 496-row core.",
        "Beyond this: more remainder attempts per size, other seeds, or cores of the other frames scored with the full "
        "budget" + ("; 600 (the best integer set known) was not reached." if len(points) < 600 else ".")]
    return d


# ---------------------------------------------------------------------------------------------
# Writing


def _refuse_existing(paths: list[Path], overwrite: bool) -> None:
    existing = [str(p) for p in paths if p.exists()]
    if existing and not overwrite:
        raise FileExistsError(f"{', '.join(existing)} already exist(s); pass overwrite=True (CLI: --overwrite) to "
                              "replace them")


def write_report(folder: str | Path | None = None, overwrite: bool = False, iterations: int = 5000, seed: int = 0,
                 cap_starts: int | None = None) -> tuple[Path, dict]:
    """Write folder/report.md for the stored program; returns (path, the report's data)."""
    folder = Path(folder) if folder is not None else default_folder()
    target = folder / "report.md"
    _refuse_existing([target], overwrite)
    data = report_data(folder, iterations, seed, cap_starts)
    return atomic_write_text(target, report_markdown(data)), data


def report_data(folder: str | Path | None = None, iterations: int = 5000, seed: int = 0,
                cap_starts: int | None = None) -> dict:
    """The report's data for folder/program.py: from the search when it reproduces the program, else
    from the live conversation stored beside it (an error when neither produced it)."""
    from hw3lib.kissing.core_program import is_core_program

    folder = Path(folder) if folder is not None else default_folder()
    if is_core_program(folder):  # written from core_search/ byte for byte: no need to re-run the 582 search
        data = core_search_report(folder, cap_starts, seed)
    else:
        data = _search_or_conversation(folder, iterations, seed, cap_starts)
    data["orbit_search"] = stored_orbit_search(folder)
    data["records"] = stored_records()
    data["core_remainder"] = stored_core_remainder(folder)
    return data


def _search_or_conversation(folder: Path, iterations: int, seed: int, cap_starts: int | None) -> dict:
    try:
        return search_report(folder, iterations, seed, cap_starts)
    except ValueError as exc:
        if isinstance(exc, ReplayRefused) or not (folder / "conversation_log.json").is_file():
            raise
        return conversation_report(folder, cap_starts, seed)


def promote_run(run_dir: str | Path, folder: str | Path | None = None, overwrite: bool = False,
                cap_starts: int | None = None) -> list[Path]:
    """Store a live run's best program, its log and reports in `folder` (see the module docstring)."""
    run_dir = Path(run_dir)
    folder = Path(folder) if folder is not None else default_folder()
    log = load_log(run_dir)
    if is_replay(log):
        raise ReplayRefused(f"{run_dir} is a {REPLAY_LABEL} (source {log.get('source', 'unrecorded')!r}): recorded "
                            "replies are not a conversation and are never stored as conversation_log.json")
    best = log.get("best")
    if not best:
        raise ValueError(f"{run_dir}: the run found no valid program; nothing to store")
    stored = folder / "program.py"
    stored_score = _stored_points(stored)[1]["combined_score"] if stored.is_file() else 0.0
    if best["score"] <= stored_score:
        raise ValueError(f"{run_dir}: the run's best score {best['score']:g} does not beat the stored program's "
                         f"{stored_score:g}; nothing stored (its files stay in {run_dir})")
    names = ["program.py", *CONVERSATION_FILES, "report.md"]
    _refuse_existing([folder / n for n in names], overwrite)
    source = _best_source(run_dir, log)
    folder.mkdir(parents=True, exist_ok=True)
    written = [atomic_write_text(folder / "program.py", source)]
    for src, dst in (("conversation_log.json", "conversation_log.json"), ("report.md", "conversation_report.md"),
                     ("score_vs_iteration.png", "score_vs_iteration.png")):
        if (run_dir / src).is_file():
            written.append(atomic_write_bytes(folder / dst, (run_dir / src).read_bytes()))
    written.append(write_report(folder, overwrite=True, cap_starts=cap_starts)[0])
    return written


def _best_source(run_dir: Path, log: dict) -> str:
    """The best program as the model wrote it, or (hybrid, when the polish won) a program of the polished points."""
    points_file = run_dir / "best_points.json"
    if points_file.is_file():
        points = json.loads(points_file.read_text(encoding="utf-8"))["points"]
        if verify(points).score >= log["best"]["score"]:
            return program_source(points, f"the {log['loop']} LLM run in {run_dir.name}, iteration "
                                  f"{log['best']['iteration']}, polished by local search",
                                  written_by="`hw3 kissing promote`")
    return (run_dir / "best_program.py").read_text(encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m hw3lib.kissing.deliverables", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="write data/kissing_number/report.md")
    rep.add_argument("--folder", default=None)
    rep.add_argument("--overwrite", action="store_true")
    rep.add_argument("--iterations", type=int, default=5000)
    rep.add_argument("--seed", type=int, default=0)
    pro = sub.add_parser("promote", help="store a live run's best program and conversation")
    pro.add_argument("run_dir")
    pro.add_argument("--folder", default=None)
    pro.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "report":
        path, data = write_report(args.folder, args.overwrite, args.iterations, args.seed)
        print(json.dumps({"written": str(path), "num_points": data["num_points"],
                          "largest_free_cap_deg": data["cap"]["angle_deg"]}))
    else:
        print(json.dumps({"written": [str(p) for p in promote_run(args.run_dir, args.folder, args.overwrite)]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
