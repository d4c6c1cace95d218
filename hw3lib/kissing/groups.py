"""Families of finite rational orthogonal groups on R^10 for the layered orbit search, given by generators.

Every group here is exact (integer matrices with a denominator, hw3lib.kissing.orbits.Element):

- monomial groups: a permutation group H on the 10 coordinates and a group of sign changes S that H
  preserves, G = S x| H. The permutation groups:
    * `cyclic`, `dihedral`: on 10 points (and on two 5-cycles, `cyclic_5x2`);
    * `s5_on_pairs`: S5 on the 10 pairs of {0..4} (the Petersen graph's symmetry, order 120), and A5;
    * `pgl2_9` / `psl2_9`: PGL(2, 9) and PSL(2, 9) = A6 on the 10 points of the projective line over F9
      (orders 720 and 360);
    * `affine_5x2`: AGL(1, 5) on two copies of F5;
    * `agl3_2_on_8`: AGL(3, 2) on 8 coordinates (the extended Hamming code's automorphisms), with or without
      the swap of the last two;
  the sign groups are spans of H-orbits of binary words (`invariant_sign_code`): all signs, the even ones,
  -I only, the span of one word's orbit, and the H-invariant codes of minimum weight 4 spanned by one orbit
  of weight-4 words (`distance_four_codes`: the sign groups half-integer orbits can survive);
- reflection groups: the signed permutations with even sign changes on 8 coordinates plus the rational
  reflection in (1, ..., 1, 0, 0) generate W(E8) on R^8 (acting on the first 8 coordinates); with signs or a
  swap on the last two. Their orbits on a pool are found from the generators (W(E8) has 696,729,600
  elements; `closure` is only asked for orders up to about 10^5);
- random subgroups of the signed permutations: the cyclic group of one random signed permutation, or the group
  of two (seeded).

`families(seed)` lists them all as `GroupSpec`s (a name, a short description, and the generators).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from hw3lib.kissing.orbits import Element, reflection, signed_permutation

DIMENSION = 10


@dataclass(frozen=True)
class GroupSpec:
    name: str
    family: str  # "monomial", "reflection" or "random"
    description: str
    generators: tuple[Element, ...]


# ---------------------------------------------------------------------------------------------
# Permutation groups on 10 points, as lists of permutations (lists of images)


def cyclic() -> list[list[int]]:
    return [[(i + 1) % 10 for i in range(10)]]


def dihedral() -> list[list[int]]:
    return cyclic() + [[(-i) % 10 for i in range(10)]]


def cyclic_5x2() -> list[list[int]]:
    """C5 x C2 on {0..4} and {5..9}: rotate both 5-cycles, swap them."""
    return [[(i + 1) % 5 + 5 * (i // 5) for i in range(10)], [(i + 5) % 10 for i in range(10)]]


def affine_5x2() -> list[list[int]]:
    """AGL(1, 5) acting on both copies of F5 at once, and the swap of the copies."""
    shift = [(i + 1) % 5 + 5 * (i // 5) for i in range(10)]
    scale = [(2 * (i % 5)) % 5 + 5 * (i // 5) for i in range(10)]
    return [shift, scale, [(i + 5) % 10 for i in range(10)]]


def _on_pairs(point_perms: list[list[int]]) -> list[list[int]]:
    pairs = list(itertools.combinations(range(5), 2))
    index = {p: k for k, p in enumerate(pairs)}
    return [[index[tuple(sorted((perm[a], perm[b])))] for a, b in pairs] for perm in point_perms]


def s5_on_pairs() -> list[list[int]]:
    return _on_pairs([[1, 0, 2, 3, 4], [1, 2, 3, 4, 0]])


def a5_on_pairs() -> list[list[int]]:
    return _on_pairs([[1, 2, 0, 3, 4], [1, 2, 3, 4, 0]])


# F9 = F3[i] / (i^2 + 1): element a + b i stored as 3a + b... as a pair (a, b)
_F9 = [(a, b) for a in range(3) for b in range(3)]


def _mul9(x, y):
    (a, b), (c, d) = x, y
    return ((a * c - b * d) % 3, (a * d + b * c) % 3)


def _add9(x, y):
    return ((x[0] + y[0]) % 3, (x[1] + y[1]) % 3)


def _inv9(x):
    return next(y for y in _F9 if _mul9(x, y) == (1, 0))


def _projective_perm(a, b, c, d) -> list[int]:
    """x -> (a x + b) / (c x + d) on P^1(F9) = F9 + {inf}, numbered 0..8 (as _F9) and 9 (infinity)."""
    infinity = 9
    images = []
    for k in range(10):
        if k == infinity:
            images.append(infinity if c == (0, 0) else _F9.index(_mul9(a, _inv9(c))))
            continue
        x = _F9[k]
        numerator, denominator = _add9(_mul9(a, x), b), _add9(_mul9(c, x), d)
        images.append(infinity if denominator == (0, 0) else _F9.index(_mul9(numerator, _inv9(denominator))))
    return images


def pgl2_9() -> list[list[int]]:
    one, zero = (1, 0), (0, 0)
    generator = (1, 1)  # 1 + i has order 8 in F9*: it generates the multiplicative group
    minus_one = (2, 0)
    return [_projective_perm(one, one, zero, one), _projective_perm(generator, zero, zero, one),
            _projective_perm(zero, minus_one, one, zero)]


def psl2_9() -> list[list[int]]:
    one, zero = (1, 0), (0, 0)
    square = _mul9((1, 1), (1, 1))  # squares only: determinant a square
    return [_projective_perm(one, one, zero, one), _projective_perm(square, zero, zero, one),
            _projective_perm(zero, (2, 0), one, zero)]


def agl3_2_on_8() -> list[list[int]]:
    """AGL(3, 2) on coordinates 0-7 (the points of F2^3, numbered by their bits), fixing 8 and 9 (order 1344):
    the automorphism group of the extended Hamming code [8, 4, 4], so it keeps that code's sign changes."""
    def affine(matrix, shift):
        images = []
        for x in range(8):
            bits = [(x >> k) & 1 for k in range(3)]
            y = [(sum(matrix[r][c] * bits[c] for c in range(3)) + shift[r]) % 2 for r in range(3)]
            images.append(y[0] | y[1] << 1 | y[2] << 2)
        return images + [8, 9]
    return [affine([[1, 0, 0], [0, 1, 0], [0, 0, 1]], [1, 0, 0]),
            affine([[0, 0, 1], [1, 0, 0], [0, 1, 0]], [0, 0, 0]),  # cycle the bits
            affine([[1, 1, 0], [0, 1, 0], [0, 0, 1]], [0, 0, 0])]  # a transvection


def agl3_2_with_swap() -> list[list[int]]:
    return agl3_2_on_8() + [list(range(8)) + [9, 8]]


PERMUTATION_GROUPS = {
    "trivial": lambda: [],
    "cyclic10": cyclic,
    "dihedral10": dihedral,
    "c5xc2": cyclic_5x2,
    "agl1_5x2": affine_5x2,
    "a5_pairs": a5_on_pairs,
    "s5_pairs": s5_on_pairs,
    "psl2_9": psl2_9,
    "pgl2_9": pgl2_9,
    "agl3_2": agl3_2_on_8,
    "agl3_2+swap": agl3_2_with_swap,
}


# ---------------------------------------------------------------------------------------------
# Sign groups the permutations preserve


def invariant_sign_code(perms: list[list[int]], seeds: list[list[int]]) -> list[np.ndarray]:
    """A basis (over F2) of the span of the images of the seed words under the permutation group."""
    words = {tuple(int(b) for b in seed) for seed in seeds}
    frontier = list(words)
    while frontier:
        grown = []
        for word in frontier:
            for perm in perms:
                image = [0] * DIMENSION
                for i, bit in enumerate(word):
                    image[perm[i]] = bit
                image = tuple(image)
                if image not in words:
                    words.add(image)
                    grown.append(image)
        frontier = grown
    basis: list[np.ndarray] = []  # Gaussian elimination over F2
    pivots: list[int] = []
    for word in sorted(words):
        row = np.array(word, dtype=np.int64)
        for pivot, b in zip(pivots, basis):
            if row[pivot]:
                row = (row + b) % 2
        if row.any():
            basis.append(row)
            pivots.append(int(np.flatnonzero(row)[0]))
    return basis


def minimum_weight(basis: list[np.ndarray]) -> int:
    """The smallest weight of a nonzero word of the code the basis spans (all 2^k words; k <= 10 here)."""
    best = DIMENSION + 1
    for bits in range(1, 2 ** len(basis)):
        word = sum((basis[k] for k in range(len(basis)) if bits >> k & 1), np.zeros(DIMENSION, dtype=np.int64)) % 2
        best = min(best, int(word.sum()))
    return best


def distance_four_codes(perms: list[list[int]], limit: int = 4) -> dict[str, list[np.ndarray]]:
    """Sign codes of minimum weight >= 4 that the permutation group preserves: the spans of the group's orbits
    of weight-4 words (one per orbit, skipping repeats), at most `limit` of them. Sign changes of weight >= 4 are
    what half-integer orbits survive: flipping the signs of k halves changes an inner product by k / 2."""
    seen, codes = set(), {}
    for support in itertools.combinations(range(DIMENSION), 4):
        word = [1 if i in support else 0 for i in range(DIMENSION)]
        basis = invariant_sign_code(perms, [word])
        key = tuple(tuple(b) for b in basis)
        if key in seen:
            continue
        seen.add(key)
        if minimum_weight(basis) >= 4:
            codes[f"code [{DIMENSION},{len(basis)},4] from {''.join(map(str, support))}"] = basis
            if len(codes) >= limit:
                break
    return codes


def sign_elements(basis: list[np.ndarray]) -> list[Element]:
    return [signed_permutation(range(DIMENSION), [-1 if bit else 1 for bit in word]) for word in basis]


def _unit_words(weight: int) -> list[list[int]]:
    """The words with `weight` consecutive ones starting at each coordinate (they span the same space
    under any permutation group: all words for weight 1, the even ones for weight 2)."""
    return [[1 if (j - i) % DIMENSION < weight else 0 for j in range(DIMENSION)] for i in range(DIMENSION)]


SIGN_SEEDS = {
    "all signs": _unit_words(1),
    "even signs": _unit_words(2),
    "-I": [[1] * 10],
    "halves": [[1] * 5 + [0] * 5],  # with -I: signs on {0..4}, {5..9} and their images
}


def monomial(name: str, signs: str, basis: list[np.ndarray] | None = None) -> GroupSpec:
    perms = PERMUTATION_GROUPS[name]()
    basis = invariant_sign_code(perms, SIGN_SEEDS[signs]) if basis is None else basis
    generators = [signed_permutation(p) for p in perms] + sign_elements(basis)
    return GroupSpec(f"{name} / {signs}", "monomial",
                     f"permutations {name} with a sign group of dimension {len(basis)} ({signs})",
                     tuple(generators))


def e8_reflection_group(last_two: str) -> GroupSpec:
    """W(E8) on the first 8 coordinates (even sign changes, S8, the reflection in (1^8)), plus `last_two`."""
    gens = [signed_permutation([1, 0] + list(range(2, 10))),
            signed_permutation(list(range(1, 8)) + [0, 8, 9]),
            signed_permutation(range(10), [-1, -1] + [1] * 8),
            reflection([1] * 8 + [0, 0])]
    if last_two in ("signs", "signs+swap"):
        gens += [signed_permutation(range(10), [1] * 8 + [-1, 1]), signed_permutation(range(10), [1] * 9 + [-1])]
    if last_two in ("swap", "signs+swap"):
        gens.append(signed_permutation(list(range(8)) + [9, 8]))
    return GroupSpec(f"W(E8) + {last_two}", "reflection",
                     f"the Weyl group of E8 on coordinates 0-7 and {last_two} on 8-9", tuple(gens))


def d8_group(last_two: str) -> GroupSpec:
    """W(D8) on the first 8 coordinates: the E8 group without its reflection (index 135)."""
    spec = e8_reflection_group(last_two)
    return GroupSpec(f"W(D8) + {last_two}", "reflection",
                     f"the Weyl group of D8 on coordinates 0-7 and {last_two} on 8-9",
                     tuple(g for g in spec.generators if g.denominator == 1))


def random_monomial(seed: int, count: int = 2) -> GroupSpec:
    rng = np.random.default_rng(seed)
    gens = [signed_permutation(rng.permutation(DIMENSION).tolist(), rng.choice([-1, 1], size=DIMENSION).tolist())
            for _ in range(count)]
    return GroupSpec(f"random #{seed}", "random", f"{count} random signed permutations (seed {seed})", tuple(gens))


def families(random_groups: int = 8, seed: int = 0) -> list[GroupSpec]:
    """Every group the search tries, cheapest families first."""
    specs = [monomial(name, signs) for name in PERMUTATION_GROUPS for signs in SIGN_SEEDS]
    codes = {name: distance_four_codes(PERMUTATION_GROUPS[name]()) for name in PERMUTATION_GROUPS if name != "trivial"}
    specs += [monomial(name, code, basis) for name, found in codes.items() for code, basis in found.items()]
    # the same sign codes with no permutations: small groups (orders 16 to 32), many small orbits
    distinct = {}
    for origin, found in codes.items():
        for code, basis in found.items():
            distinct.setdefault(tuple(tuple(b) for b in basis), f"{code} ({origin}-invariant)")
    specs += [monomial("trivial", code, [np.array(b) for b in key]) for key, code in distinct.items()]
    specs += [group(last) for group in (e8_reflection_group, d8_group)
              for last in ("none", "signs", "swap", "signs+swap")]
    specs += [random_monomial(seed + k, 1 + k % 2) for k in range(random_groups)]
    names = [spec.name for spec in specs]
    assert len(set(names)) == len(names), "group names must be unique: the search log is keyed by them"
    return specs
