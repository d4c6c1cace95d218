"""The layered orbit search: known optimal configurations from their symmetry groups, the 582 frame, exactness."""

import numpy as np
import pytest

from hw3lib.kissing.groups import PERMUTATION_GROUPS, families, invariant_sign_code, monomial
from hw3lib.kissing.layered import (TooManyOrbits, cross_conflicts, frame_points, layered_search, orbit_nodes,
                                    orbit_union, rational_pool)
from hw3lib.kissing.orbits import group_order, reflection, signed_permutation
from hw3lib.kissing.search import shell_vectors
from hw3lib.kissing.verify import verify


def signed_permutations(n, even=False):
    return [signed_permutation([1, 0] + list(range(2, n))), signed_permutation(list(range(1, n)) + [0]),
            signed_permutation(range(n), [-1, -1 if even else 1] + [1] * (n - 2))]


def test_the_24_cell_from_the_signed_permutations_of_four_coordinates():
    result = orbit_union(shell_vectors(2, 4), signed_permutations(4), threshold=1)  # |x|^2 = 2, <x, y> <= 1
    assert (result.weight, result.optimal) == (24, True)
    assert verify(result.points, dimension=4).valid and len(result.points) == 24


@pytest.mark.parametrize("with_reflection", [False, True])
def test_the_240_roots_of_e8_from_w_d8_and_from_w_e8(with_reflection):
    # rational vectors x / 2 of squared norm 2 in R^8: integer vectors of squared norm 8, inner products <= 4
    gens = signed_permutations(8, even=True) + ([reflection([1] * 8)] if with_reflection else [])
    result = orbit_union(shell_vectors(8, 8), gens, threshold=4)
    assert (result.weight, result.optimal) == (240, True)
    assert verify(result.points, dimension=8).valid
    # the optimum is the D8 roots (112) and one of the two half-integer orbits (128); W(E8) merges them
    assert sorted(len(result.nodes.members[i]) for i in result.chosen) == ([240] if with_reflection else [112, 128])


def test_frame_points_have_the_frame_geometry():
    equator = np.array([[2] + [0] * 9, [0, 2] + [0] * 8])
    tropic = np.array([[1, 1, 1] + [0] * 7])
    points = frame_points(equator, tropic, scale=1)
    assert points.shape == (2 + 2 + 2, 11)
    assert set((points * points).sum(axis=1).tolist()) == {4}
    gram = points @ points.T
    assert gram[~np.eye(len(points), dtype=bool)].max() <= 2 and verify(points).valid


def test_the_sign_group_on_integer_vectors_recovers_the_582_construction():
    # The sign changes alone (order 1024): orbits are the 16 sign patterns of one support, so a union of
    # orbits is the constant-weight-code construction, whose best is 22 + 16 * 35 = 582 (the Johnson bound)
    result = layered_search(list(monomial("trivial", "all signs").generators), scale=1, deadline_s=6)
    assert result.valid and result.size == 582
    assert result.size == 2 + result.equator_size + 2 * result.tropic_size
    assert verify(result.points).valid and result.points.dtype.kind == "i"


def test_a_group_with_no_tropic_room_is_reported_exactly():
    # PGL(2, 9) with all signs: its integer pool holds a 500-point equator (a Steiner system S(3, 4, 10)
    # and the 20 axes) and no self-compatible tropic orbit; the branch and bound proves that optimal
    result = layered_search(list(monomial("pgl2_9", "all signs").generators), scale=1, deadline_s=20)
    assert (result.size, result.equator_size, result.tropic_size, result.optimal) == (502, 500, 0, True)


def test_half_integer_pools_keep_one_parity_per_block():
    pool = rational_pool(3, 2, parity_blocks=(8, 2))  # |x / 2|^2 = 3
    assert len(pool) and np.all((pool * pool).sum(axis=1) == 12)
    assert np.all(pool[:, :8] % 2 == pool[:, :1] % 2) and np.all(pool[:, 8:] % 2 == pool[:, 8:9] % 2)
    halves = pool[pool[:, 0] % 2 == 1]  # e.g. (1/2)(+-1, ..., +-1 | +-2, 0): eight halves and a +-1
    assert len(halves) == 2**8 * 4 and not np.any(halves[:, 8:] % 2)
    assert not rational_pool(3, 2, parity_blocks=(8, 2)).flags.writeable  # cached, shared: read-only


def test_an_orbit_graph_over_the_limit_is_refused_before_the_search():
    with pytest.raises(TooManyOrbits, match="max_vertices=10"):
        layered_search(list(monomial("trivial", "all signs").generators), scale=1, max_vertices=10)


@pytest.mark.parametrize("group", ["cyclic10", "s5_pairs"])
def test_orbit_conflicts_agree_with_every_pair_checked(group):
    """One representative against a whole orbit decides every pair of points (the group keeps inner products)."""
    gens = list(monomial(group, "-I").generators)
    equator = orbit_nodes(rational_pool(4, 1), gens, 2)
    tropic = orbit_nodes(rational_pool(3, 1), gens, 1)
    for a, b, limit in ((equator, equator, 2), (tropic, tropic, 1), (tropic, equator, 2)):
        fast = cross_conflicts(a, b, limit)
        for i, members_a in enumerate(a.members):
            slow = [bool((a.pool[members_a] @ b.pool[m].T).max() > limit) for m in b.members]  # every pair of points
            assert fast[i].tolist() == slow, (group, i)


def test_group_families_are_exact_and_of_the_stated_orders():
    orders = {name: group_order([signed_permutation(p) for p in make()]) for name, make in PERMUTATION_GROUPS.items()
              if make()}
    assert orders == {"cyclic10": 10, "dihedral10": 20, "c5xc2": 10, "agl1_5x2": 40, "a5_pairs": 60,
                      "s5_pairs": 120, "psl2_9": 360, "pgl2_9": 720, "agl3_2": 1344, "agl3_2+swap": 2688}
    assert len(invariant_sign_code(PERMUTATION_GROUPS["cyclic10"](), [[1] * 5 + [0] * 5])) == 6
    specs = families(random_groups=2)
    assert len({s.name for s in specs}) == len(specs)  # the search log is keyed by name
    assert {s.family for s in specs} == {"monomial", "reflection", "random"}
    for spec in specs:
        assert all(g.dimension == 10 and g.is_orthogonal() for g in spec.generators), spec.name
