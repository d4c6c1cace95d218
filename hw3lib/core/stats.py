"""Every interval and test behind the workbook's verdicts, and the one wording of a verdict.

Implemented (all at `Z` = 2 standard errors, the band the writeup prints as "±x points"):

- `wilson(successes, n)`: the Wilson score interval of one accuracy (`accuracy_interval(p, n)` from a rate);
- `unpaired_band(p1, n1, p2, n2)`: the half-width of the difference of two accuracies measured on *different*
  samples (Agresti-Caffo: one success and one failure added to each, so 0% and 100% still get a band). Used only
  where the runs keep no per-question outcomes (then the reading says the band is unpaired);
- `paired(a, b)`: two runs scored on the *same* questions, from their per-question 0/1 outcomes: the difference,
  its paired band (2 s.e. of the mean per-question difference, which only the discordant questions widen) and the
  exact two-sided McNemar p-value (a binomial test on the discordant questions) -- sharper than the unpaired band
  because the questions' shared difficulty cancels;
- `seed_band(values)`: run-to-run variation from repeats of one config with different seeds: mean, sample sd, and
  `band`, the band a difference of two single runs must exceed: sd x sqrt 2 times Student's t quantile with
  n - 1 degrees of freedom at the coverage of 2 s.e. (`t_multiplier`: 4.53 for 3 seeds, not 2 -- an sd estimated
  from three runs is itself uncertain, and a z band on it would call chance differences real);
- `spread_band(xs, ys)`: the band of the difference of two means from their samples' spread (seed repeats of two
  configs; the first vs last third of a logged metric): Welch's s.e. times Student's t at its Welch-Satterthwaite
  degrees of freedom (`t_multiplier`), for the same reason as the seed band;
- `correlation(xs, ys)`: Pearson's r (`statistics.correlation`) with its Fisher-z interval;
- `Noise` (a difference, its question band and, when measured, its seed band) with its `Verdict`, and
  `noise_words`, the one wording every section prints.

A difference is `Verdict.BEYOND` only when it exceeds the question-sampling band *and* the seed band when one is
known; `Verdict.WITHIN` otherwise.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

Z = 2.0
"""Standard errors in every band (about a 95% two-sided interval)."""


# ---- one accuracy ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Interval:
    """An estimate and its interval (`low`, `high`)."""

    estimate: float
    low: float
    high: float

    @property
    def half_width(self) -> float:
        """The larger distance from the estimate to an end (a Wilson interval is not symmetric)."""
        return max(self.estimate - self.low, self.high - self.estimate)


def wilson(successes: int, n: int, z: float = Z) -> Interval:
    """The Wilson score interval of `successes` out of `n`: centre (p + z²/2n) / (1 + z²/n), half-width
    z sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n); stays inside [0, 1] and is not empty at 0% or 100%."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"wilson needs 0 <= successes <= n and n > 0 (got {successes} of {n})")
    p = successes / n
    scale = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / scale
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / scale
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half))


def accuracy_interval(p: float, n: int, z: float = Z) -> Interval:
    """`wilson` of an accuracy `p` measured on `n` questions."""
    return wilson(round(p * n), n, z)


# ---- two accuracies ---------------------------------------------------------------------------------------------

def unpaired_band(p1: float, n1: int, p2: float, n2: int, z: float = Z) -> float:
    """z standard errors of p1 - p2 for two independent samples (Agresti-Caffo: a success and a failure added to
    each sample)."""
    a1, a2 = (p1 * n1 + 1) / (n1 + 2), (p2 * n2 + 1) / (n2 + 2)
    return z * math.sqrt(a1 * (1 - a1) / (n1 + 2) + a2 * (1 - a2) / (n2 + 2))


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p-value: under no difference each discordant question is equally likely to favour
    either run, so the smaller count is binomial(only_a + only_b, 1/2); p = 2 P(X <= smaller), at most 1."""
    discordant = only_a + only_b
    if discordant == 0:
        return 1.0
    tail = sum(math.comb(discordant, k) for k in range(min(only_a, only_b) + 1)) / 2 ** discordant
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class Paired:
    """Two runs' outcomes on the same `n` questions: questions only `a` got right, only `b`, the difference of the
    accuracies (a - b), its paired band and the exact McNemar p-value."""

    n: int
    only_a: int
    only_b: int
    diff: float
    band: float
    p_value: float


def paired(a: Sequence[float], b: Sequence[float], z: float = Z) -> Paired:
    """Paired comparison of per-question 0/1 outcomes `a` and `b` (same questions, same order). The band is z
    standard errors of the mean per-question difference d_i = a_i - b_i: z sqrt(var(d) / n), var(d) =
    (only_a + only_b)/n - diff² (Wald, paired)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired outcomes need the same questions in both runs (got {len(a)} and {len(b)})")
    if any(x not in (0, 1) for x in (*a, *b)):
        raise ValueError("paired outcomes are 0/1 per question (answer reward)")
    n = len(a)
    only_a = sum(1 for x, y in zip(a, b) if x > y)
    only_b = sum(1 for x, y in zip(a, b) if y > x)
    diff = (only_a - only_b) / n
    variance = max(0.0, (only_a + only_b) / n - diff * diff)
    return Paired(n, only_a, only_b, diff, z * math.sqrt(variance / n), mcnemar_p(only_a, only_b))


# ---- run-to-run variation ---------------------------------------------------------------------------------------

def t_multiplier(degrees_of_freedom: float, z: float = Z) -> float:
    """Student's t quantile with `degrees_of_freedom` at the two-sided coverage of `z` standard errors (z = 2:
    95.45%): what replaces z when the sd is estimated from degrees_of_freedom + 1 values (1: 13.97, 2: 4.53,
    9: 2.32; it tends to z)."""
    from scipy.stats import norm, t

    return float(t.ppf(norm.cdf(z), degrees_of_freedom))


@dataclass(frozen=True)
class SeedBand:
    """Final values of one config run with different seeds: their mean, sample sd, and `band`, the band a
    difference of two single runs must exceed (`multiplier` sd sqrt 2, the multiplier `t_multiplier(n - 1)`)."""

    values: tuple[float, ...]
    mean: float
    sd: float
    band: float
    multiplier: float

    def for_means(self, runs_a: int = 1, runs_b: int = 1) -> float:
        """The band for a difference of two means over `runs_a` and `runs_b` seeds: multiplier sd sqrt(1/a + 1/b)."""
        return self.multiplier * self.sd * math.sqrt(1 / runs_a + 1 / runs_b)

    def for_rise(self, runs: int = 1) -> float:
        """The band for the mean rise of `runs` seeds from a start they share (the same warm start validated on
        the same questions: no seed variance there), so only the end varies: multiplier sd / sqrt(runs)."""
        return self.multiplier * self.sd / math.sqrt(runs)

    def to_dict(self) -> dict:
        return {"values": list(self.values), "mean": self.mean, "sd": self.sd, "band": self.band,
                "multiplier": self.multiplier}


def seed_band(values: Sequence[float], z: float = Z) -> SeedBand | None:
    """`SeedBand` of seed repeats' final values (None below 2 repeats: no spread to measure)."""
    if len(values) < 2:
        return None
    sd, multiplier = statistics.stdev(values), t_multiplier(len(values) - 1, z)
    return SeedBand(tuple(values), statistics.fmean(values), sd, multiplier * sd * math.sqrt(2), multiplier)


def spread_band(xs: Sequence[float], ys: Sequence[float], z: float = Z) -> float | None:
    """The band of mean(xs) - mean(ys) from the samples' own spread (None with fewer than 2 values on a side):
    Welch's standard error sqrt(var x / n_x + var y / n_y) times Student's t at the coverage of `z` s.e.'s, with
    the Welch-Satterthwaite degrees of freedom -- two seed repeats a side leave the spread barely known (1 to 2
    degrees of freedom), so z would call chance differences real; many values a side (a logged metric's thirds)
    give about z. 0 when neither side varies."""
    if len(xs) < 2 or len(ys) < 2:
        return None
    part_x, part_y = statistics.variance(xs) / len(xs), statistics.variance(ys) / len(ys)
    if part_x + part_y == 0:
        return 0.0
    freedom = (part_x + part_y) ** 2 / (part_x ** 2 / (len(xs) - 1) + part_y ** 2 / (len(ys) - 1))
    return t_multiplier(freedom, z) * math.sqrt(part_x + part_y)


# ---- correlation --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Correlation:
    """Pearson's r over `n` pairs and its Fisher-z interval (None below 4 pairs)."""

    r: float
    n: int
    low: float | None
    high: float | None


def correlation(xs: Sequence[float], ys: Sequence[float], z: float = Z) -> Correlation | None:
    """Pearson's r (`statistics.correlation`) and tanh(atanh(r) ± z / sqrt(n - 3)); None below 3 pairs or when
    either side is constant (r undefined)."""
    n = len(xs)
    if n < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    r = statistics.correlation(xs, ys)
    if n < 4 or abs(r) >= 1.0:
        return Correlation(r, n, None, None)
    centre, half = math.atanh(r), z / math.sqrt(n - 3)
    return Correlation(r, n, math.tanh(centre - half), math.tanh(centre + half))


# ---- the verdict and its wording ------------------------------------------------------------------------------------

class Verdict(str, Enum):
    """What a difference says against its noise."""

    BEYOND = "beyond noise"
    WITHIN = "within noise"


@dataclass(frozen=True)
class Noise:
    """A difference and the noise it must exceed: `band` (question sampling: paired on the same questions when
    `paired`, else unpaired) and `seed_band` (run-to-run variation, when measured); `p_value`: exact McNemar
    (paired only)."""

    diff: float
    band: float
    paired: bool = False
    seed_band: float | None = None
    p_value: float | None = None

    @property
    def verdict(self) -> Verdict:
        exceeds = abs(self.diff) > self.band and (self.seed_band is None or abs(self.diff) > self.seed_band)
        return Verdict.BEYOND if exceeds else Verdict.WITHIN

    @property
    def beyond(self) -> bool:
        return self.verdict is Verdict.BEYOND

    def to_dict(self) -> dict:
        return {"diff": self.diff, "band": self.band, "paired": self.paired, "seed_band": self.seed_band,
                "p_value": self.p_value, "verdict": self.verdict.value}


def question_outcomes(samples: Sequence[dict], n: int) -> list[int] | None:
    """Per-question 0/1 answer rewards of one validation, from its saved rollouts (`answer_reward` each, in the
    questions' order): None unless all `n` questions were saved (a run saves only a few by default), so a
    comparison then falls back to the unpaired band."""
    if len(samples) != n or any(s.get("answer_reward") not in (0, 1, 0.0, 1.0) for s in samples):
        return None
    return [int(s["answer_reward"]) for s in samples]


def compare_outcomes(a: Sequence[float] | None, b: Sequence[float] | None, p_a: float, n_a: int, p_b: float,
                     n_b: int, seed: float | None = None) -> Noise:
    """`Noise` of p_a - p_b: paired when both runs' per-question outcomes are known (same questions), else the
    unpaired band of the two rates; `seed`: the seed band, when measured."""
    if a is not None and b is not None and len(a) == len(b) and a:
        found = paired(a, b)
        return Noise(found.diff, found.band, True, seed, found.p_value)
    return Noise(p_a - p_b, unpaired_band(p_a, n_a, p_b, n_b), False, seed)


def points(value: float) -> str:
    """A band or difference of rates in percentage points, one decimal: 0.133 -> `13.3`."""
    return f"{100 * value:.1f}"


def noise_words(noise: Noise, unit: str = "points") -> str:
    """The one wording of a verdict: `beyond noise, band ±13.3 points` (unpaired), `within noise, paired band ±4.0
    points (McNemar p = 0.21)`, plus `, seed band ±9.1 points` when run-to-run variation is known. `unit` "" prints
    raw values (a metric that is not a rate)."""
    def amount(value: float) -> str:
        return f"{points(value)} {unit}" if unit else f"{value:.3g}"

    kind = "paired band" if noise.paired else "band"
    text = f"{noise.verdict.value}, {kind} ±{amount(noise.band)}"
    if noise.p_value is not None:
        text += f" (McNemar p = {noise.p_value:.2g})"
    if noise.seed_band is not None:
        text += f", seed band ±{amount(noise.seed_band)}"
    return text
