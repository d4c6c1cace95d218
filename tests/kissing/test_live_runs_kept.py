"""Re-running notebook 06 never deletes a live conversation: its own call, with a live-looking responder.

The notebook passes overwrite=True (so that CI's replays replace each other); `run_directory` sends a
re-run whose directory holds a live conversation to a new name, and `RunRecorder` itself refuses to
delete a live log whatever the caller passes.
"""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

import nbformat
import pytest

from hw3lib.kissing.llm import ScriptedResponder
from hw3lib.kissing.loops import agentic_refinement, best_of_n, replaceable, run_directory

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "06_kissing.ipynb"
REPLAY = ROOT / "tests" / "fixtures" / "kissing_replay.json"


class LiveLooking(ScriptedResponder):
    """Recorded replies, but it says it is live (as a ChatClient does): its runs are logged as live."""

    kind = "live"


def notebook_call(function: str) -> str:
    """The notebook's own statement `run = <function>(...)`, as written in its code cell."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code" or function + "(" not in cell.source:
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                    getattr(node.value.func, "id", None) == function:
                return ast.get_source_segment(cell.source, node)
    raise AssertionError(f"notebook 06 has no `... = {function}(...)` call")


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_rerunning_the_notebooks_call_live_keeps_the_first_conversation(tmp_path):
    statement = notebook_call("agentic_refinement")
    assert "overwrite=True" in statement and "run_directory(" in statement

    def run_cell(responder):
        namespace = {"agentic_refinement": agentic_refinement, "run_directory": run_directory, "responder": responder,
                     "runs_dir": lambda: tmp_path, "iterations": 1}
        exec(statement, namespace)
        return namespace["run"]

    first = run_cell(LiveLooking(REPLAY))
    assert first.run_dir == tmp_path / "kissing" / "06_agentic"
    kept = digest(first.run_dir)
    assert json.loads((first.run_dir / "conversation_log.json").read_text())["source"] == "live"
    second = run_cell(LiveLooking(REPLAY))
    assert second.run_dir == tmp_path / "kissing" / "06_agentic-2"
    assert digest(first.run_dir) == kept  # the first conversation, byte for byte
    third = run_cell(LiveLooking(REPLAY))
    assert third.run_dir.name == "06_agentic-3" and digest(first.run_dir) == kept
    # a replay re-run replaces only a replay: it goes to the first directory that holds no live run
    replay_dir = run_directory(tmp_path / "kissing" / "06_agentic")
    assert replay_dir.name == "06_agentic-4"


def test_a_replay_replaces_a_replay_in_place(tmp_path):
    base = tmp_path / "06_best_of_n"
    best_of_n(ScriptedResponder(REPLAY), run_directory(base), 1, overwrite=True)
    assert replaceable(base) and run_directory(base) == base
    again = best_of_n(ScriptedResponder(REPLAY), run_directory(base), 1, overwrite=True)
    assert again.run_dir == base and json.loads((base / "conversation_log.json").read_text())["source"] == "replay"


def test_overwrite_never_deletes_a_live_log_even_when_asked(tmp_path):
    base = tmp_path / "live"
    agentic_refinement(LiveLooking(REPLAY), base, 1)
    kept = digest(base)
    with pytest.raises(FileExistsError, match="live conversation.*live-2"):
        agentic_refinement(ScriptedResponder(REPLAY), base, 1, overwrite=True)
    assert digest(base) == kept
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "conversation_log.json").write_text("{not json")
    assert not replaceable(tmp_path / "broken")  # unreadable: kept, it might be a live one
