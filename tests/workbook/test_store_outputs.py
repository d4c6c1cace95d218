"""hw3lib.workbook.store_outputs: a workbook run's outputs go into the committed notebooks, and only safely."""

from __future__ import annotations

import json

import pytest

from hw3lib.workbook.store_outputs import main, store


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
