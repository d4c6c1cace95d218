"""hw3lib.workbook.store_outputs: a workbook run's outputs go into the committed notebooks, and only safely."""

from __future__ import annotations

import json

import pytest

from hw3lib.core.course import get_course
from hw3lib.workbook.store_outputs import course_readme, main, store


def code(source: str, outputs=(), tags=(), count=None) -> dict:
    return {"cell_type": "code", "execution_count": count, "id": f"id-{abs(hash(source)) % 10**6}",
            "metadata": {"tags": list(tags)}, "outputs": list(outputs), "source": source}


def notebook(*cells) -> dict:
    return {"cells": [{"cell_type": "markdown", "id": "m1", "metadata": {}, "source": "# title"}, *cells],
            "metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}


def stream(text: str) -> dict:
    return {"name": "stdout", "output_type": "stream", "text": text}


def write(path, nb) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


@pytest.fixture
def folders(tmp_path):
    committed, executed = tmp_path / "notebooks", tmp_path / "runs" / "notebooks"
    write(committed / "01_a.ipynb", notebook(code("profile = None", tags=["parameters"]), code("print(1)")))
    write(executed / "01_a.ipynb", notebook(
        code("profile = None", tags=["parameters"], count=1),
        code('profile = "smoke"', tags=["injected-parameters"], count=2),  # papermill's, left out
        code("print(1)", [stream("1\n"), stream("run -> runs/grpo_smoke\n")], count=3)))
    return committed, executed


def test_outputs_and_counts_are_copied_and_the_injected_cell_left_out(folders):
    committed, executed = folders
    before = json.loads((committed / "01_a.ipynb").read_text())
    assert store(executed, committed) == [committed / "01_a.ipynb"]
    after = json.loads((committed / "01_a.ipynb").read_text())
    assert len(after["cells"]) == len(before["cells"]) == 3  # no injected cell
    assert after["cells"][2]["outputs"] == [stream("1\n"), stream("run -> runs/grpo_smoke\n")]
    assert [c.get("execution_count") for c in after["cells"][1:]] == [1, 3]
    assert [c["id"] for c in after["cells"]] == [c["id"] for c in before["cells"]]  # the committed cells kept
    assert after["metadata"] == before["metadata"]


def test_an_edited_notebook_is_refused_and_nothing_is_written(folders, capsys):
    committed, executed = folders
    write(committed / "02_b.ipynb", notebook(code("print(2)")))
    write(executed / "02_b.ipynb", notebook(code("print('edited since')", [stream("2\n")])))
    first = (committed / "01_a.ipynb").read_text()
    assert main([str(executed), "--notebooks", str(committed)]) == 1
    assert "02_b.ipynb: its code cells differ" in capsys.readouterr().err
    assert (committed / "01_a.ipynb").read_text() == first  # checked all before writing any


def test_outputs_naming_paths_outside_the_project_are_refused(folders):
    committed, executed = folders
    nb = json.loads((executed / "01_a.ipynb").read_text())
    nb["cells"][3]["outputs"] = [stream("GRPO run -> /tmp/wb/runs/grpo_smoke\n")]
    write(executed / "01_a.ipynb", nb)
    with pytest.raises(ValueError, match="outside the project.*/tmp/wb"):
        store(executed, committed)


def test_an_empty_folder_says_what_to_run(tmp_path):
    with pytest.raises(ValueError, match="make workbook"):
        store(tmp_path, tmp_path)


def _png(width: int, height: int) -> str:
    """A base64 RGBA PNG of a noisy line plot's colours (many distinct shades, as matplotlib's antialiasing makes)."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    pixels = np.full((height, width, 4), 255, dtype=np.uint8)
    for row in range(0, height, 7):
        pixels[row, :, :3] = rng.integers(0, 255, size=(width, 3))
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGBA").save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def test_a_stored_notebook_is_tidied_for_readers(folders):
    """Issue 46: progress widgets stored as "0%", 4 MB of full-size figures, one run's timestamps."""
    import base64
    import io

    from PIL import Image

    committed, executed = folders
    nb = json.loads((executed / "01_a.ipynb").read_text())
    widget = {"output_type": "display_data", "metadata": {}, "data": {
        "application/vnd.jupyter.widget-view+json": {"model_id": "abc", "version_major": 2, "version_minor": 0},
        "text/plain": "sft:   0%|          | 0/300 [00:00<?, ?step/s]"}}
    figure = {"output_type": "display_data", "metadata": {"image/png": {"width": 1200}},
              "data": {"image/png": _png(1200, 420), "text/plain": "<Figure size 1200x420>"}}
    nb["cells"][3]["outputs"] = [widget, figure]
    nb["cells"][3]["metadata"]["papermill"] = {"duration": 1530.2}
    nb["cells"][3]["metadata"]["execution"] = {"iopub.execute_input": "2026-11-27T10:00:00Z"}
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    write(executed / "01_a.ipynb", nb)
    store(executed, committed)
    stored = json.loads((committed / "01_a.ipynb").read_text())
    line, picture = stored["cells"][2]["outputs"]
    assert line == {"output_type": "stream", "name": "stdout", "text": "sft: a progress bar, shown while it runs\n"}
    image = Image.open(io.BytesIO(base64.b64decode(picture["data"]["image/png"])))
    assert image.size == (900, 315) and image.mode == "P" and len(image.getcolors()) <= 64
    assert len(picture["data"]["image/png"]) < len(figure["data"]["image/png"]) / 2
    assert picture["metadata"] == {}  # the old width hint would stretch it back
    assert "widgets" not in stored["metadata"] and "papermill" not in stored["cells"][2]["metadata"]


def test_another_courses_run_is_stored_in_its_own_folder_from_the_committed_notebooks(tmp_path, folders, monkeypatch):
    from hw3lib.workbook import store_outputs

    committed, executed = folders
    monkeypatch.setenv("HW3_COURSE", "nlpdl-hw3")  # main() sets the course for the process: restored after
    monkeypatch.setattr(store_outputs, "project_root", lambda: tmp_path)
    monkeypatch.setattr("hw3lib.workbook.run.executed_notebooks_dir", lambda: executed)
    before = (committed / "01_a.ipynb").read_text()
    assert main(["--course", "cs336-a5"]) == 0
    own = tmp_path / "courses" / "cs336-a5" / "notebooks" / "01_a.ipynb"
    assert json.loads(own.read_text())["cells"][2]["outputs"][0] == stream("1\n")
    assert (committed / "01_a.ipynb").read_text() == before  # the default course's stored outputs untouched
    # The notebooks edited since (a cell changed), the course run again: its copy takes the current cells.
    write(committed / "01_a.ipynb", notebook(code("profile = None", tags=["parameters"]), code("print(1)  # edited")))
    write(executed / "01_a.ipynb", notebook(code("profile = None", tags=["parameters"], count=1),
                                            code("print(1)  # edited", [stream("1 again\n")], count=2)))
    assert main(["--course", "cs336-a5"]) == 0
    cell = json.loads(own.read_text())["cells"][2]
    assert (cell["source"], cell["outputs"]) == ("print(1)  # edited", [stream("1 again\n")])
    assert main(["--course", "cs336-a5", "--tidy"]) == 0 and own.is_file()
    readme = (tmp_path / "courses" / "cs336-a5" / "README.md").read_text()
    assert readme == store_outputs.course_readme(get_course("cs336-a5"))
    (tmp_path / "courses" / "cs336-a5" / "README.md").unlink()
    assert main(["--course", "cs336-a5", "--readme"]) == 0  # the README alone, written again
    assert (tmp_path / "courses" / "cs336-a5" / "README.md").read_text() == readme
    with pytest.raises(SystemExit):  # the default course's notebooks/ has the main README
        main(["--course", "nlpdl-hw3", "--readme"])


def test_a_course_readme_says_how_to_run_it_where_its_runs_go_and_its_sections():
    readme = course_readme(get_course("cse599o-a3"))
    assert readme.startswith("# CSE 599-O A3: the hw3 workbook\n")
    assert "HW3_COURSE=cse599o-a3 make workbook " in readme and "make store-outputs COURSE=cse599o-a3" in readme
    # Both MATH courses train the same runs: the README says so, and where they are in each profile.
    assert "- runs: `runs/math-qwen2.5/` in smoke (shared with `cs336-a5`: the same configs, trained once), " \
           "`runs/math-qwen2.5/` in full;" in readme
    assert "| 04 keyword inclusion on your own model | yes |" in readme and "| 02 Best-of-N | extra |" in readme
    olmo = course_readme(get_course("cs336-a5-2026"))  # in smoke the GSM8K courses' runs (runs/ itself)
    assert "`runs/` in smoke (shared with `nlpdl-hw3`: the same configs, trained once), `runs/gsm8k-olmo/` in full" in olmo
    assert "`from hw3lib.adapters_cs336_2026 import *`" in olmo
