"""The README a student starts from (issue 46): short, every link alive, every docs page reachable, every course
preset in its table, and its generated tables current (their own tests: tests/core/test_cost.py,
tests/workbook/test_timings.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_readme_is_short():
    assert len(README.splitlines()) <= 250


def test_every_local_link_resolves_and_every_docs_page_is_linked():
    links = re.findall(r"\]\(([^)#]+)\)", README)
    local = [link for link in links if not link.startswith("http")]
    assert local and all((ROOT / link).exists() for link in local), [l for l in local if not (ROOT / l).exists()]
    pages = {f"docs/{path.name}" for path in (ROOT / "docs").glob("*.md")}
    assert pages <= set(local), f"docs pages the README does not link: {sorted(pages - set(local))}"
    for page in (ROOT / "docs").glob("*.md"):  # and every docs page's own local links
        for link in re.findall(r"\]\(([^)#]+)\)", page.read_text()):
            if not link.startswith("http"):
                assert (page.parent / link).exists(), f"{page.name}: broken link {link}"


def test_every_course_preset_and_its_model_is_in_the_table():
    from hw3lib.core.course import ALIASES, COURSES
    from hw3lib.core.preflight import COURSE_MODELS

    for name, course in COURSES.items():
        row = next(line for line in README.splitlines() if line.startswith(f"| `{name}`"))
        assert course.handout in row and COURSE_MODELS[name] in row, row
    assert all(f"`{alias}` is `{preset}`" in README for alias, preset in ALIASES.items())


def test_the_quick_start_names_the_commands_that_exist():
    makefile = (ROOT / "Makefile").read_text()
    for target in re.findall(r"^make (\w[\w-]*)", README, flags=re.M):
        assert re.search(rf"^{target}:", makefile, flags=re.M), f"README runs `make {target}`, the Makefile lacks it"


def test_the_readme_says_whose_stored_outputs_are_where():
    """Issue 43: a reader learns which stored outputs belong to which course -- the default course's under
    notebooks/, each other course's under courses/<course>/notebooks/ when stored, and which have none yet."""
    from hw3lib.core.course import COURSES, DEFAULT_COURSE

    stored = {path.parents[1].name for path in ROOT.glob("courses/*/notebooks/*.ipynb")}
    paragraph = README[README.index("The notebooks' stored outputs"):].split("\n\n")[0]
    assert f"`{DEFAULT_COURSE}`" in paragraph and "`notebooks/`" in paragraph, paragraph
    for name in COURSES:
        if name == DEFAULT_COURSE:
            continue
        if name in stored:
            assert f"courses/{name}/notebooks/" in paragraph, f"README does not point at {name}'s stored outputs"
        else:
            assert f"`{name}`" in paragraph.split("none stored yet")[0].rsplit(";", 1)[-1], (
                f"README does not say {name} has no stored outputs yet")


def test_each_stored_courses_folder_has_its_current_readme():
    """Issue 43: a course's folder (courses/<course>/) opens with a short README of whose workbook it is, how to
    run it and where its runs go, generated from the preset (`course_readme`), so a changed preset shows here."""
    from hw3lib.core.course import get_course
    from hw3lib.workbook.store_outputs import course_readme

    folders = sorted({path.parents[1] for path in ROOT.glob("courses/*/notebooks/*.ipynb")})
    assert folders, "no course's stored outputs under courses/"
    for folder in folders:
        readme = folder / "README.md"
        assert readme.is_file(), f"{folder.name}: no README.md (make store-outputs COURSE={folder.name} writes it)"
        assert readme.read_text() == course_readme(get_course(folder.name)), (
            f"{readme.relative_to(ROOT)} is stale: python -m hw3lib.workbook.store_outputs --course {folder.name} "
            "--readme")
        assert f"(courses/{folder.name}/README.md)" in README, f"the README does not link {folder.name}'s"
