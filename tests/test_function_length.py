"""Every function in hw3lib reads on one screen: at most MAX_LINES lines, docstring included.

Long loops stay readable by calling named helpers (hw3lib.core.lifecycle for the run's records,
hw3lib.maths.sft_step for the one SFT step, ...); a function that grows past the limit should be split
the same way.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "hw3lib"
MAX_LINES = 80


def long_functions(package_dir: Path, max_lines: int = MAX_LINES) -> list[str]:
    """`path:line name (N lines)` for every function or method longer than `max_lines`."""
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > max_lines:
                    found.append(f"{path.relative_to(package_dir.parent)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_is_longer_than_the_limit():
    too_long = long_functions(PACKAGE_DIR)
    assert not too_long, f"functions over {MAX_LINES} lines (split them into named helpers):\n" + "\n".join(too_long)


def test_the_check_sees_a_long_function(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "m.py").write_text("def short():\n    a = 1\n    return a\n\n\n"
                                  "class C:\n    def method(self):\n        a = 1\n        b = 2\n        return a + b\n")
    assert long_functions(package, max_lines=4) == []
    assert long_functions(package, max_lines=3) == ["pkg/m.py:7 method (4 lines)"]
    assert long_functions(package, max_lines=2) == ["pkg/m.py:1 short (3 lines)", "pkg/m.py:7 method (4 lines)"]
