"""Maximum-weight independent sets: hand-worked graphs, exhaustive comparison, the local search."""

import itertools

import numpy as np
import pytest

from hw3lib.kissing.weighted_independent_set import local_search, max_weight_independent_set


def graph(n, edges):
    m = np.zeros((n, n), dtype=bool)
    for a, b in edges:
        m[a, b] = m[b, a] = True
    return m


def independent(conflict, vertices):
    return not any(conflict[a, b] for a, b in itertools.combinations(vertices, 2))


def brute_force(conflict, weights):
    n = len(weights)
    return max(sum(weights[v] for v in s) for r in range(n + 1) for s in itertools.combinations(range(n), r)
               if independent(conflict, s))


def test_hand_worked_graphs():
    path = graph(3, [(0, 1), (1, 2)])
    assert max_weight_independent_set(path, [2, 3, 2]).vertices == [0, 2]  # 4 beats the middle's 3
    assert max_weight_independent_set(path, [2, 5, 2]).vertices == [1]  # 5 beats 4
    star = graph(4, [(0, 1), (0, 2), (0, 3)])
    result = max_weight_independent_set(star, [5, 1, 1, 1])
    assert (result.vertices, result.weight, result.optimal) == ([0], 5, True)
    assert max_weight_independent_set(np.zeros((0, 0), dtype=bool), []).weight == 0


@pytest.mark.parametrize("seed", range(6))
def test_branch_and_bound_matches_exhaustive_search(seed):
    rng = np.random.default_rng(seed)
    n = 13
    conflict = np.triu(rng.random((n, n)) < 0.3, 1)
    conflict = conflict | conflict.T
    weights = rng.integers(1, 20, size=n).tolist()
    result = max_weight_independent_set(conflict, weights, local_iterations=0)
    assert result.optimal and independent(conflict, result.vertices)
    assert result.weight == sum(weights[v] for v in result.vertices) == brute_force(conflict, weights)


def test_local_search_finds_the_optimum_of_a_structured_graph_and_stays_independent():
    # two disjoint 5-cycles weighted 1..5 and 5..1: an independent set holds at most two vertices of each cycle,
    # and the best non-adjacent pair weighs 3 + 5 = 8 in both, so the optimum is 16 (checked exhaustively too)
    edges = [(i, (i + 1) % 5) for i in range(5)] + [(5 + i, 5 + (i + 1) % 5) for i in range(5)]
    conflict = graph(10, edges)
    weights = [1, 2, 3, 4, 5, 5, 4, 3, 2, 1]
    found = local_search(conflict, weights, iterations=200, seed=0)
    assert independent(conflict, found)
    assert sum(weights[v] for v in found) == brute_force(conflict, weights) == 16


def test_a_cut_off_search_says_it_is_not_proved_optimal():
    rng = np.random.default_rng(0)
    conflict = np.triu(rng.random((60, 60)) < 0.2, 1)
    conflict = conflict | conflict.T
    result = max_weight_independent_set(conflict, [1] * 60, node_limit=3, local_iterations=0)
    assert not result.optimal and independent(conflict, result.vertices)


def test_a_deadline_stops_the_branch_and_bound_and_says_so():
    rng = np.random.default_rng(1)
    conflict = np.triu(rng.random((400, 400)) < 0.05, 1)
    conflict = conflict | conflict.T
    result = max_weight_independent_set(conflict, rng.integers(1, 9, size=400), deadline_s=0.2, local_iterations=0)
    assert not result.optimal and independent(conflict, result.vertices)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="symmetric"):
        max_weight_independent_set(np.array([[False, True], [False, False]]), [1, 1])
    with pytest.raises(ValueError, match="positive"):
        max_weight_independent_set(graph(2, []), [1, 0])
