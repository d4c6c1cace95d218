"""Cores on the norm-4 shell of Z^11 as labelled support families: axis rows, full supports, half supports.

A core is described by
- `axes`: coordinates i whose two rows +-2 e_i are in the core;
- `full`: four-coordinate supports carrying all 16 sign patterns (+-1)^4;
- `half`: supports carrying the 8 patterns whose sign on one coordinate c is fixed to s, written (support, c, s).

Every row has squared norm 4, so the core is valid iff every pairwise inner product is <= 2. Worked out by
hand (and checked row by row in tests/kissing/test_core_families.py):
- axis rows against anything other than themselves give 0, +-2 or -4; two patterns on one support give
  4 - 2 (number of sign differences) <= 2; supports sharing at most 2 coordinates give at most 2;
- two supports sharing exactly 3 coordinates U give +-1 or +-3, and +3 exactly when two patterns agree on
  all of U. A full support shows all 8 sign choices on U, so it may share 3 coordinates with nothing. A half
  fixing c shows 4 choices on U when c is in U (c's sign fixed) and all 8 otherwise; two halves then avoid
  +3 iff they fix the same coordinate c in U with opposite signs (opposite signs at c cap the product there
  at -1, so the total is at most 1). Any other pair sharing 3 coordinates conflicts.
So validity is a property of pairs of labelled supports (`labels_compatible`), and a core is an independent
set of the label graph (330 supports x (1 full + 8 halves) = 2,970 labels, `label_conflicts`).

`CoreSpec` is the frozen description (saved in logs as text, `to_text` / `from_text`), `core_rows` its integer
rows, `verify_core` the exact check of those rows, and `invariants` what the report compares between two cores
(the support hypergraph up to coordinate permutation and sign: intersection counts, degrees, labels).
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hw3lib.kissing.constructions import DIMENSION, sign_patterns

FULL = "full"
SUPPORTS = tuple(itertools.combinations(range(DIMENSION), 4))  # the 330 four-coordinate supports


@dataclass(frozen=True, order=True)
class Label:
    """One labelled support: all 16 patterns (fixed is None) or the 8 with coordinate fixed[0] of sign fixed[1]."""

    support: tuple[int, ...]
    fixed: tuple[int, int] | None = None

    @property
    def rows(self) -> int:
        return 16 if self.fixed is None else 8


@lru_cache(maxsize=1)
def all_labels() -> tuple[Label, ...]:
    """Every labelled support: 330 full ones, then 330 x 8 halves (each coordinate of the support, each sign)."""
    full = [Label(s) for s in SUPPORTS]
    halves = [Label(s, (c, sign)) for s in SUPPORTS for c in s for sign in (1, -1)]
    return tuple(full + halves)


def labels_compatible(a: Label, b: Label) -> bool:
    """Whether the rows of two labelled supports keep every inner product <= 2 (see the module docstring)."""
    if a.support == b.support:
        return False  # one label per support: two halves with opposite signs are the full support
    shared = set(a.support) & set(b.support)
    if len(shared) <= 2:
        return True
    if a.fixed is None or b.fixed is None:
        return False
    (ca, sa), (cb, sb) = a.fixed, b.fixed
    return ca == cb and ca in shared and sa == -sb


@lru_cache(maxsize=1)
def label_conflicts() -> np.ndarray:
    """[L, L] bool: True where two labels of `all_labels()` cannot both be in a core (the diagonal is False)."""
    labels = all_labels()
    member = np.zeros((len(labels), DIMENSION), dtype=np.int64)  # [L, 11] support indicator
    for i, label in enumerate(labels):
        member[i, list(label.support)] = 1
    shared = member @ member.T  # [L, L] shared coordinates
    conflict = shared >= 3
    for i, j in np.argwhere(np.triu(shared == 3)):
        conflict[i, j] = conflict[j, i] = not labels_compatible(labels[i], labels[j])
    np.fill_diagonal(conflict, False)
    return conflict


@dataclass(frozen=True)
class CoreSpec:
    """A core: axis coordinates and labelled supports (sorted, so equal cores compare equal)."""

    axes: tuple[int, ...]
    labels: tuple[Label, ...]

    @classmethod
    def of(cls, axes, labels) -> CoreSpec:
        return cls(tuple(sorted(int(a) for a in axes)), tuple(sorted(labels)))

    @property
    def size(self) -> int:
        return 2 * len(self.axes) + sum(label.rows for label in self.labels)

    @property
    def composition(self) -> dict:
        halves = sum(label.fixed is not None for label in self.labels)
        return {"axes": len(self.axes), "full": len(self.labels) - halves, "half": halves, "rows": self.size}

    def to_text(self) -> str:
        """E.g. "axes 0 1 2; full 0.1.2.3; half 0.4.5.6@4+" (the log's and the LLM's form)."""
        parts = ["axes " + " ".join(map(str, self.axes))]
        parts += [("full " if l.fixed is None else "half ") + ".".join(map(str, l.support))
                  + ("" if l.fixed is None else f"@{l.fixed[0]}{'+' if l.fixed[1] > 0 else '-'}") for l in self.labels]
        return "; ".join(parts)

    @classmethod
    def from_text(cls, text: str) -> CoreSpec:
        """Parse `to_text`'s form; raises ValueError naming the part it cannot read."""
        axes, labels = [], []
        for part in (p.strip() for p in text.split(";") if p.strip()):
            kind, _, rest = part.partition(" ")
            if kind == "axes":
                axes = [int(a) for a in rest.split()]
            elif kind in ("full", "half"):
                labels.append(_parse_label(kind, rest.strip()))
            else:
                raise ValueError(f"core part {part!r}: expected 'axes ...', 'full a.b.c.d' or 'half a.b.c.d@c+'")
        if any(not 0 <= a < DIMENSION for a in axes) or len(set(axes)) != len(axes):
            raise ValueError(f"axes {axes}: distinct coordinates in 0..{DIMENSION - 1} expected")
        return cls.of(axes, labels)


def _parse_label(kind: str, text: str) -> Label:
    support_text, _, fixed_text = text.partition("@")
    support = tuple(sorted(int(c) for c in support_text.split(".")))
    if len(set(support)) != 4 or not all(0 <= c < DIMENSION for c in support):
        raise ValueError(f"support {support_text!r}: four distinct coordinates in 0..{DIMENSION - 1} expected")
    if kind == "full":
        if fixed_text:
            raise ValueError(f"full support {text!r} takes no fixed coordinate")
        return Label(support)
    if len(fixed_text) < 2 or fixed_text[-1] not in "+-" or int(fixed_text[:-1]) not in support:
        raise ValueError(f"half support {text!r}: write the fixed coordinate (one of the support) and sign, e.g. @4+")
    return Label(support, (int(fixed_text[:-1]), 1 if fixed_text[-1] == "+" else -1))


def label_rows(label: Label) -> np.ndarray:
    """The integer rows of one labelled support: [16 or 8, 11]."""
    rows = sign_patterns(label.support)  # [16, 11]
    if label.fixed is None:
        return rows
    coordinate, sign = label.fixed
    return rows[rows[:, coordinate] == sign]  # [8, 11]


def core_rows(spec: CoreSpec) -> np.ndarray:
    """The core's integer rows, squared norm 4: [spec.size, 11] int64 (axis rows first)."""
    eye = 2 * np.eye(DIMENSION, dtype=np.int64)[list(spec.axes)]  # [a, 11]
    parts = [eye, -eye] + [label_rows(label) for label in spec.labels]
    return np.vstack(parts) if parts else np.zeros((0, DIMENSION), dtype=np.int64)


def first_conflict(spec: CoreSpec) -> tuple[Label, Label] | None:
    """Two labels of the spec that cannot coexist, or None."""
    for a, b in itertools.combinations(spec.labels, 2):
        if not labels_compatible(a, b):
            return a, b
    return None


def verify_core(spec: CoreSpec) -> tuple[bool, str]:
    """Exact check of the core's rows: distinct rows, every inner product <= 2 (integers, no rule assumed)."""
    rows = core_rows(spec)
    gram = rows @ rows.T  # [n, n] exact in int64
    np.fill_diagonal(gram, -4)
    worst = int(gram.max(initial=-4))
    ok = worst <= 2 and len({tuple(r) for r in rows.tolist()}) == len(rows)
    return ok, f"{len(rows)} rows, largest inner product between distinct rows {worst} ({'valid' if ok else 'INVALID'})"


def invariants(spec: CoreSpec) -> dict:
    """What stays the same under coordinate permutations and sign changes (hyperoctahedral group).

    Coordinate sign changes map a half fixing (c, s) to one fixing (c, -s) and keep supports, so the labels
    up to sign are "full" or "half fixing c". Returned: the composition, the sorted degree of each coordinate
    (in axes / full / half supports / as a fixed coordinate), the multiset of pairwise support overlaps by
    label kind, and the sorted per-support profile (kind, overlaps with every other support).
    """
    def kind(label: Label) -> str:
        return FULL if label.fixed is None else "half"

    coordinate_degrees = sorted(
        (int(c in spec.axes), sum(c in l.support for l in spec.labels if l.fixed is None),
         sum(c in l.support for l in spec.labels if l.fixed is not None),
         sum(l.fixed is not None and l.fixed[0] == c for l in spec.labels)) for c in range(DIMENSION))
    overlaps = Counter()
    profiles = []
    for a in spec.labels:
        row = sorted((kind(b), len(set(a.support) & set(b.support))) for b in spec.labels if b is not a)
        profiles.append((kind(a), tuple(Counter(row).most_common())))
    for a, b in itertools.combinations(spec.labels, 2):
        overlaps[(*sorted((kind(a), kind(b))), len(set(a.support) & set(b.support)))] += 1
    return {"composition": spec.composition, "coordinate_degrees": [list(d) for d in coordinate_degrees],
            "overlaps": sorted([list(k) + [v] for k, v in overlaps.items()]),
            "profiles": sorted(str(p) for p in profiles)}


def spec_of_rows(rows) -> CoreSpec | None:
    """The CoreSpec of integer norm-4 shell rows (e.g. a stored set's core divided by its scale), or None when a
    support carries a pattern set this description cannot express (not 16, nor 8 with one coordinate fixed)."""
    axes, patterns = set(), {}
    for row in (tuple(int(v) for v in r) for r in rows):
        support = tuple(i for i, v in enumerate(row) if v)
        if len(support) == 1:
            axes.add(support[0])
        else:
            patterns.setdefault(support, []).append(row)
    labels = []
    for support, found in patterns.items():
        fixed = [(c, found[0][c]) for c in support if len({r[c] for r in found}) == 1]
        if len(found) == 16:
            labels.append(Label(support))
        elif len(found) == 8 and len(fixed) == 1:
            labels.append(Label(support, fixed[0]))
        else:
            return None
    return CoreSpec.of(axes, labels)
