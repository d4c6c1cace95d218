"""Exact kissing verifier: hand-worked small cases, every input error, and the three back ends."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from hw3lib.kissing import VerifyResult, verify
from hw3lib.kissing.verify import min_squared_distance, to_integer_matrix


def brute_force(points):
    """Reference: Python ints, every pair."""
    pts = [[int(v) for v in p] for p in points]
    dists = {(i, j): sum((a - b) ** 2 for a, b in zip(pts[i], pts[j])) for i, j in itertools.combinations(range(len(pts)), 2)}
    return min(dists.values()), max(sum(v * v for v in p) for p in pts)


def test_three_points_in_the_plane_hand_worked():
    # x0=(2,0), x1=(0,3), x2=(-2,-1): norms 4, 9, 5; distances |x0-x1|^2 = 4+9 = 13,
    # |x0-x2|^2 = 16+1 = 17, |x1-x2|^2 = 4+16 = 20. min 13 >= max 9: valid.
    result = verify([[2, 0], [0, 3], [-2, -1]], dimension=2)
    assert result == VerifyResult(True, 3, 2, 13, 9, None, None, result.message, (0, 1), 1)
    assert result.valid and result.score == 3
    assert "13" in result.message and "9" in result.message


def test_three_points_failing_names_pair_and_point():
    # x0=(1,0), x1=(0,1), x2=(1,1): norms 1, 1, 2; |x0-x2|^2 = 1 is the min (pair 0,2), < max norm 2.
    result = verify([[1, 0], [0, 1], [1, 1]], dimension=2)
    assert not result.valid and result.score == 0
    assert result.min_sq_distance == 1 and result.max_sq_norm == 2
    assert result.offending_pair == (0, 2) and result.offending_point == 2
    assert result.message.startswith("min squared distance 1 (points 0 and 2) < max squared norm 2 (point 2)")


def test_equality_is_allowed_hexagon():
    # The 6 hexagonal-lattice neighbours in the A2 basis embedded in Z^3: (1,-1,0) and permutations.
    pts = [p for p in itertools.permutations([1, -1, 0])]
    result = verify(pts, dimension=3)
    assert result.valid and result.min_sq_distance == 2 and result.max_sq_norm == 2


def test_single_point_is_valid():
    result = verify([[0, 3]], dimension=2)
    assert result.valid and result.max_sq_norm == 9 and result.min_sq_distance is None


@pytest.mark.parametrize(
    "points, needle, point",
    [
        ([], "no points", None),
        ([[0, 0], [1, 0]], "point 0 is the zero vector", 0),
        ([[1, 0], [2, 2], [1, 0]], "points 0 and 2 are identical", 2),
        ([[1, 0], [0, 1.5]], "point 1, coordinate 1: 1.5 is not an integer", 1),
        (np.array([[1.0, 0.0], [0.0, 1.5]]), "point 1, coordinate 1: 1.5 is not an integer", 1),
        (np.array([[1.0, np.inf]]), "point 0, coordinate 1: inf is not finite", 0),
        ([[1, 0], [float("nan"), 1]], "point 1, coordinate 0: nan is not finite", 1),
        ([[1, 0], [0, 1, 2]], "point 0 has 2 coordinates but point 1 has 3", 1),
        ([[1, 0], [0, "x"]], "point 1, coordinate 1: 'x' (str) is not an integer", 1),
        ([[1, 0], 7], "point 1 is 7, not a vector", 1),
        ([[1, Fraction(1, 2)]], "point 0, coordinate 1: Fraction(1, 2) is not an integer", 0),
        ([[1, 0], [0, 2.0**60]], "too large to be an exact float", 1),
        (np.array([[True, False]]), "booleans", 0),
        ("not points", "must be a list", None),
    ],
)
def test_bad_input_is_invalid_with_a_message(points, needle, point):
    result = verify(points, dimension=2)
    assert not result.valid
    assert needle in result.message, result.message
    assert result.offending_point == point


def test_wrong_dimension_and_any_dimension():
    pts = [[2, 0, 0], [0, 2, 0]]
    assert "dimension 3, expected 11" in verify(pts).message
    assert verify(pts, dimension=None).valid
    with pytest.raises(ValueError, match="dimension"):
        verify(pts, dimension=0)


def test_accepted_input_types_agree():
    # norms 4, 4, 3; |x0-x1|^2 = 4+4 = 8, |x0-x2|^2 = 9+1+1 = 11, |x1-x2|^2 = 1+9+1 = 11:
    # min 8 (pair 0, 1) >= max 4 (point 0): valid.
    base = [[2, 0, 0], [0, -2, 0], [-1, 1, 1]]
    variants = [base, tuple(map(tuple, base)), np.array(base), np.array(base, dtype=np.int32),
                np.array(base, dtype=float), np.array(base, dtype=object), [[Fraction(v) for v in p] for p in base],
                [np.array(p, dtype=np.int16) for p in base], [[2**0 * v for v in p] for p in base]]
    for variant in variants:
        got = verify(variant, dimension=3)
        assert (got.valid, got.min_sq_distance, got.max_sq_norm, got.closest_pair) == (True, 8, 4, (0, 1)), type(variant)


def test_huge_integers_are_exact():
    # Coordinates 9e12: squares ~ 8e25 overflow int64, and float64 cannot tell 2 big^2 from 2 big^2 + 1.
    big = 9 * 10**12
    p = [big, 0] + [0] * 9
    q = [0, big] + [0] * 9  # |p - q|^2 = 2 big^2, the min distance below
    tie = [0, 0, big, big] + [0] * 7  # |tie|^2 = 2 big^2 = the min distance: valid
    over = [0, 0, big, big, 1] + [0] * 6  # |over|^2 = 2 big^2 + 1 > the min distance: invalid
    ok = verify([p, q, tie])
    assert ok.valid and ok.min_sq_distance == 2 * big**2 and ok.max_sq_norm == 2 * big**2
    bad = verify([p, q, over])
    assert not bad.valid and bad.max_sq_norm == 2 * big**2 + 1
    assert bad.offending_pair == (0, 1) and bad.offending_point == 2
    close = verify([p, [big, 0, 1] + [0] * 8])  # |p - c|^2 = 1
    assert close.min_sq_distance == 1 and not close.valid


@pytest.mark.parametrize("scale", [1, 10**5, 10**8, 10**14])
def test_backends_match_brute_force(scale):
    # scale 1 and 1e5 use float64 BLAS, 1e8 int64, 1e14 Python ints.
    rng = np.random.default_rng(scale % 1000)
    pts = [[int(v) * scale + int(u) for v, u in zip(rng.integers(-3, 4, size=5), rng.integers(-2, 3, size=5))] for _ in range(40)]
    matrix = to_integer_matrix(pts)
    got, (i, j) = min_squared_distance(matrix)
    want = brute_force(pts)[0]
    assert got == want
    assert sum((a - b) ** 2 for a, b in zip(pts[i], pts[j])) == want and i < j


def test_blocked_min_crosses_block_boundaries(monkeypatch):
    import sys

    verify_module = sys.modules["hw3lib.kissing.verify"]  # the attribute `verify` is the function

    rng = np.random.default_rng(0)
    pts = rng.integers(-6, 7, size=(300, 11))
    want = brute_force(pts)[0]
    monkeypatch.setattr(verify_module, "BLOCK_ELEMENTS", 300 * 7)  # blocks of 7 rows
    got, (i, j) = min_squared_distance(to_integer_matrix(pts))
    assert got == want and int(((pts[i] - pts[j]) ** 2).sum()) == want


def test_uint64_values_above_int64_are_exact():
    pts = np.array([[2**63 + 5, 0], [0, 2**63 + 5]], dtype=np.uint64)
    res = verify(pts, dimension=2)
    assert res.valid and res.max_sq_norm == (2**63 + 5) ** 2


def test_booleans_mixed_into_integer_lists_are_not_integers():
    # np.array([[True, 0], [0, 2]]) would silently be the int64 matrix [[1, 0], [0, 2]].
    result = verify([[2, 0], [0, True]], dimension=2)
    assert not result.valid and result.offending_point == 1
    assert result.message.startswith("point 1, coordinate 1: True is a boolean")
    assert "boolean" in verify([(np.bool_(True), 0)], dimension=2).message


@pytest.mark.parametrize("scale", [1, 10**8, 10**14])  # float64 BLAS, int64 and Python-int back ends
def test_deadline_in_the_past_raises_and_a_far_one_changes_nothing(scale):
    import time

    from hw3lib.kissing.verify import VerificationTimeout

    points = [[2 * scale, 0, 0], [0, 2 * scale, 0], [0, 0, 2 * scale], [-2 * scale, 0, 0]]
    with pytest.raises(VerificationTimeout):
        verify(points, dimension=3, deadline=time.monotonic() - 1)
    assert verify(points, dimension=3, deadline=time.monotonic() + 60) == verify(points, dimension=3)


def test_bigint_path_with_many_duplicates_stays_exact_and_chunked():
    # 5,000 copies of one 60-bit point plus a distinct one: all ~12.5M pairs are screening
    # candidates; the chunked exact pass must find the first duplicate pair (0, 1) at distance 0.
    big = 2**60 + 7
    points = [[big, 0, 0]] * 5000 + [[0, big, 0]]
    assert min_squared_distance(np.array(points, dtype=object)) == (0, (0, 1))
    result = verify(points, dimension=3)
    assert not result.valid and result.offending_pair == (0, 1) and "identical" in result.message
