"""Copy a workbook run's outputs into the committed notebooks, so a reader sees a real run's results on GitHub.

`python -m hw3lib.workbook.store_outputs [runs/notebooks]` takes the executed copies `make workbook` wrote
(`hw3lib.workbook.run`: papermill, one per notebook) and puts each code cell's outputs and execution count into
the notebook of the same name under `notebooks/`. Papermill's injected `parameters` cell is left out; every
other cell must have the same source in both, else that notebook is refused (it was edited after the run:
run the workbook again). Notebooks are written through a temporary file and a rename. The committed notebooks
keep their own cells and ids.

`--course NAME` stores a course's run (another course than the default one) as full copies of the notebooks in
`courses/<course>/notebooks/`, so each course's readers see their own results (`make store-outputs
COURSE=NAME` runs that course's workbook first), and writes the folder's short README (`course_readme`: whose
workbook it is, how to run it, where its runs go, its handout's sections). `--tidy` only tidies the stored
notebooks in place; `--readme` only writes that README.

What is stored is tidied for a reader (`tidy`): a progress bar (a live widget, whose saved state shows "0%" once
the kernel is gone) becomes one line naming it; figures are stored at most `MAX_FIGURE_WIDTH` pixels wide in a
64-colour palette (a line plot loses nothing visible, the notebook a factor of 5); per-cell timing metadata and the
widget state are dropped, so no stored timestamp contradicts what a cell printed.

Outputs that name a path outside the project (a temporary folder, a home directory) are refused too: the
stored outputs are read by everyone, and hw3lib prints paths relative to the project (`shown_path`).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import re
import sys
from pathlib import Path

from hw3lib.core.io import atomic_write_text, project_root, runs_dir

ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:tmp|home|root|Users|work)/[\w.-]+")


def code_cells(notebook: dict, skip_injected: bool) -> list[dict]:
    return [cell for cell in notebook["cells"] if cell["cell_type"] == "code"
            and not (skip_injected and "injected-parameters" in cell.get("metadata", {}).get("tags", []))]


def source_of(cell: dict) -> str:
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)


def merged(committed: dict, executed: dict, name: str) -> dict:
    """`committed` with the outputs of `executed` (same code cells, papermill's injected one aside)."""
    targets, sources = code_cells(committed, False), code_cells(executed, True)
    if len(targets) != len(sources) or any(source_of(a) != source_of(b) for a, b in zip(targets, sources)):
        raise ValueError(f"{name}: its code cells differ from the executed copy's (edited after the run?): run "
                         "`make workbook` again before storing its outputs")
    leaked = sorted({match for cell in sources for match in ABSOLUTE_PATH.findall(json.dumps(cell["outputs"]))})
    if leaked:
        raise ValueError(f"{name}: outputs name paths outside the project ({', '.join(leaked[:3])}): print them "
                         "with hw3lib.core.io.shown_path, run the notebook again, then store")
    for target, source in zip(targets, sources):
        target["outputs"], target["execution_count"] = source["outputs"], source.get("execution_count")
    return committed


WIDGET = "application/vnd.jupyter.widget-view+json"
MAX_FIGURE_WIDTH = 900
FIGURE_COLOURS = 64
RUN_METADATA = ("execution", "papermill")  # per-cell timings of one run


def _text(value) -> str:
    return value if isinstance(value, str) else "".join(value)


def widget_line(output: dict) -> dict:
    """A progress-bar widget as one stdout line naming it (its text form is the bar at 0%, drawn at its start)."""
    description = _text(output["data"].get("text/plain", "")).split(":", 1)[0].strip().strip("'\"") or "progress"
    return {"output_type": "stream", "name": "stdout", "text": f"{description}: a progress bar, shown while it runs\n"}


def smaller_png(encoded) -> str:
    """A base64 PNG at most `MAX_FIGURE_WIDTH` wide in a `FIGURE_COLOURS` palette (the original if that is not
    smaller)."""
    from PIL import Image

    raw = base64.b64decode(_text(encoded))
    image = Image.open(io.BytesIO(raw)).convert("RGB")
    if image.width > MAX_FIGURE_WIDTH:
        height = round(image.height * MAX_FIGURE_WIDTH / image.width)
        image = image.resize((MAX_FIGURE_WIDTH, height), Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    image.quantize(colors=FIGURE_COLOURS, method=Image.Quantize.MEDIANCUT).save(buffer, format="PNG", optimize=True)
    return base64.b64encode(buffer.getvalue()).decode() if len(buffer.getvalue()) < len(raw) else _text(encoded)


def tidy(notebook: dict) -> dict:
    """`notebook` as stored for readers: progress widgets as lines, figures smaller, one run's timings dropped."""
    notebook["metadata"].pop("widgets", None)
    notebook["metadata"].pop("papermill", None)
    for cell in notebook["cells"]:
        for key in RUN_METADATA:
            cell.get("metadata", {}).pop(key, None)
        outputs = []
        for output in cell.get("outputs", []):
            if WIDGET in output.get("data", {}):
                output = widget_line(output)
            elif "image/png" in output.get("data", {}):
                output["data"]["image/png"] = smaller_png(output["data"]["image/png"])
                output.get("metadata", {}).pop("image/png", None)  # its size hint was the old size
            outputs.append(output)
        if "outputs" in cell:
            cell["outputs"] = outputs
    return notebook


def _write(path: Path, notebook: dict) -> None:
    atomic_write_text(path, json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")


def tidy_in_place(notebooks_dir: Path) -> list[Path]:
    """Tidy every stored notebook in `notebooks_dir` (what `--tidy` does)."""
    written = []
    for path in sorted(notebooks_dir.glob("[0-9][0-9]_*.ipynb")):
        _write(path, tidy(json.loads(path.read_text())))
        written.append(path)
    return written


def store(executed_dir: Path, notebooks_dir: Path, template_dir: Path | None = None) -> list[Path]:
    """Store every executed notebook's outputs, tidied, into its namesake in `notebooks_dir`; returns the notebooks
    written. Checks all before writing any. With `template_dir` (a course's own folder, whose notebooks are
    copies of `notebooks/`), the cells come from the template's namesake, so a copy stored before the notebooks
    were last edited takes their current cells with the new run's outputs."""
    pairs = [(path, notebooks_dir / path.name) for path in sorted(executed_dir.glob("[0-9][0-9]_*.ipynb"))]
    if not pairs:
        raise ValueError(f"{executed_dir}: no executed notebooks: run `make workbook` first")
    results = []
    for executed, committed in pairs:
        template = template_dir / committed.name if template_dir else None
        source = template if template is not None and template.exists() else committed
        if not source.exists():
            raise ValueError(f"{executed}: there is no {committed} to store its outputs in")
        results.append((committed, tidy(merged(json.loads(source.read_text()), json.loads(executed.read_text()),
                                               committed.name))))
    for committed, notebook in results:
        _write(committed, notebook)
    return [committed for committed, _ in results]


def course_readme(course) -> str:
    """The README of a course's folder (courses/<course>/README.md), from its preset (`hw3lib.core.course.Course`),
    so it cannot drift from what the notebooks run."""
    from hw3lib.core.course import COURSES, DEFAULT_SETTING, section_table

    def runs(folder: str) -> str:
        return "`runs/`" if folder == DEFAULT_SETTING else f"`runs/{folder}/`"

    sharing = [other.name for other in COURSES.values()
               if other.name != course.name and other.runs_folder("smoke") == course.runs_folder("smoke")]
    shared = f" (shared with {', '.join(f'`{name}`' for name in sharing)}: the same configs, trained once)" \
        if sharing else ""
    return "\n".join([
        f"# {course.handout}: the hw3 workbook", "",
        f"The workbook as a {course.handout} student runs it: {course.title} on a GPU, a tiny model on a CPU.",
        "From the project root (setup and profiles: the main [README](../../README.md)):", "",
        "```bash",
        f"HW3_COURSE={course.name} make workbook                # your handout's sections, then your writeup",
        f"HW3_COURSE={course.name} HW3_EXTRAS=1 make workbook   # every section, the extras too",
        "```", "",
        f"- `notebooks/`: the stored outputs of a smoke run of every section (`make store-outputs COURSE="
        f"{course.name}`), what your own smoke run should look like;",
        "- `figures/` and `writeup/writeup.pdf`: written here by your own runs (not committed);",
        f"- runs: {runs(course.runs_folder('smoke'))} in smoke{shared}, {runs(course.runs_folder('full'))} in full;",
        f"- your `tests/adapters.py` is one line: `from {course.adapters} import *`.", "",
        section_table(course), ""])


def write_course_readme(course, folder: Path) -> Path:
    """Write `course_readme(course)` to `folder`/README.md (through a temporary file); returns its path."""
    return atomic_write_text(folder / "README.md", course_readme(course))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("executed", nargs="?", type=Path, default=None, help="folder of executed notebooks "
                        "(default: the course's, runs/notebooks for the default course)")
    parser.add_argument("--notebooks", type=Path, default=None,
                        help="where to store them (default: notebooks/, or courses/<course>/notebooks/)")
    parser.add_argument("--course", default=None, help="the course whose run is stored (default: $HW3_COURSE)")
    parser.add_argument("--tidy", action="store_true", help="only tidy the stored notebooks in place")
    parser.add_argument("--readme", action="store_true", help="only write the course folder's README.md")
    args = parser.parse_args(argv)
    from hw3lib.core.course import DEFAULT_COURSE, get_course

    try:
        course = get_course(args.course).name
    except ValueError as exc:
        parser.error(str(exc))
    if args.course:
        import os

        os.environ["HW3_COURSE"] = course  # the course's runs folder (hw3lib.core.io.runs_dir)
    own = project_root() / "notebooks" if course == DEFAULT_COURSE else project_root() / "courses" / course / "notebooks"
    target = args.notebooks or own
    if args.readme:
        if course == DEFAULT_COURSE:
            parser.error(f"--readme: {course}'s notebooks are notebooks/, described by the main README")
        print(f"wrote {write_course_readme(get_course(course), own.parent).relative_to(project_root())}")
        return 0
    if args.tidy:
        written = tidy_in_place(target)
        print("tidied " + (", ".join(path.name for path in written) or f"nothing: no notebooks in {target}"))
        return 0
    from hw3lib.workbook.run import executed_notebooks_dir

    try:
        written = store(args.executed or executed_notebooks_dir(), target, project_root() / "notebooks")
    except ValueError as exc:
        print(f"store_outputs: {exc}", file=sys.stderr)
        return 1
    print(f"stored the outputs of {', '.join(path.name for path in written)} in {target}")
    if course != DEFAULT_COURSE and args.notebooks is None:
        print(f"wrote {write_course_readme(get_course(course), own.parent).relative_to(project_root())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
