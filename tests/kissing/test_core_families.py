"""Cores as labelled support families: the pair rule against integer inner products, rows, text form, invariants."""

import itertools

import numpy as np
import pytest

from hw3lib.kissing.core_families import (CoreSpec, Label, all_labels, core_rows, first_conflict, invariants,
                                          label_conflicts, label_rows, labels_compatible, spec_of_rows, verify_core)


def test_the_pair_rule_matches_the_integer_inner_products_on_six_coordinates():
    labels = [l for l in all_labels() if max(l.support) <= 5]  # 15 supports x 9 labels = 135
    assert len(labels) == 135
    for a, b in itertools.combinations(labels, 2):
        worst = int((label_rows(a) @ label_rows(b).T).max())
        assert labels_compatible(a, b) == (a.support != b.support and worst <= 2), (a, b, worst)


def test_hand_worked_pairs_sharing_three_coordinates():
    plus, minus = Label((0, 1, 2, 3), (0, 1)), Label((0, 1, 2, 4), (0, -1))
    assert int((label_rows(plus) @ label_rows(minus).T).max()) == 1  # opposite signs at 0: at most -1 + 1 + 1
    assert not labels_compatible(plus, Label((0, 1, 2, 4), (0, 1)))  # (+,+,+) on {0,1,2} in both: 3
    assert not labels_compatible(plus, Label((0, 1, 2, 4), (1, -1)))  # different fixed coordinates
    assert not labels_compatible(Label((0, 1, 2, 3)), minus)  # a full support shows all 8 signs on {0,1,2}
    assert labels_compatible(Label((0, 1, 2, 3)), Label((0, 1, 4, 5)))  # two shared coordinates: at most 2


def test_the_label_graph_has_2970_labels_and_full_supports_conflict_with_every_triple_neighbour():
    conflicts = label_conflicts()
    assert conflicts.shape == (2970, 2970) and not conflicts.diagonal().any()
    # a full support meets 4 x 7 = 28 supports in 3 coordinates, each with 9 labels, plus its own 8 halves
    assert int(conflicts[0].sum()) == 28 * 9 + 8


def test_rows_sizes_and_the_exact_check():
    spec = CoreSpec.from_text("axes 0 1; full 0.1.2.3; half 4.5.6.7@4+; half 4.5.6.8@4-")
    assert spec.size == 4 + 16 + 8 + 8 == len(core_rows(spec)) and spec.composition["half"] == 2
    assert verify_core(spec) == (True, "36 rows, largest inner product between distinct rows 2 (valid)")
    bad = CoreSpec.from_text("full 0.1.2.3; half 0.1.2.4@0+")
    assert verify_core(bad)[0] is False and "largest inner product between distinct rows 3" in verify_core(bad)[1]
    assert first_conflict(bad) == (Label((0, 1, 2, 3)), Label((0, 1, 2, 4), (0, 1)))


def test_the_text_form_round_trips_and_names_what_it_cannot_read():
    spec = CoreSpec.from_text("axes 3 1; half 0.4.5.6@4-; full 0.1.2.3")
    assert spec.to_text() == "axes 1 3; full 0.1.2.3; half 0.4.5.6@4-"
    assert CoreSpec.from_text(spec.to_text()) == spec
    assert spec_of_rows(core_rows(spec)) == spec
    with pytest.raises(ValueError, match="fixed coordinate"):
        CoreSpec.from_text("half 0.1.2.3@5+")
    with pytest.raises(ValueError, match="four distinct"):
        CoreSpec.from_text("full 0.1.2")


def test_invariants_do_not_see_coordinate_permutations_and_signs_but_see_structure():
    spec = CoreSpec.from_text("axes 0 1; full 0.1.2.3; half 4.5.6.7@4+; half 4.5.6.8@4-")
    perm, signs = [3, 0, 1, 2, 8, 7, 6, 5, 4, 10, 9], np.array([1, -1, 1, 1, -1, 1, 1, 1, 1, 1, -1])
    rows = core_rows(spec)[:, np.argsort(perm)] * signs  # coordinate i moves to perm[i], then signs flip
    moved = spec_of_rows(rows)
    assert moved != spec and invariants(moved) == invariants(spec)
    other = CoreSpec.from_text("axes 0 1; full 0.1.2.3; half 4.5.6.7@4+; half 4.5.8.9@4-")
    assert invariants(other) != invariants(spec)  # the halves share 2 coordinates, not 3
