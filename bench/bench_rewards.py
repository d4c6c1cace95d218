"""Throughput of `r1_zero_reward_fn` on GSM8K-style responses, against plain math-verify.

Run:  PYTHONPATH=. .venv/bin/python bench/bench_rewards.py [--n 6000] [--reference-every 10]

Generates `--n` R1-Zero responses deterministically (seed 0): correct answers in many surface
forms (plain, thousands separators, `$`, `\\$`, units, `.00`, `\\text{}`, `\\boxed{}`,
`\\frac{a}{b}`, `a/b`, `x = `, and a few symbolic ones like `\\sqrt{324}`), wrong answers,
"hedged" answers whose extra words or signs change the claim (`18 or more`, `at least 18`,
`\\geq 18`, `18 and twenty`, `17 + 1`; all wrong under the R1-Zero contract), and malformed
responses (no space in "</think><answer>", missing "</answer>", no tags). It grades all
of them with our grader in this one process (warm: math-verify is imported beforehand) and prints
responses/s. The reference is the typical grader: the same R1-Zero format gate and answer
extraction, then math-verify `parse` + `verify` with their default settings; it grades every
`--reference-every`-th response and we print its responses/s, the speed ratio, and the agreement.

math-verify's LaTeX extractor only looks inside math delimiters, so the reference wraps the answer
as `$answer$` (without that it fails every bare `\frac`, `\sqrt` and `\text` answer).
Wall-clock rates depend on how busy the machine is; the CPU-time rates (time.process_time) are
the steadier single-core measure, and both are printed.

Expected disagreements, by design:
- ours 1, reference 0: "<answer> 18 dollars </answer>": math-verify reads the unit word as a
  product of symbols (18*d*o*l*l*a*r*s), which is not 18; we treat trailing words after a number
  as its unit (unless one of them changes the claim, see `hw3lib.tasks.rewards.CLAIM_WORDS`).
- ours 0, reference 1: hedged answers math-verify accepts: `18 or more`, `\\geq 18`,
  `\\approx 18`, and arithmetic left undone such as `17 + 1` or `18 \\cdot 1`.
Any other disagreement is printed with its response so it can be looked at.
"""

from __future__ import annotations

import argparse
import random
import time

REASONING = (
    "She starts with {a} and adds {b}, so {a} + {b} = {s}. Then she removes {c}: {s} - {c} = {g}. "
    "Checking: {g} + {c} = {s}, which matches."
)


def correct_forms(gold: int, rng: random.Random) -> list[str]:
    """Ways a model writes the correct answer (all graded 1 by the R1-Zero contract)."""
    k = rng.randint(2, 9)
    forms = [f"{gold}", f"{gold:,}", f"${gold}", f"\\${gold}", f"{gold}.00", f"{gold} dollars",
             f"\\text{{{gold}}}", f"\\boxed{{{gold}}}", f"\\frac{{{gold * k}}}{{{k}}}", f"{gold * k}/{k}",
             f"x = {gold}", f"\\boxed{{\\frac{{{gold * 2}}}{{2}}}}", f"{gold} apples"]
    return forms


def hedged_forms(gold: int) -> list[str]:
    """Answers that mention the gold number but claim something else (all graded 0)."""
    return [f"{gold} or more", f"at least {gold}", f"about {gold}", f"\\geq {gold}", f"\\approx {gold}",
            f"{gold} and twenty", f"{gold} to {gold + 2}", f"{gold} dollars + 2", f"{gold - 1} + 1", f"{gold} \\cdot 1"]


def make_responses(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """(response, gold, kind) triples; kind is correct/wrong/hedged/malformed/symbolic."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        gold = rng.choice([rng.randint(0, 99), rng.randint(100, 9999), rng.randint(10_000, 2_000_000)])
        a = rng.randint(gold, gold + 500)
        b, c = rng.randint(0, 300), 0
        c = a + b - gold
        think = REASONING.format(a=a, b=b, s=a + b, c=c, g=gold)
        draw = rng.random()
        if draw < 0.55:
            kind, answer = "correct", rng.choice(correct_forms(gold, rng))
        elif draw < 0.75:
            kind, answer = "wrong", rng.choice([str(gold + rng.randint(1, 50)), f"\\boxed{{{gold - 1}}}",
                                                f"\\frac{{{gold * 2 + 1}}}{{2}}", f"{gold}.5", "eighteen"])
        elif draw < 0.80:
            kind, answer = "hedged", rng.choice(hedged_forms(gold))
        elif draw < 0.98:
            kind = "malformed"
            answer = str(gold)
            template = rng.choice(["{t} </think><answer> {a} </answer>", "{t} </think> <answer> {a}",
                                   "{t} The answer is {a}.", "{t} <answer> {a} </answer>"])
            rows.append((template.format(t=think, a=answer), str(gold), kind))
            continue
        else:  # a few symbolic answers that need math-verify
            root = rng.randint(2, 60)
            gold = root
            kind, answer = "symbolic", rng.choice([f"\\sqrt{{{root * root}}}", f"\\sqrt{{{root * root * 4}}}/2"])
        rows.append((f"{think} </think> <answer> {answer} </answer>", str(gold), kind))
    return rows


def reference_grade(response: str, gold: str) -> float:
    """The typical reference: the R1-Zero format gate, then plain math-verify with its defaults."""
    from math_verify import parse, verify

    if "</think> <answer>" not in response or "</answer>" not in response:
        return 0.0
    answer = response.split("<answer>")[-1].replace("</answer>", "").strip()
    return float(verify(parse(f"${gold}$"), parse(f"${answer}$")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=6000, help="responses to grade (>= 5000 for the report)")
    parser.add_argument("--reference-every", type=int, default=10, help="grade every k-th response with the reference")
    parser.add_argument("--out", default=None, help="also write the numbers to this JSON file")
    args = parser.parse_args()

    import logging

    import math_verify  # noqa: F401 - import cost is paid once per process; keep it out of both timings

    from hw3lib.tasks import rewards

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # the reference warns on its own timeouts
    rows = make_responses(args.n)
    rewards.answers_equivalent("\\sqrt{4}", "2")  # warm math-verify's parser (first call builds grammars)
    rewards._symbolic_equivalent.cache_clear()  # no answer is cached before the timed run

    started, started_cpu = time.perf_counter(), time.process_time()
    ours = [rewards.r1_zero_reward_fn(response, gold)["reward"] for response, gold, _ in rows]
    ours_s, ours_cpu_s = time.perf_counter() - started, time.process_time() - started_cpu

    subset = list(range(0, len(rows), args.reference_every))
    started, started_cpu = time.perf_counter(), time.process_time()
    reference = [reference_grade(rows[i][0], rows[i][1]) for i in subset]
    reference_s, reference_cpu_s = time.perf_counter() - started, time.process_time() - started_cpu

    kinds = {}
    for _, _, kind in rows:
        kinds[kind] = kinds.get(kind, 0) + 1
    ours_rate, reference_rate = len(rows) / ours_s, len(subset) / reference_s
    ours_cpu_rate, reference_cpu_rate = len(rows) / ours_cpu_s, len(subset) / reference_cpu_s
    print(f"responses: {len(rows)} ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})")
    print(f"ours (r1_zero_reward_fn, fast path + math-verify fallback): {ours_rate:,.0f} responses/s wall, "
          f"{ours_cpu_rate:,.0f} responses/s of CPU time ({ours_s:.2f} s wall, "
          f"mean reward {sum(ours) / len(ours):.3f})")
    print(f"reference (format gate + math_verify parse/verify, defaults) on {len(subset)}: "
          f"{reference_rate:,.0f} responses/s wall, {reference_cpu_rate:,.0f} responses/s of CPU time "
          f"({reference_s:.2f} s wall)")
    print(f"speed ratio ours/reference: {ours_rate / reference_rate:.1f}x wall, "
          f"{ours_cpu_rate / reference_cpu_rate:.1f}x CPU time")

    well_formed = [i for i in subset if rows[i][2] != "malformed"]
    agree = sum(ours[i] == reference[j] for j, i in enumerate(subset))
    agree_formed = sum(ours[i] == reference[subset.index(i)] for i in well_formed)
    print(f"agreement with the reference: {agree}/{len(subset)} overall, "
          f"{agree_formed}/{len(well_formed)} on well-formed responses")
    disagreements = [(i, j) for j, i in enumerate(subset) if ours[i] != reference[j]]
    unit_words = sum(rows[i][0].split("<answer>")[-1].split()[1:] == ["dollars", "</answer>"] for i, _ in disagreements)
    hedged = sum(rows[i][2] == "hedged" for i, _ in disagreements)
    print(f"disagreements: {len(disagreements)}, of which '<number> dollars' answers (ours 1): {unit_words}, "
          f"hedged answers (ours 0): {hedged}, other: {len(disagreements) - unit_words - hedged}")
    if args.out:
        from hw3lib.core.benchmark import record_header, write_json

        write_json(args.out, {**record_header("bench_rewards"), "responses": len(rows), "kinds": kinds,
                              "ours_per_s": ours_rate, "reference_per_s": reference_rate,
                              "ours_cpu_per_s": ours_cpu_rate, "reference_cpu_per_s": reference_cpu_rate,
                              "agreement": agree, "compared": len(subset), "disagreements": len(disagreements)})
    disagreements.sort(key=lambda pair: (rows[pair[0]][2] != "hedged", pair[0]))  # the hedged ones first
    for i, j in disagreements[:12]:
        answer = rows[i][0].split("<answer>")[-1]
        print(f"  ours {ours[i]:.0f} reference {reference[j]:.0f} gold {rows[i][1]!r} answer {answer!r}")


if __name__ == "__main__":
    main()
