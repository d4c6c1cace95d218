"""Frames of the structured core search: which labels they allow, their heaviest family, the cavity proxy."""

import numpy as np

from hw3lib.kissing.core_families import CoreSpec, Label, core_rows, invariants, verify_core
from hw3lib.kissing.core_frames import Frame, cavity_proxy, frame_cores, frames, ternary_directions

PUBLISHED_LIKE = Frame(axes=8, full_extra=1, full_z=False, half_extra=0)


def test_a_frame_allows_only_its_supports():
    # axes 0..7; x, y = 8, 9; z = 10 (the halves' fixed coordinate)
    assert PUBLISHED_LIKE.allows(Label((0, 1, 2, 3))) and PUBLISHED_LIKE.allows(Label((0, 1, 2, 8)))
    assert not PUBLISHED_LIKE.allows(Label((0, 1, 8, 9)))  # two non-axis coordinates besides z
    assert not PUBLISHED_LIKE.allows(Label((0, 1, 2, 10)))  # a full support on z
    assert PUBLISHED_LIKE.allows(Label((0, 1, 2, 10), (10, -1)))
    assert not PUBLISHED_LIKE.allows(Label((0, 1, 2, 10), (0, 1)))  # a half must fix z, not an axis coordinate
    assert not PUBLISHED_LIKE.allows(Label((0, 1, 8, 10), (10, 1)))  # a half with x besides z
    assert Frame(8, 1, False, 1).allows(Label((0, 1, 8, 10), (10, 1)))


def test_the_frames_are_counted_once_per_symmetry_class():
    # a = 7 and 8 leave 3 and 2 non-axis coordinates besides z: 3 x 2 x 2 = 12 frames each; a = 9 leaves one, so
    # full_extra 2 does not exist: 2 x 2 x 2 = 8
    assert len(frames((7,))) == len(frames((8,))) == 12 and len(frames((9,))) == 8 and len(frames()) == 32
    assert PUBLISHED_LIKE.name == "a8-f1-h0" and PUBLISHED_LIKE in frames((8,))


def test_the_8_axis_frame_is_a_tight_design_of_496_rows():
    # the 56 triples of the 8 axis coordinates: 4 packings of 8 (fulls with x, fulls with y, halves z+, halves z-)
    # and 6 quadruples x 4 triples; rows 8 x 2 + 22 x 16 + 16 x 8 = 496
    best = frame_cores(PUBLISHED_LIKE, draws=2, iterations=1000)[0]
    assert best.composition == {"axes": 8, "full": 22, "half": 16, "rows": 496} and verify_core(best)[0]
    degrees = invariants(best)["coordinate_degrees"]  # (axis, in full, in half, fixed), sorted
    assert degrees == [[0, 0, 16, 16], [0, 8, 0, 0], [0, 8, 0, 0]] + [[1, 9, 6, 0]] * 8
    proxy = cavity_proxy(best)  # room: 474 ternary directions touch no core row closer than 60 degrees, 148 strictly
    assert (proxy["free"], proxy["strict"]) == (474, 148) and proxy["estimate"] == 496 + proxy["packed"] > 496


def test_the_cavity_proxy_counts_ternary_directions_by_hand():
    assert len(ternary_directions()) == 22 + 55 * 4 + 165 * 8 + 330 * 16 + 462 * 32 == 21626
    # the 22 axis rows: t.c <= 2 with equality on every t, so t is free iff 2 <= |t| (|t|^2 4 or 5), strictly iff
    # |t|^2 = 5: 330 x 16 + 462 x 32 free, 462 x 32 strictly
    axes = CoreSpec.from_text("axes 0 1 2 3 4 5 6 7 8 9 10")
    assert cavity_proxy(axes, pack=False) == {"free": 330 * 16 + 462 * 32, "strict": 462 * 32}
    # one support more, full 0.1.2.3: its best pattern gives t.c = k, the number of t's nonzero coordinates in
    # 0..3, so t stays free iff k <= 2: |t|^2 4: 330 - 28 (k 3) - 1 (k 4) = 301 supports x 16; |t|^2 5: 462 - 84 - 7
    # = 371 supports x 32, all strict (t.c <= 2 < sqrt 5)
    one = CoreSpec.from_text("axes 0 1 2 3 4 5 6 7 8 9 10; full 0.1.2.3")
    assert cavity_proxy(one, pack=False) == {"free": 301 * 16 + 371 * 32, "strict": 371 * 32}
    T = ternary_directions()
    cosines = (T @ core_rows(one).T) / (2 * np.linalg.norm(T, axis=1, keepdims=True))  # the rule, in floats
    assert int((cosines.max(axis=1) <= 0.5 + 1e-12).sum()) == 301 * 16 + 371 * 32

