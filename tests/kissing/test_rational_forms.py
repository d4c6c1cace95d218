"""Rational quadratic forms: Hilbert symbols by hand, Hasse-Minkowski similarity with explicit embeddings."""

from fractions import Fraction
import random

import numpy as np
import pytest

from hw3lib.kissing.rational_forms import diagonalize, hasse_invariant, hilbert_symbol, similarity_factor

A2 = [[2, -1], [-1, 2]]
D4 = [[2, -1, 0, 0], [-1, 2, -1, -1], [0, -1, 2, 0], [0, -1, 0, 2]]


def block(*matrices):
    n = sum(len(m) for m in matrices)
    out = np.zeros((n, n), dtype=int)
    at = 0
    for m in matrices:
        out[at:at + len(m), at:at + len(m)] = m
        at += len(m)
    return out.tolist()


@pytest.mark.parametrize("a, b, p, expected", [
    (-1, -1, 2, -1),  # the quaternions are a division algebra over Q_2
    (-1, -1, 3, 1),  # units at an odd prime: always 1
    (3, 3, 3, -1),  # (-1)^(1*1*1) * 1 * 1
    (2, 5, 5, -1),  # 2 is not a square mod 5
    (2, 7, 7, 1),  # 2 = 3^2 mod 7
    (Fraction(1, 3), 3, 3, -1),  # the class of 1/3 is that of 3
])
def test_hilbert_symbols_by_hand(a, b, p, expected):
    assert hilbert_symbol(a, b, p) == expected


def test_hilbert_product_formula():
    rng = random.Random(0)
    primes = [p for p in range(2, 62) if all(p % q for q in range(2, p))]
    for _ in range(200):
        a, b = (rng.choice([-1, 1]) * rng.randint(1, 60) for _ in range(2))
        product = 1
        for p in primes:
            product *= hilbert_symbol(a, b, p)
        assert product == (-1 if a < 0 and b < 0 else 1), (a, b)


def test_diagonalize_keeps_the_discriminant():
    diagonal = diagonalize(D4)
    assert np.prod([float(d) for d in diagonal]) == pytest.approx(np.linalg.det(np.array(D4)))
    assert diagonalize([[0, 1], [1, 0]]) == [2, Fraction(-1, 2)]  # zero diagonal: a row is added first
    with pytest.raises(ValueError, match="degenerate"):
        diagonalize([[1, 1], [1, 1]])


def embedding_gram(rows):
    m = np.array(rows)
    return (m @ m.T).tolist()


@pytest.mark.parametrize("gram", [
    D4,
    embedding_gram([[1, -1, 0], [0, 1, -1], [1, 1, 1]]),  # A2 + <3>, realized inside Z^3
    (3 * np.eye(4, dtype=int)).tolist(),  # 3 = 1 + 1 + 1: <3,3,3,3> is I_4 (quaternion norms are multiplicative)
])
def test_forms_with_an_integer_embedding_are_similar_to_the_identity(gram):
    factor, why = similarity_factor(gram)
    assert factor == 1, why


def test_forms_without_one_say_why():
    factor, why = similarity_factor(A2)
    assert factor is None and "discriminant is 3" in why
    # <1, 1, 3>: lambda must be 3; its Hasse invariant at 3 is +1 and that of <3, 3, 3> is (3,3)_3^3 = -1
    factor, why = similarity_factor([[1, 0, 0], [0, 1, 0], [0, 0, 3]])
    assert factor is None and "p = 2, 3" in why  # the product formula: they differ at an even number of places
    assert hasse_invariant([1, 1, 3], 3) == 1 and hasse_invariant([3, 3, 3], 3) == -1


def test_an_odd_dimensional_form_similar_to_a_multiple():
    # <1, 1, 2> = <2, 2, 2> since x^2 + y^2 = 2 has the rational point (1, 1): similar with lambda = 2
    assert similarity_factor([[1, 0, 0], [0, 1, 0], [0, 0, 2]])[0] == 2
    assert similarity_factor(block(A2, A2, A2, A2, A2, [[1]]))[0] == 3  # integer A2 blocks (not the frame's A2 / 2)


def test_the_eisenstein_frame_has_no_integer_coordinates():
    # Re(z conj(w)) in the basis (1, omega) has Gram A2 / 2 = <1, 3/4> ~ <1, 3>; with the height axis <1> the
    # space is <1^6, 3^5>: lambda must be 3 (the discriminant 3^5), and at p = 3 its Hasse invariant is
    # (3,3)_3^C(5,2) = +1 while that of <3^11> is (3,3)_3^C(11,2) = -1
    half_a2 = [[1, Fraction(-1, 2)], [Fraction(-1, 2), 1]]
    factor, why = similarity_factor(_blocks([half_a2] * 5 + [[[1]]]))
    assert factor is None and "must be 3" in why and "3" in why.split("p =")[1]
    assert hasse_invariant([1] * 6 + [3] * 5, 3) == 1 and hasse_invariant([3] * 11, 3) == -1


def _blocks(matrices):
    n = sum(len(m) for m in matrices)
    out = [[Fraction(0)] * n for _ in range(n)]
    at = 0
    for m in matrices:
        for i, row in enumerate(m):
            for j, value in enumerate(row):
                out[at + i][at + j] = Fraction(value)
        at += len(m)
    return out
