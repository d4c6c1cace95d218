"""Constructions and the independent-set local search: hand-worked graphs, determinism, resume."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from hw3lib.kissing import evaluate_program, verify
from hw3lib.kissing.constructions import (CONSTRUCTIONS, best_known_construction, code_construction,
                                          constant_weight_code, d11_roots, sign_patterns, starter)
from hw3lib.kissing.search import (IndependentSet, conflict_graph, grow_independent_set, local_search, main,
                                   program_source, shell_size, shell_vectors)


def graph(n, edges):
    adj = [[] for _ in range(n)]
    for a, b in edges:
        adj[a].append(b)
        adj[b].append(a)
    return [np.array(sorted(row), dtype=np.int64) for row in adj]


# --- constructions -----------------------------------------------------------------------------


def test_starter_and_d11_roots():
    s, r = starter(), d11_roots()
    assert s.shape == (22, 11) and r.shape == (220, 11)  # 4 * C(11, 2) = 220
    assert (verify(s).min_sq_distance, verify(s).max_sq_norm) == (8, 4)  # |2e_i - 2e_j|^2 = 8
    assert (verify(r).min_sq_distance, verify(r).max_sq_norm) == (2, 2)  # |(1,1,0) - (1,0,1)|^2 = 2
    assert verify(s).valid and verify(r).valid


def test_sign_patterns_on_a_support():
    p = sign_patterns((0, 2), dimension=3)
    assert p.tolist() == [[1, 0, 1], [1, 0, -1], [-1, 0, 1], [-1, 0, -1]]


def test_constant_weight_code_reaches_the_johnson_bound():
    blocks = constant_weight_code()
    # Johnson bound: floor(11/4 * floor(10/3 * floor(9/2))) = floor(11/4 * 13) = 35.
    assert len(blocks) == 35 and len(set(blocks)) == 35
    assert all(len(set(a) & set(b)) <= 2 for a, b in itertools.combinations(blocks, 2))
    assert constant_weight_code() == blocks  # seeded: the same code every time


def test_code_construction_counts_and_validity():
    blocks = [(0, 1, 2, 3), (0, 1, 4, 5)]  # share 2 coordinates: allowed
    pts = code_construction(blocks)
    assert pts.shape == (22 + 2 * 16, 11)
    res = verify(pts)
    # (1,1,1,1,0..) vs (1,1,0,0,1,1,..): inner product 2 = N/2 -> squared distance 4 + 4 - 4 = 4 = N.
    assert res.valid and res.min_sq_distance == 4 and res.max_sq_norm == 4
    with pytest.raises(ValueError, match=r"blocks \(0, 1, 2, 3\) and \(0, 1, 2, 4\) share 3"):
        code_construction([(0, 1, 2, 3), (0, 1, 2, 4)])
    # ...and the verifier agrees those would clash: (1,1,1,1,0) . (1,1,1,0,1) = 3 > 2.
    assert not verify(np.vstack([sign_patterns((0, 1, 2, 3)), sign_patterns((0, 1, 2, 4))])).valid


def test_best_known_construction_is_582():
    pts = best_known_construction()
    res = verify(pts)
    assert res.valid and res.num_points == 582 == 22 + 16 * 35
    assert set(CONSTRUCTIONS) >= {"starter", "d11_roots", "code_582"}
    assert len(CONSTRUCTIONS["code_582"]()) == 582


# --- candidates and the conflict graph -------------------------------------------------------


def test_shell_size_matches_enumeration():
    for norm_sq, low, dim in [(1, None, 11), (2, None, 11), (4, None, 11), (5, 1, 6), (9, 4, 3)]:
        assert shell_size(norm_sq, dim, low) == len(shell_vectors(norm_sq, dim, low))
    assert shell_size(4) == 5302 and shell_size(6) == 33528


def test_shell_vectors_counts():
    assert len(shell_vectors(1)) == 22
    assert len(shell_vectors(2)) == 220  # ±e_i ± e_j
    assert len(shell_vectors(4)) == 22 + 16 * 330  # ±2e_i and (±1)^4 on C(11,4) = 330 supports
    # dimension 2, 1 <= |x|^2 <= 2: (±1, 0), (0, ±1), (±1, ±1)
    assert sorted(map(tuple, shell_vectors(2, dimension=2, min_norm_sq=1).tolist())) == sorted(
        [(1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (1, -1), (-1, 1), (-1, -1)])


def test_conflict_graph_hand_worked():
    pts = np.array([[1, 0], [0, 1], [-1, 0]])
    # squared distances: (0,1) 2, (0,2) 4, (1,2) 2
    assert [a.tolist() for a in conflict_graph(pts, 2)] == [[], [], []]
    assert [a.tolist() for a in conflict_graph(pts, 3)] == [[1], [0, 2], [1]]
    assert [a.tolist() for a in conflict_graph(pts, 5)] == [[1, 2], [0, 2], [0, 1]]


# --- the independent-set moves ---------------------------------------------------------------


def test_two_improvement_on_a_path():
    # a - x - b: {x} is maximal, the 2-improvement swaps it for {a, b}.
    state = IndependentSet(graph(3, [(0, 1), (1, 2)]), np.random.default_rng(0))
    state.add(1)
    assert state.tight.tolist() == [1, 0, 1]
    state.two_improve([1])
    assert state.members().tolist() == [0, 2] and state.tight.tolist() == [0, 2, 0]


def test_no_two_improvement_in_a_triangle():
    state = IndependentSet(graph(3, [(0, 1), (1, 2), (0, 2)]), np.random.default_rng(0))
    state.add(0)
    state.two_improve([0])
    assert state.members().tolist() == [0]


def test_perturb_keeps_the_set_independent():
    rng = np.random.default_rng(3)
    n = 40
    edges = [(a, b) for a, b in itertools.combinations(range(n), 2) if rng.random() < 0.15]
    nbrs = graph(n, edges)
    state = IndependentSet(nbrs, np.random.default_rng(1))
    state.fill()
    for _ in range(50):
        state.two_improve(state.perturb(2))
        members = set(state.members().tolist())
        assert not any(a in members and b in members for a, b in edges)
        assert all(state.tight[v] == len(set(nbrs[v].tolist()) & members) for v in range(n))


@pytest.mark.parametrize("n, edges, optimum", [
    (9, [(i, (i + 1) % 9) for i in range(9)], 4),  # cycle C9: floor(9/2)
    # Petersen graph: outer 5-cycle, inner pentagram, spokes; independence number 4.
    (10, [(i, (i + 1) % 5) for i in range(5)] + [(5 + i, 5 + (i + 2) % 5) for i in range(5)] + [(i, i + 5) for i in range(5)], 4),
])
def test_grow_independent_set_finds_the_optimum(n, edges, optimum):
    best, history, _ = grow_independent_set(graph(n, edges), seed=0, iterations=200)
    assert len(best) == optimum and history[-1]["size"] == optimum
    assert not any(a in best and b in best for a, b in edges)


# --- local_search ------------------------------------------------------------------------------


def test_local_search_from_scratch_on_the_norm4_shell():
    result = local_search(norm_sq=4, seed=1, iterations=600)
    assert result.verdict.valid and result.verdict.max_sq_norm <= 4
    assert len(result.points) >= 520  # random greedy gives ~300; 2-improvements + kicks get far higher
    assert [h["size"] for h in result.history] == sorted(h["size"] for h in result.history)
    again = local_search(norm_sq=4, seed=1, iterations=600)
    assert np.array_equal(again.points, result.points)  # deterministic for a seed


def test_local_search_resume_matches_an_uninterrupted_run(tmp_path):
    straight = local_search(norm_sq=4, seed=2, iterations=300)
    ckpt = tmp_path / "search.json"
    half = local_search(norm_sq=4, seed=2, iterations=150, checkpoint=ckpt)
    assert json.loads(ckpt.read_text())["iteration"] == 150 and half.resumed_from == 0
    resumed = local_search(norm_sq=4, seed=2, iterations=300, checkpoint=ckpt)
    assert resumed.resumed_from == 150 and resumed.iterations == 300
    assert np.array_equal(resumed.points, straight.points)
    assert [h["size"] for h in resumed.history] == [h["size"] for h in straight.history]
    with pytest.raises(ValueError, match="different search"):
        local_search(norm_sq=4, seed=3, iterations=10, checkpoint=ckpt)


def test_local_search_polishes_a_damaged_construction():
    full = best_known_construction()
    damaged = full[np.random.default_rng(0).permutation(len(full))[:500]]
    result = local_search(damaged, seed=0, iterations=20)  # norm_sq defaults to 4, the set's max norm
    assert result.verdict.valid and len(result.points) >= 582
    assert result.history[0]["size"] >= 582  # the 82 removed points are free again: refilled at once


def test_local_search_rejects_bad_initial_points():
    with pytest.raises(ValueError, match="longer than norm_sq=2"):
        local_search([[2] + [0] * 10], norm_sq=2, iterations=1)
    with pytest.raises(ValueError, match="dimension 3, expected 11"):
        local_search([[1, 0, 0]], iterations=1)
    with pytest.raises(ValueError, match="has 116380 vectors"):  # r_11(8): refused before building it
        local_search(norm_sq=8, iterations=1)
    with pytest.raises(ValueError, match="iterations, time_limit_s or target"):
        local_search(norm_sq=2, iterations=None)


# --- the stored program ----------------------------------------------------------------------


def test_program_source_refuses_invalid_sets():
    with pytest.raises(ValueError, match="refusing to write an invalid set"):
        program_source(np.array([[1] + [0] * 10, [1, 1] + [0] * 9]), "bad")


def test_write_program_end_to_end(tmp_path, capsys):
    out = tmp_path / "program.py"
    assert main(["--write-program", "--iterations", "200", "--output", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["num_points"] >= 582 and summary["construction_points"] == 582
    metrics = evaluate_program(out, timeout_s=30)
    assert metrics["validity"] == 1.0 and metrics["num_points"] == summary["num_points"]
