"""hw3lib.workbook.run: notebooks are executed with the profile injected into their `parameters` cell."""

import nbformat

from hw3lib.workbook.run import notebooks, run_notebook


def test_profile_parameter_is_injected(tmp_path):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("profile = None")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("print('profile is', profile)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source = tmp_path / "01_demo.ipynb"
    nbformat.write(nb, source)
    out = run_notebook(source, "smoke", tmp_path / "out")
    executed = nbformat.read(out, as_version=4)
    printed = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    assert "profile is smoke" in printed
    assert nbformat.read(source, as_version=4).cells[1].outputs == []  # the source is left untouched


def test_workbook_lists_numbered_notebooks_in_order():
    names = [p.name for p in notebooks()]
    assert names == sorted(names) and all(n[:2].isdigit() for n in names)
