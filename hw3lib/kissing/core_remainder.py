"""The core-and-remainder search: a fixed core on the norm-4 shell of Z^11, a remainder optimized against it.

Written from the published description of how the 594-600 point records were made (see
../shared/data/kissing_records/README.md), not from their code:

1. The core: rows +-2 e_i on a set of axis coordinates and all 16 sign patterns (+-1, +-1, +-1, +-1) on
   four-coordinate supports that pairwise share at most two coordinates (a constant-weight code, n = 11,
   w = 4, d = 4; `constructions.constant_weight_code`). With all 11 axes and the 35 supports of the code
   this is the classical 22 + 16 * 35 = 582 (`reproduce_582`). A *cavity* is made by leaving axis rows and
   supports out of the core (`CoreRemainderConfig.drop_axes`, `drop_supports`); the rows left out start
   the remainder, so the search starts from a valid set.
2. The remainder: m unit directions optimized jointly against the fixed core (as unit vectors c / 2):
   `equilibrate` minimizes an annealed hinge sum(relu(theta_min(margin) - theta)^2) on the pair angles
   (theta_min = arccos(1/2 - margin)) plus a smooth maximum
   (1/beta) log sum exp(beta (cos - 1/2)) over every remainder-core and remainder-remainder pair, by
   projected gradient steps with momentum on the sphere; the margin shrinks and beta grows in stages.
3. `chebyshev_lp`: over the near-contact pairs, a linear program (scipy's HiGHS) moves each remainder
   direction in its tangent plane (|step| <= s per coordinate) to maximize the smallest slack t in
   cos <= 1/2 - t (linearized; recomputed exactly after each round, s shrinks when a round does not help).
4. `round_and_check`: remainder rows rounded to integers at denominator D (norm ~ D), core rows times the
   least k with 4 k^2 >= the largest remainder norm^2 (`verify.equalize_norms`' rule), then the exact
   verifier in the course's min-distance form decides. Only sets it accepts are stored.
5. `grow`: add one seed row at the deepest hole found (best of many random directions, refined on the smooth
   maximum) and re-equilibrate the whole remainder; up to `attempts_per_size` tries (new seeds, jittered
   remainder) per size. Resumable: the JSON log holds the current remainder, the best verified set and a
   row per attempt with its CPU time; a text log and a progress bar show it running.

`python -m hw3lib.kissing.core_remainder --log runs/kissing/core_remainder.json [--drop-axes 8 9 10]
[--budget-minutes 20]` runs it on one core (numpy threads pinned to 1 by the caller's environment).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from hw3lib.core.io import atomic_write_json
from hw3lib.kissing.constructions import code_construction, constant_weight_code, sign_patterns
from hw3lib.kissing.verify import verify

HALF = 0.5


@dataclass(frozen=True)
class CoreRemainderConfig:
    """Settings of one core-and-remainder search (saved in its log; a resumed log must match).

    drop_axes: axis coordinates whose rows +-2 e_i leave the core (they start the remainder).
    drop_supports: indices (into the 35-block code, sorted) of supports whose 16 rows leave the core.
    supports: how many of the code's supports (the first ones, sorted) the recipe uses at all (35: the 582 recipe;
        fewer leave empty room, e.g. 0: the core is the 22 axis rows).
    core_file: instead of the recipe, the core rows of a stored configuration (`scaffold.core_split`: rows that are
        k times a norm-4 shell vector), divided by k; the remainder then starts empty. A reproduction
        experiment on a published core, labelled as such in the log -- not our own core.
    start_empty: the remainder starts empty instead of with the rows left out of the core, so the growth may find
        a different (denser) packing of the cavity than the recipe's own rows.
    core_spec: instead of the recipe, a core in `core_families.CoreSpec.to_text` form (axes, full and half
        supports; e.g. one found by `hw3lib.kissing.core_search`); the remainder then starts empty.
    code_seed: seed of the constant-weight code search (35 blocks).
    seed: seed of the seeds and jitters of the growth.
    stages: (margin, beta, steps) of the annealed penalty, in order.
    lr: gradient step on the sphere. momentum: heavy-ball momentum.
    smooth_weight: weight of the smooth-maximum term beside the hinge.
    lp_rounds: Chebyshev LP rounds after a successful equilibration. lp_step: first per-coordinate move bound.
    lp_near: pairs with cos above 1/2 - lp_near enter the LP.
    denominator: rounding scale D of the remainder rows (integer rows of norm about D).
    seed_candidates: random directions scored when looking for the deepest hole.
    attempts_per_size: tries to add one row before the growth stops.
    target: stop when the verified set reaches this size.
    """

    drop_axes: tuple[int, ...] = (8, 9, 10)
    drop_supports: tuple[int, ...] = ()
    supports: int = 35
    core_file: str = ""
    start_empty: bool = False
    core_spec: str = ""
    code_seed: int = 0
    seed: int = 0
    stages: tuple[tuple[float, float, int], ...] = ((0.03, 40.0, 400), (0.01, 120.0, 400), (0.002, 400.0, 600))
    lr: float = 0.02
    momentum: float = 0.9
    smooth_weight: float = 0.05
    lp_rounds: int = 12
    lp_step: float = 0.01
    lp_near: float = 0.03
    denominator: int = 100_000
    seed_candidates: int = 4000
    attempts_per_size: int = 6
    target: int = 600


# ---------------------------------------------------------------------------------------------
# The core


def code_blocks(code_seed: int = 0) -> list[tuple[int, ...]]:
    """The 35 supports of a constant-weight code n = 11, w = 4, d = 4 (pairwise overlap <= 2), sorted."""
    return sorted(tuple(sorted(b)) for b in constant_weight_code(seed=code_seed))


def reproduce_582(code_seed: int = 0) -> np.ndarray:
    """The 35-support recipe: 22 axis rows + 16 x 35 sign patterns = 582 integer rows of norm^2 4."""
    return code_construction(code_blocks(code_seed))


def build_core(cfg: CoreRemainderConfig) -> tuple[np.ndarray, np.ndarray]:
    """(core rows, rows left out for the cavity), integer, norm^2 4; together they are the recipe with
    `cfg.supports` supports (the 582 recipe for 35)."""
    if cfg.core_spec:
        from hw3lib.kissing.core_families import CoreSpec, core_rows

        return core_rows(CoreSpec.from_text(cfg.core_spec)), np.zeros((0, 11), dtype=np.int64)
    if cfg.core_file:
        from hw3lib.kissing.scaffold import load_start

        start = load_start(cfg.core_file)
        rows = np.array([start.points[i] for i in start.split.core], dtype=np.int64) // start.split.scale
        return rows, np.zeros((0, 11), dtype=np.int64)
    blocks = code_blocks(cfg.code_seed)[:cfg.supports]
    core, cavity = [], []
    for axis in range(11):
        rows = np.zeros((2, 11), dtype=np.int64)
        rows[0, axis], rows[1, axis] = 2, -2
        (cavity if axis in cfg.drop_axes else core).append(rows)
    for k, block in enumerate(blocks):
        (cavity if k in cfg.drop_supports else core).append(sign_patterns(block))
    empty = np.zeros((0, 11), dtype=np.int64)
    return (np.vstack(core) if core else empty), (np.vstack(cavity) if cavity else empty)


# ---------------------------------------------------------------------------------------------
# The penalty and its minimization


def pair_cosines(R: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(remainder-core cosines [m, nc], remainder-remainder cosines [m, m] with -1 on and below the diagonal)."""
    rc = R @ C.T  # [m, nc]
    rr = R @ R.T  # [m, m]
    rr[np.tril_indices(len(R))] = -1.0
    return rc, rr


def max_cosine(R: np.ndarray, C: np.ndarray) -> float:
    if len(R) == 0:
        return -1.0
    rc, rr = pair_cosines(R, C)
    return float(max(rc.max(initial=-1.0), rr.max(initial=-1.0)))


def penalty(R: np.ndarray, C: np.ndarray, margin: float, beta: float, smooth_weight: float) -> tuple[float, np.ndarray]:
    """(value, gradient [m, 11]) of the angle hinge^2 + smooth_weight * smooth max of the cosines, over all
    remainder-core and remainder-remainder pairs."""
    rc, rr = pair_cosines(R, C)
    m = len(R)
    upper = np.triu(np.ones((m, m), dtype=bool), 1)  # [m, m]
    # The hinge acts on the angle, not the cosine: cos is flat where two directions meet (d cos / d theta = 0 at
    # theta = 0), so a hinge on cos lets a remainder row settle on top of a core row; on the angle it is pushed off.
    limit = math.acos(HALF - margin)  # the smallest angle wanted, a little above 60 degrees
    theta_rc, theta_rr = np.arccos(np.clip(rc, -1.0, 1.0)), np.arccos(np.clip(rr, -1.0, 1.0))
    hinge_rc = np.maximum(limit - theta_rc, 0.0)  # [m, nc]
    hinge_rr = np.where(upper, np.maximum(limit - theta_rr, 0.0), 0.0)  # [m, m]
    value = float((hinge_rc ** 2).sum() + (hinge_rr ** 2).sum())
    # d(limit - theta)^2 / d cos = 2 (limit - theta) / sin theta
    d_rc = 2 * hinge_rc / np.maximum(np.sqrt(1.0 - np.clip(rc, -1.0, 1.0) ** 2), 1e-3)
    d_rr = 2 * hinge_rr / np.maximum(np.sqrt(1.0 - np.clip(rr, -1.0, 1.0) ** 2), 1e-3)
    if smooth_weight:
        z_rc = beta * (rc - HALF)
        z_rr = np.where(upper, beta * (rr - HALF), -np.inf)
        top = max(z_rc.max(initial=-np.inf), z_rr.max(initial=-np.inf))
        e_rc, e_rr = np.exp(z_rc - top), np.exp(z_rr - top)  # softmax weights (unnormalized)
        total = e_rc.sum() + e_rr.sum()
        value += smooth_weight * (top + math.log(total)) / beta
        d_rc = d_rc + smooth_weight * e_rc / total
        d_rr = d_rr + smooth_weight * e_rr / total
    grad = d_rc @ C + (d_rr + d_rr.T) @ R  # [m, 11]
    return value, grad


def _normalize(R: np.ndarray) -> np.ndarray:
    return R / np.linalg.norm(R, axis=1, keepdims=True)


def equilibrate(R: np.ndarray, C: np.ndarray, cfg: CoreRemainderConfig) -> np.ndarray:
    """Minimize the annealed penalty over the remainder's unit directions (the core stays fixed)."""
    R = _normalize(R.copy())
    velocity = np.zeros_like(R)
    for margin, beta, steps in cfg.stages:
        for _ in range(steps):
            _, grad = penalty(R, C, margin, beta, cfg.smooth_weight)
            grad -= (grad * R).sum(axis=1, keepdims=True) * R  # tangent part
            velocity = cfg.momentum * velocity - cfg.lr * grad
            R = _normalize(R + velocity)
    return R


def chebyshev_lp(R: np.ndarray, C: np.ndarray, cfg: CoreRemainderConfig) -> tuple[np.ndarray, float]:
    """Rounds of the slack LP; returns (directions, exact smallest slack 1/2 - max cos)."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    m = len(R)
    best_R, best_slack = R, HALF - max_cosine(R, C)
    step = cfg.lp_step
    for _ in range(cfg.lp_rounds):
        rc, rr = pair_cosines(best_R, C)
        near_c = np.argwhere(rc > HALF - cfg.lp_near)  # [k1, 2] (i, c)
        near_r = np.argwhere(rr > HALF - cfg.lp_near)  # [k2, 2] (i, j)
        rows, cols, vals, rhs = [], [], [], []
        t = m * 11  # index of the slack variable
        for n, (i, c) in enumerate(near_c):
            rows += [n] * 12
            cols += [*range(11 * i, 11 * i + 11), t]
            vals += [*C[c], 1.0]
            rhs.append(HALF - rc[i, c])
        base = len(near_c)
        for n, (i, j) in enumerate(near_r):
            rows += [base + n] * 23
            cols += [*range(11 * i, 11 * i + 11), *range(11 * j, 11 * j + 11), t]
            vals += [*best_R[j], *best_R[i], 1.0]
            rhs.append(HALF - rr[i, j])
        if not rhs:
            break
        a_ub = coo_matrix((vals, (rows, cols)), shape=(len(rhs), t + 1)).tocsr()
        eq_rows = np.repeat(np.arange(m), 11)
        a_eq = coo_matrix((best_R.ravel(), (eq_rows, np.arange(m * 11))), shape=(m, t + 1)).tocsr()  # tangent moves
        cost = np.zeros(t + 1)
        cost[t] = -1.0
        bounds = [(-step, step)] * (m * 11) + [(-1.0, 1.0)]
        solved = linprog(cost, A_ub=a_ub, b_ub=np.array(rhs), A_eq=a_eq, b_eq=np.zeros(m), bounds=bounds,
                         method="highs")
        if solved.status != 0:
            break
        moved = _normalize(best_R + solved.x[:t].reshape(m, 11))
        slack = HALF - max_cosine(moved, C)
        if slack > best_slack:
            best_R, best_slack = moved, slack
        else:
            step /= 2  # the linearization overshot: smaller moves
            if step < 1e-7:
                break
    return best_R, best_slack


def round_and_check(R: np.ndarray, core: np.ndarray, denominator: int) -> tuple[list[list[int]] | None, str]:
    """Integer rows (core times k, remainder rounded at `denominator`) and the exact verdict in the course's form."""
    remainder = [[int(v) for v in row] for row in np.rint(R * denominator).astype(np.int64)]
    largest = max((sum(v * v for v in row) for row in remainder), default=4)
    k = max(1, math.isqrt(max(largest // 4, 1)))
    while 4 * k * k < largest:
        k += 1
    points = [[k * int(v) for v in row] for row in core] + remainder
    result = verify(points)
    return (points if result.valid else None), result.message


# ---------------------------------------------------------------------------------------------
# Growth


def deepest_hole(R: np.ndarray, C: np.ndarray, candidates: int, rng: np.random.Generator) -> np.ndarray:
    """A unit direction far from every core and remainder row: the best of random ones, refined."""
    # random directions plus the structured ones of the norm-4 shell's holes: +-e_i and (+-1, +-1, 0, ...)/sqrt2
    pairs = [np.eye(11)[i] * a + np.eye(11)[j] * b for i in range(11) for j in range(i + 1, 11)
             for a in (1, -1) for b in (1, -1)]
    X = _normalize(np.vstack([rng.standard_normal((candidates, 11)), np.eye(11), -np.eye(11), pairs]))  # [N, 11]
    A = np.vstack([C, R]) if len(R) else C  # [n, 11]
    worst = (X @ A.T).max(axis=1)  # [N]
    x = X[int(np.argmin(worst))]
    if worst.min() <= HALF:  # already a legal position (e.g. an empty lattice site): keep it exact
        return x
    for _ in range(200):  # soft-max descent on the cosines to A
        cos = A @ x  # [n]
        w = np.exp(60 * (cos - cos.max()))
        g = (w[:, None] * A).sum(axis=0) / w.sum()
        g -= (g @ x) * x
        x = x - 0.02 * g
        x /= np.linalg.norm(x)
    return x


@dataclass
class GrowState:
    """What the JSON log holds between runs."""

    config: dict
    remainder: list = field(default_factory=list)
    best_points: list | None = None
    best_size: int = 0
    attempts: list = field(default_factory=list)
    done: bool = False
    reason: str = ""
    cpu_s: float = 0.0
    wall_s: float = 0.0
    machine: str = ""


def saved_settings(saved: dict) -> dict:
    """A log's settings with every field added since it was written set to its default (`core_spec`,
    `start_empty`): a field the log does not name was not an option then, so the run used what is now the default."""
    defaults = json.loads(json.dumps(asdict(CoreRemainderConfig())))  # tuples -> lists, as the log stores them
    return {**defaults, **saved}


def config_of(saved: dict) -> CoreRemainderConfig:
    """The config a log was written with (lists back to tuples), e.g. to resume a stored log."""
    settings = saved_settings(saved)
    settings["stages"] = tuple(tuple(stage) for stage in settings["stages"])
    return CoreRemainderConfig(**{k: tuple(v) if isinstance(v, list) and k != "stages" else v
                                  for k, v in settings.items()})


def _load_state(path: Path, cfg: CoreRemainderConfig) -> GrowState:
    settings = json.loads(json.dumps(asdict(cfg)))  # tuples -> lists, as the log stores them
    if path.is_file():
        state = GrowState(**json.loads(path.read_text(encoding="utf-8")))
        if saved_settings(state.config) != settings:
            raise ValueError(f"{path} was written with other settings; pass another --log or the same settings")
        state.config = settings  # saved again with every field named
        return state
    return GrowState(settings, machine=f"{platform.platform()}, Python {platform.python_version()}")


def grow(log_path: str | Path, cfg: CoreRemainderConfig = CoreRemainderConfig(), budget_s: float | None = None,
         progress: bool = True, text_log: str | Path | None = None, cpu_budget_s: float | None = None) -> GrowState:
    """Grow the remainder one row at a time (module docstring); resumes from `log_path`. budget_s: wall seconds of
    this call; cpu_budget_s: CPU seconds of the whole log, so a short-budget score does not depend on machine load."""
    log_path = Path(log_path)
    text_log = Path(text_log) if text_log else log_path.with_suffix(".log")
    state = _load_state(log_path, cfg)
    core, cavity = build_core(cfg)
    C = core / 2.0  # unit core directions
    if state.remainder or state.best_points is not None:
        R = np.array(state.remainder, dtype=np.float64).reshape(-1, 11)
    else:
        R = np.zeros((0, 11)) if cfg.start_empty else _normalize(cavity / 2.0)
    if state.best_points is None:  # the start: the 582 recipe split into core and cavity rows
        points, message = round_and_check(R, core, cfg.denominator)
        if points is None:
            raise RuntimeError(f"the starting set does not verify: {message}")
        state.best_points, state.best_size, state.remainder = points, len(points), R.tolist()
        _save(log_path, state, text_log, f"start: core {len(core)} + remainder {len(R)} = {len(points)} (verified)")
    rng = np.random.default_rng([cfg.seed, len(state.attempts)])
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    wall0, cpu0 = state.wall_s, state.cpu_s
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.target, initial=state.best_size, desc="core+remainder", unit="pt", leave=False)
    failures = _failures_at(state, state.best_size + 1)
    try:
        while not state.done:
            if state.best_size >= cfg.target:
                state.done, state.reason = True, f"reached the target {cfg.target}"
                break
            if failures >= cfg.attempts_per_size:
                state.done, state.reason = True, (f"{cfg.attempts_per_size} attempts found no valid set of "
                                                  f"{state.best_size + 1}")
                break
            if _budget_spent(budget_s, time.perf_counter() - start_wall, cpu_budget_s,
                             cpu0 + time.process_time() - start_cpu):
                state.reason = "budget spent (resume with the same command)"
                break
            t_cpu = time.process_time()
            base = R + (0.0 if failures == 0 else 0.02 * failures) * rng.standard_normal(R.shape)  # jitter retries
            placed = np.vstack([_normalize(base), deepest_hole(R, C, cfg.seed_candidates, rng)])
            trial = equilibrate(placed, C, cfg)
            if HALF - max_cosine(placed, C) > HALF - max_cosine(trial, C):
                trial = placed  # a tight cavity: the seed in its hole beats the re-equilibrated remainder
            eq_cpu = time.process_time() - t_cpu
            slack_eq = HALF - max_cosine(trial, C)
            points, message, slack = None, f"equilibrium max cos {HALF - slack_eq:.6f} > 1/2", slack_eq
            lp_cpu = 0.0
            if slack_eq > -1e-3:  # close enough for the LP to finish the job
                t_lp = time.process_time()
                trial, slack = chebyshev_lp(trial, C, cfg)
                lp_cpu = time.process_time() - t_lp
                if slack > -1e-12:  # slack 0 (exact contacts) can still round to a valid set, e.g. at lattice points
                    points, message = round_and_check(trial, core, cfg.denominator)
            row = {"size": len(core) + len(trial), "valid": points is not None, "slack_after_equilibrium": slack_eq,
                   "slack_after_lp": slack, "cpu_equilibrate_s": eq_cpu, "cpu_lp_s": lp_cpu,
                   "cpu_s": time.process_time() - t_cpu, "message": message[:200]}
            state.attempts.append(row)
            if points is not None:
                R, failures = trial, 0
                state.best_points, state.best_size, state.remainder = points, len(points), R.tolist()
                if bar is not None:
                    bar.update(len(points) - bar.n)
            else:
                failures += 1
            state.wall_s = wall0 + time.perf_counter() - start_wall
            state.cpu_s = cpu0 + time.process_time() - start_cpu
            _save(log_path, state, text_log, f"size {row['size']}: {'VALID' if row['valid'] else 'no'}; slack "
                  f"{slack_eq:+.2e} -> {slack:+.2e}; cpu {row['cpu_s']:.1f} s (equilibrate {eq_cpu:.1f}, LP {lp_cpu:.1f})")
    finally:
        if bar is not None:
            bar.close()
    state.wall_s = wall0 + time.perf_counter() - start_wall
    state.cpu_s = cpu0 + time.process_time() - start_cpu
    _save(log_path, state, text_log, f"stop: best {state.best_size} verified; {state.reason}")
    return state


def _budget_spent(budget_s: float | None, wall_s: float, cpu_budget_s: float | None, cpu_s: float) -> bool:
    return (budget_s is not None and wall_s > budget_s) or (cpu_budget_s is not None and cpu_s > cpu_budget_s)


def _failures_at(state: GrowState, size: int) -> int:
    count = 0
    for row in reversed(state.attempts):
        if row["valid"] or row["size"] != size:
            break
        count += 1
    return count


def _save(path: Path, state: GrowState, text_log: Path, line: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, asdict(state), indent=None)
    with open(text_log, "a", encoding="utf-8") as handle:
        handle.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n")


def summary(log: dict) -> dict:
    """What the report states about a stored growth log (its best set verified again here)."""
    cfg = log["config"]
    rows = log["attempts"]
    valid = [r for r in rows if r["valid"]]
    best = log.get("best_points")
    verdict = verify(best) if best else None
    core = (f"the core of {Path(cfg['core_file']).name} (a reproduction experiment on a published core)"
            if cfg.get("core_file") else f"our own core {cfg['core_spec']}" if cfg.get("core_spec") else
            f"the {cfg['supports']}-support recipe without axes {cfg['drop_axes']} and supports {cfg['drop_supports']}")
    mean = lambda key, rs: sum(r[key] for r in rs) / len(rs) if rs else 0.0  # noqa: E731
    return {"core": core, "start_empty": bool(cfg.get("start_empty") or cfg.get("core_file")),
            "best_size": log["best_size"],
            "verified": bool(verdict and verdict.valid), "attempts": len(rows), "valid_attempts": len(valid),
            "first_size": min((r["size"] for r in rows), default=log["best_size"]) - 1,
            "cpu_s": log["cpu_s"], "wall_s": log["wall_s"], "done": log["done"], "reason": log["reason"],
            "cpu_per_attempt_s": mean("cpu_s", rows), "cpu_equilibrate_s": mean("cpu_equilibrate_s", rows),
            "cpu_lp_s": mean("cpu_lp_s", [r for r in rows if r["cpu_lp_s"] > 0]), "machine": log.get("machine", "")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hw3lib.kissing.core_remainder", description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True, help="JSON log to write and resume from (a .log text file beside it)")
    parser.add_argument("--drop-axes", type=int, nargs="*", default=[8, 9, 10])
    parser.add_argument("--drop-supports", type=int, nargs="*", default=[])
    parser.add_argument("--supports", type=int, default=35, help="supports of the code the recipe uses")
    parser.add_argument("--core-file", default="", help="take the core of this stored configuration (an experiment)")
    parser.add_argument("--start-empty", action="store_true", help="grow the remainder from nothing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--attempts", type=int, default=6, help="tries per size before stopping")
    parser.add_argument("--target", type=int, default=600)
    parser.add_argument("--budget-minutes", type=float, default=None)
    args = parser.parse_args(argv)
    cfg = CoreRemainderConfig(drop_axes=tuple(args.drop_axes), drop_supports=tuple(args.drop_supports),
                              supports=args.supports, core_file=args.core_file, start_empty=args.start_empty,
                              seed=args.seed, attempts_per_size=args.attempts, target=args.target)
    state = grow(args.log, cfg, None if args.budget_minutes is None else 60 * args.budget_minutes)
    print(json.dumps({"best_size": state.best_size, "attempts": len(state.attempts), "cpu_s": round(state.cpu_s, 1),
                      "done": state.done, "reason": state.reason}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
