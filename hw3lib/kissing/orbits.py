"""Finite groups of rational orthogonal matrices, exactly, and their orbits on integer shells.

A group element is an integer matrix A with a positive integer denominator d; it maps x to A x / d.
Everything is integer arithmetic: composing two elements multiplies numerators and denominators and
divides out their common factor; an element is orthogonal when A A^T = d^2 I exactly. No float ever
decides anything here.

- `Element`, `compose`, `signed_permutation`, `reflection`: the elements the group families use
  (hw3lib.kissing.groups).
- `closure(generators, limit)`: the whole group by breadth-first search over products, for orders up to
  about 10^5 (the group order goes in the reports); larger groups raise `GroupTooLarge`, and their orbits
  are still computed from the generators alone.
- `orbits(points, generators)`: the orbits of a finite pool of integer vectors (rows). An orbit that
  leaves the pool (some image is not an integer vector, or not in the pool) is dropped, so every orbit
  returned is a complete orbit of the group. Orbits are found by label propagation over the generators'
  action (each vector takes the smallest label it can reach), vectorized over the whole pool.

Why orbits of a pool rather than orbits of "lines fixed by subgroups": every orbit of a vector fixed by a
subgroup is an orbit of the pool when the pool is the whole shell of a rational grid, so the small orbits
that make symmetric configurations (Ganzhinov 2022) are all among these, and so are the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


class GroupTooLarge(ValueError):
    """`closure` met more elements than its limit."""


@dataclass(frozen=True)
class Element:
    """x -> numerator @ x / denominator, with gcd(all numerator entries, denominator) = 1."""

    numerator: np.ndarray  # [d, d] int64
    denominator: int

    @staticmethod
    def make(numerator, denominator: int = 1) -> "Element":
        numerator = np.asarray(numerator, dtype=np.int64)
        if numerator.ndim != 2 or numerator.shape[0] != numerator.shape[1]:
            raise ValueError(f"a group element is a square matrix, got shape {numerator.shape}")
        if denominator <= 0:
            raise ValueError(f"the denominator must be positive, got {denominator}")
        common = math.gcd(int(np.gcd.reduce(np.abs(numerator).ravel())), int(denominator))
        return Element(numerator // common, int(denominator) // common)

    @property
    def dimension(self) -> int:
        return self.numerator.shape[0]

    def key(self) -> tuple[int, bytes]:
        return self.denominator, self.numerator.tobytes()

    def is_orthogonal(self) -> bool:
        n = self.numerator
        return bool(np.array_equal(n @ n.T, self.denominator**2 * np.eye(self.dimension, dtype=np.int64)))


def compose(a: Element, b: Element) -> Element:
    """The element x -> a(b(x))."""
    return Element.make(a.numerator @ b.numerator, a.denominator * b.denominator)


def identity(dimension: int) -> Element:
    return Element.make(np.eye(dimension, dtype=np.int64))


def signed_permutation(permutation, signs=None) -> Element:
    """x -> y with y[permutation[i]] = signs[i] * x[i] (a monomial orthogonal matrix)."""
    permutation = list(permutation)
    n = len(permutation)
    if sorted(permutation) != list(range(n)):
        raise ValueError(f"not a permutation of 0..{n - 1}: {permutation}")
    signs = [1] * n if signs is None else list(signs)
    if len(signs) != n or any(s not in (1, -1) for s in signs):
        raise ValueError(f"signs must be {n} entries of +-1, got {signs}")
    matrix = np.zeros((n, n), dtype=np.int64)
    for i, (j, s) in enumerate(zip(permutation, signs)):
        matrix[j, i] = s
    return Element.make(matrix)


def reflection(root) -> Element:
    """The reflection in the hyperplane orthogonal to the integer vector `root`: x - 2 <x, r> r / <r, r>."""
    r = np.asarray(root, dtype=np.int64)
    norm = int(r @ r)
    if norm == 0:
        raise ValueError("the zero vector has no reflection")
    return Element.make(norm * np.eye(len(r), dtype=np.int64) - 2 * np.outer(r, r), norm)


def closure(generators: list[Element], limit: int = 100_000) -> list[Element]:
    """Every element of the group the generators generate (breadth-first over right multiplication)."""
    if not generators:
        raise ValueError("closure needs at least one generator")
    start = identity(generators[0].dimension)
    seen = {start.key()}
    elements, frontier = [start], [start]
    while frontier:
        grown = []
        for element in frontier:
            for g in generators:
                product = compose(element, g)
                if product.key() not in seen:
                    seen.add(product.key())
                    elements.append(product)
                    grown.append(product)
                    if len(elements) > limit:
                        raise GroupTooLarge(f"the group has more than {limit} elements")
        frontier = grown
    return elements


def group_order(generators: list[Element], limit: int = 100_000) -> int | None:
    """The order of the group, or None when it exceeds `limit`."""
    try:
        return len(closure(generators, limit))
    except GroupTooLarge:
        return None


# ---------------------------------------------------------------------------------------------
# Orbits of a pool of integer vectors


def _keys(points: np.ndarray, radius: int) -> np.ndarray:
    """One int64 per row, increasing in the rows' lexicographic order (coordinates in [-radius, radius])."""
    base = 2 * radius + 1
    if base ** points.shape[1] >= 2**62:
        raise ValueError(f"vectors of dimension {points.shape[1]} with coordinates up to {radius} are too many "
                         "to number in int64; use a smaller pool")
    keys = np.zeros(points.shape[0], dtype=np.int64)
    for column in points.T:
        keys = keys * base + (column + radius)
    return keys


def _images(points: np.ndarray, keys: np.ndarray, radius: int, g: Element) -> np.ndarray:
    """Index in the pool of g(x) for each x (rows sorted by `keys`), -1 where g(x) is not in the pool."""
    moved = points @ g.numerator.T  # [n, d]
    integral = np.all(moved % g.denominator == 0, axis=1)
    moved //= g.denominator
    inside = integral & np.all(np.abs(moved) <= radius, axis=1)
    index = np.full(points.shape[0], -1, dtype=np.int64)
    image_keys = _keys(np.where(inside[:, None], moved, 0), radius)
    position = np.searchsorted(keys, image_keys)
    position = np.minimum(position, len(keys) - 1)
    found = inside & (keys[position] == image_keys)
    index[found] = position[found]
    return index


def orbit_labels(points, generators: list[Element]) -> np.ndarray:
    """For each row of `points`, the smallest row index in its orbit, or -1 if its orbit leaves the pool.

    points: [n, d] distinct integer vectors. The labels are exact: two rows share a label iff one is
    mapped to the other by a word in the generators (the group is finite, so inverses are words too).
    """
    points = np.asarray(points, dtype=np.int64)
    if points.ndim != 2 or points.shape[0] == 0:
        raise ValueError("orbit_labels needs a non-empty [n, d] array of integer vectors")
    if any(g.dimension != points.shape[1] for g in generators):
        raise ValueError(f"the generators must act on dimension {points.shape[1]}")
    radius = int(np.abs(points).max())
    keys = _keys(points, radius)
    order = np.argsort(keys, kind="stable")
    if np.any(np.diff(keys[order]) == 0):
        raise ValueError("orbit_labels: the pool has repeated vectors")
    sorted_points, sorted_keys = points[order], keys[order]
    images = [_images(sorted_points, sorted_keys, radius, g) for g in generators]  # each [n]
    escaped = np.zeros(len(points), dtype=bool)
    for image in images:
        escaped |= image < 0
    labels = np.arange(len(points), dtype=np.int64)
    edges = [(np.flatnonzero(image >= 0), image[image >= 0]) for image in images]
    while True:
        before = labels.copy()
        for source, target in edges:
            smaller = np.minimum(labels[source], labels[target])
            np.minimum.at(labels, source, smaller)
            np.minimum.at(labels, target, smaller)
        labels = labels[labels]  # pointer jumping: follow each label to its own label
        if np.array_equal(labels, before):
            break
    bad = np.zeros(len(points), dtype=bool)
    bad[labels[escaped]] = True
    labels = np.where(bad[labels], -1, labels)
    # back to the caller's row order, labelled by the caller's smallest row index in the orbit
    result = np.full(len(points), -1, dtype=np.int64)
    result[order] = np.where(labels >= 0, order[np.maximum(labels, 0)], -1)
    valid = result >= 0
    smallest = np.full(len(points), len(points), dtype=np.int64)
    np.minimum.at(smallest, result[valid], np.flatnonzero(valid))
    result[valid] = smallest[result[valid]]
    return result


def orbits(points, generators: list[Element]) -> list[np.ndarray]:
    """The complete orbits inside the pool, as arrays of row indices (sorted by their first index)."""
    labels = orbit_labels(points, generators)
    valid = np.flatnonzero(labels >= 0)
    if len(valid) == 0:
        return []
    order = valid[np.argsort(labels[valid], kind="stable")]
    boundaries = np.flatnonzero(np.diff(labels[order])) + 1
    return np.split(order, boundaries)
