"""Start the LLM loops from a stored configuration, and describe its core-and-remainder scaffold.

The records of 2025-26 are built as a *core* on the norm-4 shell of Z^11 -- rows +-2 e_i on some axis
coordinates and sign patterns (+-1, +-1, +-1, +-1) on four-coordinate supports that pairwise share at
most two coordinates (a constant-weight code, n = 11, w = 4, d = 4) -- plus a *remainder* of rows
optimized against it. This module

- `load_start(source)`: a starting configuration from a record file in any published form
  (`hw3lib.kissing.verify.verify_form`; the angle form is converted by `equalize_norms`, Z[sqrt2] has
  no integer copy and is refused), a program (run in the sandboxed evaluator) or a list of points;
  it is always checked exactly in the course's min-distance form first;
- `core_split(points)`: which rows are k times a norm-4 shell vector (the core), on which axes and
  supports with how many sign patterns each, and which are the remainder;
- `scaffold_text(start)`: that description in words for the prompt (the `start_task` section of
  prompts.md), with the published method for the remainder;
- `start_preamble(start)`: the Python lines defining `START`, `CORE` and `REMAINDER` that the loop
  puts in front of every candidate program, so each stored candidate is a complete, self-contained
  program the course's evaluator runs as it is.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hw3lib.kissing.verify import equalize_norms, verify, verify_form

PREAMBLE_MARK = "# --- starting configuration (put here by hw3lib.kissing.loops; START, CORE, REMAINDER) ---"


@dataclass(frozen=True)
class CoreSplit:
    """The core-and-remainder structure of an integer configuration.

    scale: the k with core rows = k * (a norm-4 shell vector) (the most common one). axes: coordinates
    carrying +-2k e_i rows. supports: {four-coordinate support: number of sign patterns used}.
    core / remainder: row indices.
    """

    scale: int
    axes: list[int]
    supports: dict[tuple[int, ...], int]
    core: list[int]
    remainder: list[int]


@dataclass(frozen=True)
class StartConfig:
    """A verified starting configuration in the course's form (integer points, min-distance >= max norm)."""

    points: list[list[int]]
    label: str
    split: CoreSplit = field(repr=False)

    @property
    def num_points(self) -> int:
        return len(self.points)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.points, separators=(",", ":")).encode()).hexdigest()

    def settings(self) -> dict:
        """What a run's log records about its start."""
        return {"label": self.label, "num_points": self.num_points, "sha256": self.sha256,
                "core": len(self.split.core), "remainder": len(self.split.remainder)}


def _shell_multiple(row: list[int]) -> tuple[int, tuple[int, ...]] | None:
    """(k, support) when row = k * c with c = +-2 e_i (support of 1) or a +-1 pattern on 4 coordinates."""
    support = tuple(i for i, v in enumerate(row) if v)
    if len(support) == 1:
        value = abs(row[support[0]])
        return (value // 2, support) if value % 2 == 0 else None
    if len(support) == 4 and len({abs(row[i]) for i in support}) == 1:
        return abs(row[support[0]]), support
    return None


def core_split(points) -> CoreSplit:
    """Split integer `points` into the norm-4-shell core (at its most common scale) and the remainder."""
    rows = [[int(v) for v in p] for p in points]
    found = {i: _shell_multiple(r) for i, r in enumerate(rows)}
    scales = Counter(k for k, _ in filter(None, found.values()))
    if not scales:
        return CoreSplit(0, [], {}, [], list(range(len(rows))))
    scale = scales.most_common(1)[0][0]
    core = [i for i, f in found.items() if f is not None and f[0] == scale]
    axes = sorted({found[i][1][0] for i in core if len(found[i][1]) == 1})
    supports = Counter(found[i][1] for i in core if len(found[i][1]) == 4)
    return CoreSplit(scale, axes, dict(sorted(supports.items())), core, [i for i in range(len(rows)) if i not in set(core)])


def load_start(source, label: str | None = None, timeout_s: float = 60) -> StartConfig:
    """A starting configuration, verified in the course's form; raises ValueError (with the reason) otherwise.

    source: a JSON record (list of points, {"points"|"vectors": ...}; any form `verify_form` reads), a .py
    program (run sandboxed), or a list of integer points.
    """
    if isinstance(source, (str, Path)):
        path = Path(source)
        label = label or path.name
        if path.suffix == ".py":
            from hw3lib.kissing.evaluator import evaluate_program

            metrics = evaluate_program(path, timeout_s=timeout_s, return_points=True)
            if not metrics["validity"]:
                raise ValueError(f"{path}: not a valid program ({metrics['message']})")
            points = metrics["points"]
        else:
            from hw3lib.kissing.records import load_record

            points = _integer_form(load_record(path), str(path))
    else:
        points = _integer_form(source, label or "given points")
        label = label or "given points"
    points = [[int(v) for v in p] for p in points]
    result = verify(points)
    if not result.valid:
        raise ValueError(f"{label}: not valid in the course's min-distance form ({result.message})")
    return StartConfig(points, label, core_split(points))


def _integer_form(data, where: str) -> list:
    """The course's integer min-distance form of `data`, whatever form it was published in."""
    result = verify_form(data, "auto")
    if result.form == "zsqrt2":
        raise ValueError(f"{where}: Z[sqrt2] coordinates have no integer copy (some cosines are irrational), so the "
                         "course's integer evaluator cannot take this set as a start")
    inner = data.get("points", data.get("vectors")) if isinstance(data, dict) else data
    if result.valid and result.form == "integer":
        return inner
    if result.form == "rational" and result.valid:
        from hw3lib.kissing.verify import clear_denominators, to_fraction_rows

        return clear_denominators(to_fraction_rows(inner))[0].tolist()
    angle = verify_form(inner, "angle")
    if angle.valid:  # valid by angle (mixed norms): the min-distance copy, if equalizing the norms gives one
        return equalize_norms(inner).tolist()
    raise ValueError(f"{where}: not a valid configuration in any form ({result.message})")


def scaffold_text(start: StartConfig) -> str:
    """The starting configuration and its core-and-remainder structure, in words, for the prompt."""
    s = start.split
    full = sum(1 for n in s.supports.values() if n == 16)
    half = sum(1 for n in s.supports.values() if n == 8)
    other = len(s.supports) - full - half
    norms = sorted({sum(v * v for v in start.points[i]) for i in s.remainder})
    lines = [f"Starting configuration: {start.label}, {start.num_points} points, valid (checked exactly). It is "
             f"defined before your code as the global `START` (a list of {start.num_points} integer lists), with "
             "`CORE` and `REMAINDER` (lists of row indices into START)."]
    if s.core:
        lines.append(
            f"Its core: {len(s.core)} rows, each {s.scale} times a vector of the norm-4 shell of Z^11: "
            f"+-{2 * s.scale} e_i on the {len(s.axes)} axis coordinates {s.axes}, and sign patterns "
            f"({s.scale} * (+-1, +-1, +-1, +-1)) on {len(s.supports)} four-coordinate supports that pairwise share at most "
            f"two coordinates (a constant-weight code, n=11, w=4, d=4): {full} supports with all 16 sign patterns, "
            f"{half} with half of them (8){f', {other} with other counts' if other else ''}. Within the core every "
            "inner product is at most half the squared norm.")
    if not s.core:
        lines.append(f"It has no core on the norm-4 shell: all {len(s.remainder)} rows are general integer vectors "
                     f"(squared norms from {norms[0]} to {norms[-1]}).")
    elif s.remainder:
        lines.append(
            f"Its remainder: {len(s.remainder)} rows optimized against the fixed core, squared norms from {norms[0]} "
            f"to {norms[-1]} (the course's condition needs min ||x - y||^2 >= max ||x||^2 over ALL rows).")
    else:
        lines.append("It has no remainder: every row is in the core.")
    lines.append(
        "The published way to grow such a set (594 -> 600 points): keep the core, treat the remainder rows as unit "
        "directions, minimize an annealed hinge plus smooth-maximum penalty on their inner products near or above "
        "1/2 (against the core and each other), then solve a Chebyshev linear program over the near-contact pairs "
        "that moves them in tangent coordinates to create strict slack, round to denominator 100000 and check "
        "exactly; add one seed row at a time and re-equilibrate the whole remainder.")
    return "\n\n".join(lines)


def start_preamble(start: StartConfig) -> str:
    """Python source defining START, CORE and REMAINDER (compact, one row per line)."""
    rows = ",\n".join("    " + json.dumps(p, separators=(",", ":")) for p in start.points)
    return (f"{PREAMBLE_MARK}\n# {start.label}: {start.num_points} points, sha256 {start.sha256[:16]}\n"
            f"START = [\n{rows},\n]\nCORE = {start.split.core!r}\nREMAINDER = {start.split.remainder!r}\n"
            "# --- the model's program ---\n")
