"""Why a valid kissing configuration stops growing: its largest free cap and its shell neighbourhood.

- `largest_free_cap(points)`: the largest spherical cap (angular radius rho) around some unit
  direction u that holds no point's direction in its interior, rho(u) = min_x angle(u, x). A new
  sphere fits iff some u has rho(u) >= 60 degrees (two kissing spheres are at least 60 degrees
  apart), so a configuration whose largest cap is below 60 degrees is *saturated*: no point can be
  added without moving the others. Finding max_u rho(u) exactly is a deep-hole problem, so this is
  a search: structured integer directions (every integer vector of squared norm <= 3) and seeded
  random directions, each refined by descent on a soft maximum of <u, x/|x|>, then rounded to small
  integer directions that are re-scored exactly. The answer is an *estimate with a certified lower
  bound*: the returned direction really has that cap (exactly, when it is an integer direction);
  nothing here proves that no larger cap exists.
- `shell_neighbourhood(points)`: for a set lying on one integer shell ||x||^2 = T (what the local
  search of `hw3lib.kissing.search` explores), how many shell vectors are free to add (no conflict),
  how many conflict with exactly 1, 2, ... members, and whether a (1,2)-swap exists.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction

import numpy as np

from hw3lib.kissing.independent_set import IndependentSet
from hw3lib.kissing.search import conflict_graph, shell_vectors
from hw3lib.kissing.verify import to_integer_matrix

KISSING_ANGLE_DEG = 60.0
STRUCTURED_MAX_NORM_SQ = 3
SHELL_MAX_NORM_SQ = 5  # |x|^2 = 5 in Z^11 has 15,224 vectors: the largest shell analysed here
BETAS = (20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 3000.0, 1e4, 3e4, 1e5)
NEAR_BEST_DEG = 0.1


@dataclass(frozen=True)
class FreeCap:
    """The largest free cap found: `angle_deg` (a certified lower bound on the true maximum)."""

    angle_deg: float
    cos: float
    direction: list
    """The centre of the cap: an integer vector when `exact`, else a unit vector (floats)."""
    exact: bool
    """True when the direction is an integer vector and `cos_sq` is the exact value."""
    cos_sq: str | None
    """cos^2 of the cap's radius as a fraction (exact directions with cos > 0 only)."""
    fits_another: bool
    """The cap reaches 60 degrees: one more sphere fits (with real, perhaps irrational, coordinates)."""
    random_starts: int
    structured_directions: int
    starts_near_best: int
    """Refined random starts ending within NEAR_BEST_DEG (0.1) degrees of the best (how often they find it)."""
    best_random_refined_deg: float
    """The largest cap the refined random starts reached on their own (floating point)."""
    best_random_unrefined_deg: float
    seed: int

    def to_dict(self) -> dict:
        return asdict(self)


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _max_cos(directions: np.ndarray, units: np.ndarray) -> np.ndarray:
    """For each unit direction [m, d], the largest cosine to the set's directions [n, d]: [m]."""
    return (directions @ units.T).max(axis=1)


def _refine(directions: np.ndarray, units: np.ndarray, steps_per_beta: int = 30) -> np.ndarray:
    """Lower max_x <u, x> by normalized gradient steps on the soft maximum, sharpening it (beta) as it goes."""
    u = directions.copy()
    for beta in BETAS:
        step = 0.05 * math.sqrt(BETAS[0] / beta)
        for _ in range(steps_per_beta):
            scores = u @ units.T  # [m, n]
            weights = np.exp(beta * (scores - scores.max(axis=1, keepdims=True)))  # [m, n]
            grad = (weights / weights.sum(axis=1, keepdims=True)) @ units  # [m, d]
            grad -= (grad * u).sum(axis=1, keepdims=True) * u  # tangent to the sphere
            u = u - step * grad / (np.linalg.norm(grad, axis=1, keepdims=True) + 1e-12)
            u /= np.linalg.norm(u, axis=1, keepdims=True)
    return u


def exact_max_cos_sq(direction, points: np.ndarray) -> tuple[Fraction, bool]:
    """(max over x of cos^2 angle(v, x) among x with <v, x> > 0, whether any such x exists), exactly."""
    v = [int(c) for c in direction]
    norm_v = sum(c * c for c in v)
    best, positive = Fraction(0), False
    for x in points.tolist():
        dot = sum(a * b for a, b in zip(v, x))
        if dot > 0:
            positive = True
            best = max(best, Fraction(dot * dot, norm_v * sum(c * c for c in x)))
    return best, positive


def _integer_candidates(unit: np.ndarray, max_scale: int = 8) -> list[np.ndarray]:
    """Small integer vectors pointing (nearly) along `unit`: round(s * unit) for s = 1..max_scale."""
    out = []
    for scale in range(1, max_scale + 1):
        v = np.rint(unit * scale).astype(np.int64)
        if v.any():
            out.append(v)
    return out


def _structured_directions(dimension: int) -> np.ndarray:
    return shell_vectors(STRUCTURED_MAX_NORM_SQ, dimension, min_norm_sq=1)


def largest_free_cap(points, random_starts: int = 2000, seed: int = 0, refine_structured: int = 200) -> FreeCap:
    """Estimate max_u min_x angle(u, x) over unit directions u (see the module docstring)."""
    matrix = to_integer_matrix(points)
    units = _unit_rows(matrix.astype(np.float64))  # [n, d]
    rng = np.random.default_rng(seed)
    random_dirs = _unit_rows(rng.standard_normal((random_starts, matrix.shape[1])))  # [r, d]
    structured = _structured_directions(matrix.shape[1])  # [s, d] integers
    structured_cos = _max_cos(_unit_rows(structured.astype(np.float64)), units)  # [s]
    top = structured[np.argsort(structured_cos, kind="stable")[:refine_structured]]
    refined_random = _refine(random_dirs, units)
    refined = np.vstack([refined_random, _refine(_unit_rows(top.astype(np.float64)), units)])
    refined_cos = _max_cos(refined, units)
    best_float = int(np.argmin(refined_cos))
    # exact candidates: the structured directions and integer roundings of the best refined ones
    exact_pool = list(structured[np.argsort(structured_cos, kind="stable")[:20]])
    for i in np.argsort(refined_cos, kind="stable")[:20]:
        exact_pool += _integer_candidates(refined[i])
    best_exact = None
    for v in exact_pool:
        cos_sq, positive = exact_max_cos_sq(v, matrix)
        cos = math.sqrt(cos_sq) if positive else float(_max_cos(_unit_rows(v[None].astype(np.float64)), units)[0])
        if best_exact is None or cos < best_exact[0] - 1e-15:
            best_exact = (cos, v, cos_sq if positive else None)
    if best_exact is not None and best_exact[0] <= refined_cos[best_float] + 1e-12:
        cos, v, cos_sq = best_exact
        direction, exact, fraction = [int(c) for c in v], True, None if cos_sq is None else str(cos_sq)
        fits = cos <= 0 or (cos_sq is not None and cos_sq <= Fraction(1, 4))
    else:
        cos = float(refined_cos[best_float])
        direction, exact, fraction = [round(float(c), 6) for c in refined[best_float]], False, None
        fits = cos <= 0.5
    angle = math.degrees(math.acos(max(-1.0, min(1.0, cos))))
    random_angles = np.degrees(np.arccos(np.clip(_max_cos(refined_random, units), -1, 1)))
    return FreeCap(angle, cos, direction, exact, fraction, bool(fits), random_starts, len(structured),
                   int((random_angles >= angle - NEAR_BEST_DEG).sum()), float(random_angles.max()),
                   float(np.degrees(np.arccos(np.clip(_max_cos(random_dirs, units).min(), -1, 1)))), seed)


def shell_neighbourhood(points) -> dict | None:
    """For a set on one shell ||x||^2 = T <= SHELL_MAX_NORM_SQ: the shell's size, how many of its other
    vectors conflict with 0, 1, 2, ... members (`conflicts`: {count: vectors}), and whether a (1,2)-swap
    (drop one member, add two) exists. None when the set mixes norms or its shell is too large."""
    matrix = to_integer_matrix(points)
    norms = np.einsum("ij,ij->i", matrix, matrix)
    if matrix.dtype != np.int64 or norms.min() != norms.max() or norms[0] > SHELL_MAX_NORM_SQ:
        return None
    norm_sq = int(norms[0])
    pool = shell_vectors(norm_sq, matrix.shape[1])
    index = {tuple(row): i for i, row in enumerate(pool.tolist())}
    neighbours = conflict_graph(pool, norm_sq)
    state = IndependentSet(neighbours, np.random.default_rng(0))
    for row in matrix.tolist():
        state.add(index[tuple(row)])
    outside = ~state.member
    counts = np.bincount(state.tight[outside])
    fewest = int(state.tight[outside].min()) if outside.any() else None
    before = state.size
    state.two_improve(state.members())  # a copy of the set; grows only if a (1,2)-swap exists
    return {"norm_sq": norm_sq, "shell_size": len(pool), "members": int(before),
            "conflict_edges": int(sum(len(n) for n in neighbours) // 2),
            "conflicts": {int(k): int(v) for k, v in enumerate(counts) if v},
            "free": int(counts[0]) if len(counts) else 0,
            "fewest_conflicts": fewest,
            "swap_exists": state.size > before}
