"""Local search that grows valid kissing configurations from a finite set of integer candidates.

Fix a threshold T and candidate vectors of squared norm <= T (by default an equal-norm shell
{x in Z^11 : ||x||^2 = T}). Any subset whose points are pairwise at squared distance >= T is a
valid configuration (min distance^2 >= T >= max norm^2). Join two candidates when they are
closer than that (for an equal-norm shell: when <x, y> > T / 2); valid configurations are then
exactly the *independent sets* of this conflict graph, and growing a configuration is the
maximum-independent-set problem.

The search is the iterated local search of Andrade, Resende and Werneck (J. Heuristics 2012),
simplified:
- (1,2)-swaps ("2-improvements"): drop a member x and add two non-adjacent vertices whose
  only conflicting member was x; free vertices (no conflicting member) are added greedily;
- perturbation: force one (sometimes a few) random non-members in, dropping the members they
  conflict with, then re-run the 2-improvements around the change;
- acceptance: keep the perturbed set unless it falls more than `slack` below the best, then
  restart from the best (a randomized restart from the incumbent).
All integer arithmetic is exact (conflicts come from the integer Gram matrix), every move keeps
the set independent, and the final set is re-checked with `verify`. Randomness comes from one
numpy Generator seeded by `seed`: a run is deterministic, and a run resumed from its
checkpoint (current set, best set, iteration, RNG state; written atomically) continues exactly
as the uninterrupted run would.

Command line: `python -m hw3lib.kissing.search --write-program` rebuilds
data/kissing_number/program.py from the best construction polished by this search.
"""

from __future__ import annotations

import hashlib
import math
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hw3lib.io import atomic_write_json
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
# The independent-set state and its moves


class IndependentSet:
    """A set of vertices with no conflicts, plus each vertex's number of conflicting members.

    tight[v] = |N(v) ∩ S|: v can join when tight[v] == 0; a member x can be swapped for two
    non-adjacent vertices u, w with tight == 1 (their only conflict is x) — a 2-improvement.
    """

    def __init__(self, neighbours: list[np.ndarray], rng: np.random.Generator):
        self.neighbours = neighbours
        self.rng = rng
        self.n = len(neighbours)
        self.member = np.zeros(self.n, dtype=bool)  # [n]
        self.tight = np.zeros(self.n, dtype=np.int64)  # [n]
        self.size = 0
        self._neighbour_sets: dict[int, set[int]] = {}

    def adjacent(self, u: int, w: int) -> bool:
        cached = self._neighbour_sets.get(u)
        if cached is None:
            cached = self._neighbour_sets[u] = set(self.neighbours[u].tolist())
        return w in cached

    def add(self, v: int) -> None:
        assert not self.member[v] and self.tight[v] == 0, "adding a conflicting vertex"
        self.member[v] = True
        self.tight[self.neighbours[v]] += 1
        self.size += 1

    def remove(self, v: int) -> None:
        self.member[v] = False
        self.tight[self.neighbours[v]] -= 1
        self.size -= 1

    def members(self) -> np.ndarray:
        return np.flatnonzero(self.member)  # [size] sorted

    def reset_to(self, vertices) -> None:
        for v in self.members():
            self.remove(int(v))
        for v in sorted(int(v) for v in vertices):
            self.add(v)

    def add_free(self, vertices) -> list[int]:
        """Add the given vertices that are free now, in a random order; return those added."""
        vertices = np.unique(np.asarray(vertices, dtype=np.int64))  # sorted: order depends only on the set
        free = vertices[(self.tight[vertices] == 0) & ~self.member[vertices]]
        added = []
        for v in self.rng.permutation(free):
            v = int(v)
            if self.tight[v] == 0 and not self.member[v]:
                self.add(v)
                added.append(v)
        return added

    def fill(self) -> list[int]:
        return self.add_free(np.arange(self.n))

    def _sole_member_neighbour(self, v: int) -> int:
        nbrs = self.neighbours[v]
        return int(nbrs[self.member[nbrs]][0])

    def two_improve(self, queue) -> None:
        """Apply 2-improvements starting from the members in `queue` until none applies there."""
        pending = sorted({int(x) for x in queue if self.member[x]})
        pending.reverse()
        queued = set(pending)
        while pending:
            x = pending.pop()
            queued.discard(x)
            if not self.member[x]:
                continue
            nbrs = self.neighbours[x]
            one_tight = nbrs[(self.tight[nbrs] == 1) & ~self.member[nbrs]]  # their only conflict is x
            if one_tight.size < 2:
                continue
            pair = self._non_adjacent_pair(self.rng.permutation(one_tight).tolist())
            if pair is None:
                continue
            self.remove(x)
            self.add(pair[0])
            self.add(pair[1])
            new = list(pair) + self.add_free(nbrs)
            # Members whose 1-tight neighbourhood may have grown: the new members, and the sole
            # conflicting member of every neighbour of x that is now 1-tight.
            now_one = nbrs[(self.tight[nbrs] == 1) & ~self.member[nbrs]]
            for y in new + [self._sole_member_neighbour(int(v)) for v in now_one]:
                if y not in queued:
                    queued.add(y)
                    pending.append(y)

    def _non_adjacent_pair(self, candidates: list[int]) -> tuple[int, int] | None:
        for a, u in enumerate(candidates):
            for w in candidates[a + 1:]:
                if not self.adjacent(u, w):
                    return u, w
        return None

    def perturb(self, count: int) -> list[int]:
        """Force `count` random non-members in (dropping their conflicts); return members to re-examine.

        Those are the forced and refilled vertices and, for every neighbour of a dropped member
        that is now 1-tight, its sole conflicting member: where new 2-improvements can appear.
        """
        outside = np.flatnonzero(~self.member)
        if outside.size == 0:
            return []
        forced = self.rng.choice(outside, size=min(count, outside.size), replace=False).tolist()
        dropped: list[int] = []
        for v in forced:
            nbrs = self.neighbours[v]
            for w in nbrs[self.member[nbrs]].tolist():
                self.remove(w)
                dropped.append(w)
            self.add(v)
        if not dropped:
            return forced
        around = np.unique(np.concatenate([self.neighbours[w] for w in dropped]))
        added = self.add_free(around)
        now_one = around[(self.tight[around] == 1) & ~self.member[around]]
        return forced + added + [self._sole_member_neighbour(int(v)) for v in now_one]


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


def grow_independent_set(neighbours: list[np.ndarray], initial=(), seed: int = 0, iterations: int | None = 1000,
                         time_limit_s: float | None = None, target: int | None = None, slack: int = 8,
                         state: dict | None = None, on_progress=None, progress: bool = False):
    """Iterated local search for a large independent set; returns (best vertices, history, final state).

    initial: vertices to start from (added greedily in order; conflicting ones are skipped).
    iterations / time_limit_s / target: stop at whichever comes first (at least one must be set).
    state: a dict from a previous call's result (resume); on_progress(state) is called every
        few seconds with a resumable state (for checkpoints).
    """
    if iterations is None and time_limit_s is None and target is None:
        raise ValueError("grow_independent_set: give iterations, time_limit_s or target, or it never stops")
    rng = np.random.default_rng(seed)
    current = IndependentSet(neighbours, rng)
    if state is not None:
        rng.bit_generator.state = state["rng_state"]
        current.reset_to(state["current"])
        best, done = list(state["best"]), int(state["iteration"])
        history = [row for row in state["history"] if not row.get("final")]  # the end row is re-added below
        elapsed_before = float(state["elapsed_s"])
    else:
        for v in initial:
            if not current.member[v] and current.tight[v] == 0:
                current.add(int(v))
        current.fill()
        current.two_improve(current.members())
        best, done, elapsed_before = current.members().tolist(), 0, 0.0
        history = [{"iteration": 0, "time_s": 0.0, "size": len(best)}]

    def snapshot(iteration: int, elapsed: float) -> dict:
        return {"iteration": iteration, "elapsed_s": elapsed, "current": current.members().tolist(), "best": best,
                "history": history, "rng_state": rng.bit_generator.state}

    start = time.perf_counter()
    last_report = start
    bar = _progress_bar(iterations, done, progress)
    iteration = done
    while True:
        elapsed = elapsed_before + time.perf_counter() - start
        if (iterations is not None and iteration >= iterations) or (target is not None and len(best) >= target) \
                or (time_limit_s is not None and time.perf_counter() - start >= time_limit_s):
            break
        iteration += 1
        count = 1 if rng.random() < 0.5 else 1 + int(rng.geometric(0.5))  # mostly small kicks
        current.two_improve(current.perturb(count))
        if current.size > len(best):
            best = current.members().tolist()
            history.append({"iteration": iteration, "time_s": round(elapsed, 3), "size": len(best)})
            bar.set_postfix(best=len(best))
        elif current.size < len(best) - slack:
            current.reset_to(best)  # restart from the incumbent
        bar.update(1)
        now = time.perf_counter()
        if on_progress is not None and now - last_report >= 5.0:
            on_progress(snapshot(iteration, elapsed_before + now - start))
            last_report = now
    bar.close()
    final = snapshot(iteration, elapsed_before + time.perf_counter() - start)
    history.append({"iteration": iteration, "time_s": round(final["elapsed_s"], 3), "size": len(best), "final": True})
    return best, history, final


def _progress_bar(total: int | None, initial: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, desc="kissing search", unit="it", leave=False)


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

Written by `python -m hw3lib.kissing.search --write-program` (do not edit by hand).
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


def program_source(points: np.ndarray, method: str) -> str:
    """A self-contained program (numpy only) whose run_code() returns `points`; refuses invalid sets."""
    verdict = verify(points)
    if not verdict.valid:
        raise ValueError(f"program_source: refusing to write an invalid set: {verdict.message}")
    rows = "\n".join("    [" + ", ".join(str(int(v)) for v in row) + "]," for row in np.asarray(points).tolist())
    return PROGRAM_TEMPLATE.format(n=len(points), method=method, verdict=verdict.message, rows=rows)


def build_best_program(iterations: int = 5000, seed: int = 0, progress: bool = True) -> tuple[str, dict]:
    """Best construction polished by local search in its own shell; returns (program source, summary).

    An iteration budget (not a time limit) keeps the written program identical on every machine.
    """
    from hw3lib.kissing.constructions import best_known_construction

    start = time.perf_counter()
    construction = best_known_construction()
    built_s = time.perf_counter() - start
    polished = local_search(construction, seed=seed, iterations=iterations, progress=progress)
    points = polished.points if len(polished.points) > len(construction) else construction
    summary = {"num_points": len(points), "construction_points": len(construction), "construction_s": round(built_s, 2),
               "search_points": len(polished.points), "search_s": round(polished.elapsed_s, 2),
               "search_iterations": polished.iterations}
    method = ("the norm-4 code construction: ±2e_i and all (±1)^4 sign patterns on\n"
              "the 35 blocks of a length-11, weight-4, distance-4 constant-weight code found by seeded\n"
              f"local search ({len(construction)} points), then {polished.iterations} iterations (seed {seed}) of\n"
              f"independent-set local search in the norm-4 shell (best {len(polished.points)} points).")
    return program_source(points, method), summary


def main(argv: list[str] | None = None) -> int:
    import argparse

    from hw3lib.io import atomic_write_text, project_root

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
