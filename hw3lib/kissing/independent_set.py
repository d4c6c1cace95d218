"""Iterated local search for a large independent set of a graph given as neighbour lists.

This is the graph-only core shared by `hw3lib.kissing.search` (valid kissing configurations are
the independent sets of a conflict graph) and `hw3lib.kissing.constructions` (a constant-weight
code is an independent set of the "blocks overlap too much" graph); it knows nothing about
points or the kissing problem, and imports nothing from hw3lib.

The search is the iterated local search of Andrade, Resende and Werneck (J. Heuristics 2012),
simplified:
- (1,2)-swaps ("2-improvements"): drop a member x and add two non-adjacent vertices whose
  only conflicting member was x; free vertices (no conflicting member) are added greedily;
- perturbation: force one (sometimes a few) random non-members in, dropping the members they
  conflict with, then re-run the 2-improvements around the change;
- acceptance: keep the perturbed set unless it falls more than `slack` below the best, then
  restart from the best (a randomized restart from the incumbent).
Every move keeps the set independent. Randomness comes from one numpy Generator seeded by
`seed`: a run is deterministic, and a run resumed from a saved state (current set, best set,
iteration, RNG state) continues exactly as the uninterrupted run would.
"""

from __future__ import annotations

import time

import numpy as np


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
