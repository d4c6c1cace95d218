"""Benchmark: the exact vectorized verifier against the course's double-loop check.

Run: `python bench/bench_kissing.py` (from the repository root). Prints the time per check for
600 and 10,000 points and the speedup over the reference loop (targets: <= 5 ms for 600 points,
<= 2 s for 10,000). The reference is timed on 600 points (and on a subset for 10,000, then
scaled by the number of pairs, since the full loop would take minutes); the big-integer path
(coordinates ~ 9e12) is timed too, and so are the published records in their own forms (integers up to
13 digits, the angle form, Z[sqrt2]; `hw3lib.kissing.records`).

The table is printed twice: with numpy's default BLAS threads, then in a child process with
OPENBLAS_NUM_THREADS=1. On a shared, overloaded machine multi-threaded OpenBLAS can be 10-30x
slower than one thread for these thin products (K = 13), so the second table is the stable one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

from hw3lib.kissing import verify
from hw3lib.kissing.constructions import best_known_construction


def course_double_loop(points: np.ndarray) -> bool:
    """The course's check: a Python double loop over pairs with numpy norms (the reference)."""
    points = np.asarray(points, dtype=np.float64)
    max_norm = max(np.linalg.norm(p) for p in points)
    min_dist = np.inf
    for i in range(len(points)):
        for j in range(i + 1, len(points)):
            min_dist = min(min_dist, np.linalg.norm(points[i] - points[j]))
    return min_dist >= max_norm


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    rng = np.random.default_rng(0)
    code = best_known_construction()  # 582 valid points
    sets = {
        "582 (valid code construction)": code,
        "600 random ints in [-50, 50]": rng.integers(-50, 51, size=(600, 11)),
        "10,000 random ints in [-50, 50]": rng.integers(-50, 51, size=(10_000, 11)),
    }
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    print(f"\nBLAS threads: {threads}")
    print(f"{'set':34s} {'verify':>10s} {'course loop':>12s} {'speedup':>9s}  verdict")
    for name, points in sets.items():
        n = len(points)
        ours = best_time(lambda: verify(points), repeats=30 if n <= 1000 else 3)
        if n <= 1000:
            ref = best_time(lambda: course_double_loop(points), repeats=1)
            ref_note = f"{ref:11.3f}s"
        else:  # time 1,000 points and scale by the pair count (the loop is quadratic)
            sub = points[:1000]
            ref = best_time(lambda: course_double_loop(sub), repeats=1) * (n * (n - 1)) / (1000 * 999)
            ref_note = f"~{ref:10.1f}s"
        verdict = verify(points)
        print(f"{name:34s} {ours * 1e3:8.2f}ms {ref_note} {ref / ours:8.0f}x  {verdict.valid} (min d^2 {verdict.min_sq_distance})")

    big = code.astype(object) * (3 * 10**12)  # squares ~ 1e26: exact Python-int path
    ours = best_time(lambda: verify(big), repeats=1)
    print(f"{'582 scaled by 3e12 (big ints)':34s} {ours * 1e3:8.2f}ms {'-':>12s} {'-':>9s}  {verify(big).valid}")

    # The published records, each in its own form (exact; JSON loading not timed)
    from hw3lib.kissing.records import RECORDS, load_record, records_folder
    from hw3lib.kissing.verify import verify_form

    try:
        folder = records_folder()
    except FileNotFoundError as exc:
        print(f"records: skipped ({exc})")
        return
    for record in RECORDS:
        data = load_record(folder / record.file)
        seconds = best_time(lambda: verify_form(data, record.form), repeats=3)
        result = verify_form(data, record.form)
        print(f"{record.file:34s} {seconds * 1e3:8.2f}ms {'-':>12s} {'-':>9s}  {result.valid} ({record.form})")


if __name__ == "__main__":
    main()
    if "OPENBLAS_NUM_THREADS" not in os.environ:
        subprocess.run([sys.executable, __file__], env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, check=True)
