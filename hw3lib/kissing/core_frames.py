"""Structured core candidates: frames that decide which supports may carry rows, their heaviest families, a cavity proxy.

The search space is guided by the published composition of the 600-point core (../shared/data/kissing_records/
README.md and issue 64: facts, not coordinates): some coordinates carry no axis rows, halves fix the sign of one
coordinate, and the supports left out must be left out together so that a cavity opens. A `Frame` says that
with three numbers, and a frame's cores are the heaviest independent sets of the label graph it allows
(`core_families`: 2,970 labelled supports, conflicts decided exactly):

- `axes` a: the axis rows +-2 e_i sit on coordinates 0..a-1; the other 11 - a coordinates carry none. Which
  coordinates they are does not matter (coordinate permutations), so the first a are taken.
- halves fix the sign of the last coordinate z = 10, one of the non-axis coordinates (any non-axis coordinate is
  equivalent), and may contain `half_extra` (0 or 1) further non-axis coordinates besides z. Halves that fix the
  same z with opposite signs may share three coordinates (the product there is capped at -1); with the same
  sign they may share at most two.
- full supports may contain up to `full_extra` (0, 1 or 2) non-axis coordinates other than z, and z itself only
  if `full_z`. A full support that contains a non-axis coordinate x puts rows at 60 degrees from +-e_x, so
  forbidding such supports is what keeps room around the non-axis directions.

Within a frame `frame_cores` draws maximal families by the weighted local search
(`weighted_independent_set.local_search`, weight = rows, a little noise so draws differ) and keeps one core per
invariant class (`core_families.invariants`, unchanged by coordinate permutations and sign changes). For a = 8,
halves on z plus three axis coordinates and fulls with at most one of the two other non-axis coordinates, the
heaviest family has 8 x 2 + 22 x 16 + 16 x 8 = 496 rows: 4 packings of 8 triples on the 8 axis coordinates
(fulls with x, fulls with y, halves z+, halves z-) and 6 quadruples of axis coordinates take all 56 triples.

`cavity_proxy` scores a core before the expensive remainder optimizer: over the 21,626 ternary directions
t in {-1, 0, 1}^11 with |t|^2 <= 5, how many are at angle >= 60 degrees from every core row (t.c <= |t| |c| / 2
with |c| = 2), how many strictly, and how many of the free ones a local search packs pairwise at >= 60 degrees.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hw3lib.kissing.constructions import DIMENSION
from hw3lib.kissing.core_families import CoreSpec, Label, all_labels, core_rows, label_conflicts

HALF_COORDINATE = DIMENSION - 1  # z: the non-axis coordinate whose sign the halves fix


@dataclass(frozen=True)
class Frame:
    """Which labelled supports a core may use (module docstring)."""

    axes: int
    full_extra: int
    full_z: bool
    half_extra: int

    @property
    def name(self) -> str:
        return f"a{self.axes}-f{self.full_extra}{'z' if self.full_z else ''}-h{self.half_extra}"

    def allows(self, label: Label) -> bool:
        outside = set(label.support) - set(range(self.axes))  # the non-axis coordinates of the support
        extra = len(outside - {HALF_COORDINATE})
        if label.fixed is None:
            return extra <= self.full_extra and (self.full_z or HALF_COORDINATE not in outside)
        return label.fixed[0] == HALF_COORDINATE and extra <= self.half_extra


def frames(axes_options=(7, 8, 9)) -> list[Frame]:
    """Every frame with these axis counts, one per symmetry class (extra coordinates beyond those that exist
    would repeat a frame, so they are skipped)."""
    found = []
    for axes, full_extra, full_z, half_extra in itertools.product(axes_options, (0, 1, 2), (False, True), (0, 1)):
        free = DIMENSION - axes - 1  # non-axis coordinates other than z
        if full_extra <= free and half_extra <= free:
            found.append(Frame(axes, full_extra, full_z, half_extra))
    return found


def frame_cores(frame: Frame, draws: int, iterations: int = 300, seed: int = 0) -> list[CoreSpec]:
    """The distinct (by invariants) heaviest families of `draws` seeded local searches in the frame, heaviest first."""
    from hw3lib.kissing.core_families import invariants
    from hw3lib.kissing.weighted_independent_set import local_search

    labels = all_labels()
    allowed = [i for i, label in enumerate(labels) if frame.allows(label)]
    conflicts = label_conflicts()[np.ix_(allowed, allowed)]  # [A, A]
    rows = np.array([labels[i].rows for i in allowed], dtype=np.int64)  # [A]
    found = {}
    for draw in range(draws):
        rng = np.random.default_rng([seed, draw])
        # weight = rows, scaled so the noise (0..2) only breaks ties between equally heavy families
        weights = 16 * rows + rng.integers(0, 3, size=len(rows))  # [A]
        chosen = local_search(conflicts, weights, iterations=iterations, seed=int(rng.integers(1 << 31)))
        spec = CoreSpec.of(range(frame.axes), [labels[allowed[i]] for i in chosen])
        key = repr(sorted(invariants(spec).items()))
        if key not in found or found[key].size < spec.size:
            found[key] = spec
    return sorted(found.values(), key=lambda s: (-s.size, s.to_text()))


@lru_cache(maxsize=1)
def ternary_directions() -> np.ndarray:
    """[21626, 11] int64: the vectors of {-1, 0, 1}^11 with 1 <= |t|^2 <= 5."""
    rows = [t for t in itertools.product((-1, 0, 1), repeat=DIMENSION) if 0 < sum(map(abs, t)) <= 5]
    return np.array(rows, dtype=np.int64)


def cavity_proxy(spec: CoreSpec, iterations: int = 300, pack: bool = True) -> dict:
    """{free, strict, packed, estimate}: ternary directions at angle >= 60 degrees from every core row, strictly
    more than 60, a packing of the free ones pairwise >= 60 degrees apart, and rows + packed (pack=False: free
    and strict only; the packing's [f, f] matrix is large for a small core)."""
    from hw3lib.kissing.weighted_independent_set import local_search

    T = ternary_directions()  # [N, 11]
    norms_sq = (T * T).sum(axis=1)  # [N]
    worst = (T @ core_rows(spec).T).max(axis=1, initial=-4)  # [N] largest t.c, exact integers
    # cos(t, c) <= 1/2  <=>  t.c <= |t| (|c| = 2)  <=>  t.c <= 0 or (t.c)^2 <= |t|^2, kept in integers
    free = (worst <= 0) | (worst * worst <= norms_sq)
    strict = (worst <= 0) | (worst * worst < norms_sq)
    if not pack:
        return {"free": int(free.sum()), "strict": int(strict.sum())}
    F = T[free]  # [f, 11]
    G = F @ F.T  # [f, f] t.u
    nf = norms_sq[free]
    too_close = (G > 0) & (4 * G * G > nf[:, None] * nf[None, :])  # cos > 1/2, exactly
    packed = local_search(too_close, np.ones(len(F), dtype=np.int64), iterations=iterations) if len(F) else []
    return {"free": int(free.sum()), "strict": int(strict.sum()), "packed": len(packed),
            "estimate": spec.size + len(packed)}
