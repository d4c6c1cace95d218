"""The layered orbit search over many groups and pools, with a budget, a resumable log and a summary.

`run_orbit_search(log_path, ...)` tries every group of `hw3lib.kissing.groups.families()` on every pool
(rational vectors with denominators 1 or 2, optionally restricted to parity blocks) with
`hw3lib.kissing.layered.layered_search`, and writes one entry per (group, pool) to a JSON log after each
one (atomically), so an interrupted run resumes where it stopped; a log written with other settings is
refused unless `overwrite=True`. A (group, pool) whose orbit graph has more than `max_orbits` vertices is
recorded as skipped with that reason (its independent-set step would not finish in the budget).

The log's best configuration is checked again with `verify` when it is read. `summary(log)` gives the
numbers the report, notebook 06 and the writeup show: per family the groups tried and their best, the
compute, and what limited each.

Command line:
    python -m hw3lib.kissing.orbit_search --log runs/kissing/orbit_search.json [--deadline 30] [--budget-minutes 60]
    python -m hw3lib.kissing.orbit_search --log ... --store data/kissing_number/orbit_search.json [--replace-stored]
(`--store` copies the log, with its best set, into the deliverables folder -- a log stopped by its budget says
it is incomplete, and the report says how much of the plan ran; `hw3 kissing report` reads it from there and
reports it as its own section, `summary` checking the best set again. `--overwrite` starts a log with other
settings again; neither flag is ever implied.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import resource
import time
from pathlib import Path

import numpy as np

from hw3lib.core.io import atomic_write_json, read_json
from hw3lib.kissing.groups import GroupSpec, families
from hw3lib.kissing.layered import EQUATOR_NORM, TROPIC_NORM, TooManyOrbits, layered_search, rational_pool
from hw3lib.kissing.orbits import group_order
from hw3lib.kissing.verify import verify

# (name, scale, parity blocks): rational vectors x / scale, all coordinates of a block of one parity
POOLS = (("integers", 1, None), ("halves on 8+2 blocks", 2, (8, 2)), ("halves on 4+4+2 blocks", 2, (4, 4, 2)),
         ("halves", 2, None))
BASE_SCORE = 582  # the stored program's score: the classical code construction


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _config(deadline_s: float, max_orbits: int, random_groups: int, seed: int, specs: list[GroupSpec]) -> dict:
    """The settings a log is tied to, with a digest of the group list (a changed family makes another log)."""
    names = "\n".join(spec.name for spec in specs)
    return {"deadline_s": deadline_s, "max_orbits": max_orbits, "random_groups": random_groups, "seed": seed,
            "pools": [list(p[:2]) + [list(p[2]) if p[2] else None] for p in POOLS],
            "groups": len(specs), "groups_sha256": hashlib.sha256(names.encode()).hexdigest()[:16]}


def _load(log_path: Path, config: dict, overwrite: bool) -> dict:
    log = None if overwrite else read_json(log_path, "orbit-search log")
    if log is not None:
        if log.get("config") != config:
            raise ValueError(f"{log_path} was written with other settings ({log.get('config')}); pass --overwrite "
                             "to start again, or give another --log")
        return log
    return {"config": config, "entries": [], "best": None, "wall_s": 0.0, "cpu_s": 0.0, "complete": False,
            "planned": config["groups"] * len(config["pools"]),
            "machine": f"{platform.platform()}, Python {platform.python_version()}"}


def _entry(spec: GroupSpec, order: int | None, pool_name: str, scale: int, pools, deadline_s: float,
           max_orbits: int, seed: int) -> tuple[dict, np.ndarray | None]:
    generators = list(spec.generators)
    entry = {"group": spec.name, "family": spec.family, "description": spec.description, "pool": pool_name,
             "order": order, "skipped": None}
    try:
        result = layered_search(generators, scale=scale, deadline_s=deadline_s, pools=pools, max_vertices=max_orbits,
                                seed=seed)
    except TooManyOrbits as exc:
        entry.update(equator_orbits=exc.equator_orbits, tropic_orbits=exc.tropic_orbits, skipped=str(exc))
        return entry, None
    if not result.valid:  # cannot happen unless the exact steps are wrong: say so loudly
        raise AssertionError(f"{spec.name} on {pool_name}: the orbit union failed the exact verifier")
    fractional = int(np.any(result.points % scale != 0, axis=1).sum())  # points with a coordinate not an integer
    entry.update(equator_orbits=result.equator_orbits, tropic_orbits=result.tropic_orbits, size=result.size,
                 fractional_points=fractional, equator=result.equator_size, tropic=result.tropic_size, optimal=result.optimal,
                 seconds=round(result.seconds, 3), bnb_nodes=result.timings["branch_and_bound_nodes"])
    return entry, result.points


def run_orbit_search(log_path: str | Path, deadline_s: float = 30.0, max_orbits: int = 4000, random_groups: int = 8,
                     seed: int = 0, budget_s: float | None = None, overwrite: bool = False,
                     progress=print) -> dict:
    """Run (or resume) the search; returns the log."""
    log_path = Path(log_path)
    specs = families(random_groups, seed)
    config = _config(deadline_s, max_orbits, random_groups, seed, specs)
    log = _load(log_path, config, overwrite)
    done = {(e["group"], e["pool"]) for e in log["entries"]}
    orders: dict[str, int | None] = {}  # the closure is the same for every pool: compute it once
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    wall_before, cpu_before = log["wall_s"], log["cpu_s"]
    for pool_name, scale, blocks in POOLS:
        if all((s.name, pool_name) in done for s in specs):
            continue
        pools = (rational_pool(EQUATOR_NORM, scale, 10, blocks), rational_pool(TROPIC_NORM, scale, 10, blocks))
        for spec in specs:
            if (spec.name, pool_name) in done:
                continue
            if budget_s is not None and time.perf_counter() - started > budget_s:
                progress(f"budget of {budget_s:.0f} s spent; resume with the same command")
                return log
            if spec.name not in orders:
                orders[spec.name] = group_order(list(spec.generators))
            entry, points = _entry(spec, orders[spec.name], pool_name, scale, pools, deadline_s, max_orbits, seed)
            log["entries"].append(entry)
            if points is not None and (log["best"] is None or len(points) > log["best"]["size"]):
                log["best"] = {"size": int(len(points)), "group": spec.name, "pool": pool_name,
                               "points": points.tolist()}
            log["wall_s"] = wall_before + time.perf_counter() - started
            log["cpu_s"] = cpu_before + _cpu_seconds() - cpu_started
            atomic_write_json(log_path, log)
            progress(f"{spec.name:26s} {pool_name:24s} " + (entry["skipped"] or
                     f"{entry['size']} points (E {entry['equator']}, W {entry['tropic']}), "
                     f"{'optimal' if entry['optimal'] else 'best found'}, {entry['seconds']:.1f} s"))
    log["complete"] = len(log["entries"]) == log["planned"]
    atomic_write_json(log_path, log)
    return log


def summary(log: dict) -> dict:
    """Per family and pool: groups tried, skipped, the best size and where; the best overall, verified again."""
    best = log.get("best")
    if best is not None:
        check = verify(best["points"], dimension=11)
        if not check.valid or check.num_points != best["size"]:
            raise ValueError(f"the orbit-search log's best set does not verify: {check.message}")
    rows = {}
    for e in log["entries"]:
        row = rows.setdefault((e["family"], e["pool"]), {"family": e["family"], "pool": e["pool"], "groups": 0,
                                                          "searched": 0, "optimal": 0, "best": 0, "best_group": None})
        row["groups"] += 1
        if e["skipped"] is None:
            row["searched"] += 1
            row["optimal"] += bool(e["optimal"])
            if e["size"] > row["best"]:
                row["best"], row["best_group"] = e["size"], e["group"]
    return {"rows": list(rows.values()), "best_size": None if best is None else best["size"],
            "best_group": None if best is None else best["group"], "best_pool": None if best is None else best["pool"],
            "entries": len(log["entries"]), "skipped": sum(e["skipped"] is not None for e in log["entries"]),
            "wall_s": log["wall_s"], "cpu_s": log["cpu_s"], "config": log["config"], "machine": log.get("machine"),
            "beats_base": best is not None and best["size"] > BASE_SCORE,
            "complete": bool(log.get("complete")), "planned": log.get("planned", len(log["entries"])),
            "families": {f: len({e["group"] for e in log["entries"] if e["family"] == f})
                         for f in sorted({e["family"] for e in log["entries"]})},
            "integer_best": max((e.get("size", 0) for e in log["entries"] if e["pool"] == "integers"
                                 and e["skipped"] is None), default=None),
            "fractional_best": max((e.get("size", 0) for e in log["entries"] if e["pool"] != "integers"
                                    and e["skipped"] is None and e.get("fractional_points")), default=None),
            "pools": list(dict.fromkeys(e["pool"] for e in log["entries"])),
            "with_fractional_points": sum(1 for e in log["entries"] if e.get("fractional_points")),
            "searched_fractional_pools": sum(1 for e in log["entries"] if e["skipped"] is None and e["pool"] != "integers"),
            "max_orbits_skips": sum(1 for e in log["entries"] if e["skipped"])}


def stored_refusal(store: Path, log: Path) -> str:
    """The one-line refusal of `--store` over an existing file (a fresh clone ships the stored log)."""
    what = "the stored orbit-search log"
    try:
        stored = summary(json.loads(store.read_text(encoding="utf-8")))
        what += f" ({stored['entries']} of {stored['planned']} (group, pool) pairs, best {stored['best_size']})"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    run = (f"{log} exists, so this resumes it" if log.exists() else
           f"{log} does not exist yet, so this starts the whole search (about 3 CPU-hours)")
    return (f"{store} already holds {what}: nothing was run. `hw3 kissing report --overwrite` reads it as it is; "
            f"to replace it add --replace-stored ({run}).")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hw3lib.kissing.orbit_search", description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True, help="the JSON log to write (and resume from)")
    parser.add_argument("--deadline", type=float, default=30.0, help="seconds per (group, pool) independent-set step")
    parser.add_argument("--max-orbits", type=int, default=4000)
    parser.add_argument("--random-groups", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget-minutes", type=float, default=None, help="stop (resumably) after this long")
    parser.add_argument("--store", default=None, help="copy the log (complete or not: it says which) here")
    parser.add_argument("--overwrite", action="store_true", help="start the log again when its settings differ")
    parser.add_argument("--replace-stored", action="store_true", help="replace an existing --store file")
    args = parser.parse_args(argv)
    if args.store and Path(args.store).exists() and not args.replace_stored:
        raise SystemExit(stored_refusal(Path(args.store), Path(args.log)))
    log = run_orbit_search(args.log, args.deadline, args.max_orbits, args.random_groups, args.seed,
                           None if args.budget_minutes is None else 60 * args.budget_minutes, overwrite=args.overwrite)
    result = summary(log)
    print(json.dumps({k: result[k] for k in ("best_size", "best_group", "best_pool", "entries", "planned", "complete",
                                              "skipped", "wall_s", "cpu_s")}))
    if args.store:
        target = Path(args.store)
        atomic_write_json(target, log)
        print(f"stored {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
