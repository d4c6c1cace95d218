"""A generated MATH-format task for the smoke profile: short problems whose `\\boxed{}` answers need
the symbolic grader, written as the same `{"problem", "solution"}` jsonl the real MATH data uses.

Why: the MATH course's notebooks must run offline in CI, where no MATH data exists, and still show
their phenomena (a baseline, learning under SFT/GRPO, expert iteration). GSM8K-style integers never
reach the symbolic stage of `hw3lib.tasks.rewards.answers_equivalent`; these answers do, and the
answer space is small enough that the tiny CPU model can learn part of it in minutes.

Five problem types (the record's `type`), each a few tokens of LaTeX:

- `Fractions`: `Compute $\\frac{1}{2}+\\frac{1}{3}$.` -> `\\frac{5}{6}` (sum or difference of two
  proper fractions with denominators 2 to 6, reduced to lowest terms; a whole number when it is one);
- `Radicals`: the hypotenuse of a right triangle with legs 1 to 9 in simplest radical form -> `3\\sqrt{5}`;
- `Linear Equations`: `Solve for $x$: $3x+4=19$.` -> `5` or a reduced fraction such as `-\\frac{5}{3}`;
- `Inequalities`: `Solve $2x-3>5$.` -> `(4, \\infty)`, or a compound `$3\\le 2x+1\\le 11$` -> `[1, 5]`;
- `Functions`: `If $f(x)=2x+1$ and $g(x)=x+3$, find $f(g(x))$.` -> `2x+7`.

Why composition and not "Expand $(x+2)(x+3)$": the grader compares values, so copying the product
from the question (`(x+2)(x+3)`) is graded correct -- a reward a policy can collect without doing
any algebra. Likewise "Simplify $\\sqrt{18}$" is answered correctly by `\\sqrt{18}`; the hypotenuse
needs the squares summed first. Each problem's answer cannot be copied from its text.

Held-out problems never occur in training: every problem text falls, by a hash of the text, in the
`test` bucket (one in eight) or the `train` bucket, and `make_math_problems(..., split=...)` draws
only from its bucket, so any seeds give disjoint splits while every type appears in both.

- `make_math_problems(n, seed, split=None)`: `n` records `{"problem", "solution", "level", "type"}`
  (`level` is `Level 1` or `Level 2`, as MATH writes it), types drawn uniformly, deterministic per seed.
- `write_math_task(folder, n_train, n_test, seed)`: `<folder>/train.jsonl` and `test.jsonl`, read
  back by `hw3lib.tasks.data.load_math` / `load_task`; an existing file with other content is an
  error, never overwritten.
- `math_sft_target(record, boxed=True)`: the R1-Zero completion teaching the format,
  `" $...=\\frac{5}{6}$ </think> <answer> \\boxed{\\frac{5}{6}} </answer>"`; it works for any
  MATH record (real ones too): the solution with its last box unwrapped is the working.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from hw3lib.core.io import DataFileError, atomic_write_bytes
from hw3lib.tasks.boxed import boxed_content, last_boxed_expression

PROBLEM_TYPES = ("Fractions", "Radicals", "Linear Equations", "Inequalities", "Functions")
SPLITS = ("train", "test")
TEST_BUCKETS = 8  # one problem text in TEST_BUCKETS belongs to the held-out split
_MAX_DRAWS = 10_000  # rejection sampling of a bucket: far more than any type needs


# ---- LaTeX helpers ------------------------------------------------------------------------------

def latex_number(value: Fraction | int) -> str:
    """`5`, `-3`, `\\frac{5}{6}`, `-\\frac{5}{3}`: a reduced fraction as MATH writes answers."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def linear_expression(coefficient: int, constant: int, variable: str = "x") -> str:
    """`2x+7`, `x-3`, `-x`, `4`: `coefficient * x + constant` with ones and zeros left out."""
    if coefficient == 0:
        return str(constant)
    term = {1: variable, -1: f"-{variable}"}.get(coefficient, f"{coefficient}{variable}")
    if constant == 0:
        return term
    return f"{term}{'+' if constant > 0 else '-'}{abs(constant)}"


def simplest_radical(n: int) -> str:
    """`\\sqrt{n}` in simplest form: 45 -> `3\\sqrt{5}`, 25 -> `5`, 2 -> `\\sqrt{2}`."""
    if n < 1:
        raise ValueError(f"n={n}: pass a positive integer")
    outside, inside = 1, n
    factor = 2
    while factor * factor <= inside:
        while inside % (factor * factor) == 0:
            inside //= factor * factor
            outside *= factor
        factor += 1
    if inside == 1:
        return str(outside)
    return f"{outside if outside > 1 else ''}\\sqrt{{{inside}}}"


# ---- the five problem types: each returns (problem, solution, level) ---------------------------

@dataclass(frozen=True)
class Ranges:
    """The numbers the problems draw from (inclusive bounds)."""

    denominator: int  # Fractions: denominators 2..denominator
    leg: int  # Radicals: legs 1..leg
    coefficient: int  # Linear Equations: a in 2..coefficient (Inequalities: 2..min(4, coefficient))
    constant: int  # Linear Equations / Inequalities: b in +-1..constant, the right side from -constant
    right_side: int  # Linear Equations: the right side up to right_side
    bound: int  # Inequalities: endpoints in -bound..bound+1; Functions: constants in +-1..bound
    slope: int  # Functions: slopes 1..slope
    worded: bool = False  # each problem opens with one of LEAD_INS (see SMALL)


STANDARD = Ranges(denominator=6, leg=9, coefficient=6, constant=9, right_side=20, bound=5, slope=3)
SMALL = Ranges(denominator=3, leg=3, coefficient=3, constant=1, right_side=3, bound=1, slope=2, worded=True)
"""`small=True`: the smoke profile's task, for the 0.5M-parameter tiny model on 2 CPU cores: 150 distinct
questions (96 inequalities, 20 equations, 16 compositions, 9 fraction sums, 9 hypotenuses), each worded in
the ways of `LEAD_INS`, so that -- as in the GSM8K course's arithmetic word problems -- a held-out problem
asks, in words never seen in training, what the training set asks in other words. Measured (greedy, 256
held-out problems, 600 SFT steps of the worked solutions unless said): the standard ranges, one wording
each, 4-6% right (every held-out problem was one it had never seen); ranges of 5, 1,500 questions, 66%;
these ranges after 200 steps 64%. GRPO at the arithmetic recipe's settings did not raise the held-out
reward on any of them within 30-50 steps (0.64 -> 0.57 here; lr 5e-5 to 6e-4, on- or off-policy), though
it learns the questions it trains on: on a pool of 32 training problems the sampled reward rose 0.52 -> 0.91 in
15 steps, on a pool of 256 0.38 -> 0.61 in 32 steps while the held-out greedy reward fell 0.64 -> 0.52. Measured
*sampled* (T=1, as the MATH course validates), the held-out reward does rise: 0.44 -> 0.45 -> 0.48 -> 0.57 -> 0.56
at steps 0/20/40/60/80 of the smoke recipe (256 problems, two standard errors of a difference 8.7 points). GRPO
sharpens the sampling distribution the course measures while the greedy argmax drifts; the smoke profile therefore
validates this task sampled (hw3lib.core.config.RunConfig._SMOKE_MATH)."""
LEAD_INS = ("", "Problem: ", "Question: ", "Exercise: ", "Quiz: ", "Homework: ", "Try this. ", "A short one. ",
            "Practice: ", "Warm-up: ", "Review: ", "Task: ")


def _fractions(rng: random.Random, r: "Ranges") -> tuple[str, str, int]:
    b, d = rng.randint(2, r.denominator), rng.randint(2, r.denominator)
    a = rng.choice([i for i in range(1, b) if _gcd(i, b) == 1])  # operands in lowest terms, as MATH writes them
    c = rng.choice([i for i in range(1, d) if _gcd(i, d) == 1])
    if Fraction(a, b) == Fraction(c, d):
        c, d = (1, 2) if Fraction(a, b) != Fraction(1, 2) else (1, 3)
    op = rng.choice("+-")
    if op == "-" and Fraction(a, b) < Fraction(c, d):
        a, b, c, d = c, d, a, b  # keep differences positive
    result = Fraction(a, b) + Fraction(c, d) if op == "+" else Fraction(a, b) - Fraction(c, d)
    common = b * d // _gcd(b, d)
    left, right = a * common // b, c * common // d
    question = f"\\frac{{{a}}}{{{b}}}{op}\\frac{{{c}}}{{{d}}}"
    working = f"{question}=\\frac{{{left}}}{{{common}}}{op}\\frac{{{right}}}{{{common}}}"
    problem = f"Compute ${question}$. Express your answer as a common fraction."
    return problem, f"${working}=\\boxed{{{latex_number(result)}}}$.", 1 if b == d or op == "+" else 2


def _radicals(rng: random.Random, r: "Ranges") -> tuple[str, str, int]:
    a, b = rng.randint(1, r.leg), rng.randint(1, r.leg)
    square = a * a + b * b
    answer = simplest_radical(square)
    problem = (f"A right triangle has legs of length ${a}$ and ${b}$. What is the length of its hypotenuse? "
               "Express your answer in simplest radical form.")
    steps = f"\\sqrt{{{a}^2+{b}^2}}" + ("" if answer == f"\\sqrt{{{square}}}" else f"=\\sqrt{{{square}}}")
    return problem, f"${steps}=\\boxed{{{answer}}}$.", 1 if "sqrt" not in answer else 2


def _linear_equations(rng: random.Random, r: "Ranges") -> tuple[str, str, int]:
    a, b, c = rng.randint(2, r.coefficient), rng.choice(_nonzero(r.constant)), rng.randint(-r.constant, r.right_side)
    x = Fraction(c - b, a)
    problem = f"Solve for $x$: ${linear_expression(a, b)}={c}$."
    return problem, f"${a}x={c - b}$, so $x=\\boxed{{{latex_number(x)}}}$.", 1 if x.denominator == 1 else 2


def _inequalities(rng: random.Random, r: "Ranges") -> tuple[str, str, int]:
    a, b = rng.randint(2, min(4, r.coefficient)), rng.choice(_nonzero(r.constant))
    low = rng.randint(-r.bound, r.bound + 1)
    if rng.random() < 0.3:  # compound: a bounded closed interval
        high = low + rng.randint(1, r.bound + 1)
        problem = f"Solve ${a * low + b}\\le {linear_expression(a, b)}\\le {a * high + b}$. " \
                  "Express your answer in interval notation."
        return problem, f"${a * low}\\le {a}x\\le {a * high}$, so $x\\in\\boxed{{[{low}, {high}]}}$.", 2
    relation = rng.choice([">", "<", "\\ge", "\\le"])
    interval = {">": f"({low}, \\infty)", "<": f"(-\\infty, {low})",
                "\\ge": f"[{low}, \\infty)", "\\le": f"(-\\infty, {low}]"}[relation]
    space = " " if relation.startswith("\\") else ""
    problem = f"Solve ${linear_expression(a, b)}{relation}{space}{a * low + b}$. Express your answer in interval notation."
    return problem, f"${a}x{relation}{space}{a * low}$, so $x\\in\\boxed{{{interval}}}$.", 1


def _functions(rng: random.Random, r: "Ranges") -> tuple[str, str, int]:
    nonzero = _nonzero(r.bound)
    a, b, c, d = rng.randint(1, r.slope), rng.choice(nonzero), rng.randint(1, r.slope), rng.choice(nonzero)
    f, g = linear_expression(a, b), linear_expression(c, d)
    answer = linear_expression(a * c, a * d + b)
    inner = f"({g})" if a > 1 else g
    working = f"{a if a > 1 else ''}{inner}{'+' if b > 0 else '-'}{abs(b)}"
    problem = f"If $f(x)={f}$ and $g(x)={g}$, find $f(g(x))$."
    return problem, f"$f(g(x))={working}=\\boxed{{{answer}}}$.", 1 if a == 1 or c == 1 else 2


_GENERATORS = {"Fractions": _fractions, "Radicals": _radicals, "Linear Equations": _linear_equations,
               "Inequalities": _inequalities, "Functions": _functions}


def _nonzero(limit: int) -> list[int]:
    return [i for i in range(-limit, limit + 1) if i]


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


# ---- records and splits -------------------------------------------------------------------------

def problem_split(problem: str) -> str:
    """`test` for one problem text in TEST_BUCKETS (by a stable hash of the text), else `train`."""
    digest = hashlib.sha256(problem.encode("utf-8")).digest()
    return "test" if int.from_bytes(digest[:8], "big") % TEST_BUCKETS == 0 else "train"


def make_math_problems(n: int, seed: int = 0, split: str | None = None, small: bool = False) -> list[dict]:
    """`n` MATH-format records `{"problem", "solution", "level", "type"}`, deterministic per `seed`.

    Each record's type is drawn uniformly from PROBLEM_TYPES; its solution ends in `\\boxed{answer}`.
    `split` (`train` / `test`) keeps only problems of that hash bucket (`problem_split`), so the two
    splits never share a problem text; None draws from all problems.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n={n!r}: pass a non-negative int")
    if split is not None and split not in SPLITS:
        raise ValueError(f"split={split!r}: pass one of {SPLITS} or None")
    rng, ranges = random.Random(seed), SMALL if small else STANDARD
    records = []
    for _ in range(n):
        kind = rng.choice(PROBLEM_TYPES)
        for _ in range(_MAX_DRAWS):
            problem, solution, level = _GENERATORS[kind](rng, ranges)
            if ranges.worded:
                problem = rng.choice(LEAD_INS) + problem
            if split is None or problem_split(problem) == split:
                break
        else:  # unreachable for the shipped generators; guards edits that shrink a type's problem space
            raise RuntimeError(f"no {kind!r} problem of split {split!r} in {_MAX_DRAWS} draws")
        records.append({"problem": problem, "solution": solution, "level": f"Level {level}", "type": kind})
    return records


def write_math_task(folder: str | os.PathLike, n_train: int, n_test: int, seed: int = 0,
                    small: bool = False) -> list[Path]:
    """Write `<folder>/train.jsonl` (`n_train` records) and `<folder>/test.jsonl` (`n_test`), atomically.

    The splits share no problem text (see `make_math_problems`); the test split uses seed
    `seed + 1`. A file that already exists with the same content is reused; one with other content
    raises FileExistsError naming it, before anything is written (delete it or pick another folder).
    Returns [train path, test path].
    """
    for name, value in (("n_train", n_train), ("n_test", n_test)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r}: pass a positive int")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"folder={str(folder)!r} exists and is not a directory")
    contents = {folder / "train.jsonl": _jsonl_bytes(make_math_problems(n_train, seed, split="train", small=small)),
                folder / "test.jsonl": _jsonl_bytes(make_math_problems(n_test, seed + 1, split="test", small=small))}
    for path, data in contents.items():
        if path.exists() and (not path.is_file() or path.read_bytes() != data):
            raise FileExistsError(f"{path} already exists with other content (not the generated task for "
                                  f"n_train={n_train}, n_test={n_test}, seed={seed}); refusing to overwrite it: "
                                  "delete it or write the task to another folder")
    for path, data in contents.items():
        if not path.exists():
            atomic_write_bytes(path, data)
    return list(contents)


def _jsonl_bytes(records: list[dict]) -> bytes:
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records).encode("utf-8")


# ---- the R1-Zero SFT target ---------------------------------------------------------------------

_WHITESPACE = re.compile(r"\s+")


def math_sft_target(record: dict, boxed: bool = True) -> str:
    """The R1-Zero completion after the prompt's `<think>` for a MATH record:
    `" $...=\\frac{5}{6}$. </think> <answer> \\boxed{\\frac{5}{6}} </answer>"`.

    The working is the record's solution with its last `\\boxed{X}` unwrapped to `X` and whitespace
    collapsed; the answer is `\\boxed{answer}` (or the bare answer when `boxed` is false). The
    answer is the record's `answer` field when present (as `load_math` adds), else the last box.
    """
    solution = record.get("solution")
    if not isinstance(solution, str):
        raise DataFileError(f"record has no string 'solution' (keys: {sorted(record)}); math_sft_target needs one")
    box = last_boxed_expression(solution)
    content = boxed_content(box) if box is not None else None
    answer = record.get("answer", content)
    if box is None or not answer:
        raise DataFileError(f"record's solution has no complete \\boxed{{...}} answer: {solution[:80]!r}")
    start = solution.rfind(box)
    working = _WHITESPACE.sub(" ", solution[:start] + content + solution[start + len(box):]).strip()
    final = f"\\boxed{{{answer}}}" if boxed else str(answer)
    return f" {working} </think> <answer> {final} </answer>"
