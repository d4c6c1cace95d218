"""Build `writeup/writeup.pdf` from the user's own runs.

The notebooks export their plots (PNG/PDF) and a small JSON of their key numbers to `figures/`.
This module gathers every `figures/*.json` into `writeup/results.json` and compiles
`writeup/writeup.typ` with Typst (the `typst` PyPI package, fully offline). The Typst source reads
the numbers from that JSON, so no figure in the writeup is typed by hand; sections whose notebook
has not been run say so ("Not run yet") instead of failing. Each section ends with the student's own
discussion, `writeup/answers/<key>.md` (`ANSWER_KEYS`), included verbatim (a placeholder when absent);
the build reads those files and never writes them.

`SECTIONS` lists the writeup's top-level sections in order with the notebook that fills each;
`check_writeup(pdf, required_sections, must_be_run)` opens a built PDF (pypdf), splits its text at
its headings (the PDF's bookmarks) and reports the required sections it lacks and the sections
that still say "Not run yet" though they must have been run (`hw3lib.workbook.run` runs it after each
build).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from hw3lib.core.io import (DataFileError, atomic_write_bytes, atomic_write_json, course_output_root, figures_dir,
                            project_root)


# The grids' sections (writeup/grids.typ), in the order the writeup shows them: grid -> section title.
GRID_SECTIONS = {
    "learning_rate": "Learning-rate sweep",
    "baselines": "Baselines: no baseline vs the group mean",
    "length_normalization": "Length normalization: per response vs constant",
    "std_normalization": "Dividing advantages by the group std",
    "off_policy": "Off-policy GRPO: broad sweep",
    "off_policy_focused": "Off-policy GRPO: focused runs",
    "clip_ablation": "Clipping the importance ratio",
    "prompt": "Prompt: R1-Zero vs question only",
    "sync_strategy": "Colocated sync strategy: one step vs several epochs per rollout batch",
    "kl_drift": "KL drift from the initial policy",
    "leaderboard": "Leaderboard run",
    "algorithms": "Beyond the handouts: GRPO, Dr. GRPO, DAPO, GSPO, CISPO and MIS from one start",
}
# Every top-level section of writeup.pdf in order, with the notebook (number) whose run fills it.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("Zero-shot evaluation", "01"),
    ("Best-of-N test-time scaling", "02"),
    ("The GRPO building blocks", "03"),
    ("GRPO training", "04"),
    ("Keyword inclusion on a transformer written in hw3lib", "04"),
    ("Asynchronous GRPO: overlapping generation and training", "04"),
    *((title, "05") for title in GRID_SECTIONS.values()),
    ("SFT at several data sizes, and expert iteration", "05"),
    ("Kissing configurations in 11 dimensions", "06"),
)
NOT_RUN = "Not run yet"  # what `missing()` in writeup/common.typ prints
# The student's own words: writeup/answers/<key>.md, one per section, included verbatim below the computed
# reading (`your-answer(key)` in writeup/common.typ). Section title -> key (a grid's key is its name).
ANSWERS_DIR = "answers"
ANSWER_KEYS: dict[str, str] = {
    "Zero-shot evaluation": "zero_shot", "Best-of-N test-time scaling": "best_of_n",
    "The GRPO building blocks": "grpo_units", "GRPO training": "grpo_loop",
    "Keyword inclusion on a transformer written in hw3lib": "keyword",
    "Asynchronous GRPO: overlapping generation and training": "async_grpo",
    **{title: name for name, title in GRID_SECTIONS.items()},
    "SFT at several data sizes, and expert iteration": "sft_ei",
    "Kissing configurations in 11 dimensions": "kissing",
}


# What each section must say once it has runs (the handouts' written deliverables, issue-by-issue): phrases the
# PDF's text must hold; a tuple of alternatives where either form answers the item. Every section also needs
# the student's box ("Your answer"), and every section with sampled numbers its settings line ("Settings:").
EVERY_SECTION = ("Your answer",)
WITH_SETTINGS = ("Settings:",)
REQUIRED_ITEMS: dict[str, tuple] = {
    "Zero-shot evaluation": WITH_SETTINGS + ("Model or parser?",
                                             ("An example of the correct category", "No response was correct")),
    "Best-of-N test-time scaling": WITH_SETTINGS + ("Solving or recognizing?",),
    "The GRPO building blocks": ("Which normalization biases towards short or long responses?",),
    "GRPO training": WITH_SETTINGS + ("Example rollouts over time",),
    "Keyword inclusion on a transformer written in hw3lib": WITH_SETTINGS + ("Reward hacking.",),
    "Asynchronous GRPO: overlapping generation and training": WITH_SETTINGS,
    "SFT at several data sizes, and expert iteration": WITH_SETTINGS + ("The handout's thresholds", "Against SFT:"),
    **{title: WITH_SETTINGS + ("Logged metrics", "Stability") for title in GRID_SECTIONS.values()},
}
REQUIRED_ITEMS[GRID_SECTIONS["learning_rate"]] += ("The handout asks for a validation accuracy of at least",)
REQUIRED_ITEMS[GRID_SECTIONS["off_policy"]] += ("Why these ranges",)
REQUIRED_ITEMS["Kissing configurations in 11 dimensions"] = ("How the stored program was found", "Largest free cap",
                                                             "What limited it.", "Reflection.",
                                                             "Orbit search beyond 582")
REQUIRED_ITEMS[GRID_SECTIONS["length_normalization"]] += ("think about it",)
REQUIRED_ITEMS[GRID_SECTIONS["leaderboard"]] += ("How the preset was chosen",)


class WriteupCheckError(RuntimeError):
    """The built PDF lacks required sections or items, or shows "Not run yet" where a run was expected."""

    def __init__(self, pdf: Path, missing: list[str], not_run: list[str], incomplete: dict[str, list[str]] | None = None):
        self.missing, self.not_run, self.incomplete = missing, not_run, incomplete or {}
        lines = [f"{pdf} fails its check:"]
        if missing:
            lines.append("  sections missing: " + "; ".join(missing) + " (is writeup/writeup.typ complete?)")
        if not_run:
            lines.append("  sections still saying \"Not run yet\": " + "; ".join(not_run)
                         + " (run their notebooks, then rebuild)")
        for title, items in self.incomplete.items():
            lines.append(f"  section \"{title}\" lacks: " + "; ".join(items)
                         + " (its notebook did not export it: re-run the notebook, then rebuild)")
        super().__init__("\n".join(lines))


def required_items(title: str) -> tuple:
    """The phrases (or alternatives) section `title` must hold once it has runs."""
    return EVERY_SECTION + REQUIRED_ITEMS.get(title, ())


def missing_items(title: str, text: str) -> list[str]:
    """The required items of section `title` that its (run) `text` lacks, each as its first phrasing."""
    text = _normalized(text)
    lacking = []
    for item in required_items(title):
        options = item if isinstance(item, tuple) else (item,)
        if not any(option in text for option in options):
            lacking.append(" or ".join(f'"{option}"' for option in options))
    return lacking


def sections_of_notebooks(numbers: Iterable[str]) -> list[str]:
    """The titles of the sections filled by the notebooks numbered `numbers` (e.g. "01", "05")."""
    numbers = set(numbers)
    return [title for title, notebook in SECTIONS if notebook in numbers]


# Typst typesets straight quotes as typographic ones ("handout's" reads back from the PDF as "handout’s").
_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})


def _normalized(text: str) -> str:
    return " ".join(text.translate(_QUOTES).split())


def _heading_at(lines: list[str], i: int, title: str) -> bool:
    """Whether `lines[i]` (with up to two following lines, for a heading that wrapped) reads `title`."""
    return any(" ".join(lines[i:i + n]) == title for n in (1, 2, 3))


def pdf_sections(pdf: str | Path) -> dict[str, str]:
    """Section title (numbering removed) -> the text of that section in the PDF, in document order.

    The PDF's top-level bookmarks give each heading and its page; the section starts at the line(s) of
    that page that read as its heading (the top of the page if text extraction garbled it) and ends
    where the next one starts.
    """
    from pypdf import PdfReader

    pdf = Path(pdf)
    if not pdf.is_file():
        raise FileNotFoundError(f"{pdf} not found: build the writeup first (make writeup)")
    reader = PdfReader(pdf)
    pages = [[_normalized(line) for line in (page.extract_text() or "").splitlines()] for page in reader.pages]
    headings = [(_normalized(item.title), reader.get_destination_page_number(item))
                for item in reader.outline if not isinstance(item, list)]  # lists: sub-headings
    starts = []  # (page, line) where each heading's section begins
    cursor = (0, 0)
    for title, page in headings:
        position = max(cursor, (page, 0))
        lines = pages[position[0]]
        found = next((i for i in range(position[1], len(lines)) if _heading_at(lines, i, title)), None)
        cursor = (position[0], found) if found is not None else position
        starts.append(cursor)
        cursor = (cursor[0], cursor[1] + 1)
    sections = {}
    for k, (title, _) in enumerate(headings):
        (page, line), end = starts[k], starts[k + 1] if k + 1 < len(starts) else (len(pages), 0)
        text = []
        for p in range(page, min(end[0], len(pages) - 1) + 1):
            first = line if p == page else 0
            last = end[1] if p == end[0] else len(pages[p])
            text += pages[p][first:last]
        sections[re.sub(r"^\d+(\.\d+)*\.?\s+", "", title)] = "\n".join(text)
    return sections


def check_writeup(pdf: str | Path, required_sections: Iterable[str] = tuple(t for t, _ in SECTIONS),
                  must_be_run: Iterable[str] = (), raise_on_failure: bool = True) -> dict:
    """Which `required_sections` the PDF lacks, which of `must_be_run` still say "Not run yet", and which
    required items (`required_items`) each section that has runs lacks.

    Returns `{"sections": {title: ran?}, "missing": [...], "not_run": [...], "incomplete": {title: [...]}}`;
    raises WriteupCheckError naming all three when any is non-empty (unless `raise_on_failure=False`).
    """
    sections = pdf_sections(pdf)
    ran = {title: NOT_RUN not in _normalized(text) for title, text in sections.items()}
    missing = [title for title in required_sections if title not in sections]
    not_run = [title for title in must_be_run if title in sections and not ran[title]]
    missing += [title for title in must_be_run if title not in sections and title not in missing]
    incomplete = {title: lacking for title, text in sections.items()
                  if ran[title] and (lacking := missing_items(title, text))}
    if (missing or not_run or incomplete) and raise_on_failure:
        raise WriteupCheckError(Path(pdf), missing, not_run, incomplete)
    return {"sections": ran, "missing": missing, "not_run": not_run, "incomplete": incomplete}


def handout_asks(title: str, sections) -> bool:
    """Whether the writeup section `title` (`SECTIONS`) is among the workbook `sections` (keys of
    hw3lib.core.course.SECTIONS, e.g. a course's handout sections or `sections_to_run`'s answer)."""
    from hw3lib.core.course import SECTIONS as SECTION_KEYS
    from hw3lib.experiments.parallel import GRID_SECTIONS as GRID_SECTION_KEYS

    key, sections = ANSWER_KEYS[title], set(sections)
    if key in GRID_SECTION_KEYS:  # a grid: its section, or (beyond every handout) only with every section
        return GRID_SECTION_KEYS[key] in sections if GRID_SECTION_KEYS[key] is not None else sections >= set(SECTION_KEYS)
    if key == "sft_ei":  # notebook 05 runs SFT and expert iteration together (one reading compares them)
        return bool({"sft", "expert_iteration"} & sections)
    return key in sections


def course_summary(course=None) -> dict:
    """The course preset the writeup is for, and which of its sections (answer keys) are extras: beyond what the
    course's handout asks (the PDF marks them)."""
    from hw3lib.core.course import get_course

    crs = get_course(course)
    return {"name": crs.name, "handout": crs.handout, "title": crs.title,
            "extras": [ANSWER_KEYS[title] for title, _ in SECTIONS if not handout_asks(title, crs.sections)]}


def collect_results(figures: Path | None = None) -> dict:
    """Every figures/<stem>.json as results[stem], plus which figure images exist and the course (`course_summary`)."""
    figures = figures or figures_dir()
    results: dict = {}
    for path in sorted(figures.glob("*.json")):
        try:
            results[path.stem] = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise DataFileError(f"{path}: not valid JSON ({exc}); re-run the notebook that writes it") from None
    return {
        "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _git_commit(),
        "figures": sorted(p.name for p in figures.glob("*.png")),
        "course": course_summary(),
        "results": results,
    }


def collect_answers(writeup: Path) -> dict[str, str]:
    """The student's answers, `writeup/answers/<key>.md` -> {key: text}; only read, never written.

    A file whose name is not a section key is refused with the list of keys, so a typo does not
    silently drop an answer from the PDF.
    """
    folder = writeup / ANSWERS_DIR
    answers = {}
    for path in sorted(folder.glob("*.md")) if folder.is_dir() else []:
        if path.name == "README.md":
            continue
        if path.stem not in ANSWER_KEYS.values():
            raise DataFileError(f"{path}: no section has the key {path.stem!r}; rename it to one of "
                                + ", ".join(f"{key}.md" for key in ANSWER_KEYS.values()))
        try:
            answers[path.stem] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise DataFileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8") from None
    return answers


def build_writeup(root: Path | None = None) -> Path:
    """Compile `root`/writeup/writeup.typ to `root`/writeup/writeup.pdf (written atomically) from
    `root`/figures; returns the PDF path. Default root: `course_output_root()` (the checkout, or
    $HW3_OUTPUT_DIR, and courses/<course> under it for a course other than the default one; a root other than
    the checkout is given a fresh copy of the checkout's Typst sources first)."""
    import typst

    if root is None:
        root = course_output_root()
        _copy_typst_sources(project_root() / "writeup", root / "writeup")
    source = root / "writeup" / "writeup.typ"
    if not source.is_file():
        raise FileNotFoundError(f"{source} is missing: restore it from the repository (git checkout writeup/)")
    # The student's answers are read from the checkout's writeup/answers/ (where they write them), never written.
    answers = collect_answers(root / "writeup" if (root / "writeup" / ANSWERS_DIR).is_dir()
                              else project_root() / "writeup")
    atomic_write_json(root / "writeup" / "results.json", {**collect_results(root / "figures"), "answers": answers})
    pdf_bytes = typst.compile(str(source), root=str(root))
    return atomic_write_bytes(root / "writeup" / "writeup.pdf", pdf_bytes)


def _copy_typst_sources(source: Path, target: Path) -> None:
    """The writeup's Typst sources, copied into an output folder outside the checkout (nothing when the
    two are the same folder)."""
    if not source.is_dir() or target.resolve() == source.resolve():
        return
    for path in sorted(source.glob("*.typ")):
        atomic_write_bytes(target / path.name, path.read_bytes())


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=project_root(), timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    """`python -m hw3lib.workbook.writeup [--check]`: build the PDF; with --check also require every section to
    show its results and every required item (what `make test` runs after the notebooks, on their outputs)."""
    check = "--check" in (sys.argv[1:] if argv is None else argv)
    pdf = build_writeup()
    print(pdf)
    if check:
        try:
            check_writeup(pdf, must_be_run=[title for title, _ in SECTIONS])
        except WriteupCheckError as exc:
            print(exc, file=sys.stderr)
            return 1
        print("every section shows its results and every required item")
    return 0


if __name__ == "__main__":
    sys.exit(main())
