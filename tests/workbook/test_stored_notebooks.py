"""The committed notebooks' stored outputs (what a reader sees on GitHub) are current and tidy, for every course
that has them: `notebooks/` (the default course's) and `courses/<course>/notebooks/` (`make store-outputs
COURSE=...`). Issues 43 and 46."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hw3lib.core.course import get_course
from hw3lib.workbook.store_outputs import ABSOLUTE_PATH, code_cells, source_of

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_BYTES = 1_100_000  # "under ~1 MB each" (issue 46); notebook 05 holds every grid's figures
STORED = sorted(REPO_ROOT.glob("notebooks/*.ipynb")) + sorted(REPO_ROOT.glob("courses/*/notebooks/*.ipynb"))


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("path", STORED, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_a_stored_notebook_is_small_and_names_no_outside_path(path):
    notebook = _load(path)
    cells = code_cells(notebook, False)
    assert path.stat().st_size < MAX_BYTES, f"{path.name}: {path.stat().st_size} bytes"
    assert "widgets" not in notebook["metadata"], "saved widget state shows '0%' bars once the kernel is gone"
    leaked = {m for cell in cells for m in ABSOLUTE_PATH.findall(json.dumps(cell["outputs"]))}
    assert not leaked, f"{path.name}: outputs name {sorted(leaked)}"


def check_another_courses_notebook(path: Path, root: Path = REPO_ROOT) -> None:
    """`path` (courses/<course>/notebooks/<name>.ipynb): a course preset's, every code cell run, from the current
    notebooks/<name>.ipynb source."""
    course = path.parents[1].name
    assert get_course(course).name == course, f"courses/{course}: not a course preset's name"
    committed = root / "notebooks" / path.name
    assert committed.is_file(), f"{path}: notebooks/{path.name} no longer exists"
    stored = [source_of(cell) for cell in code_cells(_load(path), False)]
    current = [source_of(cell) for cell in code_cells(_load(committed), False)]
    assert stored == current, f"{path} was stored from an older notebooks/{path.name}: run `make store-outputs COURSE={course}`"
    assert all(cell.get("execution_count") for cell in code_cells(_load(path), False)), f"{path}: a cell never ran"


def test_other_courses_stored_notebooks_run_the_current_code():
    """Each courses/<course>/notebooks/*.ipynb in the repository passes `check_another_courses_notebook`."""
    for path in sorted(REPO_ROOT.glob("courses/*/notebooks/*.ipynb")):
        check_another_courses_notebook(path)


@pytest.mark.parametrize("path", sorted(REPO_ROOT.glob("notebooks/*.ipynb")), ids=lambda p: p.name)
def test_the_default_courses_stored_notebooks_have_every_cell_run(path):
    """notebooks/ holds the default course's stored outputs (`make store-outputs`): every code cell ran, so no cell
    added since the last store stands there without its output."""
    unrun = [i for i, cell in enumerate(code_cells(_load(path), False)) if not cell.get("execution_count")]
    assert not unrun, f"{path.name}: code cells {unrun} have no stored output: run `make store-outputs`"


def test_the_check_refuses_a_stale_or_unrun_copy(tmp_path):
    (tmp_path / "notebooks").mkdir()
    cell = {"cell_type": "code", "source": "x = 1", "outputs": [], "execution_count": 1, "metadata": {}}
    (tmp_path / "notebooks" / "01.ipynb").write_text(json.dumps({"cells": [cell], "metadata": {}}))
    stored = tmp_path / "courses" / "cse599o-a3" / "notebooks" / "01.ipynb"
    stored.parent.mkdir(parents=True)
    stored.write_text(json.dumps({"cells": [cell], "metadata": {}}))
    check_another_courses_notebook(stored, tmp_path)
    stored.write_text(json.dumps({"cells": [{**cell, "source": "x = 2"}], "metadata": {}}))
    with pytest.raises(AssertionError, match="stored from an older"):
        check_another_courses_notebook(stored, tmp_path)
    stored.write_text(json.dumps({"cells": [{**cell, "execution_count": None}], "metadata": {}}))
    with pytest.raises(AssertionError, match="never ran"):
        check_another_courses_notebook(stored, tmp_path)
    wrong = tmp_path / "courses" / "no-such-course" / "notebooks" / "01.ipynb"
    wrong.parent.mkdir(parents=True)
    wrong.write_text(stored.read_text())
    with pytest.raises(ValueError, match="unknown course 'no-such-course'"):
        check_another_courses_notebook(wrong, tmp_path)
