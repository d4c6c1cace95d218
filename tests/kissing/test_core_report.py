"""The comparison of a core with the published one: a signed coordinate permutation, found and checked on rows."""

import numpy as np

from hw3lib.kissing.core_families import CoreSpec, core_rows, spec_of_rows
from hw3lib.kissing.core_frames import Frame, frame_cores
from hw3lib.kissing.core_report import compare, published_core_spec, signed_permutation

SMALL = CoreSpec.from_text("axes 0 1; full 0.1.2.3; half 4.5.6.7@4+; half 4.5.6.8@4-")


def test_a_moved_core_is_mapped_back_exactly():
    perm, signs = [3, 0, 1, 2, 8, 7, 6, 5, 4, 10, 9], np.array([1, -1, 1, 1, 1, 1, 1, 1, -1, 1, -1])
    moved = spec_of_rows((core_rows(SMALL)[:, np.argsort(perm)]) * signs)  # coordinate i moves to perm[i], signs flip
    found = signed_permutation(SMALL, moved)
    assert found is not None
    # coordinate 4, the only one both halves fix, must go to 8; axes 0 and 1 to 3 and 0 (in either order). Swapping
    # 7 and 8 with the sign of 4 flipped leaves SMALL unchanged, so the signs found need not be the ones used
    assert found[0][4] == 8 and sorted(found[0][:2]) == [0, 3]
    rows = np.zeros_like(core_rows(SMALL))
    rows[:, found[0]] = core_rows(SMALL)  # applied by hand: coordinate i -> found[0][i], then the signs
    assert sorted(map(tuple, (rows * found[1]).tolist())) == sorted(map(tuple, core_rows(moved).tolist()))


def test_cores_that_differ_are_not_mapped():
    other = CoreSpec.from_text("axes 0 1; full 0.1.2.3; half 4.5.6.7@4+; half 4.5.8.9@4-")  # halves share 2
    assert signed_permutation(SMALL, other) is None
    # the same supports, but both halves fix 4 with the same sign: no sign change makes one the other
    same_sign = CoreSpec.from_text("axes 0 1; full 0.1.2.3; half 4.5.6.7@4+; half 4.5.6.8@4+")
    assert signed_permutation(SMALL, same_sign) is None


def test_the_heaviest_core_of_the_8_axis_frame_is_the_published_core_up_to_symmetry():
    ours = frame_cores(Frame(8, 1, False, 0), draws=2, iterations=1000)[0]
    theirs = published_core_spec()  # read here, after the search and apart from it
    assert compare(ours, theirs)["same_invariants"] and signed_permutation(ours, theirs) is not None
