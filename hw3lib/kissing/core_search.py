"""Our own search for a core on the norm-4 shell, scored by the remainder optimizer (`core_remainder.grow`).

The search space was guided by the published composition of the 600-point core (8 axis coordinates, full
supports and halves that fix one coordinate's sign, ../shared/data/kissing_records/README.md and issue 64):
facts, not coordinates. It is the set of frames of `core_frames` (how many axis coordinates, which non-axis
coordinates full supports and halves may contain; coordinate permutations make the choice of coordinates
immaterial), and it is searched in three phases:

1. Proposals: every frame with `axes_options` axis coordinates; in each, the heaviest families of `draws`
   seeded local searches on the exact label graph (`core_frames.frame_cores`); one core per invariant class
   over all frames (symmetry reduction by the hyperoctahedral group, `core_families.invariants`), each checked
   exactly (`core_families.verify_core`) and given the cheap cavity proxy (`core_frames.cavity_proxy`).
2. The pool: the `scored` proposals ranked first by the proxy (cores with a strictly free ternary direction, i.e.
   room beyond touching, first; then rows + packed free directions) are scored by `core_remainder.grow` from an
   empty remainder with a short CPU budget (`short_cpu_s`, 2 failed tries per size): the score is the verified
   size it reaches. The pool is ranked by score.
3. The first `finalists` of `finalist_order` get the full budget (`full_cpu_s`, `full_attempts` tries per size) in
   their own growth logs: candidates whose short growth was cut by the budget come before those that saturated
   (a saturated 560-row core stops at 570, while the 496-row core is still growing at 529 when cut). The largest
   verified set of the finalists and the pool is the result. It is checked exactly again and through the course's sandboxed
   evaluator (`evaluator.evaluate_program` on the program `search.program_source` writes).

Nothing here reads a stored configuration: the only inputs are the settings below (a test asserts it).
Resumable: the JSON log holds the settings, the proposals (frame, spec text, composition, invariant digest,
proxy), the pool (score, CPU time per attempt), the finalists' results and the best verified set; every growth
has its own resumable log in the same folder. A progress bar shows the pool being scored; the stated CPU budget
of each phase is in the log.

`python -m hw3lib.kissing.core_search --out data/kissing_number/core_search` runs it and, run again, resumes it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hw3lib.core.io import atomic_write_json
from hw3lib.kissing.core_families import CoreSpec, all_labels, first_conflict, invariants, verify_core
from hw3lib.kissing.core_frames import cavity_proxy, frame_cores, frames
from hw3lib.kissing.core_remainder import CoreRemainderConfig, grow
from hw3lib.kissing.verify import verify

LOG_NAME = "core_search.json"


@dataclass(frozen=True)
class CoreSearchConfig:
    """Settings of one core search (saved in its log; a resumed log must match, except that `full_cpu_s` may grow).

    axes_options: the axis-coordinate counts whose frames are searched (`core_frames.frames`).
    draws: seeded local searches per frame. local_iterations: iterations of each (the 496-row family of the
        8-axis frame is a tight design: 300 iterations miss it, 1,000 find it).
    scored: how many proposals, best proxy first, get the short-budget growth.
    short_cpu_s: CPU seconds of the short-budget growth that scores a candidate.
    finalists: how many of the best-scored candidates get the full budget.
    full_cpu_s: CPU seconds of each finalist's full-budget growth. full_attempts: its tries per size.
    seed: seed of the draws (draw k of every frame uses [seed, k], so a rerun proposes the same cores).
    """

    axes_options: tuple[int, ...] = (7, 8, 9)
    draws: int = 6
    local_iterations: int = 1000
    scored: int = 8
    short_cpu_s: float = 20.0
    finalists: int = 1
    full_cpu_s: float = 900.0
    full_attempts: int = 4
    seed: int = 0


# ---------------------------------------------------------------------------------------------
# Proposals


def invariant_digest(spec: CoreSpec) -> str:
    """A short digest of `core_families.invariants`: equal for cores equivalent under the hyperoctahedral group."""
    return hashlib.sha256(json.dumps(invariants(spec), sort_keys=True).encode()).hexdigest()[:16]


def proxy_rank(entry: dict) -> tuple:
    """Sort key of a proposal, best first: room beyond touching (a strictly free direction), then the estimate."""
    proxy = entry["proxy"]
    return (proxy["strict"] == 0, -proxy["estimate"], -proxy["strict"], entry["index"])


def propose(cfg: CoreSearchConfig, progress: bool = True) -> list[dict]:
    """Phase 1: one entry per invariant class over every frame's heaviest families, with its proxy."""
    found: dict[str, dict] = {}
    todo = frames(cfg.axes_options)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc="core frames", unit="frame", leave=False)
    try:
        for frame in todo:
            for spec in frame_cores(frame, cfg.draws, cfg.local_iterations, cfg.seed):
                digest = invariant_digest(spec)
                if digest in found:  # the same core up to symmetry, already proposed by an earlier frame
                    continue
                ok, message = verify_core(spec)
                if not ok:
                    raise RuntimeError(f"frame {frame.name} proposed an invalid core: {message}")
                found[digest] = {"frame": frame.name, "spec": spec.to_text(), "composition": spec.composition,
                                 "invariants": digest, "core_check": message, "proxy": cavity_proxy(spec)}
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    entries = [{"index": k, **entry} for k, entry in enumerate(found.values())]
    return sorted(entries, key=proxy_rank)


# ---------------------------------------------------------------------------------------------
# The log


def _machine() -> str:
    return f"{platform.platform()}, Python {platform.python_version()}"


def load_log(folder: Path, cfg: CoreSearchConfig) -> dict:
    """The search's log (a fresh one when absent); refuses a log written with other settings."""
    settings = json.loads(json.dumps(asdict(cfg)))
    path = folder / LOG_NAME
    if path.is_file():
        log = json.loads(path.read_text(encoding="utf-8"))
        # a larger full budget may resume a log: it only lets the finalists' growths (resumable) run on
        other = {**log["config"], "full_cpu_s": settings["full_cpu_s"]}
        if other != settings or settings["full_cpu_s"] < log["config"]["full_cpu_s"]:
            raise ValueError(f"{path} was written with other settings; pass another --out or the same settings "
                             "(only --full-cpu-s may grow)")
        if settings["full_cpu_s"] > log["config"]["full_cpu_s"]:
            log["budget"].setdefault("full_cpu_s_history", [log["config"]["full_cpu_s"]]).append(cfg.full_cpu_s)
            log["config"]["full_cpu_s"] = log["budget"]["full_cpu_s_per_finalist"] = cfg.full_cpu_s
            log["budget"]["stated_total_cpu_s"] = cfg.scored * cfg.short_cpu_s + cfg.finalists * cfg.full_cpu_s
        return log
    return {"config": settings, "machine": _machine(), "inputs": search_inputs(cfg),
            "budget": {"short_cpu_s_per_candidate": cfg.short_cpu_s, "full_cpu_s_per_finalist": cfg.full_cpu_s,
                       "stated_total_cpu_s": cfg.scored * cfg.short_cpu_s + cfg.finalists * cfg.full_cpu_s,
                       "proposals": "not budgeted: one pass over the frames (recorded as proposal_cpu_s)"},
            "proposals": None, "proposal_cpu_s": 0.0, "pool": [], "finalists": [], "best": None, "cpu_s": 0.0}


def search_inputs(cfg: CoreSearchConfig) -> dict:
    """Everything the search reads: its settings and the label graph it builds itself (no stored configuration)."""
    return {"settings": json.loads(json.dumps(asdict(cfg))), "labels": len(all_labels()),
            "frames": [f.name for f in frames(cfg.axes_options)], "files_read": []}


def save_log(folder: Path, log: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / LOG_NAME, log, indent=1)


def ranked_pool(log: dict) -> list[dict]:
    """The scored candidates, best first (ties: the smaller core first, it left more to the optimizer)."""
    scored = [entry for entry in log["pool"] if entry.get("score") is not None]
    return sorted(scored, key=lambda e: (-e["score"], e["composition"]["rows"], e["index"]))


# ---------------------------------------------------------------------------------------------
# Scoring


def growth_config(spec: CoreSpec, attempts: int, seed: int = 0) -> CoreRemainderConfig:
    return CoreRemainderConfig(core_spec=spec.to_text(), start_empty=True, attempts_per_size=attempts, seed=seed)


def score_core(folder: Path, spec: CoreSpec, name: str, attempts: int, cpu_s: float) -> dict:
    """Grow a remainder against `spec` (resuming `folder/name.json`) and return what the pool records."""
    ok, message = verify_core(spec)
    if not ok:
        raise RuntimeError(f"candidate core does not verify: {message}")
    state = grow(folder / f"{name}.json", growth_config(spec, attempts), progress=False, cpu_budget_s=cpu_s)
    return {"score": state.best_size, "core_check": message, "growth_log": f"{name}.json", "attempts":
            len(state.attempts), "cpu_s": state.cpu_s, "growth_done": state.done, "growth_reason": state.reason,
            "cpu_per_attempt_s": [round(a["cpu_s"], 3) for a in state.attempts]}


def fill_proposals(cfg: CoreSearchConfig, log: dict, folder: Path, progress: bool = True) -> None:
    """Phase 1 once; a resumed log keeps its proposals (they are deterministic, but cost a few CPU minutes)."""
    if log["proposals"] is not None:
        return
    start = time.process_time()
    log["proposals"] = propose(cfg, progress)
    log["proposal_cpu_s"] = time.process_time() - start
    log["cpu_s"] += log["proposal_cpu_s"]
    save_log(folder, log)


def fill_pool(folder: Path, cfg: CoreSearchConfig, log: dict, progress: bool = True) -> None:
    """Score the best-proxy proposals not yet in the pool (the short budget), saving after each."""
    todo = log["proposals"][:cfg.scored]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), initial=len(log["pool"]), desc="core pool", unit="core", leave=False)
    try:
        for proposal in todo[len(log["pool"]):]:
            start = time.process_time()
            entry = dict(proposal)
            entry.update(score_core(folder, CoreSpec.from_text(entry["spec"]), f"candidate_{entry['index']:03d}", 2,
                                    cfg.short_cpu_s))
            entry["score_cpu_s"] = time.process_time() - start
            log["pool"].append(entry)
            log["cpu_s"] += entry["score_cpu_s"]
            save_log(folder, log)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(best=max(e["score"] for e in log["pool"]))
    finally:
        if bar is not None:
            bar.close()


def finalist_order(log: dict) -> list[dict]:
    """The scored candidates in the order the full budget goes to them: first those whose short growth the budget
    stopped (their score is only a lower bound), best score first; then those that stopped on their own (2 failed
    tries: they have shown their size, a longer run adds little)."""
    return sorted(ranked_pool(log), key=lambda e: (e["growth_done"], -e["score"], e["index"]))


def run_finalists(folder: Path, cfg: CoreSearchConfig, log: dict) -> None:
    """The full budget for the first candidates of `finalist_order` (each growth resumes its own log)."""
    done = {f["index"]: f for f in log["finalists"]}
    for entry in finalist_order(log)[:cfg.finalists]:
        if entry["index"] in done and done[entry["index"]]["growth_done"]:
            continue
        start = time.process_time()
        result = score_core(folder, CoreSpec.from_text(entry["spec"]), f"finalist_{entry['index']:03d}",
                            cfg.full_attempts, cfg.full_cpu_s)
        result.update(index=entry["index"], spec=entry["spec"], short_score=entry["score"])
        log["cpu_s"] += time.process_time() - start
        log["finalists"] = [f for f in log["finalists"] if f["index"] != entry["index"]] + [result]
        save_log(folder, log)


def record_best(folder: Path, log: dict, sandboxed: bool = True) -> dict | None:
    """The largest verified set among the finalists (and the pool), checked exactly and by the sandboxed evaluator."""
    runs = [(f["score"], f["growth_log"], f["index"]) for f in log["finalists"]]
    runs += [(e["score"], e["growth_log"], e["index"]) for e in ranked_pool(log)[:1]]
    if not runs:
        return None
    score, name, index = max(runs)
    points = json.loads((folder / name).read_text(encoding="utf-8"))["best_points"]
    verdict = verify(points)
    best = {"num_points": len(points), "index": index, "growth_log": name, "exact_check": verdict.message,
            "valid": verdict.valid, "points": points}
    if sandboxed:
        best["sandboxed_evaluator"] = sandboxed_metrics(points)
    log["best"] = best
    save_log(folder, log)
    return best


def sandboxed_metrics(points) -> dict:
    """The course's sandboxed evaluator on the program that prints `points`."""
    from hw3lib.kissing.evaluator import evaluate_program
    from hw3lib.kissing.search import program_source

    source = program_source(np.asarray(points, dtype=np.int64), "core search (hw3lib.kissing.core_search)")
    metrics = evaluate_program(source, timeout_s=120)
    return {k: metrics[k] for k in ("validity", "num_points", "combined_score", "message") if k in metrics}


def run_search(folder: str | Path, cfg: CoreSearchConfig = CoreSearchConfig(), progress: bool = True,
               sandboxed: bool = True) -> dict:
    """Pool, finalists, best (module docstring); resumes from `folder/core_search.json`."""
    folder = Path(folder)
    log = load_log(folder, cfg)
    fill_proposals(cfg, log, folder, progress)
    fill_pool(folder, cfg, log, progress)
    run_finalists(folder, cfg, log)
    record_best(folder, log, sandboxed)
    return log


# ---------------------------------------------------------------------------------------------
# Cores proposed by an LLM (the agentic and hybrid loops)

CORE_BLOCK = re.compile(r"```core\s*\n(.*?)```", re.S)


def proposed_core(text: str) -> str | None:
    """The spec text of the last ```core block in a reply, or None when there is none."""
    found = CORE_BLOCK.findall(text)
    return found[-1].strip() if found else None


def score_proposal(spec_text: str, folder: Path, name: str, cpu_s: float = 20.0) -> tuple[list | None, str]:
    """(the verified set, the message sent back) for a proposed core: parsed, checked exactly (the first
    conflicting pair is named), then scored like a pool candidate (short budget, 2 tries per size)."""
    try:
        spec = CoreSpec.from_text(spec_text.replace("\n", ";"))
    except ValueError as exc:
        return None, f"core not read: {exc}"
    clash = first_conflict(spec)
    if clash is not None:
        a, b = (CoreSpec.of((), [label]).to_text().split("; ", 1)[1] for label in clash)
        return None, f"core invalid: {a} and {b} share 3 coordinates and give an inner product 3 > 2"
    result = score_core(folder, spec, name, 2, cpu_s)
    points = json.loads((folder / result["growth_log"]).read_text(encoding="utf-8"))["best_points"]
    return points, (f"core {spec.composition} ({spec.size} rows, exact check: {result['core_check']}); the remainder "
                    f"optimizer ({cpu_s:g} CPU s) reached {result['score']} verified points "
                    f"({result['score'] - spec.size} remainder rows)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hw3lib.kissing.core_search", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder of the search's log and growth logs (resumed if present)")
    defaults = CoreSearchConfig()
    parser.add_argument("--axes", type=int, nargs="+", default=list(defaults.axes_options),
                        help="axis-coordinate counts whose frames are searched")
    parser.add_argument("--draws", type=int, default=defaults.draws)
    parser.add_argument("--scored", type=int, default=defaults.scored)
    parser.add_argument("--short-cpu-s", type=float, default=defaults.short_cpu_s)
    parser.add_argument("--finalists", type=int, default=defaults.finalists)
    parser.add_argument("--full-cpu-s", type=float, default=defaults.full_cpu_s)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--no-sandbox", action="store_true", help="skip the sandboxed evaluator of the best set")
    args = parser.parse_args(argv)
    cfg = CoreSearchConfig(axes_options=tuple(args.axes), draws=args.draws, scored=args.scored,
                           short_cpu_s=args.short_cpu_s, finalists=args.finalists, full_cpu_s=args.full_cpu_s,
                           seed=args.seed)
    log = run_search(args.out, cfg, sandboxed=not args.no_sandbox)
    best = log["best"] or {}
    print(json.dumps({"best": best.get("num_points"), "valid": best.get("valid"), "cpu_s": round(log["cpu_s"], 1),
                      "pool": [e["score"] for e in ranked_pool(log)][:8],
                      "sandboxed": best.get("sandboxed_evaluator")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
