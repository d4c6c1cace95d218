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
from decimal import Decimal
from fractions import Fraction

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


# ---------------------------------------------------------------------------------------------
# The other published forms: rational coordinates, the angle form (mixed norms), Z[sqrt2]
#
# The course's form (above) asks min ||x - y||^2 >= max ||x||^2 of integer points. Published records
# come in three more forms, each decided here exactly (integers and Fractions only; a float is
# used at most to *name* the worst pair in a message, never to decide):
#
# * rational coordinates: the min-distance condition is homogeneous of degree 2, so multiplying
#   every point by the common denominator L changes nothing; the integer verifier then decides.
# * the angle form: every pair has cos <= 1/2, i.e. 2<u, v> <= |u||v|, which is what kissing needs
#   (the spheres sit at 2u/|u|, whatever |u| is). Exactly: a pair with <u, v> <= 0 passes; one with
#   <u, v> > 0 passes iff 4<u, v>^2 <= |u|^2 |v|^2 (both sides positive, so squaring keeps the order).
#   Conversion to the course's form: with equal norms the two forms are the same condition
#   (||u - v||^2 = 2N - 2<u, v> >= N  <=>  2<u, v> <= N). With mixed norms the angle form does not
#   imply the min-distance one (station600 has norms^2 4 and ~1e10); `equalize_norms` multiplies each
#   row by the integer ceil(sqrt(T / |u|^2)), T the largest norm^2, so that all norms^2 lie in
#   [T, T (1 + O(1/sqrt T)))] and the min-distance form may hold -- the integer verifier then decides
#   (for station600 the factor for the core is 50001, giving station600_aeform_k50001, slack 0).
# * Z[sqrt2] coordinates a + b sqrt2 (a, b integers or rationals): inner products are P + Q sqrt2 with
#   P = <a, a'> + 2<b, b'>, Q = <a, b'> + <b, a'>; the sign of p + q sqrt2 is exact (sign rule below).

ANGLE = "angle"
MIN_DISTANCE = "min-distance"


@dataclass(frozen=True)
class FormResult:
    """The verdict on a set in one of the published forms (see `verify_form`).

    valid: the set satisfies its criterion (and is well formed). form: "integer", "rational", "angle" or
        "zsqrt2". criterion: "min-distance" (min ||x - y||^2 >= max ||x||^2) or "angle" (cos <= 1/2).
    num_points, dimension: the shape read. message: what is wrong and where, or a one-line summary.
    offending_pair / offending_point: a violating pair (the worst one by cosine or distance) / a malformed point.
    tight_pairs: the number of pairs exactly at the bound (cos = 1/2, or distance^2 = max norm^2), counted exactly.
    max_cos: the largest cosine over pairs, as a float for display only (the decision is exact).
    scale: the integer the coordinates were multiplied by to clear denominators (1 for integers).
    min_sq_distance, max_sq_norm: the integer (and rational, times scale^2) min-distance form's two sides.
    """

    valid: bool
    form: str
    criterion: str
    num_points: int
    dimension: int | None
    message: str
    offending_pair: tuple[int, int] | None = None
    offending_point: int | None = None
    tight_pairs: int | None = None
    max_cos: float | None = None
    scale: int = 1
    min_sq_distance: int | None = None
    max_sq_norm: int | None = None

    @property
    def score(self) -> int:
        return self.num_points if self.valid else 0


def _fraction(value, i: int, j: int, n: int, d: int) -> Fraction:
    """An exact rational from an int, Fraction, Decimal or a string such as "3/7" or "0.1234" (never a float)."""
    where = f"point {i}, coordinate {j}"
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, np.bool_)):
        raise InputError(f"{where}: {value!r} is a boolean, not a number", i, n, d)
    if isinstance(value, float):
        raise InputError(f"{where}: {value!r} is a float, which is not exact; give rationals as strings "
                         "('0.1234', '3/7'), Fractions or Decimals (read JSON with parse_float=Decimal)", i, n, d)
    try:
        if isinstance(value, (numbers.Rational, Decimal, str)):
            exact = Fraction(value)
        else:
            raise TypeError
    except (TypeError, ValueError, ZeroDivisionError, ArithmeticError):
        raise InputError(f"{where}: {value!r} ({type(value).__name__}) is not an exact rational number", i, n, d) from None
    return exact


def to_fraction_rows(points, dimension: int | None = None) -> list[list[Fraction]]:
    """Rows of Fractions, exactly; raises InputError naming the point and coordinate."""
    if isinstance(points, (str, bytes)) or points is None or not hasattr(points, "__len__"):
        raise InputError(f"points must be a list of vectors, got {type(points).__name__}")
    points = list(points)
    if not points:
        raise InputError("no points given: the set must contain at least one nonzero vector")
    lengths = [_row_length(row, i) for i, row in enumerate(points)]
    n, d = len(points), lengths[0]
    if any(length != d for length in lengths):
        bad = next(i for i, length in enumerate(lengths) if length != d)
        raise InputError(f"ragged input: point 0 has {d} coordinates but point {bad} has {lengths[bad]}", bad, n)
    if dimension is not None and d != dimension:
        raise InputError(f"points have dimension {d}, expected {dimension}", None, n, d)
    return [[_fraction(v, i, j, n, d) for j, v in enumerate(row)] for i, row in enumerate(points)]


def clear_denominators(rows: list[list[Fraction]]) -> tuple[np.ndarray, int]:
    """(integer object matrix [n, d], L): the rows times L, the least common multiple of every denominator."""
    scale = 1
    for row in rows:
        for v in row:
            scale = math.lcm(scale, v.denominator)
    out = np.empty((len(rows), len(rows[0])), dtype=object)
    for i, row in enumerate(rows):
        out[i, :] = [v.numerator * (scale // v.denominator) for v in row]
    return out, scale


def _int64_or_object(matrix: np.ndarray) -> np.ndarray:
    return matrix.astype(np.int64) if _max_abs(matrix) < 2**63 else matrix.astype(object)


def exact_products(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x @ y.T exactly for integer matrices [n, d], [m, d] (int64 or object of Python ints of any size).

    Small entries: one float64 BLAS product when every partial sum stays below 2^53 (exact), else
    int64 when it stays below 2^62. Larger: each entry is split into signed limbs of `bits` bits
    (|limb| < 2^bits, d 2^(2 bits) < 2^53), every pair of limb matrices is one exact float64 product,
    and the products are recombined with Python ints (object array) by shift: chunked exact integer
    arithmetic, a few object operations per entry instead of d big multiplications.
    """
    d = x.shape[1]
    mx, my = _max_abs(x), _max_abs(y)
    bound = d * mx * my
    if bound < FLOAT_EXACT_LIMIT:
        return (x.astype(np.float64) @ y.astype(np.float64).T).astype(np.int64)
    if bound < INT64_SAFE_LIMIT and x.dtype != object and y.dtype != object:
        return x.astype(np.int64) @ y.astype(np.int64).T
    bits = (52 - max(1, d).bit_length()) // 2  # d * 2^(2 bits) <= 2^52
    xl, yl = _limbs(x, bits, mx), _limbs(y, bits, my)
    by_shift: dict[int, np.ndarray] = {}
    for s, a in enumerate(xl):
        for t, b in enumerate(yl):
            product = (a @ b.T).astype(np.int64)  # exact: |entries| < d 2^(2 bits) <= 2^52
            by_shift[s + t] = by_shift[s + t] + product if s + t in by_shift else product  # few terms: < 2^62
    out = np.zeros((x.shape[0], y.shape[0]), dtype=object)
    for k, product in by_shift.items():
        out += product.astype(object) * (1 << (bits * k))
    return out


def _limbs(matrix: np.ndarray, bits: int, largest: int) -> list[np.ndarray]:
    """Signed limbs L_k (float64, |L_k| < 2^bits) with matrix = sum_k L_k 2^(bits k), exactly."""
    obj = matrix.astype(object)
    negative = np.vectorize(lambda v: v < 0, otypes=[bool])(obj)
    magnitude = np.abs(obj)
    mask = (1 << bits) - 1
    limbs = []
    for k in range(max(1, -(-max(largest, 1).bit_length() // bits))):
        limb = ((magnitude >> (bits * k)) & mask).astype(np.float64)
        limbs.append(np.where(negative, -limb, limb))
    return limbs


def _integer_rows(points, dimension: int | None, per_row: bool) -> tuple[np.ndarray, int]:
    """Exact integer rows from integer or rational input. per_row: each row cleared by its own denominator
    (the angle form is unchanged by a positive scale per row); else one common scale L (returned)."""
    try:
        return to_integer_matrix(points), 1
    except InputError:
        rows = to_fraction_rows(points, dimension)  # raises the rational path's own, more precise error
    if per_row:
        out = np.empty((len(rows), len(rows[0])), dtype=object)
        for i, row in enumerate(rows):
            out[i, :] = clear_denominators([row])[0][0]
        return out, 1
    return clear_denominators(rows)


def verify_rational(points, dimension: int | None = 11) -> FormResult:
    """Rational coordinates in the course's min-distance form, exactly (cleared of denominators first)."""
    try:
        rows = to_fraction_rows(points, dimension)
    except InputError as exc:
        return FormResult(False, "rational", MIN_DISTANCE, exc.num_points, exc.dimension, str(exc),
                          offending_point=exc.point)
    matrix, scale = clear_denominators(rows)
    result = verify(_int64_or_object(matrix), dimension)
    note = "" if scale == 1 else f" (coordinates times their common denominator {scale}; the form is scale-free)"
    return FormResult(result.valid, "rational", MIN_DISTANCE, result.num_points, result.dimension,
                      result.message + note, result.offending_pair, result.offending_point, scale=scale,
                      min_sq_distance=result.min_sq_distance, max_sq_norm=result.max_sq_norm)


def _pair_indices(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(n, k=1)


def _first_zero_row(matrix: np.ndarray) -> int | None:
    zero = [i for i, row in enumerate(matrix) if not any(int(v) for v in row)]
    return zero[0] if zero else None


def verify_angle(points, dimension: int | None = 11) -> FormResult:
    """The angle form: every pair of (nonzero, integer or rational) points has cos <= 1/2, decided exactly.

    Mixed norms are allowed (a rational row is cleared by its own denominator: angles do not change).
    Exactly: G = <u, v> from `exact_products`; pairs with G > 0 must have 4 G^2 <= |u|^2 |v|^2 (Python ints).
    """
    try:
        matrix, _ = _integer_rows(points, dimension, per_row=True)
    except InputError as exc:
        return FormResult(False, "angle", ANGLE, exc.num_points, exc.dimension, str(exc), offending_point=exc.point)
    n, d = matrix.shape
    if dimension is not None and d != dimension:
        return FormResult(False, "angle", ANGLE, n, d, f"points have dimension {d}, expected {dimension}")
    zero = _first_zero_row(matrix)
    if zero is not None:
        return FormResult(False, "angle", ANGLE, n, d, f"point {zero} is the zero vector; it has no direction",
                          offending_point=zero)
    if n == 1:
        return FormResult(True, "angle", ANGLE, 1, d, f"valid: 1 point in dimension {d}", tight_pairs=0)
    gram = exact_products(matrix, matrix)  # [n, n] exact
    norms = np.array([int(gram[i, i]) for i in range(n)], dtype=object)  # [n] |u|^2
    i, j = _pair_indices(n)
    g = gram[i, j]
    positive = np.flatnonzero(g > 0)
    gp = g[positive].astype(object)  # [m] Python ints
    lhs = 4 * gp * gp  # [m] 4 <u, v>^2
    rhs = norms[i[positive]] * norms[j[positive]]  # [m] |u|^2 |v|^2
    bad = positive[np.flatnonzero(lhs > rhs)]
    tight = int(np.count_nonzero(lhs == rhs))
    cos = _display_cos(g, norms, i, j)
    worst = int(np.argmax(cos))
    if bad.size:
        k = int(bad[np.argmax(cos[bad])])
        a, b = int(i[k]), int(j[k])
        return FormResult(False, "angle", ANGLE, n, d,
                          f"points {a} and {b} have cos {cos[k]:.12g} > 1/2 (exactly: 4<u,v>^2 = {4 * int(g[k]) ** 2} > "
                          f"|u|^2|v|^2 = {int(norms[a]) * int(norms[b])}); {bad.size} pair(s) violate the angle form",
                          (a, b), None, tight, float(cos[worst]))
    return FormResult(True, "angle", ANGLE, n, d,
                      f"valid: {n} points in dimension {d}, every pair has cos <= 1/2 (max {cos[worst]:.12g}; "
                      f"{tight} pair(s) at exactly 1/2)", None, None, tight, float(cos[worst]))


def _display_cos(g: np.ndarray, norms: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Cosines as floats, for messages only (int / int rounds correctly even for huge Python ints)."""
    scale = max(int(v) for v in norms)
    nf = np.array([int(v) / scale for v in norms])
    gf = np.array([int(v) / scale for v in g]) if g.dtype == object else g.astype(np.float64) / scale
    return gf / np.sqrt(nf[i] * nf[j])


def equalize_norms(points) -> np.ndarray:
    """The candidate min-distance form of an angle-form integer set: rows within a factor 4 of the largest
    norm^2 T stay as they are; a shorter row u is multiplied by the least integer k with k^2 |u|^2 >= T
    (k >= 2). Returns an object array of Python ints; nothing is promised -- verify it with `verify`.
    For station600 this multiplies the 496 core rows (norm^2 4) by 50001 and reproduces
    station600_aeform_k50001 exactly."""
    matrix = to_integer_matrix(points).astype(object)
    norms = [sum(int(v) * int(v) for v in row) for row in matrix]
    if min(norms) == 0:
        raise ValueError("a zero vector has no direction; remove it")
    target = max(norms)
    out = matrix.copy()
    for r, norm in enumerate(norms):
        if 4 * norm > target:
            continue
        k = max(2, math.isqrt(target // norm))
        while k * k * norm < target:
            k += 1
        out[r] = matrix[r] * k
    return out


# Z[sqrt2]: numbers p + q sqrt2 as pairs of integer arrays.


def zsqrt2_sign(p, q) -> np.ndarray:
    """sign(p + q sqrt2) elementwise, exactly, for integer arrays (int64 or object).

    Same signs (or a zero): the sign of the nonzero part. Opposite signs: p^2 - 2 q^2 = (p + q sqrt2)(p - q sqrt2)
    and p - q sqrt2 has the sign of p there, so sign(p + q sqrt2) = sign(p) * sign(p^2 - 2 q^2).
    """
    p = np.asarray(p, dtype=object)
    q = np.asarray(q, dtype=object)
    sp = (p > 0).astype(np.int8) - (p < 0).astype(np.int8)
    sq = (q > 0).astype(np.int8) - (q < 0).astype(np.int8)
    out = np.where(sp != 0, sp, sq).astype(np.int8)  # right wherever the signs agree or one is zero
    mixed = sp * sq < 0
    if mixed.any():
        pm, qm = p[mixed], q[mixed]
        t = pm * pm - 2 * qm * qm  # never 0 for q != 0 (sqrt2 is irrational)
        out[mixed] = sp[mixed] * ((t > 0).astype(np.int8) - (t < 0).astype(np.int8))
    return out


def split_zsqrt2(vectors) -> tuple[list, list]:
    """(rational parts, sqrt2 parts) from interleaved rows [a_0, b_0, a_1, b_1, ...] (the station604 file)."""
    rows = [list(v) for v in vectors]
    if any(len(r) % 2 for r in rows):
        raise ValueError("interleaved Z[sqrt2] rows need an even length: entry 2k = rational part, 2k+1 = sqrt2 part")
    return [r[0::2] for r in rows], [r[1::2] for r in rows]


def verify_zsqrt2(rational, sqrt2, dimension: int | None = 11, criterion: str = MIN_DISTANCE) -> FormResult:
    """Points a + b sqrt2 (a = `rational`, b = `sqrt2`: integer or rational [n, d]), exactly, in either form.

    min-distance: ||x - y||^2 >= max ||x||^2 (the course's form; the largest norm is found by exact comparison);
    angle: cos <= 1/2 (G > 0 pairs need 4 G^2 <= N_x N_y, products in Z[sqrt2]). No float decides anything.
    """
    if criterion not in (MIN_DISTANCE, ANGLE):
        raise ValueError(f"criterion={criterion!r}: choose {MIN_DISTANCE!r} or {ANGLE!r}")
    try:
        a_rows = to_fraction_rows(rational, dimension)
        b_rows = to_fraction_rows(sqrt2, dimension)
    except InputError as exc:
        return FormResult(False, "zsqrt2", criterion, exc.num_points, exc.dimension, str(exc), offending_point=exc.point)
    if len(a_rows) != len(b_rows):
        return FormResult(False, "zsqrt2", criterion, len(a_rows), len(a_rows[0]),
                          f"{len(a_rows)} rational parts but {len(b_rows)} sqrt2 parts")
    matrix, scale = clear_denominators(a_rows + b_rows)  # one scale for both parts: x -> L x
    n, d = len(a_rows), len(a_rows[0])
    a, b = _int64_or_object(matrix[:n]), _int64_or_object(matrix[n:])
    zero = _first_zero_row(np.hstack([a.astype(object), b.astype(object)]))
    if zero is not None:
        return FormResult(False, "zsqrt2", criterion, n, d, f"point {zero} is the zero vector", offending_point=zero,
                          scale=scale)
    if n == 1:
        return FormResult(True, "zsqrt2", criterion, 1, d, f"valid: 1 point in dimension {d}", tight_pairs=0, scale=scale)
    P = (exact_products(a, a) + 2 * exact_products(b, b)).astype(object)  # [n, n] rational part of <x, y>
    ab = exact_products(a, b).astype(object)
    Q = ab + ab.T  # [n, n] sqrt2 part of <x, y>
    np_, nq = np.array([P[k, k] for k in range(n)], dtype=object), np.array([Q[k, k] for k in range(n)], dtype=object)
    i, j = _pair_indices(n)
    cos = _zsqrt2_display_cos(P[i, j], Q[i, j], np_, nq, i, j)
    worst = int(np.argmax(cos)) if len(i) else 0
    max_cos = float(cos[worst]) if len(i) else None
    if criterion == MIN_DISTANCE:
        longest = 0
        for k in range(1, n):  # exact argmax of the norms N_k = np_k + nq_k sqrt2
            if zsqrt2_sign(np.array([np_[k] - np_[longest]], dtype=object), np.array([nq[k] - nq[longest]], dtype=object))[0] > 0:
                longest = k
        dp = np_[i] + np_[j] - 2 * P[i, j]  # [pairs] ||x - y||^2 = dp + dq sqrt2
        dq = nq[i] + nq[j] - 2 * Q[i, j]
        duplicate = np.flatnonzero((dp == 0) & (dq == 0))
        if duplicate.size:
            k = int(duplicate[0])
            return FormResult(False, "zsqrt2", criterion, n, d, f"points {i[k]} and {j[k]} are identical",
                              (int(i[k]), int(j[k])), int(j[k]), scale=scale)
        signs = zsqrt2_sign(dp - np_[longest], dq - nq[longest])  # sign(||x - y||^2 - max ||z||^2)
        norm_text = f"{np_[longest]} + {nq[longest]} sqrt2"
        bound = f"max squared norm {norm_text} (point {longest})"
    else:
        g_sign = zsqrt2_sign(P[i, j], Q[i, j])
        positive = np.flatnonzero(g_sign > 0)
        signs = np.ones(len(i), dtype=np.int8)
        if positive.size:
            gp, gq = P[i, j][positive], Q[i, j][positive]
            ni_p, ni_q, nj_p, nj_q = np_[i[positive]], nq[i[positive]], np_[j[positive]], nq[j[positive]]
            prod_p, prod_q = ni_p * nj_p + 2 * ni_q * nj_q, ni_p * nj_q + ni_q * nj_p  # N_x N_y
            sq_p, sq_q = gp * gp + 2 * gq * gq, 2 * gp * gq  # G^2
            signs[positive] = zsqrt2_sign(prod_p - 4 * sq_p, prod_q - 4 * sq_q)  # sign(N_x N_y - 4 G^2)
        bound = "cos 1/2"
    bad = np.flatnonzero(signs < 0)
    tight = int(np.count_nonzero(signs == 0))
    if bad.size:
        k = int(bad[np.argmax(cos[bad])])
        return FormResult(False, "zsqrt2", criterion, n, d,
                          f"points {i[k]} and {j[k]} (cos {cos[k]:.15g}) break the {criterion} form against the {bound}, "
                          f"exactly in Z[sqrt2]; {bad.size} pair(s) violate it", (int(i[k]), int(j[k])), None, tight,
                          max_cos, scale)
    return FormResult(True, "zsqrt2", criterion, n, d,
                      f"valid: {n} points in dimension {d} with coordinates in Z[sqrt2], {criterion} form "
                      f"({bound}; {tight} pair(s) exactly at the bound; max cos {max_cos:.12g})", None, None, tight,
                      max_cos, scale)


def _zsqrt2_float(p: np.ndarray, q: np.ndarray, scale: int) -> np.ndarray:
    """(p + q sqrt2) / scale as floats without cancellation: where p and q have opposite signs it is
    (p^2 - 2 q^2) / (p - q sqrt2), whose denominator adds two numbers of the same sign. Display only."""
    root2 = math.sqrt(2.0)
    out = np.empty(len(p))
    for k, (a, b) in enumerate(zip(p, q)):
        a, b = int(a), int(b)
        if (a > 0 and b < 0) or (a < 0 and b > 0):
            out[k] = ((a * a - 2 * b * b) / (scale * scale)) / (a / scale - b / scale * root2)
        else:
            out[k] = a / scale + b / scale * root2
    return out


def _zsqrt2_display_cos(gp, gq, np_, nq, i, j) -> np.ndarray:
    scale = max(abs(int(v)) for v in np_) or 1
    g = _zsqrt2_float(gp, gq, scale)
    norm = _zsqrt2_float(np_, nq, scale)
    return g / np.sqrt(norm[i] * norm[j])


FORMS = ("integer", "rational", "angle", "zsqrt2")


def verify_form(data, form: str = "auto", dimension: int | None = 11) -> FormResult:
    """Verify `data` in `form`: "integer" (the course's form), "rational", "angle", "zsqrt2" (interleaved rows, or
    {"rational": ..., "sqrt2": ...}; min-distance form) or "auto" (zsqrt2 for such a dict or for a
    {"vectors": ...} record whose rows have 2 * dimension entries, else integer when every entry is an integer,
    else rational). Angle is never guessed: name it."""
    if isinstance(data, dict):
        if "rational" in data and "sqrt2" in data:
            return verify_zsqrt2(data["rational"], data["sqrt2"], dimension)
        inner = data.get("points", data.get("vectors"))
        if inner is None:
            raise ValueError("a JSON object needs a 'points' or 'vectors' key (or 'rational' and 'sqrt2')")
        if form == "auto" and dimension is not None and inner and len(inner[0]) == 2 * dimension:
            form = "zsqrt2"
        data = inner
    if form == "auto":
        try:
            to_integer_matrix(data)
            form = "integer"
        except InputError:
            form = "rational"
    if form == "integer":
        r = verify(data, dimension)
        return FormResult(r.valid, "integer", MIN_DISTANCE, r.num_points, r.dimension, r.message, r.offending_pair,
                          r.offending_point, min_sq_distance=r.min_sq_distance, max_sq_norm=r.max_sq_norm)
    if form == "rational":
        return verify_rational(data, dimension)
    if form == "angle":
        return verify_angle(data, dimension)
    if form == "zsqrt2":
        try:
            rational, sqrt2 = split_zsqrt2(data)
        except (ValueError, TypeError) as exc:
            return FormResult(False, "zsqrt2", MIN_DISTANCE, len(data) if hasattr(data, "__len__") else 0, None, str(exc))
        return verify_zsqrt2(rational, sqrt2, dimension)
    raise ValueError(f"form={form!r}: choose auto or one of {', '.join(FORMS)}")
