"""Exact verifier for the kissing-configuration problem in Z^d (d = 11 by default).

A set C of nonzero integer vectors is *valid* when

    min_{x != y in C} ||x - y||^2  >=  max_{x in C} ||x||^2,

because then unit spheres centred at 2x/||x|| all touch a central unit sphere without
overlapping, so the kissing number tau_d >= |C|. Everything here is exact integer arithmetic:

* input is converted to integers first; an entry that is not an integer (1.5, NaN, inf, a string,
  a boolean array) is an error naming the point and coordinate. A float that is integral *and* exactly
  representable (|v| <= 2^53, e.g. ``2.0``) is accepted as that integer: a float can only hold
  such a value exactly, so nothing is rounded. Larger floats are rejected, pass Python ints.
* pairwise squared distances come from the Gram matrix, ||x||^2 + ||y||^2 - 2<x, y>, in row
  blocks (memory stays O(block * n)). Three exact back ends, picked from the largest coordinate
  M and the dimension d:
    - float64 + BLAS when 4 d M^2 <= 2^53: every product, partial sum and distance is an integer
      below 2^53, which float64 represents exactly, so the result is exact (and fast);
    - int64 when 4 d M^2 < 2^62 (no overflow possible);
    - Python big integers beyond that, e.g. coordinates around 1e13 whose squares overflow
      int64: a float64 pass screens the pairs and every pair that could be the minimum is
      recomputed exactly with Python ints (see `_bigint_min`).

Duplicated points, the zero vector, ragged or empty input and a wrong dimension are reported as
invalid with a message a person (or an LLM) can act on. Booleans (Python or numpy) are never
integers, even mixed into integer lists.

`verify(points, deadline=t)` bounds the time: the conversion and every distance block check the
clock (`time.monotonic()`) and raise `VerificationTimeout` once it passes `t`, so a caller that
verifies untrusted points (the program evaluator) is never held up longer than one block.
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass

import numpy as np

FLOAT_EXACT_LIMIT = 2**53  # float64 holds every integer of magnitude <= 2^53 exactly
INT64_SAFE_LIMIT = 2**62  # headroom below 2^63 for the int64 back end
BLOCK_ELEMENTS = 1 << 20  # ~1M distances per block: 8 MiB of float64/int64, cache friendly
EXACT_PAIRS_CHUNK = 1 << 14  # candidate pairs recomputed with Python ints at a time (bounded memory)


class VerificationTimeout(TimeoutError):
    """Raised by `verify(..., deadline=...)` when the clock passes the deadline before a verdict."""


def _check_clock(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise VerificationTimeout("verification ran past its deadline")


@dataclass(frozen=True)
class VerifyResult:
    """The verdict on one candidate set.

    valid: the set satisfies min squared distance >= max squared norm (and is well formed).
    num_points, dimension: the shape of the input as far as it could be read (dimension None
        when it could not be determined, e.g. empty or ragged input).
    min_sq_distance: exact min over pairs of ||x - y||^2 (None when not computed, e.g. bad input
        or fewer than 2 points).
    max_sq_norm: exact max of ||x||^2 (None when not computed).
    closest_pair: (i, j), i < j, a pair attaining min_sq_distance.
    longest_point: an index attaining max_sq_norm.
    offending_pair: closest_pair when it violates the condition, else None.
    offending_point: longest_point when the condition fails, or the index of the malformed point
        (zero vector, non-integer entry, wrong length) for input errors; else None.
    message: what is wrong and where, or a one-line summary when valid.
    """

    valid: bool
    num_points: int
    dimension: int | None
    min_sq_distance: int | None
    max_sq_norm: int | None
    offending_pair: tuple[int, int] | None
    offending_point: int | None
    message: str
    closest_pair: tuple[int, int] | None = None
    longest_point: int | None = None

    @property
    def score(self) -> int:
        """The problem's score: |C| when valid, else 0."""
        return self.num_points if self.valid else 0


class InputError(Exception):
    """Malformed input; carries the offending point index for VerifyResult."""

    def __init__(self, message: str, point: int | None = None, num_points: int = 0, dimension: int | None = None):
        super().__init__(message)
        self.point = point
        self.num_points = num_points
        self.dimension = dimension


def verify(points, dimension: int | None = 11, deadline: float | None = None) -> VerifyResult:
    """Check a candidate kissing configuration exactly; never raises on bad points.

    points: anything array-like of shape [n, d]: a list/tuple of lists/tuples, or a numpy array
        of int, float or object dtype; entries may be Python ints of any size.
    dimension: the required d (11 for the course's problem); None accepts any dimension.
    deadline: a `time.monotonic()` value; past it, `VerificationTimeout` is raised (None: no limit).
    """
    if dimension is not None and (not isinstance(dimension, numbers.Integral) or dimension < 1):
        raise ValueError(f"verify(dimension=...) must be a positive int or None, got {dimension!r}")
    try:
        matrix = to_integer_matrix(points, deadline)  # [n, d] int64 or object (Python ints)
    except InputError as exc:
        return VerifyResult(False, exc.num_points, exc.dimension, None, None, None, exc.point, str(exc))
    n, d = matrix.shape
    if dimension is not None and d != dimension:
        return VerifyResult(False, n, d, None, None, None, None,
                            f"points have dimension {d}, expected {dimension}: every point needs exactly {dimension} integer coordinates")

    _check_clock(deadline)
    sq_norms = _squared_norms(matrix)  # [n] int64 or object
    _check_clock(deadline)
    zero = np.flatnonzero(sq_norms == 0)
    if zero.size:
        i = int(zero[0])
        return VerifyResult(False, n, d, None, None, None, i,
                            f"point {i} is the zero vector; the kissing condition needs nonzero points, remove it")
    longest = int(np.argmax(sq_norms))
    max_sq_norm = int(sq_norms[longest])
    if n == 1:
        return VerifyResult(True, 1, d, None, max_sq_norm, None, None,
                            f"valid: 1 point in dimension {d} (max squared norm {max_sq_norm})", None, longest)

    min_sq_distance, (i, j) = min_squared_distance(matrix, sq_norms, deadline)
    closest = (i, j)
    if min_sq_distance == 0:
        return VerifyResult(False, n, d, 0, max_sq_norm, closest, j,
                            f"points {i} and {j} are identical (duplicate points); remove one of them",
                            closest, longest)
    if min_sq_distance < max_sq_norm:
        return VerifyResult(False, n, d, min_sq_distance, max_sq_norm, closest, longest,
                            f"min squared distance {min_sq_distance} (points {i} and {j}) < max squared norm "
                            f"{max_sq_norm} (point {longest}); move those points apart or shorten point {longest}",
                            closest, longest)
    return VerifyResult(True, n, d, min_sq_distance, max_sq_norm, None, None,
                        f"valid: {n} points in dimension {d}, min squared distance {min_sq_distance} "
                        f">= max squared norm {max_sq_norm}", closest, longest)


# ---------------------------------------------------------------------------------------------
# Input conversion


def to_integer_matrix(points, deadline: float | None = None) -> np.ndarray:
    """Convert `points` to an exact integer matrix [n, d]: int64 when every entry fits, else object.

    Raises InputError (message names the point and coordinate) for anything not exactly an integer.
    """
    if isinstance(points, (str, bytes)) or points is None:
        raise InputError(f"points must be a list of integer vectors, got {type(points).__name__}")
    if isinstance(points, np.ndarray):
        array = points
    else:
        try:
            points = list(points)
        except TypeError:
            raise InputError(f"points must be a list of integer vectors, got {type(points).__name__}") from None
        if not points:
            raise InputError("no points given: the set must contain at least one nonzero integer vector")
        lengths = [_row_length(row, i) for i, row in enumerate(points)]
        _reject_booleans(points)  # np.array would silently turn True/False into 1/0
        if len(set(lengths)) > 1:
            first = lengths[0]
            bad = next(i for i, length in enumerate(lengths) if length != first)
            raise InputError(f"ragged input: point 0 has {first} coordinates but point {bad} has {lengths[bad]}; "
                              f"all points need the same dimension", bad, len(points))
        try:
            array = np.array(points)  # int64, float64, object (huge ints / mixed) or str
        except (ValueError, TypeError, OverflowError):
            array = None
        if array is None or array.dtype.kind not in "iufOb":
            # Strings or odd objects: keep each entry as given so the error names the right one.
            array = np.empty((len(points), lengths[0]), dtype=object)
            for i, row in enumerate(points):
                array[i, :] = list(row)
    if array.ndim != 2:
        if array.size == 0:
            raise InputError("no points given: the set must contain at least one nonzero integer vector")
        raise InputError(f"points must form a 2-D array [num_points, dimension], got shape {array.shape}",
                          None, array.shape[0] if array.ndim else 0)
    n, d = array.shape
    if n == 0:
        raise InputError("no points given: the set must contain at least one nonzero integer vector")
    if d == 0:
        raise InputError("points have no coordinates (dimension 0)", 0, n, 0)

    kind = array.dtype.kind
    if kind == "i":
        return array.astype(np.int64, copy=False)
    if kind == "u":
        if array.size and int(array.max()) >= 2**63:
            return _object_to_ints(array.astype(object))
        return array.astype(np.int64)
    if kind == "f":
        return _floats_to_ints(array)
    if kind == "O":
        return _object_to_ints(array, deadline)
    if kind == "b":
        raise InputError("point 0, coordinate 0: points are booleans; give integer coordinates", 0, n, d)
    return _object_to_ints(array.astype(object), deadline)  # strings, complex, ...: names the first bad entry


def _reject_booleans(points: list) -> None:
    """Name the first boolean entry in list/tuple rows (numpy rows of dtype bool are caught later)."""
    for i, row in enumerate(points):
        if isinstance(row, (list, tuple)):
            for j, value in enumerate(row):
                if isinstance(value, (bool, np.bool_)):
                    raise InputError(f"point {i}, coordinate {j}: {value!r} is a boolean, not an integer",
                                     i, len(points), len(row))


def _row_length(row, index: int) -> int:
    if isinstance(row, (str, bytes)) or not hasattr(row, "__len__"):
        raise InputError(f"point {index} is {row!r}, not a vector of integers", index)
    return len(row)


def _floats_to_ints(array: np.ndarray) -> np.ndarray:
    n, d = array.shape
    bad = ~np.isfinite(array) | (array != np.round(array)) | (np.abs(array) > FLOAT_EXACT_LIMIT)
    if bad.any():
        i, j = (int(k) for k in np.argwhere(bad)[0])
        value = array[i, j].item()
        why = "is not finite" if not np.isfinite(value) else (
            "is not an integer" if value != np.round(value) else "is too large to be an exact float; pass a Python int")
        raise InputError(f"point {i}, coordinate {j}: {value!r} {why} (coordinates must be integers; "
                          f"nothing is rounded)", i, n, d)
    return array.astype(np.int64)


def _object_to_ints(array: np.ndarray, deadline: float | None = None) -> np.ndarray:
    """Entry-by-entry conversion of an object array to Python ints (exact), int64 when all fit."""
    n, d = array.shape
    out = np.empty((n, d), dtype=object)
    largest = 0
    for i in range(n):
        if i % 1024 == 0:
            _check_clock(deadline)
        for j in range(d):
            value = array[i, j]
            out[i, j] = exact = _exact_int(value, i, j, n, d)
            largest = max(largest, abs(exact))
    if largest < 2**63:
        return out.astype(np.int64)
    return out


def _exact_int(value, i: int, j: int, n: int, d: int) -> int:
    where = f"point {i}, coordinate {j}"
    if isinstance(value, np.generic):
        value = value.item()  # plain Python number: exact, and shown without the numpy wrapper
    if isinstance(value, (bool, np.bool_)):
        raise InputError(f"{where}: {value!r} is a boolean, not an integer", i, n, d)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        as_float = float(value)
        if not math.isfinite(as_float):
            raise InputError(f"{where}: {value!r} is not finite; coordinates must be integers", i, n, d)
        if isinstance(value, float | np.floating):
            if as_float != math.floor(as_float):
                raise InputError(f"{where}: {value!r} is not an integer (coordinates must be integers; nothing is rounded)", i, n, d)
            if abs(as_float) > FLOAT_EXACT_LIMIT:
                raise InputError(f"{where}: {value!r} is too large to be an exact float; pass a Python int", i, n, d)
            return int(as_float)
        # Fraction, Decimal, ...: accept only when exactly integral.
        if value == int(value):
            return int(value)
        raise InputError(f"{where}: {value!r} is not an integer (coordinates must be integers; nothing is rounded)", i, n, d)
    if isinstance(value, (list, tuple, np.ndarray)):
        raise InputError(f"{where} is itself a sequence ({type(value).__name__}); points must be flat vectors", i, n, d)
    raise InputError(f"{where}: {value!r} ({type(value).__name__}) is not an integer", i, n, d)


# ---------------------------------------------------------------------------------------------
# Exact arithmetic


def _squared_norms(matrix: np.ndarray) -> np.ndarray:
    """||x||^2 per row, exact: int64 when it cannot overflow, else Python ints."""
    if matrix.dtype == object or _max_abs(matrix) ** 2 * matrix.shape[1] >= INT64_SAFE_LIMIT:
        rows = matrix.astype(object)
        return np.array([sum(int(v) * int(v) for v in row) for row in rows], dtype=object)  # [n]
    return np.einsum("ij,ij->i", matrix, matrix)  # [n] int64


def _max_abs(matrix: np.ndarray) -> int:
    if matrix.dtype == object:
        return max(abs(int(v)) for v in matrix.flat)
    return max(abs(int(matrix.max())), abs(int(matrix.min())))


def min_squared_distance(matrix: np.ndarray, sq_norms: np.ndarray | None = None,
                         deadline: float | None = None) -> tuple[int, tuple[int, int]]:
    """Exact min over i < j of ||x_i - x_j||^2 and a pair (i, j) attaining it (needs n >= 2).

    deadline: a `time.monotonic()` value checked between blocks (VerificationTimeout past it).
    """
    n, d = matrix.shape
    if n < 2:
        raise ValueError("min_squared_distance needs at least 2 points")
    bound = 4 * d * _max_abs(matrix) ** 2  # |n_i + n_j - 2<x_i, x_j>| <= 4 d M^2
    if sq_norms is None:
        sq_norms = _squared_norms(matrix)
    if bound <= FLOAT_EXACT_LIMIT:
        return _blocked_min(matrix.astype(np.float64), sq_norms.astype(np.float64), deadline)
    if bound < INT64_SAFE_LIMIT:
        return _blocked_min(matrix.astype(np.int64), sq_norms.astype(np.int64), deadline)
    return _bigint_min(matrix.astype(object), deadline)


def _distance_blocks(matrix: np.ndarray, sq_norms: np.ndarray):
    """Yield (start, dist): dist[r, c] = ||x_{start+r} - x_{start+c}||^2 for c > r, a sentinel for c <= r.

    Each block comes out of a single matrix product of augmented rows,
    [x_i, |x_i|^2, 1] . [-2 x_j, 1, |x_j|^2] = |x_i|^2 + |x_j|^2 - 2 <x_i, x_j>, so for float64
    it is one BLAS call; for integer inputs every partial sum is an integer of magnitude
    <= 4 d M^2, exact by the caller's choice of back end. Only columns j >= start are formed.
    """
    n = matrix.shape[0]
    ones = np.ones((n, 1), dtype=matrix.dtype)
    left = np.hstack([matrix, sq_norms[:, None], ones])  # [n, d + 2]
    right = np.hstack([-2 * matrix, ones, sq_norms[:, None]])  # [n, d + 2]
    block = max(1, min(n, BLOCK_ELEMENTS // n))
    below_diagonal = np.tri(block, dtype=bool)  # [b, b]: column <= row, i.e. j <= i
    sentinel = np.inf if matrix.dtype == np.float64 else np.iinfo(np.int64).max
    for start in range(0, n - 1, block):
        stop = min(n, start + block)
        rows = stop - start
        dist = left[start:stop] @ right[start:].T  # [b, n - start]
        dist[:, :rows][below_diagonal[:rows, :rows]] = sentinel  # drop j <= i
        yield start, dist


def _blocked_min(matrix: np.ndarray, sq_norms: np.ndarray, deadline: float | None = None) -> tuple[int, tuple[int, int]]:
    """Min over pairs i < j, block by block; returns (value, (i, j))."""
    best, best_pair = None, (0, 1)
    for start, dist in _distance_blocks(matrix, sq_norms):
        _check_clock(deadline)
        r, c = divmod(int(np.argmin(dist)), dist.shape[1])
        if best is None or dist[r, c] < best:
            best, best_pair = dist[r, c], (start + r, start + c)
    return int(best), best_pair


def _bigint_min(matrix: np.ndarray, deadline: float | None = None) -> tuple[int, tuple[int, int]]:
    """Exact min for coordinates beyond the int64 range: float64 screening, then Python ints.

    Coordinates divided by the largest one M are floats in [-1, 1] (int / int rounds correctly,
    even for huge ints); distances from them are off by far less than TOL (about 3e-13 for
    d = 11: a few d^2 float64 roundings). Every pair whose screened distance is within 2 TOL of
    the screened minimum -- which includes every exact minimiser -- is then recomputed exactly,
    EXACT_PAIRS_CHUNK pairs at a time (many near-ties, e.g. thousands of duplicates, must not
    build one huge object array). Pairs come in (i, j) order and only a strictly smaller value
    replaces the best, so the first minimising pair is returned; an exact 0 cannot be beaten.
    """
    n, d = matrix.shape
    largest = max(abs(int(v)) for v in matrix.flat)
    scaled = np.array([[int(v) / largest for v in row] for row in matrix], dtype=np.float64)  # [n, d] in [-1, 1]
    scaled_norms = np.einsum("ij,ij->i", scaled, scaled)  # [n]
    tol = 64 * d * d * np.finfo(np.float64).eps
    screened_min = np.inf
    for _, dist in _distance_blocks(scaled, scaled_norms):
        _check_clock(deadline)
        screened_min = min(screened_min, float(dist.min()))
    exact = matrix.astype(object)
    best, best_pair = None, (0, 1)
    for start, dist in _distance_blocks(scaled, scaled_norms):
        r, c = np.nonzero(dist <= screened_min + 2 * tol)  # row-major: (i, j) ascending
        first, second = start + r, start + c  # [m] candidate pairs, first < second
        for lo in range(0, len(first), EXACT_PAIRS_CHUNK):
            _check_clock(deadline)
            f, g = first[lo:lo + EXACT_PAIRS_CHUNK], second[lo:lo + EXACT_PAIRS_CHUNK]
            diff = exact[f] - exact[g]  # [m', d] Python ints
            values = (diff * diff).sum(axis=1)  # [m'] exact squared distances
            k = int(np.argmin(values))
            if best is None or values[k] < best:
                best, best_pair = int(values[k]), (int(f[k]), int(g[k]))
            if best == 0:
                return best, best_pair
    return best, best_pair
