"""Local search that grows valid kissing configurations from a finite set of integer candidates.

Fix a threshold T and candidate vectors of squared norm <= T (by default an equal-norm shell
{x in Z^11 : ||x||^2 = T}). Any subset whose points are pairwise at squared distance >= T is a
valid configuration (min distance^2 >= T >= max norm^2). Join two candidates when they are
closer than that (for an equal-norm shell: when <x, y> > T / 2); valid configurations are then
exactly the *independent sets* of this conflict graph, and growing a configuration is the
maximum-independent-set problem.

The graph search itself (2-improvements, perturbation, restarts from the incumbent: a
simplified Andrade-Resende-Werneck iterated local search) is `grow_independent_set` in
`hw3lib.kissing.independent_set`; `IndependentSet` and `grow_independent_set` are re-exported
here. This module builds the candidates and the conflict graph, checkpoints the search, and
writes the result as a program. All integer arithmetic is exact (conflicts come from the
integer Gram matrix) and the final set is re-checked with `verify`. A run is deterministic for
a given `seed`, and a run resumed from its checkpoint (current set, best set, iteration, RNG
state; written atomically) continues exactly as the uninterrupted run would.

Command line: `python -m hw3lib.kissing.search --write-program` rebuilds
data/kissing_number/program.py from the best construction (`hw3lib.kissing.constructions`)
polished by this search.
"""

from __future__ import annotations

import hashlib
import math
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hw3lib.core.io import atomic_write_json
from hw3lib.kissing.constructions import code_construction, constant_weight_code_search
# IndependentSet stays importable from here (tests import it with the rest of the search).
from hw3lib.kissing.independent_set import IndependentSet, grow_independent_set  # noqa: F401
from hw3lib.kissing.verify import InputError, VerifyResult, to_integer_matrix, verify

CHECKPOINT_VERSION = 1
MAX_CANDIDATES = 60_000  # beyond this the conflict graph gets too large for this pure-Python search


# ---------------------------------------------------------------------------------------------
# Candidates and the conflict graph


def shell_vectors(norm_sq: int, dimension: int = 11, min_norm_sq: int | None = None) -> np.ndarray:
    """All x in Z^dimension with min_norm_sq <= ||x||^2 <= norm_sq (min defaults to norm_sq), sorted.

    E.g. norm_sq=2 in dimension 11 gives the 220 vectors ±e_i ± e_j; norm_sq=4 gives 5302.
    """
    if norm_sq < 1 or dimension < 1:
        raise ValueError(f"shell_vectors needs norm_sq >= 1 and dimension >= 1, got {norm_sq}, {dimension}")
    low = norm_sq if min_norm_sq is None else max(1, min_norm_sq)
    radius = math.isqrt(norm_sq)
    values = np.arange(-radius, radius + 1, dtype=np.int64)  # [2r+1]
    partial = np.zeros((1, 0), dtype=np.int64)  # [m, k]: prefixes with squared norm <= norm_sq
    used = np.zeros(1, dtype=np.int64)  # [m]
    for _ in range(dimension):
        grown_used = used[:, None] + values[None, :] ** 2  # [m, 2r+1]
        keep_row, keep_col = np.nonzero(grown_used <= norm_sq)
        partial = np.hstack([partial[keep_row], values[keep_col, None]])  # [m', k+1]
        used = grown_used[keep_row, keep_col]  # [m']
    vectors = partial[(used >= low) & (used <= norm_sq)]  # [n, d]
    return vectors[np.lexsort(vectors.T[::-1])]


def shell_size(norm_sq: int, dimension: int = 11, min_norm_sq: int | None = None) -> int:
    """How many vectors `shell_vectors` would return, without building them (theta-series count).

    r_d(N) = #{x in Z^d : ||x||^2 = N} is the coefficient of q^N in theta(q)^d with
    theta(q) = 1 + 2q + 2q^4 + 2q^9 + ...; e.g. r_11(2) = 220, r_11(4) = 5302.
    """
    low = norm_sq if min_norm_sq is None else max(1, min_norm_sq)
    theta = [0] * (norm_sq + 1)
    for k in range(-math.isqrt(norm_sq), math.isqrt(norm_sq) + 1):
        theta[k * k] += 1
    counts = [1] + [0] * norm_sq  # r_0 = 1 at N = 0
    for _ in range(dimension):
        counts = [sum(counts[a] * theta[total - a] for a in range(total + 1)) for total in range(norm_sq + 1)]
    return sum(counts[low:norm_sq + 1])


def conflict_graph(points: np.ndarray, threshold: int) -> list[np.ndarray]:
    """For each point, the indices of the others at squared distance < threshold (exact).

    points: [n, d] integers small enough for exact float64 Gram entries (checked).
    """
    points = np.asarray(points)
    n, d = points.shape
    largest = int(np.abs(points).max()) if points.size else 0
    if 4 * d * largest**2 > 2**53:
        raise ValueError("conflict_graph: coordinates too large for the exact float64 Gram; use smaller candidates")
    as_float = points.astype(np.float64)  # exact: entries are small integers
    sq_norms = np.einsum("ij,ij->i", as_float, as_float)  # [n]
    block = max(1, (1 << 22) // max(n, 1))
    neighbours: list[np.ndarray] = []
    for start in range(0, n, block):
        rows = as_float[start:start + block]  # [b, d]
        dist = sq_norms[start:start + block, None] + sq_norms[None, :] - 2 * (rows @ as_float.T)  # [b, n]
        close = dist < threshold  # [b, n]
        close[np.arange(rows.shape[0]), np.arange(start, start + rows.shape[0])] = False  # not its own neighbour
        neighbours.extend(np.flatnonzero(row).astype(np.int64) for row in close)
    return neighbours


# ---------------------------------------------------------------------------------------------
# Search results


@dataclass
class SearchResult:
    """points: the best valid set found [k, d] (int64); history: one row per new best (and the end)."""

    points: np.ndarray
    history: list[dict]
    iterations: int = 0
    elapsed_s: float = 0.0
    verdict: VerifyResult | None = None
    resumed_from: int = 0
    extra: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# The public entry point


def local_search(initial_points=None, norm_sq: int | None = None, seed: int = 0, iterations: int | None = 2000,
                 time_limit_s: float | None = None, checkpoint: str | Path | None = None,
                 min_norm_sq: int | None = None, candidates=None, dimension: int = 11, target: int | None = None,
                 slack: int = 8, progress: bool = False) -> SearchResult:
    """Grow / polish a valid configuration by local search over integer candidates.

    initial_points: a valid set to start from (e.g. a construction or an LLM's output), or None.
    norm_sq: the threshold T (every candidate has ||x||^2 <= T, every pair must be >= T apart);
        defaults to the max squared norm of initial_points (so a valid start stays valid), else 4.
    min_norm_sq: candidates are the integer vectors with min_norm_sq <= ||x||^2 <= T (default T:
        the equal-norm shell); `candidates` replaces the shell with an explicit [m, d] array.
    seed, iterations, time_limit_s, target, slack: see `grow_independent_set`.
    checkpoint: a JSON file; written atomically every few seconds and at the end, and resumed
        from when it exists and was written by the same search settings.
    Returns SearchResult with the best set (verified exactly: `verdict.valid` is always True).
    """
    start_points = None if initial_points is None else _as_int_matrix(initial_points, dimension)
    if norm_sq is None:
        norm_sq = int(np.einsum("ij,ij->i", start_points, start_points).max()) if start_points is not None else 4
    if candidates is None:
        if shell_size(norm_sq, dimension, min_norm_sq) > MAX_CANDIDATES:
            raise ValueError(f"local_search: the shell {min_norm_sq or norm_sq} <= |x|^2 <= {norm_sq} has "
                             f"{shell_size(norm_sq, dimension, min_norm_sq)} vectors (max {MAX_CANDIDATES}); use a "
                             "smaller norm_sq (e.g. 4), or pass an explicit `candidates` array")
        pool = shell_vectors(norm_sq, dimension, min_norm_sq)
    else:
        pool = _as_int_matrix(candidates, dimension)
    if start_points is not None:
        too_long = np.einsum("ij,ij->i", start_points, start_points) > norm_sq
        if too_long.any():
            raise ValueError(f"local_search: initial point {int(np.flatnonzero(too_long)[0])} is longer than "
                             f"norm_sq={norm_sq}; pass norm_sq >= the largest squared norm of the initial points")
        pool = np.unique(np.vstack([pool, start_points]), axis=0)
    pool = pool[np.einsum("ij,ij->i", pool, pool) <= norm_sq]
    if len(pool) > MAX_CANDIDATES:
        raise ValueError(f"local_search: {len(pool)} candidates is too many (max {MAX_CANDIDATES}); "
                         f"use a smaller norm_sq, a narrower min_norm_sq or an explicit `candidates` array")
    index = {tuple(row): i for i, row in enumerate(pool.tolist())}
    initial = [] if start_points is None else [index[tuple(row)] for row in start_points.tolist()]

    config = {"version": CHECKPOINT_VERSION, "norm_sq": int(norm_sq), "seed": int(seed), "dimension": dimension,
              "slack": slack, "candidates_sha1": hashlib.sha1(pool.tobytes()).hexdigest(),
              "initial_sha1": hashlib.sha1(json.dumps(initial).encode()).hexdigest()}
    state = _load_checkpoint(checkpoint, config, index) if checkpoint is not None else None
    resumed_from = 0 if state is None else int(state["iteration"])

    def save(snapshot: dict) -> None:
        if checkpoint is not None:
            _save_checkpoint(checkpoint, config, snapshot, pool)

    neighbours = conflict_graph(pool, norm_sq)
    best, history, final = grow_independent_set(neighbours, initial, seed, iterations, time_limit_s, target, slack,
                                                state, save, progress)
    save(final)
    points = pool[np.asarray(best, dtype=np.int64)]  # [k, d]
    verdict = verify(points, dimension=dimension)
    if not verdict.valid:  # cannot happen if the moves are right: fail loudly rather than return junk
        raise AssertionError(f"local_search produced an invalid set: {verdict.message}")
    return SearchResult(points, history, final["iteration"], final["elapsed_s"], verdict, resumed_from,
                        {"num_candidates": len(pool), "norm_sq": int(norm_sq)})


def _as_int_matrix(points, dimension: int) -> np.ndarray:
    """Exact int64 [n, dimension] matrix or a ValueError saying what is wrong (the set need not be valid)."""
    try:
        matrix = to_integer_matrix(points)
    except InputError as exc:
        raise ValueError(f"local_search: bad points: {exc}") from None
    if matrix.shape[1] != dimension:
        raise ValueError(f"local_search: points have dimension {matrix.shape[1]}, expected {dimension}")
    if matrix.dtype != np.int64:
        raise ValueError("local_search: coordinates beyond int64; the search works with small integer candidates")
    return matrix


def _save_checkpoint(path, config: dict, snapshot: dict, pool: np.ndarray) -> None:
    rows = {key: pool[np.asarray(snapshot[key], dtype=np.int64)].tolist() for key in ("current", "best")}
    atomic_write_json(path, {"config": config, **snapshot, **rows}, indent=None)


def _load_checkpoint(path, config: dict, index: dict) -> dict | None:
    path = Path(path)
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: checkpoint is not valid JSON ({exc}); delete it to start over") from None
    if saved.get("config") != config:
        raise ValueError(f"{path}: checkpoint was written by a different search (settings {saved.get('config')}, "
                         f"now {config}); delete it or pass another checkpoint path")
    state = dict(saved)
    for key in ("current", "best"):
        state[key] = [index[tuple(row)] for row in saved[key]]
    return state


# ---------------------------------------------------------------------------------------------
# Writing the result as a course-compatible program

PROGRAM_TEMPLATE = '''"""Kissing configuration in dimension 11 with {n} points (tau_11 >= {n}).

Written by {written_by} (do not edit by hand).
Method: {method}
Exact check: {verdict}
"""

import numpy as np

POINTS = [
{rows}
]


def run_code():
    """The course's interface: (points as an int64 array [n, 11], the dimension)."""
    return np.array(POINTS, dtype=np.int64), 11
'''


def program_source(points: np.ndarray, method: str,
                   written_by: str = "`python -m hw3lib.kissing.search --write-program`") -> str:
    """A self-contained program (numpy only) whose run_code() returns `points`; refuses invalid sets."""
    verdict = verify(points)
    if not verdict.valid:
        raise ValueError(f"program_source: refusing to write an invalid set: {verdict.message}")
    rows = "\n".join("    [" + ", ".join(str(int(v)) for v in row) + "]," for row in np.asarray(points).tolist())
    return PROGRAM_TEMPLATE.format(n=len(points), method=method, verdict=verdict.message, rows=rows,
                                   written_by=written_by)


@dataclass
class BestProgramRun:
    """Everything `best_program_search` did: the program, both searches' histories and their timings."""

    source: str
    """The program file's text (what `--write-program` stores)."""
    points: np.ndarray
    construction_points: int
    code_blocks: tuple
    code_history: list[dict]
    """The constant-weight code search: {iteration, time_s, size = blocks} per new best and at the end."""
    code_iterations: int
    polished: SearchResult
    seed: int
    iterations: int
    timings: dict
    """Wall and CPU seconds of each phase: code_search, construction, local_search, program (verify + write)."""


def best_program_search(iterations: int = 5000, seed: int = 0, progress: bool = False) -> BestProgramRun:
    """The search behind data/kissing_number/program.py, with its history and its compute.

    The constant-weight code (`constructions.constant_weight_code_search`, the same call as
    `best_known_construction`), the norm-4 code construction, then `iterations` (seed `seed`) of
    local search in its shell; the better set is written as a program. An iteration budget (not a
    time limit) keeps the written program identical on every machine.
    """
    timings: dict[str, dict] = {}

    def timed(name: str, work):
        wall, cpu = time.perf_counter(), time.process_time()
        value = work()
        timings[name] = {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}
        return value

    blocks, code_history, code_final = timed("code_search", constant_weight_code_search)
    construction = timed("construction", lambda: code_construction(blocks))
    polished = timed("local_search", lambda: local_search(construction, seed=seed, iterations=iterations,
                                                          progress=progress))
    points = polished.points if len(polished.points) > len(construction) else construction
    method = ("the norm-4 code construction: ±2e_i and all (±1)^4 sign patterns on\n"
              f"the {len(blocks)} blocks of a length-11, weight-4, distance-4 constant-weight code found by seeded\n"
              f"local search ({len(construction)} points), then {polished.iterations} iterations (seed {seed}) of\n"
              f"independent-set local search in the norm-4 shell (best {len(polished.points)} points).")
    source = timed("program", lambda: program_source(points, method))
    return BestProgramRun(source, points, len(construction), blocks, code_history, int(code_final["iteration"]),
                          polished, seed, iterations, timings)


def build_best_program(iterations: int = 5000, seed: int = 0, progress: bool = True) -> tuple[str, dict]:
    """Best construction polished by local search in its own shell; returns (program source, summary)."""
    run = best_program_search(iterations, seed, progress)
    summary = {"num_points": len(run.points), "construction_points": run.construction_points,
               "construction_s": round(run.timings["code_search"]["wall_s"] + run.timings["construction"]["wall_s"], 2),
               "search_points": len(run.polished.points), "search_s": round(run.polished.elapsed_s, 2),
               "search_iterations": run.polished.iterations}
    return run.source, summary


def main(argv: list[str] | None = None) -> int:
    import argparse

    from hw3lib.core.io import atomic_write_text, project_root

    parser = argparse.ArgumentParser(prog="python -m hw3lib.kissing.search", description=__doc__.splitlines()[0])
    parser.add_argument("--write-program", action="store_true", help="rebuild data/kissing_number/program.py")
    parser.add_argument("--output", default=None, help="where to write the program (default data/kissing_number/program.py)")
    parser.add_argument("--iterations", type=int, default=5000, help="local search iterations for polishing")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.write_program:
        parser.error("nothing to do: pass --write-program")
    source, summary = build_best_program(args.iterations, args.seed)
    output = Path(args.output) if args.output else project_root() / "data" / "kissing_number" / "program.py"
    atomic_write_text(output, source)
    print(json.dumps({"written": str(output), **summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
