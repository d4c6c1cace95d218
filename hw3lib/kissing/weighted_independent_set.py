"""Maximum-weight independent set of a small graph: exact branch and bound with a deadline.

The orbit search (hw3lib.kissing.layered) picks a union of whole orbits: the vertices are orbits, a
vertex's weight is the number of points it contributes, and two vertices conflict when some point of one
is too close to some point of the other. Those graphs have tens to a few thousand vertices, so this module
solves them exactly when it can and says so:

- a greedy start (heaviest first), then an iterated local search (`local_search`) give the first
  incumbent: (w,1)-swaps (bring in a vertex that outweighs the members it conflicts with, Nogueira,
  Pinheiro and Subramanian 2018), free vertices added greedily, random forced insertions to leave local
  optima, and a return to the best set after a while without progress;
- branch and bound over bitsets (Python ints): at each node the candidates are split into independent
  classes greedily (each class an independent set in the complement sense: a clique of the conflict
  graph), and the sum of each class's heaviest weight bounds what the node can still add; branches that
  cannot beat the incumbent are cut (the weighted colouring bound of Kumlander / Östergård's style).

`max_weight_independent_set(...)` returns the best set, its weight and whether it is proved optimal (the
search finished before the deadline). Imports nothing from hw3lib.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import numpy as np


@dataclass
class WeightedSet:
    vertices: list[int]
    weight: int
    optimal: bool  # True when branch and bound finished: no independent set weighs more
    nodes: int  # branch-and-bound nodes visited


def _bits(indices) -> int:
    value = 0
    for i in indices:
        value |= 1 << int(i)
    return value


def _members(bitset: int) -> list[int]:
    out = []
    while bitset:
        low = bitset & -bitset
        out.append(low.bit_length() - 1)
        bitset ^= low
    return out


def _greedy(order: list[int], conflicts: list[int], allowed: int) -> list[int]:
    chosen = []
    for v in order:
        if allowed >> v & 1:
            chosen.append(v)
            allowed &= ~conflicts[v] & ~(1 << v)
    return chosen


class _LocalState:
    """A member mask and, per vertex, the total weight of the members it conflicts with."""

    def __init__(self, conflict: np.ndarray, weights: np.ndarray, members):
        self.conflict, self.weights = conflict, weights
        self.member = np.zeros(len(weights), dtype=bool)
        self.blocked = np.zeros(len(weights), dtype=np.int64)
        self.tight = np.zeros(len(weights), dtype=np.int64)  # how many members each vertex conflicts with
        for v in members:
            self.insert(int(v))

    def copy(self) -> "_LocalState":
        twin = _LocalState.__new__(_LocalState)
        twin.conflict, twin.weights = self.conflict, self.weights
        twin.member, twin.blocked, twin.tight = self.member.copy(), self.blocked.copy(), self.tight.copy()
        return twin

    def insert(self, v: int) -> None:
        """Add v, dropping the members it conflicts with."""
        for x in np.flatnonzero(self.member & self.conflict[v]):
            self.member[x] = False
            self.blocked[self.conflict[x]] -= self.weights[x]
            self.tight[self.conflict[x]] -= 1
        self.member[v] = True
        self.blocked[self.conflict[v]] += self.weights[v]
        self.tight[self.conflict[v]] += 1

    def two_swap(self, rng: np.random.Generator) -> bool:
        """A (1,2)-swap: drop a member x for two non-conflicting vertices whose only conflicting member is x
        and who together outweigh it. Returns whether one was made."""
        single = ~self.member & (self.tight == 1)
        for x in rng.permutation(np.flatnonzero(self.member)):
            candidates = np.flatnonzero(single & self.conflict[x])
            if len(candidates) < 2:
                continue
            pairs = ~self.conflict[np.ix_(candidates, candidates)]
            total = self.weights[candidates][:, None] + self.weights[candidates][None, :]
            good = np.argwhere(np.triu(pairs & (total > self.weights[x]), 1))
            if len(good):
                i, j = good[rng.integers(len(good))]
                self.insert(int(candidates[i]))
                self.insert(int(candidates[j]))
                return True
        return False

    def improve(self, rng: np.random.Generator) -> None:
        """Insert vertices that gain weight (free ones gain all of theirs) until none does."""
        while True:
            gain = np.where(self.member, 0, self.weights - self.blocked)
            best = gain.max()
            if best <= 0:
                if self.two_swap(rng):
                    continue
                return
            ties = np.flatnonzero(gain == best)
            self.insert(int(ties[rng.integers(len(ties))]))

    @property
    def weight(self) -> int:
        return int(self.weights[self.member].sum())


def local_search(conflict: np.ndarray, weights, initial=(), iterations: int = 2000, seed: int = 0,
                 deadline_s: float | None = None, restart_after: int = 200) -> list[int]:
    """Iterated local search for a heavy independent set (see the module docstring); seeded, deterministic."""
    conflict = np.asarray(conflict, dtype=bool).copy()
    np.fill_diagonal(conflict, False)
    weights = np.asarray(weights, dtype=np.int64)
    rng = np.random.default_rng(seed)
    stop = None if deadline_s is None else time.monotonic() + deadline_s
    current = _LocalState(conflict, weights, initial)
    current.improve(rng)
    best, best_weight, stale = current.member.copy(), current.weight, 0
    for _ in range(iterations):
        if stop is not None and time.monotonic() > stop:
            break
        trial = current.copy()
        outside = np.flatnonzero(~trial.member)
        if len(outside) == 0:
            break
        for v in rng.choice(outside, size=min(len(outside), 1 + int(rng.random() < 0.2) * rng.integers(1, 4)),
                            replace=False):
            trial.insert(int(v))
        trial.improve(rng)
        if trial.weight >= current.weight or rng.random() < 0.05:
            current = trial
        if current.weight > best_weight:
            best, best_weight, stale = current.member.copy(), current.weight, 0
        else:
            stale += 1
            if stale >= restart_after:
                current, stale = _LocalState(conflict, weights, np.flatnonzero(best)), 0
    return [int(v) for v in np.flatnonzero(best)]


def _clique_cover_bound(candidates: int, order: list[int], conflicts: list[int], weights: list[int]) -> int:
    """Cover the candidates by cliques of the conflict graph (greedily, heaviest first); an independent set takes
    at most one vertex of each clique, so the sum of each clique's heaviest weight bounds what it can add."""
    members = [v for v in order if candidates >> v & 1]  # heaviest first
    total = 0
    while members:
        head, rest = members[0], []  # the head is the heaviest of its clique
        possible = conflicts[head]
        for v in members[1:]:
            if possible >> v & 1:
                possible &= conflicts[v]  # v joins the clique
            else:
                rest.append(v)
        total += weights[head]
        members = rest
    return total


def max_weight_independent_set(conflict: np.ndarray, weights, deadline_s: float | None = 60.0,
                               node_limit: int | None = None, local_iterations: int = 2000,
                               seed: int = 0) -> WeightedSet:
    """conflict: [n, n] symmetric bool (diagonal ignored); weights: [n] positive integers.

    The local search gets at most half the deadline; branch and bound then tries to prove its set optimal
    (or beat it) in the rest.
    """
    conflict = np.asarray(conflict, dtype=bool)
    weights = [int(w) for w in weights]
    n = len(weights)
    if conflict.shape != (n, n):
        raise ValueError(f"conflict must be [{n}, {n}], got {conflict.shape}")
    if any(w <= 0 for w in weights):
        raise ValueError("weights must be positive")
    if not np.array_equal(conflict, conflict.T):
        raise ValueError("the conflict matrix must be symmetric")
    conflict = conflict.copy()
    np.fill_diagonal(conflict, False)
    conflicts = [_bits(np.flatnonzero(row)) for row in conflict]
    everything = (1 << n) - 1
    # heaviest first, ties broken by fewer conflicts: the order both the greedy start and the branching use
    order = sorted(range(n), key=lambda v: (-weights[v], bin(conflicts[v]).count("1"), v))
    stop = None if deadline_s is None else time.monotonic() + deadline_s
    best = _greedy(order, conflicts, everything)
    if n and local_iterations:
        improved = local_search(conflict, weights, best, local_iterations, seed,
                                None if deadline_s is None else deadline_s / 2)
        if sum(weights[v] for v in improved) > sum(weights[v] for v in best):
            best = improved
    best_weight = sum(weights[v] for v in best)
    nodes = 0
    finished = True

    def expand(chosen: list[int], weight: int, candidates: int) -> None:
        nonlocal best, best_weight, nodes, finished
        nodes += 1
        # the clock every node: one bound costs up to a fraction of a second on thousands of vertices
        if (stop is not None and time.monotonic() > stop) or (node_limit is not None and nodes > node_limit):
            finished = False
            return
        if weight > best_weight:
            best, best_weight = list(chosen), weight
        if not candidates:
            return
        upper = _clique_cover_bound(candidates, order, conflicts, weights)
        if weight + upper <= best_weight:
            return
        v = next(u for u in order if candidates >> u & 1)
        # branch 1: take v; branch 2: leave it out
        chosen.append(v)
        expand(chosen, weight + weights[v], candidates & ~conflicts[v] & ~(1 << v))
        chosen.pop()
        if finished:
            expand(chosen, weight, candidates & ~(1 << v))

    depth = sys.getrecursionlimit()
    sys.setrecursionlimit(max(depth, 2 * n + 100))
    try:
        expand([], 0, everything)
    finally:
        sys.setrecursionlimit(depth)
    return WeightedSet(sorted(best), best_weight, finished, nodes)
