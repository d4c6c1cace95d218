"""The published forms, decided exactly: rationals, the angle form with mixed norms, Z[sqrt2], big integers.

Every near-tie here is beyond float64 (a Pell-equation pair, a perturbation in the last digit of a 13-digit
coordinate, an irrational difference of 1e-19 relative): the verdict must still be right, and a float
reference would get several of them wrong. References are plain Python ints / Fractions over every pair.
"""

from __future__ import annotations

import itertools
import json
import os
import random
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from hw3lib.kissing.records import RECORDS, records_folder, records_markdown, verify_records
from hw3lib.kissing.verify import (equalize_norms, exact_products, split_zsqrt2, verify, verify_angle, verify_form,
                                   verify_rational, verify_zsqrt2, zsqrt2_sign)

SHARED = Path(os.environ.get("HW3_DATA_DIR", "/nonexistent")) / "kissing_records"
OURS = Path(__file__).resolve().parents[2] / "data" / "kissing_number" / "records"


# ---------------------------------------------------------------------------------------------
# Exact products (the chunked big-integer Gram)


@pytest.mark.parametrize("bits", [10, 40, 60, 90, 200])
def test_exact_products_match_python_ints(bits):
    rng = random.Random(bits)
    x = [[rng.randint(-2**bits, 2**bits) for _ in range(11)] for _ in range(7)]
    y = [[rng.randint(-2**bits, 2**bits) for _ in range(11)] for _ in range(5)]
    ref = [[sum(a * b for a, b in zip(u, v)) for v in y] for u in x]
    got = exact_products(np.array(x, dtype=object), np.array(y, dtype=object))
    assert [[int(v) for v in row] for row in got] == ref


# ---------------------------------------------------------------------------------------------
# The sign of p + q sqrt2


def pell(n: int) -> tuple[int, int]:
    """(1 + sqrt2)^n = p + q sqrt2, so p^2 - 2 q^2 = (-1)^n and p - q sqrt2 = (1 - sqrt2)^n has sign (-1)^n."""
    p, q = 1, 0
    for _ in range(n):
        p, q = p + 2 * q, p + q
    return p, q


def test_zsqrt2_sign_hand_worked_and_beyond_floats():
    cases = {(3, -2): 1,  # 3 - 2.828
             (-3, 2): -1, (1, -1): -1,  # 1 - 1.414
             (-1, 1): 1, (0, 0): 0, (0, -1): -1, (5, 0): 1, (-5, 0): -1, (2, 3): 1, (-2, -3): -1}
    p, q = zip(*cases)
    assert zsqrt2_sign(np.array(p), np.array(q)).tolist() == list(cases.values())
    for n in (60, 61):  # |p - q sqrt2| = (sqrt2 - 1)^n ~ 1e-23: float64 says 0 (or the wrong sign)
        a, b = pell(n)
        assert zsqrt2_sign(np.array([a], dtype=object), np.array([-b], dtype=object))[0] == (-1) ** n
        assert zsqrt2_sign(np.array([-a], dtype=object), np.array([b], dtype=object))[0] == -(-1) ** n


# ---------------------------------------------------------------------------------------------
# Rational coordinates


def test_rational_hand_worked_with_its_scale():
    # (1/2, 0) and (0, 1/3): distance^2 = 1/4 + 1/9 = 13/36 >= max norm^2 1/4; times 6: 13 >= 9.
    result = verify_rational([["1/2", 0], [0, Fraction(1, 3)]], dimension=2)
    assert result.valid and result.scale == 6
    assert (result.min_sq_distance, result.max_sq_norm) == (13, 9)


def hexagon(scale) -> list[list]:
    return [[scale * a for a in p] for p in itertools.permutations([1, -1, 0])]


def test_rational_tight_pair_and_one_unit_in_the_last_decimal():
    tight = hexagon(Decimal("0.1234"))  # the 6 vectors (1,-1,0) and permutations: distance^2 = norm^2, tight
    assert verify_rational(tight, dimension=3).valid
    longer = [list(p) for p in tight]
    longer[0][0] += Decimal("0.0001")  # 0.1235: that point gets longer than its distance to a neighbour
    result = verify_rational(longer, dimension=3)
    assert not result.valid and result.scale == 10000
    shorter = [list(p) for p in tight]
    shorter[0][0] -= Decimal("0.0001")  # 0.1233: it moves towards a neighbour (distance^2 < 2 * 0.1234^2)
    assert not verify_rational(shorter, dimension=3).valid


def test_rational_refuses_floats_and_names_the_entry():
    result = verify_rational([[1, 0], [0, 0.5]], dimension=2)
    assert not result.valid and "point 1, coordinate 1" in result.message and "float" in result.message
    result = verify_rational([[1, 0], [0, "x"]], dimension=2)
    assert not result.valid and result.offending_point == 1


def test_rational_json_decimals_are_read_exactly(tmp_path):
    from typer.testing import CliRunner

    from hw3lib.cli import app

    path = tmp_path / "hex.json"
    path.write_text(json.dumps([[float(v) for v in p] for p in hexagon(Decimal("0.1234"))]))
    result = CliRunner().invoke(app, ["kissing", "verify", str(path), "--dimension", "3"])
    verdict = json.loads(result.output[:result.output.rindex("}") + 1])
    assert result.exit_code == 0 and verdict["valid"] and verdict["form"] == "rational" and verdict["scale"] == 5000


# ---------------------------------------------------------------------------------------------
# The angle form


def brute_angle(points) -> bool:
    pts = [[int(v) for v in p] for p in points]
    for u, v in itertools.combinations(pts, 2):
        g = sum(a * b for a, b in zip(u, v))
        if g > 0 and 4 * g * g > sum(a * a for a in u) * sum(b * b for b in v):
            return False
    return True


def pell3(target: int, count: int) -> list[tuple[int, int]]:
    """Solutions (b, a) of b^2 - 3 a^2 = target from the seed, by (b, a) -> (2b + 3a, b + 2a)."""
    b, a = {1: (2, 1), -2: (1, 1)}[target]
    out = []
    for _ in range(count):
        out.append((b, a))
        b, a = 2 * b + 3 * a, b + 2 * a
    return out


def test_angle_pell_near_ties_with_mixed_norms():
    # u = (10^20, 0), v = (a, b): cos^2 = a^2 / (a^2 + b^2). b^2 = 3a^2 + 1: cos^2 = a^2/(4a^2 + 1) < 1/4 (valid);
    # b^2 = 3a^2 - 2: cos^2 = a^2/(4a^2 - 2) > 1/4 (invalid). At a ~ 1e20 the cosines differ from 1/2 by ~1e-41.
    for b, a in pell3(1, 40)[-3:]:
        assert verify_angle([[10**20, 0], [a, b]], dimension=2).valid
    for b, a in pell3(-2, 40)[-3:]:
        result = verify_angle([[10**20, 0], [a, b]], dimension=2)
        assert not result.valid and result.offending_pair == (0, 1)
        assert abs(result.max_cos - 0.5) < 1e-15  # floats cannot tell: the decision was exact


def test_angle_exactly_one_half_is_allowed_and_one_unit_more_is_not():
    tight = [[7, 7, 0], [3, 0, 3], [0, 0, -1]]  # cos(u, v) = 21 / (7 sqrt2 * 3 sqrt2) = 1/2 exactly
    result = verify_angle(tight, dimension=3)
    assert result.valid and result.tight_pairs == 1
    closer = [[7, 7, 0], [3, 1, 3], [0, 0, -1]]  # one unit more along u: cos = 28 / (7 sqrt2 sqrt19) > 1/2
    result = verify_angle(closer, dimension=3)
    assert not result.valid and result.offending_pair == (0, 1)


def test_angle_form_is_not_the_min_distance_form_and_equalize_norms_converts():
    points = [[1, 0], [0, 1], [-7, -7]]  # angles 90, 135, 135 degrees; norms^2 1, 1, 98
    assert verify_angle(points, dimension=2).valid
    assert not verify(points, dimension=2).valid  # |e1 - e2|^2 = 2 < 98
    scaled = equalize_norms(points)  # 1 -> least k with k^2 >= 98: 10
    assert scaled.tolist() == [[10, 0], [0, 10], [-7, -7]]
    assert verify(scaled, dimension=2).valid
    # with equal norms the two forms agree (random checks)
    rng = np.random.default_rng(0)
    for _ in range(30):
        pts = rng.integers(-3, 4, size=(8, 4))
        pts = pts[np.any(pts != 0, axis=1)]
        same = [p for p in pts if int(p @ p) == 9] or [[3, 0, 0, 0]]
        assert verify_angle(same, dimension=4).valid == verify(same, dimension=4).valid


@pytest.mark.parametrize("bits", [4, 30, 70])
def test_angle_matches_brute_force_on_random_sets(bits):
    rng = random.Random(bits)
    outcomes = set()
    for trial in range(40):
        n = rng.randint(2, 9)
        pts = [[rng.randint(-2**bits, 2**bits) for _ in range(3)] for _ in range(n)]
        if any(not any(p) for p in pts):
            continue
        expected = brute_angle(pts)
        outcomes.add(expected)
        assert verify_angle(pts, dimension=3).valid == expected
    assert outcomes == {True, False}


def test_angle_refuses_the_zero_vector():
    result = verify_angle([[1, 0], [0, 0]], dimension=2)
    assert not result.valid and result.offending_point == 1


# ---------------------------------------------------------------------------------------------
# Z[sqrt2]


def mul(x, y):
    return x[0] * y[0] + 2 * x[1] * y[1], x[0] * y[1] + x[1] * y[0]


def zpow(x, n):
    out = (1, 0)
    for _ in range(n):
        out = mul(out, x)
    return out


def three_points(d, c):
    """A = (-d, 0), B = (d, 0), C = (0, 2c) in Z[sqrt2]^2: |A - B|^2 = 4 d^2 against max norm^2 4 c^2."""
    rational = [[-d[0], 0], [d[0], 0], [0, 2 * c[0]]]
    sqrt2 = [[-d[1], 0], [d[1], 0], [0, 2 * c[1]]]
    return rational, sqrt2


def test_zsqrt2_irrational_near_ties():
    d = zpow((1, 1), 10)  # (1 + sqrt2)^10 ~ 6726
    eps = zpow((-1, 1), 40)  # (sqrt2 - 1)^40 ~ 5e-16: c differs from d by 1e-19 relative
    exact = three_points(d, d)
    result = verify_zsqrt2(*exact, dimension=2)
    assert result.valid and result.tight_pairs == 1  # A-B exactly at the max norm
    above = three_points(d, (d[0] + eps[0], d[1] + eps[1]))
    result = verify_zsqrt2(*above, dimension=2)
    assert not result.valid and result.offending_pair == (0, 1)
    below = three_points(d, (d[0] - eps[0], d[1] - eps[1]))
    result = verify_zsqrt2(*below, dimension=2)
    assert result.valid and result.tight_pairs == 0
    # float64 cannot even evaluate c = p + q sqrt2 here (p, q ~ 1e15 cancel): it is off by far more than eps
    value = lambda z: z[0] + z[1] * 2 ** 0.5  # noqa: E731
    assert abs(value((d[0] + eps[0], d[1] + eps[1])) - value(d)) > 1e-6


def test_zsqrt2_agrees_with_the_integer_verifier():
    rng = np.random.default_rng(1)
    for _ in range(20):
        pts = rng.integers(-2, 3, size=(10, 4)).tolist()
        if any(not any(p) for p in pts):
            continue
        zeros = [[0] * 4 for _ in pts]
        expected = verify(pts, dimension=4).valid
        assert verify_zsqrt2(pts, zeros, dimension=4).valid == expected  # rational part only
        assert verify_zsqrt2(zeros, pts, dimension=4).valid == expected  # sqrt2 times the set: scale-free
        assert verify_zsqrt2(pts, zeros, dimension=4, criterion="angle").valid == verify_angle(pts, dimension=4).valid


def test_zsqrt2_duplicates_and_interleaving():
    result = verify_zsqrt2([[1, 0], [1, 0]], [[1, 0], [1, 0]], dimension=2)
    assert not result.valid and "identical" in result.message
    assert split_zsqrt2([[1, 2, 3, 4]]) == ([[1, 3]], [[2, 4]])
    assert not verify_form([[1, 2, 3]], "zsqrt2", dimension=None).valid


# ---------------------------------------------------------------------------------------------
# The records


def folders():
    out = [pytest.param(OURS, id="committed")]
    if SHARED.is_dir():
        out.append(pytest.param(SHARED, id="shared"))
    return out


@pytest.mark.parametrize("folder", folders())
def test_every_record_verifies_exactly(folder):
    rows = verify_records(folder)
    assert [(r["file"], r["valid"], r["points"]) for r in rows] == [
        ("ae593.json", True, 593), ("station600.json", True, 600), ("station600_aeform_k50001.json", True, 600),
        ("station604_zsqrt2.json", True, 604)]
    table = records_markdown(rows)
    assert len([line for line in table if line.startswith("| `")]) == len(RECORDS)


def test_committed_copies_are_the_shared_files():
    if not SHARED.is_dir():
        pytest.skip("no shared reference data here")
    for record in RECORDS:
        assert (OURS / record.file).read_bytes() == (SHARED / record.file).read_bytes()


def test_station600_forms_and_one_unit_perturbations():
    folder = records_folder()
    angle = json.loads((folder / "station600.json").read_text())
    aeform = json.loads((folder / "station600_aeform_k50001.json").read_text())
    assert not verify(angle).valid  # as published it is valid by angle only
    assert equalize_norms(angle).tolist() == aeform
    result = verify(aeform)
    assert result.valid and result.min_sq_distance == result.max_sq_norm  # slack 0
    bumped = [list(p) for p in aeform]
    bumped[0][0] -= 1  # -100002 -> -100003: that core row is now the longest, by 2 * 100002 + 1
    assert not verify(bumped).valid
    turned = [list(p) for p in angle]
    i, j = verify_angle(angle).offending_pair or (None, None)
    assert i is None
    turned[-1][1] += 1  # one unit in the last digit of a remainder row: some pair goes past cos 1/2
    assert verify_angle(turned).valid is brute_angle(turned)


def test_station604_one_unit_off_is_invalid():
    data = json.loads((records_folder() / "station604_zsqrt2.json").read_text())
    result = verify_form(data)
    assert result.valid and abs(result.max_cos - 0.5) < 1e-12  # equal norms: the largest cosine is 1/2
    rows = [list(v) for v in data["vectors"]]
    k = next(c for c, v in enumerate(rows[0]) if v)  # a nonzero entry of point 0
    rows[0][k] += 1 if rows[0][k] > 0 else -1  # longer: norm^2 above 8
    result = verify_form({"vectors": rows})
    assert not result.valid and result.form == "zsqrt2"


def test_cli_verifies_each_form(tmp_path):
    from typer.testing import CliRunner

    from hw3lib.cli import app

    runner = CliRunner()
    folder = records_folder()
    out = runner.invoke(app, ["kissing", "verify", str(folder / "station600.json"), "--form", "angle"])
    assert out.exit_code == 0 and '"valid": true' in out.output and "cos <= 1/2" in out.output
    out = runner.invoke(app, ["kissing", "verify", str(folder / "station600.json")])
    assert out.exit_code == 0 and '"valid": false' in out.output
    out = runner.invoke(app, ["kissing", "verify", str(folder / "station604_zsqrt2.json")])
    assert out.exit_code == 0 and '"form": "zsqrt2"' in out.output and '"valid": true' in out.output
    out = runner.invoke(app, ["kissing", "verify", str(folder / "ae593.json")])
    assert out.exit_code == 0 and '"valid": true' in out.output
    out = runner.invoke(app, ["kissing", "verify", str(folder / "ae593.json"), "--form", "cubes"])
    assert out.exit_code == 2 and "--form 'cubes'" in out.output
