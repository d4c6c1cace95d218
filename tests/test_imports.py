"""No import cycles inside hw3lib, and the layering of its folders: the module graph, built statically
from the AST, must be acyclic, and each folder may import only the folders below it (LAYERS).

Every `import` / `from ... import` statement counts, wherever it is: at the top of a module, inside
a function (a "lazy" import still makes the two modules depend on each other), under
`if __name__ == "__main__":`. Only `if TYPE_CHECKING:` blocks are skipped (never executed).

Edges, for a statement in module m:
- `import a.b.c` -> a.b.c (a package means its `__init__.py`);
- `from a.b import c` -> a.b.c when that is a module or package, else -> a.b (the name comes
  from a.b's namespace, e.g. `from hw3lib.generation import make_engine` -> hw3lib.generation);
- relative imports are resolved against m's package (an `__init__.py` is its own package).
Parent packages are not added as edges (`import a.b.c` also runs a/__init__.py, but counting it
would turn every package whose `__init__` re-exports a submodule into a false cycle), and a
module naming itself is ignored.

A package's lazy `__getattr__` (hw3lib.generation: `TransformersEngine` is imported on first
access) is an ordinary function, so its imports are edges from the package to the engine module.
`from hw3lib.generation import TransformersEngine` therefore reaches hf_engine through the
package, as it does at run time; an engine importing names back from the package (not from
`hw3lib.generation.base`) would show up as a cycle, which it is.
"""

from __future__ import annotations

import ast
import textwrap
from collections import deque
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "hw3lib"


# ---------------------------------------------------------------------------------------------
# The graph


def discover_modules(package_dir: Path) -> dict[str, Path]:
    """{dotted module name: file} for every .py file under `package_dir` (packages as their __init__)."""
    root = package_dir.parent
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST):
    """Every Import / ImportFrom node, at any depth, except those under `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)  # the else branch does run
            continue
        stack.extend(ast.iter_child_nodes(node))


def _base_package(module: str, path: Path, level: int) -> str | None:
    """The package a `from .{level}` import in `module` is relative to (None if it climbs too far)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if level - 1 > len(package) - 1:
        return None
    return ".".join(package[: len(package) - (level - 1)])


def import_edges(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """{module: {imported module: line of the first such import}}, restricted to `modules`."""
    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _import_nodes(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = _base_package(module, path, node.level)
                    if base is None:
                        continue
                    source = f"{base}.{node.module}" if node.module else base
                else:
                    source = node.module
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    targets.append(submodule if alias.name != "*" and submodule in modules else source)
            for target in targets:
                if target in modules and target != module:
                    graph[module][target] = min(node.lineno, graph[module].get(target, node.lineno))
    return graph


# ---------------------------------------------------------------------------------------------
# Cycles


def strongly_connected_components(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative); components in a deterministic order, members sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return sorted(components)


def _shortest_cycle_through(graph: dict[str, dict[str, int]], start: str, within: set[str]) -> list[str]:
    """start -> ... -> start, shortest (BFS inside the component), ties broken by name."""
    parent: dict[str, str] = {}
    queue = deque([start])
    seen = {start}
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node]):
            if child not in within:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1] + [start]
            if child not in seen:
                seen.add(child)
                parent[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is in a cycle but none was found")  # cannot happen inside an SCC


def cyclic_components(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (each holds at least one cycle)."""
    return [component for component in strongly_connected_components(graph) if len(component) > 1]


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One shortest cycle through each module of each cyclic component, deduplicated.

    Each cycle is a list [a, b, ..., a] rotated to start at its smallest name.
    """
    cycles = []
    for component in cyclic_components(graph):
        members = set(component)
        for module in component:
            cycle = _shortest_cycle_through(graph, module, members)[:-1]
            first = cycle.index(min(cycle))
            cycle = cycle[first:] + cycle[:first] + [cycle[first]]
            if cycle not in cycles:
                cycles.append(cycle)
    return cycles


def describe(cycle: list[str], graph: dict[str, dict[str, int]], modules: dict[str, Path], root: Path) -> str:
    """`a -> b -> a`, then where each import is (file:line, relative to `root`)."""
    where = [f"      {a} -> {b}: {modules[a].relative_to(root).as_posix()}:{graph[a][b]}"
             for a, b in zip(cycle, cycle[1:])]
    return "  " + " -> ".join(cycle) + "\n" + "\n".join(where)


def cycle_report(package_dir: Path) -> tuple[list[list[str]], str]:
    """(the cycles, a text naming each cyclic component and, under it, its cycles with file:line)."""
    modules = discover_modules(package_dir)
    graph = import_edges(modules)
    cycles = find_cycles(graph)
    blocks = []
    for component in cyclic_components(graph):
        inside = [c for c in cycles if c[0] in component]
        blocks.append(f"component of {len(component)} modules: {', '.join(component)}\n"
                      + "\n".join(describe(c, graph, modules, package_dir.parent) for c in inside))
    return cycles, "\n".join(blocks)


# ---------------------------------------------------------------------------------------------
# Tests


def test_hw3lib_has_no_import_cycles():
    cycles, text = cycle_report(PACKAGE_DIR)
    assert not cycles, f"import cycles in hw3lib (function-level imports count too):\n{text}"


def test_kissing_has_no_import_cycles():
    """The kissing subpackage on its own (it must stay acyclic whatever happens elsewhere)."""
    cycles, text = cycle_report(PACKAGE_DIR)
    kissing = [c for c in cycles if any(m.startswith("hw3lib.kissing") for m in c)]
    assert not kissing, "import cycles through hw3lib.kissing:\n" + text


def test_graph_sees_the_known_edges():
    """Sanity checks on the real package, so an empty graph cannot pass the cycle test."""
    modules = discover_modules(PACKAGE_DIR)
    graph = import_edges(modules)
    assert {"hw3lib", "hw3lib.kissing", "hw3lib.kissing.search", "hw3lib.generation"} <= set(modules)
    assert "hw3lib.kissing.verify" in graph["hw3lib.kissing.search"]  # top level
    assert "hw3lib.kissing.report" in graph["hw3lib.kissing.loops"]
    assert "hw3lib.kissing.search" in graph["hw3lib.kissing.loops"]  # function level (polish_candidate)
    assert "hw3lib.kissing.loops" in graph["hw3lib.kissing.cli"]  # function level
    # the lazy __getattr__ / make_engine imports are edges from the package to its engines
    assert {"hw3lib.generation.base", "hw3lib.generation.hf_engine", "hw3lib.generation.vllm_engine"} <= set(
        graph["hw3lib.generation"])


# ---------------------------------------------------------------------------------------------
# Layering: the folders in course order, each importing only what sits below it

ALL = {"core", "tasks", "maths", "models", "generation", "evaluation", "grpo", "sft", "keywords", "experiments",
       "kissing", "workbook"}
BASE = {"core", "tasks", "maths", "models", "generation", "evaluation"}
LAYERS = {
    "core": set(),  # the profile, files, run folders: nothing of hw3lib
    "maths": set(),  # the course's pure functions: nothing of hw3lib
    "tasks": {"core"},  # data and rewards never see a model
    "models": {"core", "tasks", "maths"},
    "generation": {"core", "tasks", "maths", "models"},
    "evaluation": {"core", "tasks", "maths", "models", "generation"},
    "grpo": BASE,
    "sft": BASE,  # SFT and expert iteration never import the GRPO loop
    "keywords": BASE | {"grpo", "sft"},
    "experiments": BASE | {"grpo", "sft"},
    "kissing": {"core"},  # the discovery problem stands alone
    "workbook": ALL,  # the top, with the root `hw3lib.cli`
}


def folder_of(module: str) -> str:
    """`hw3lib.grpo.loop` -> `grpo`; modules at the package root (`hw3lib`, `hw3lib.cli`) -> `(root)`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ALL) else "(root)"


def layering_violations(graph: dict[str, dict[str, int]]) -> list[str]:
    """`a -> b (line n)` for every import across folders that LAYERS does not allow, and every import of a
    `cli` module or of `workbook` from anywhere but the root `hw3lib.cli` (they sit on top)."""
    bad = []
    for module, targets in sorted(graph.items()):
        here = folder_of(module)
        for target, line in sorted(targets.items()):
            there = folder_of(target)
            if here == "(root)" or here == there:
                if target.endswith(".cli") and module != "hw3lib.cli" and not module.endswith(".cli"):
                    bad.append(f"{module} -> {target} (line {line}): only the CLIs import a CLI")
                continue
            if there == "(root)" or there not in LAYERS.get(here, set()):
                bad.append(f"{module} -> {target} (line {line}): {here} may import {sorted(LAYERS.get(here, ()))}")
            elif target.endswith(".cli") and not module.endswith(".cli"):
                bad.append(f"{module} -> {target} (line {line}): only the CLIs import a CLI")
    return bad


def test_hw3lib_folders_follow_the_layers():
    modules = discover_modules(PACKAGE_DIR)
    assert {folder_of(m) for m in modules} == ALL | {"(root)"}, "a folder is missing from LAYERS"
    root_modules = sorted(m for m in modules if folder_of(m) == "(root)")
    assert root_modules == ["hw3lib", "hw3lib.adapters", "hw3lib.adapters_cs336_2026", "hw3lib.cli"], (
        f"only __init__, the course adapters and cli sit at the package root: {root_modules}")
    bad = layering_violations(import_edges(modules))
    assert not bad, "imports against hw3lib's layering:\n" + "\n".join(bad)


def test_layering_check_catches_an_upward_import():
    graph = {"hw3lib.sft.loop": {"hw3lib.grpo.loop": 3, "hw3lib.core.io": 1},
             "hw3lib.maths.grpo": {"hw3lib.core.io": 7}, "hw3lib.tasks.data": {"hw3lib.grpo.cli": 9},
             "hw3lib.grpo.cli": {"hw3lib.sft.cli": 2}, "hw3lib.cli": {"hw3lib.grpo.cli": 1}}
    assert layering_violations(graph) == [
        "hw3lib.grpo.cli -> hw3lib.sft.cli (line 2): grpo may import "
        "['core', 'evaluation', 'generation', 'maths', 'models', 'tasks']",
        "hw3lib.maths.grpo -> hw3lib.core.io (line 7): maths may import []",
        "hw3lib.sft.loop -> hw3lib.grpo.loop (line 3): sft may import "
        "['core', 'evaluation', 'generation', 'maths', 'models', 'tasks']",
        "hw3lib.tasks.data -> hw3lib.grpo.cli (line 9): tasks may import ['core']",
    ]
    # a module importing another folder's CLI it may otherwise import is still refused
    assert layering_violations({"hw3lib.keywords.recipe": {"hw3lib.grpo.cli": 4}}) == [
        "hw3lib.keywords.recipe -> hw3lib.grpo.cli (line 4): only the CLIs import a CLI"]


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return root / "pkg"


def test_detector_finds_a_function_level_cycle(tmp_path):
    package = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import helper\n",
        "pkg/b.py": "def helper():\n    from pkg.a import thing\n    return thing\n",
        "pkg/c.py": "import pkg.a\n",
    })
    cycles, text = cycle_report(package)
    assert cycles == [["pkg.a", "pkg.b", "pkg.a"]]
    assert text.splitlines()[:2] == ["component of 2 modules: pkg.a, pkg.b", "  pkg.a -> pkg.b -> pkg.a"]
    assert "pkg/b.py:2" in text


@pytest.mark.parametrize("files, expected", [
    # relative imports: `from . import x` (submodule) and `from .x import y`, from a module and a package
    ({"pkg/__init__.py": "from . import a\n", "pkg/a.py": "from .sub.b import f\n",
      "pkg/sub/__init__.py": "", "pkg/sub/b.py": "from .. import a\n"},
     [["pkg.a", "pkg.sub.b", "pkg.a"]]),
    # `from pkg import name` (not a submodule) is an edge to the package, whose lazy __getattr__
    # imports the engine: engine -> package -> engine
    ({"pkg/__init__.py": "def __getattr__(name):\n    from pkg.engine import Engine\n    return Engine\n",
      "pkg/engine.py": "from pkg import CONFIG\n"},
     [["pkg", "pkg.engine", "pkg"]]),
    # ...but an engine importing from pkg.base is fine, and so is a package re-exporting submodules
    ({"pkg/__init__.py": "from pkg.base import CONFIG\n\ndef __getattr__(name):\n    from pkg.engine import E\n"
                         "    return E\n",
      "pkg/base.py": "CONFIG = 1\n", "pkg/engine.py": "from pkg.base import CONFIG\nimport pkg.base as b\n"},
     []),
    # TYPE_CHECKING imports never run; a three-module ring is reported once, from its smallest name
    ({"pkg/__init__.py": "", "pkg/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.y\n",
      "pkg/y.py": "import pkg.z\n", "pkg/z.py": "def f():\n    from pkg import w\n",
      "pkg/w.py": "from pkg.y import *\n"},
     [["pkg.w", "pkg.y", "pkg.z", "pkg.w"]]),
])
def test_detector_resolves_imports(tmp_path, files, expected):
    cycles, _ = cycle_report(_write(tmp_path, files))
    assert cycles == expected
