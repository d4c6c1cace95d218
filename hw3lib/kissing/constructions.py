"""Known kissing configurations in Z^11, built from their mathematical description (never pasted).

- `starter()`: the course's starting point, ±2 e_i: 22 points (squared norm 4, distances >= 8).
- `d11_roots()`: the root system D11, ±e_i ± e_j: 4 * C(11, 2) = 220 points, all of squared
  norm 2, pairwise squared distance >= 2 (the kissing configuration of the lattice D11).
- `code_construction(blocks)`: the norm-4 shell construction behind the classical bound
  tau_11 >= 582 (Leech–Sloane style "Construction A" with a constant-weight code):
      ±2 e_i (22 points)  ∪  { (±1, ±1, ±1, ±1) on the support B : B in blocks, all 16 signs }.
  All points have squared norm N = 4, so the set is valid iff <x, y> <= N / 2 = 2 for x != y:
    * ±2e_i vs ±2e_j: 0 or -4;  ±2e_i vs a (±1)^4 vector: 0 or ±2;
    * two sign vectors on the same support: 4 - 2 (#sign differences) <= 2;
    * sign vectors on supports A != B: at most |A ∩ B| in absolute value, so <= 2 as soon as
      any two blocks share at most 2 coordinates, i.e. the blocks form a binary constant-weight
      code of length 11, weight 4 and minimum distance 4 (a packing of triples).
  Its size is 22 + 16 |blocks|. The Johnson bound gives |blocks| <= floor(11/4 floor(10/3
  floor(9/2))) = 35, and 35 is attained, hence 22 + 16 * 35 = 582.
- `constant_weight_code()`: such a code with 35 blocks, found by our own local search
  (maximum independent set in the graph of 4-subsets of {0..10} sharing 3 elements); the
  search is seeded, so the code is the same on every machine.
- `best_known_construction()`: `code_construction(constant_weight_code())`, 582 points.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np

from hw3lib.kissing.independent_set import grow_independent_set

DIMENSION = 11


def starter(dimension: int = DIMENSION) -> np.ndarray:
    """±2 e_i: [2 d, d] int64."""
    eye = 2 * np.eye(dimension, dtype=np.int64)  # [d, d]
    return np.vstack([eye, -eye])  # [2d, d]


def d11_roots(dimension: int = DIMENSION) -> np.ndarray:
    """±e_i ± e_j for i < j: [4 C(d, 2), d] int64."""
    rows = []
    for i, j in itertools.combinations(range(dimension), 2):
        for si, sj in itertools.product((1, -1), repeat=2):
            row = [0] * dimension
            row[i], row[j] = si, sj
            rows.append(row)
    return np.array(rows, dtype=np.int64)  # [4 C(d,2), d]


def sign_patterns(support, dimension: int = DIMENSION) -> np.ndarray:
    """All 2^|support| vectors with entries ±1 on `support` and 0 elsewhere: [2^w, d] int64."""
    support = list(support)
    signs = np.array(list(itertools.product((1, -1), repeat=len(support))), dtype=np.int64)  # [2^w, w]
    out = np.zeros((len(signs), dimension), dtype=np.int64)  # [2^w, d]
    out[:, support] = signs
    return out


def code_construction(blocks, dimension: int = DIMENSION) -> np.ndarray:
    """±2 e_i plus all sign patterns on each block: [2 d + 16 |blocks|, d] int64.

    Valid iff every block has 4 elements and two blocks share at most 2 (see the module docstring);
    raises ValueError naming the two blocks otherwise.
    """
    blocks = [tuple(sorted(int(c) for c in block)) for block in blocks]
    for block in blocks:
        if len(set(block)) != 4 or not all(0 <= c < dimension for c in block):
            raise ValueError(f"code_construction: block {block} must be 4 distinct coordinates in 0..{dimension - 1}")
    for a, b in itertools.combinations(blocks, 2):
        if len(set(a) & set(b)) > 2:
            raise ValueError(f"code_construction: blocks {a} and {b} share {len(set(a) & set(b))} coordinates "
                             "(at most 2 allowed, or their sign vectors get inner product 3 > 2)")
    parts = [starter(dimension)] + [sign_patterns(block, dimension) for block in blocks]
    return np.vstack(parts)  # [2d + 16 |blocks|, d]


@lru_cache(maxsize=8)
def constant_weight_code(length: int = DIMENSION, weight: int = 4, max_overlap: int = 2, target: int | None = 35,
                         seed: int = 0, iterations: int = 20_000) -> tuple[tuple[int, ...], ...]:
    """A large family of `weight`-subsets of range(length), pairwise sharing <= max_overlap elements.

    Found as an independent set of the "shares more than max_overlap" graph by the seeded local
    search of `hw3lib.kissing.independent_set`; stops at `target` blocks (35 = the Johnson bound for the
    defaults, reached in well under a second) or after `iterations`.
    """
    return constant_weight_code_search(length, weight, max_overlap, target, seed, iterations)[0]


def constant_weight_code_search(length: int = DIMENSION, weight: int = 4, max_overlap: int = 2,
                                target: int | None = 35, seed: int = 0, iterations: int = 20_000):
    """`constant_weight_code`'s search itself (uncached): (blocks, history, final state).

    history: `grow_independent_set`'s rows {iteration, time_s, size} (size = number of blocks), one
    per new best and one at the end; final: its final state (`final["iteration"]` = iterations run).
    """
    subsets = list(itertools.combinations(range(length), weight))
    incidence = np.zeros((len(subsets), length), dtype=np.int64)  # [m, length]
    for row, subset in enumerate(subsets):
        incidence[row, list(subset)] = 1
    overlap = incidence @ incidence.T  # [m, m]
    neighbours = [np.flatnonzero((overlap[i] > max_overlap) & (np.arange(len(subsets)) != i)) for i in range(len(subsets))]
    best, history, final = grow_independent_set(neighbours, seed=seed, iterations=iterations, target=target)
    return tuple(subsets[i] for i in sorted(best)), history, final


def johnson_bound(length: int = DIMENSION, weight: int = 4, max_overlap: int = 2) -> int:
    """Johnson's upper bound on a family of `weight`-subsets of range(length) pairwise sharing <= max_overlap.

    A(n, w, t) <= floor(n / w * A(n - 1, w - 1, t - 1)) with A(n, w, 0) = floor(n / w) (disjoint
    blocks); for the defaults floor(11/4 floor(10/3 floor(9/2))) = 35.
    """
    if max_overlap <= 0:
        return length // weight
    return (length * johnson_bound(length - 1, weight - 1, max_overlap - 1)) // weight


def best_known_construction() -> np.ndarray:
    """The best structured set we build: 22 + 16 * 35 = 582 points of squared norm 4."""
    return code_construction(constant_weight_code())


CONSTRUCTIONS = {
    "starter": starter,
    "d11_roots": d11_roots,
    "code_582": best_known_construction,
}
