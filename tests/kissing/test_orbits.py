"""Exact group elements, closures and orbits (hw3lib.kissing.orbits), with hand-counted orders and orbits."""

import numpy as np
import pytest

from hw3lib.kissing.orbits import (Element, GroupTooLarge, closure, compose, group_order, identity, orbit_labels,
                                   orbits, reflection, signed_permutation)
from hw3lib.kissing.search import shell_vectors


def hyperoctahedral(n, even=False):
    """S_n on coordinates plus one sign change (two for the even-sign subgroup W(D_n))."""
    signs = [-1, -1 if even else 1] + [1] * (n - 2)
    return [signed_permutation([1, 0] + list(range(2, n))), signed_permutation(list(range(1, n)) + [0]),
            signed_permutation(range(n), signs)]


def apply(g: Element, x):
    moved = g.numerator @ np.asarray(x)
    assert np.all(moved % g.denominator == 0)
    return tuple(int(v) for v in moved // g.denominator)


def test_elements_are_exact_orthogonal_matrices():
    r = reflection([1, 1, 1, 1])  # x - <x, r> r / 2: denominator 2 after reduction
    assert r.denominator == 2 and r.is_orthogonal()
    assert apply(r, (2, 0, 0, 0)) == (1, -1, -1, -1)
    assert compose(r, r).key() == identity(4).key()  # a reflection is an involution, exactly
    p = signed_permutation([1, 2, 0], [1, -1, 1])
    assert apply(p, (5, 6, 7)) == (7, 5, -6)
    assert p.is_orthogonal() and not Element.make([[1, 1], [0, 1]]).is_orthogonal()
    with pytest.raises(ValueError, match="permutation"):
        signed_permutation([0, 0, 1])


def test_closure_orders_match_the_known_groups():
    assert group_order(hyperoctahedral(3)) == 48  # 2^3 * 3!
    assert group_order(hyperoctahedral(4, even=True)) == 192  # W(D4) = 2^3 * 4!
    # W(F4): W(B4) and the rational reflection in (1,1,1,1); order 1152, entries in Z[1/2]
    assert group_order(hyperoctahedral(4) + [reflection([1, 1, 1, 1])]) == 1152
    with pytest.raises(GroupTooLarge):
        closure(hyperoctahedral(5), limit=100)
    assert group_order(hyperoctahedral(5), limit=100) is None


def test_orbits_of_shells_are_the_hand_counted_ones():
    norm2 = shell_vectors(2, 4)  # the 24 roots of D4
    assert [len(o) for o in orbits(norm2, hyperoctahedral(4))] == [24]
    norm4 = shell_vectors(4, 4)  # 8 vectors (+-2, 0, 0, 0) and 16 of the form (+-1)^4
    assert sorted(len(o) for o in orbits(norm4, hyperoctahedral(4))) == [8, 16]
    assert sorted(len(o) for o in orbits(norm4, hyperoctahedral(4, even=True))) == [8, 8, 8]  # even/odd minus signs
    # the reflection in (1,1,1,1) joins (2,0,0,0) to (1,-1,-1,-1): one orbit of 24 (the F4 root shell)
    assert [len(o) for o in orbits(norm4, hyperoctahedral(4) + [reflection([1, 1, 1, 1])])] == [24]


def test_an_orbit_that_leaves_the_pool_is_dropped():
    axes = np.array([v for v in shell_vectors(4, 4) if np.count_nonzero(v) == 1])  # (+-2, 0, 0, 0) only
    labels = orbit_labels(axes, hyperoctahedral(4) + [reflection([1, 1, 1, 1])])
    assert np.all(labels == -1) and orbits(axes, hyperoctahedral(4) + [reflection([1, 1, 1, 1])]) == []
    halves = np.array([[1, 1, 0, 0]])  # the reflection in (1,1,0,1) sends it to non-integers
    assert orbit_labels(halves, [reflection([1, 1, 0, 1])]).tolist() == [-1]


def test_orbit_labels_agree_with_the_whole_group_applied():
    rng = np.random.default_rng(3)
    gens = [signed_permutation(rng.permutation(5).tolist(), rng.choice([-1, 1], 5).tolist()) for _ in range(2)]
    group = closure(gens)
    pool = shell_vectors(3, 5)
    labels = orbit_labels(pool, gens)
    index = {tuple(v): i for i, v in enumerate(pool.tolist())}
    for i, x in enumerate(pool.tolist()):
        orbit = {index[apply(g, x)] for g in group}
        assert labels[i] == min(orbit)
        assert set(np.flatnonzero(labels == labels[i]).tolist()) == orbit


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="repeated"):
        orbit_labels(np.array([[1, 0], [1, 0]]), [identity(2)])
    with pytest.raises(ValueError, match="dimension"):
        orbit_labels(np.array([[1, 0, 0]]), [identity(2)])
    with pytest.raises(ValueError, match="denominator"):
        Element.make([[1]], 0)
    assert [g.key() for g in closure([identity(3)])] == [identity(3).key()]  # the trivial group is just itself
