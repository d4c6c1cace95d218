"""The full profile's memory model and GPU-hour estimates (hw3lib.core.cost), checked against the CPU rehearsal.

Prints three markdown tables (the README's "What the full workbook costs" is this output):

1. **The model against the CPU measurements**: each phase of bench/rehearse.py's run (bench/results/
   rehearse.json), its measured peak resident set beside the model's prediction. Two host constants are
   calibrated on the two evaluation phases (the process's own memory, from `eval_hf`; what vLLM's CPU
   engine holds beyond its weights and KV cache, from `eval_vllm`) and marked as such; every other row is
   a prediction from the parts of `hw3lib.core.cost` (on the CPU the engine never sleeps).
2. **One 80 GB GPU**: each course's GRPO run at the course's settings, colocated (at the old default
   `gpu_memory_utilization=0.85` and at `COLOCATED_SHARE`) and with the engine on a second GPU.
3. **GPU-hours** (estimates): every run of the full profile's grids and single runs, for two response
   lengths (the whole 1,024-token budget, an upper bound, and half of it), beside the handouts' own
   estimates where they give one.
4. **What fits your card** (the README's section of that name): each course's runs at their default settings
   on an 80, 40, 24 and 16 GB card with bf16 and on a T4 (16 GB, float32), and where one does not fit the
   least change that does (hw3lib.core.preflight.fit_table); then the 24 GB recipe of each course
   (hw3lib.core.preflight.recipe_24gb) with its peaks.

    .venv/bin/python bench/cost_model.py                 # all four tables
    .venv/bin/python bench/cost_model.py --check         # exit 1 if a CPU prediction is off by more than 15%
    .venv/bin/python bench/cost_model.py --write-readme  # put the tables into README.md between their markers
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from hw3lib.core import cost, preflight
from hw3lib.core.benchmark import record_header, write_json
from hw3lib.models.real_shape import course_shapes

REHEARSAL = ROOT / "bench" / "results" / "rehearse.json"
PROMPT_TOKENS = cost.PROMPT_TOKENS  # stated assumption: the R1-Zero template (~120 tokens) plus a question
TOLERANCE = 0.15
README = ROOT / "README.md"
DOCS = ROOT / "docs" / "gpu.md"  # the long tables (1-3); the README keeps the fit table and the per-notebook summary
BEGIN, END = "<!-- cost tables: python bench/cost_model.py --write-readme -->", "<!-- end of cost tables -->"
SUMMARY_BEGIN = "<!-- notebook costs: python bench/cost_model.py --write-readme -->"
SUMMARY_END = "<!-- end of notebook costs -->"
TABLE_COURSES = ("nlpdl-hw3", "cs336-a5")  # one course per model in the long tables (CSE 599-O's runs are CS336's)
FIT_BEGIN, FIT_END = "<!-- fit table: python bench/cost_model.py --write-readme -->", "<!-- end of fit table -->"
FIT_DEVICES = (80, 40, 24, 16, "T4-16GB")  # nominal bf16 cards, then a T4 (no bf16: float32)
KIND_WORDS = {"eval": f"evaluation (share {cost.EVAL_SHARE})", "grpo": "GRPO", "sft": "SFT", "ei": "expert iteration"}
HANDOUT_ESTIMATES = {("cs336-a5", "learning_rate"): 6.0}  # H100-hours the MATH handout states for its sweep


def gb(value: float) -> str:
    return f"{value / cost.GiB:.1f} GiB"


# ---- 1. the CPU check ------------------------------------------------------------------------------------------

def cpu_rows(rehearsal: dict) -> list[dict]:
    """Measured vs predicted peak resident set of each rehearsal phase that the model covers."""
    from hw3lib.models.real_shape import real_shape_config

    phases, build = rehearsal["phases"], rehearsal["phases"]["build"]["result"]
    names = {"qwen3": "qwen3-0.6b", "math_eval": "qwen2.5-math-1.5b", "math_train": "qwen2.5-math-1.5b"}
    shapes = {key: cost.Shape.from_config(key, real_shape_config(names[key], build[key]["layers"])) for key in names}
    kv = int(rehearsal["kv_gib"] * cost.GiB)
    qwen3 = shapes["qwen3"]
    measured = {name: phase["peak_rss_bytes"] for name, phase in phases.items()}
    process = measured["eval_hf"] - 2 * qwen3.params  # the process itself: Python, torch, transformers
    vllm_extra = measured["eval_vllm"] - process - 2 * qwen3.params - kv  # vLLM's CPU engine beyond weights + KV

    def engine(shape):
        return 2 * shape.params + kv + vllm_extra

    counts = rehearsal["counts"]
    grpo_micro = 2 * (PROMPT_TOKENS + counts["rollout_tokens"])
    sft_response = max(phases["sft"]["result"]["response_tokens"])  # the longer of its two steps' batches

    def trainer(shape, micro_tokens, response_tokens, kl, first_step=False):
        return cost.trainer_peak(cost.trainer_parts(shape, micro_tokens, response_tokens, kl), first_step)

    predicted = {
        "eval_hf": process + 2 * qwen3.params,
        "eval_vllm": process + engine(qwen3),
        "math_eval": process + engine(shapes["math_eval"]),
        "grpo": process + engine(qwen3) + trainer(qwen3, grpo_micro, 2 * counts["rollout_tokens"], True),
        "grpo_resume": process + engine(qwen3) + trainer(qwen3, grpo_micro, 2 * counts["rollout_tokens"], True),
        "sft": process + engine(qwen3) + trainer(qwen3, sft_response + 2 * PROMPT_TOKENS, sft_response, False),
        # one optimizer step each: AdamW's moments do not exist yet during its forward/backward
        "ei": process + engine(qwen3) + trainer(qwen3, grpo_micro, 2 * counts["rollout_tokens"], False, True),
        "math_train": process + engine(shapes["math_train"])
        + trainer(shapes["math_train"], grpo_micro, 2 * counts["rollout_tokens"], False, True),
    }
    calibrated = {"eval_hf", "eval_vllm"}
    return [{"phase": name, "measured": measured[name], "predicted": value, "calibrated": name in calibrated,
             "error": value / measured[name] - 1} for name, value in predicted.items()]


def cpu_table(rows: list[dict]) -> str:
    lines = ["| rehearsal phase (CPU) | measured peak | model | error |", "|---|---|---|---|"]
    for row in rows:
        note = "calibration" if row["calibrated"] else f"{row['error']:+.0%}"
        lines.append(f"| `{row['phase']}` | {gb(row['measured'])} | {gb(row['predicted'])} | {note} |")
    return "\n".join(lines)


# ---- 2. the GPU plan ------------------------------------------------------------------------------------------

def course_runs() -> dict[str, tuple]:
    """course -> (its GRPO config in the full profile, the model's Shape)."""
    from hw3lib.core.course import get_course
    from hw3lib.core.profile import get_profile
    from hw3lib.grpo.config import GRPOConfig

    shapes = course_shapes()
    out = {}
    for course in TABLE_COURSES:
        # at the course data's longest prompt, as the tables assume it (a run measures its own)
        cfg = GRPOConfig.for_profile("full", course=course, prompt_tokens=preflight.COURSE_PROMPT_TOKENS[course])
        model = get_course(course).model_for(get_profile("full"))
        out[course] = (cfg, shapes[model])
    return out


def gpu_table() -> str:
    """Each course's GRPO run on one 80 GB card (79.2 GiB as torch reports it) at the rows per forward the loop
    uses (hw3lib.core.preflight.forward_rows: the most within 85% of the card), the engine colocated at two shares
    or on a second GPU."""
    card = int(preflight.USABLE_GIB[80] * cost.GiB)
    lines = ["| course, model | engine | share | rows per forward | generation peak | training peak | fits (within 85%) "
             "| largest colocated share |", "|---|---|---|---|---|---|---|---|"]
    for course, (cfg, shape) in course_runs().items():
        for colocated, share in ((True, 0.85), (True, cfg.gpu_memory_utilization), (False, 0.85)):
            run = cfg.replace(gpu_memory_utilization=share, policy_device="cuda:0" if colocated else "cuda:1")
            rows = preflight.forward_rows(run, "grpo", shape, card)
            plan = preflight.plan_for(run, "grpo", shape, card, rows=rows)
            generation, training = plan.peaks.values()
            where = "colocated" if colocated else "second GPU"
            lines.append(f"| {course}, {shape.name} | {where} | {share} | {rows} | {gb(generation)} | "
                         f"{gb(training)} ({training / card:.0%}) | {'yes' if plan.fits else '**no**'} | "
                         f"{plan.max_share if colocated else '-'} |")
    return "\n".join(lines)


# ---- 3. GPU-hours ------------------------------------------------------------------------------------------

def grid_configs(name: str, course: str):
    """A grid's full-profile configs; the grids that pick up earlier grids' winners get the base's settings
    (the on-policy point) as their winners."""
    import os

    from hw3lib.experiments.grids import GRIDS, build_grid, common_base

    saved = os.environ.get("HW3_COURSE")
    os.environ["HW3_COURSE"] = course  # the grids take the course from the environment, as the notebooks do
    try:
        base = common_base("full")
        choices = {"top": [{}, {}], "off_policy": {}, "settings": {}} if GRIDS[name].needs else None
        return list(build_grid(name, "full", choices=choices).configs.values()), base
    finally:
        if saved is None:
            os.environ.pop("HW3_COURSE")
        else:
            os.environ["HW3_COURSE"] = saved


def hours_text(hours: float) -> str:
    return f"{hours:.1f}" if hours >= 1 else f"{hours:.2f}"


def test_questions(course: str) -> int:
    """Questions of the course's test split: GSM8K's counted from the data; MATH's test split has 5,000."""
    import os

    if course == "math-qwen2.5":
        return 5000
    path = Path(os.environ.get("HW3_DATA_DIR", ROOT.parent / "shared" / "data")) / "gsm8k" / "test.jsonl"
    return sum(1 for _ in path.open()) if path.exists() else 1319


def notebook_rows(course: str, shape, lengths: tuple[int, int]) -> list[tuple[str, str, list[float]]]:
    """(notebook, what, hours at each response length) for the runs outside the grids."""
    from hw3lib.core.profile import get_profile
    from hw3lib.grpo.config import GRPOConfig
    from hw3lib.sft.config import EIConfig, SFTConfig
    from hw3lib.sft.experiments import EI_VARIANTS, SFT_SIZES, ei_variant_configs, sft_size_configs

    prof, questions = get_profile("full"), test_questions(course)
    grpo = GRPOConfig.for_profile("full", course=course)
    sft = sft_size_configs(SFTConfig.for_profile("full", course=course), SFT_SIZES)
    ei = ei_variant_configs(EIConfig.for_profile("full", course=course), EI_VARIANTS)
    return [
        ("01", f"zero-shot, {questions} test questions x 1", [cost.evaluation_gpu_hours(
            shape, questions, 1, PROMPT_TOKENS, n) for n in lengths]),
        ("02", f"Best-of-N, {questions} x {prof.best_of_n}", [cost.evaluation_gpu_hours(
            shape, questions, prof.best_of_n, PROMPT_TOKENS, n) for n in lengths]),
        ("04", f"one GRPO run, {grpo.n_grpo_steps} steps", [cost.run_gpu_hours(
            grpo, shape, PROMPT_TOKENS, n) for n in lengths]),
        ("05", f"SFT, {len(sft)} runs x {next(iter(sft.values())).n_sft_steps} steps", [sum(
            cost.sft_gpu_hours(c, shape, PROMPT_TOKENS, n) for c in sft.values()) for n in lengths]),
        ("05", f"expert iteration, {len(ei)} runs (every rollout kept: an upper bound)", [sum(
            cost.ei_gpu_hours(c, shape, PROMPT_TOKENS, n) for c in ei.values()) for n in lengths]),
    ]


def hours_table() -> str:
    from hw3lib.core.course import get_course
    from hw3lib.core.profile import get_profile
    from hw3lib.experiments.grids import GRIDS

    lines = ["| course | notebook | runs | H100-hours, every response 1,024 tokens | at 512 tokens | "
             "handout's estimate |", "|---|---|---|---|---|---|"]
    shapes = course_shapes()
    for course in TABLE_COURSES:
        shape = shapes[get_course(course).model_for(get_profile("full"))]
        total = [0.0, 0.0]
        for notebook, what, hours in notebook_rows(course, shape, (1024, 512)):
            total = [t + h for t, h in zip(total, hours)]
            lines.append(f"| {course} | {notebook} | {what} | {hours_text(hours[0])} | {hours_text(hours[1])} | - |")
        for name in GRIDS:
            try:
                configs, _ = grid_configs(name, course)
            except ValueError:
                continue
            hours = [sum(cost.run_gpu_hours(c, shapes[c.model] if c.model in shapes else shapes["Qwen/Qwen3-0.6B"],
                                            PROMPT_TOKENS, length) for c in configs)
                     for length in (configs[0].sampling_max_tokens, configs[0].sampling_max_tokens // 2)]
            total = [t + h for t, h in zip(total, hours)]
            steps = sorted({c.n_grpo_steps for c in configs})
            handout = HANDOUT_ESTIMATES.get((course, name))
            lines.append(f"| {course} | 05 | grid `{name}`, {len(configs)} run(s) x {'/'.join(map(str, steps))} steps | "
                         f"{hours_text(hours[0])} | {hours_text(hours[1])} | {f'{handout:g}' if handout else '-'} |")
        lines.append(f"| {course} | **all** | | **{total[0]:.0f}** | **{total[1]:.0f}** | |")
    return "\n".join(lines)


def tables(rows: list[dict]) -> str:
    return "\n\n".join([cpu_table(rows), gpu_table(), hours_table()])


# ---- 4. what fits each card ----------------------------------------------------------------------------------

def fit_cell(row: dict) -> str:
    """`fits (15 rows, 64.3 GiB = 81%)`: the rows per forward the loop uses and the plan's peak as a share of the card."""
    if row["change"] == "does not fit":
        return "**does not fit**"
    count = row["forward_rows"]
    rows = f"{count} row{'s' if count > 1 else ''}, " if count else ""
    peak = f"({rows}{row['peak_gib']} GiB = {row['share_of_card']:.0%})"
    return f"fits {peak}" if row["fits"] else f"`{row['change']}` {peak}"


RECIPE_COURSES = ("nlpdl-hw3", "cs336-a5", "cs336-a5-2026")  # one per model


def recipe_lines() -> list[str]:
    """The 24 GB recipe of each course on the smaller 24 GB cards, with its peaks by the memory model."""
    card = preflight.nominal_device(24)
    lines = []
    for course in RECIPE_COURSES:
        changes = preflight.recipe_24gb(course)
        cfg = preflight.course_config(course, "grpo").replace(**changes)
        report = preflight.preflight(cfg, "grpo", card)
        peaks = ", ".join(f"{name} {value / cost.GiB:.1f} GiB" for name, value in report.peaks.items())
        settings = ", ".join(f"{key}={value!r}" for key, value in changes.items())
        lines.append(f"- {course} ({cfg.model}), GRPO: `{settings}` -- {peaks} of {card.total_bytes / cost.GiB:.1f} GiB")
    return lines


def fit_text(devices=FIT_DEVICES) -> str:
    """The README's fit table (hw3lib.core.preflight.fit_table) and the 24 GB recipes."""
    rows = preflight.fit_table(devices)
    infos = [preflight.nominal_device(d) for d in devices]
    heads = [f"{d} GB ({i.total_bytes / cost.GiB:.1f} GiB)" if isinstance(d, int) else
             f"{i.name} ({i.total_bytes / cost.GiB:.1f} GiB, {preflight.supported_dtype(i)[0]})"
             for d, i in zip(devices, infos)]
    lines = ["| course, model | run | " + " | ".join(heads) + " |", "|---|---|" + "---|" * len(heads)]
    for start in range(0, len(rows), len(devices)):
        group = rows[start:start + len(devices)]
        first = group[0]
        lines.append(f"| {first['course']}, {first['model']} | {KIND_WORDS[first['kind']]} | "
                     + " | ".join(fit_cell(row) for row in group) + " |")
    return "\n".join(lines + ["", "The 24 GB recipes (`hw3lib.core.preflight.recipe_24gb`):", "", *recipe_lines()])


def summary_table() -> str:
    """What each notebook costs each course preset on one H100 (hw3lib.experiments.plan.notebook_plan: what the
    notebook itself prints before its GPU work), its handout's sections and, in brackets, the extras on top."""
    from hw3lib.core.course import COURSE_NAMES
    from hw3lib.experiments.plan import NOTEBOOK_SECTIONS, notebook_plan
    from hw3lib.experiments.plan import _hours as hours_words

    h100 = preflight.nominal_device("H100-80GB")
    notebooks = [nb for nb in NOTEBOOK_SECTIONS]
    lines = ["| course | " + " | ".join(f"notebook {nb}" for nb in notebooks) + " | all |",
             "|---|" + "---|" * (len(notebooks) + 1)]

    def cell(own, every):  # the plan's own wording of hours (2 digits below 1 h); extras in brackets
        extra = every[0] - own[0]
        text = hours_words(own) if own[0] else "-"
        return text + (f" [+{hours_words((extra, extra)).split(' / ')[0]}]" if extra >= 0.005 else "")

    for course in COURSE_NAMES:
        own = [notebook_plan(nb, "full", course, extras=False, device=h100).total for nb in notebooks]
        every = [notebook_plan(nb, "full", course, extras=True, device=h100).total for nb in notebooks]
        total = tuple(sum(t[i] for t in own) for i in (0, 1)), tuple(sum(t[i] for t in every) for i in (0, 1))
        lines.append(f"| `{course}` | " + " | ".join(cell(o, e) for o, e in zip(own, every)) + f" | {cell(*total)} |")
    return "\n".join(lines)


def replace_between(text: str, begin: str, end: str, body: str) -> str:
    """`text` with what stands between the markers `begin` and `end` replaced by `body`."""
    if begin not in text or end not in text:
        sys.exit(f"{README}: the markers {begin!r} and {end!r} are missing: put them where the table goes")
    head, rest = text.split(begin, 1)
    return head + begin + "\n" + body + "\n" + end + rest.split(end, 1)[1]


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_readme(text: str, fits: str, summary: str) -> None:
    """Put the fit table and the per-notebook summary between their README markers and the long tables between
    theirs in docs/gpu.md (temporary files, then rename)."""
    readme = replace_between(README.read_text(), FIT_BEGIN, FIT_END, fits)
    _write(README, replace_between(readme, SUMMARY_BEGIN, SUMMARY_END, summary))
    _write(DOCS, replace_between(DOCS.read_text(), BEGIN, END, text))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a CPU prediction is off by more than 15%%")
    parser.add_argument("--write-readme", action="store_true", help="put the tables into README.md")
    parser.add_argument("--out", default=None, help="also write the predicted-vs-measured rows to this JSON file")
    args = parser.parse_args()
    rows = cpu_rows(json.loads(REHEARSAL.read_text()))
    text, fits, summary = tables(rows), fit_text(), summary_table()
    print(text + "\n\n" + fits + "\n\n" + summary)
    if args.write_readme:
        write_readme(text, fits, summary)
    worst = max(abs(row["error"]) for row in rows if not row["calibrated"])
    if args.out:
        write_json(args.out, {**record_header("cost_model"), "rows": rows, "largest_error": worst})
    print(f"\nlargest CPU prediction error: {worst:.0%} (limit {TOLERANCE:.0%})")
    return 1 if args.check and worst > TOLERANCE else 0


if __name__ == "__main__":
    sys.exit(main())
