"""Every environment variable the code reads is documented in docs/environment.md.

The reads are found in the syntax tree of every module under hw3lib/ and bench/: `os.environ.get(X)`,
`os.getenv(X)`, `os.environ[X]` (read, not assigned), `X in os.environ` and `os.environ.setdefault(X, ...)`.
`X` is a string, a module-level constant (`MATH_DATA_ENV = "HW3_MATH_DATA"`, also imported into another
module or reached as `data.MATH_DATA_ENV`), a loop variable over a tuple of names or over such a constant,
or a parameter of a helper that reads the variable it is given (`_env("HW3_LLM_BASE_URL", "OPENAI_BASE_URL")`):
then the names passed to the helper anywhere count. A read whose name cannot be told this way fails the
test too, so a new read is never silently missed. The Makefile's `HW3_*` variables are checked as text.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "environment.md"
SOURCES = ("hw3lib", "bench")
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _is_environ(node: ast.AST) -> bool:
    """`os.environ` or a bare `environ` (from os import environ)."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (isinstance(node, ast.Name)
                                                                            and node.id == "environ")


def _read_argument(node: ast.AST) -> ast.AST | None:
    """The name expression of an environment read, or None when `node` is not one."""
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("get", "setdefault", "pop") and _is_environ(func.value):
            return node.args[0] if node.args else None
        if ((isinstance(func, ast.Attribute) and func.attr == "getenv")
                or (isinstance(func, ast.Name) and func.id == "getenv")):
            return node.args[0] if node.args else None
    if isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
        return node.slice
    if (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn))
            and _is_environ(node.comparators[0])):
        return node.left
    return None


def _strings(node: ast.AST) -> list[str] | None:
    """The strings of a literal string, or of a tuple / list / set of them; None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        values = [_strings(element) for element in node.elts]
        if all(value is not None for value in values):
            return [text for value in values for text in value]
    return None


class Module:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        self.parents: dict[ast.AST, ast.AST] = {}
        for parent in ast.walk(self.tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
        self.constants: dict[str, list[str]] = {}  # module-level NAME = "X" or NAME = ("X", "Y")
        for statement in self.tree.body:
            targets = (statement.targets if isinstance(statement, ast.Assign)
                       else [statement.target] if isinstance(statement, ast.AnnAssign) and statement.value else [])
            for target in targets:
                value = _strings(statement.value)
                if isinstance(target, ast.Name) and value is not None:
                    self.constants[target.id] = value


def _modules() -> list[Module]:
    return [Module(path) for folder in SOURCES for path in sorted((REPO / folder).rglob("*.py"))]


def _where(module: Module, node: ast.AST) -> str:
    return f"{module.path.relative_to(REPO)}:{node.lineno}"


def _resolve(node: ast.AST, module: Module, modules: list[Module]) -> list[str] | None:
    """The variable names `node` (the name in a read) stands for; None when they cannot be told."""
    literal = _strings(node)
    if literal is not None:
        return literal
    if isinstance(node, ast.Starred):  # helper(*names) inside another helper: what that one is given
        return _resolve(node.value, module, modules)
    if isinstance(node, ast.JoinedStr):
        return None
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
    if name is None:
        return None
    if isinstance(node, ast.Name):
        bound = _loop_binding(node, module, modules)
        if bound is not None:
            return bound
        passed = _helper_arguments(node, module, modules)
        if passed is not None:
            return passed
    if name in module.constants:
        return module.constants[name]
    found = [other.constants[name] for other in modules if name in other.constants]
    if found and all(values == found[0] for values in found):
        return found[0]
    return None


def _loop_binding(node: ast.Name, module: Module, modules: list[Module]) -> list[str] | None:
    """`for name in ITER` / a comprehension over ITER enclosing `node`: the names ITER holds."""
    current = node
    while current in module.parents:
        current = module.parents[current]
        loops = ([current] if isinstance(current, (ast.For, ast.AsyncFor))
                 else current.generators if isinstance(current, (ast.ListComp, ast.SetComp, ast.DictComp,
                                                                 ast.GeneratorExp)) else [])
        for loop in loops:
            if isinstance(loop.target, ast.Name) and loop.target.id == node.id:
                return _resolve(loop.iter, module, modules)
    return None


def _helper_arguments(node: ast.Name, module: Module, modules: list[Module]) -> list[str] | None:
    """`node` is a parameter of the enclosing function (a helper reading the variable it is given): the
    strings passed for it at every call of that function in the sources."""
    current = node
    while current in module.parents and not isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef)):
        current = module.parents[current]
    if not isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    positional = [arg.arg for arg in (*current.args.posonlyargs, *current.args.args)]
    star = current.args.vararg.arg if current.args.vararg else None
    if node.id not in positional and node.id != star:
        return None
    names: list[str] = []
    for other in modules:
        for call in ast.walk(other.tree):
            if not (isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", None))
                    == current.name):
                continue
            given = (call.args if node.id == star
                     else call.args[positional.index(node.id):positional.index(node.id) + 1])
            given = [*given, *(kw.value for kw in call.keywords if kw.arg == node.id)]
            for argument in given:
                value = _resolve(argument, other, modules)
                if value is None:
                    return None
                names.extend(value)
    return names or None


def environment_reads() -> tuple[dict[str, list[str]], list[str]]:
    """`({variable: [file:line, ...]}, [file:line of reads whose name cannot be told])`."""
    modules = _modules()
    reads: dict[str, list[str]] = {}
    unresolved: list[str] = []
    for module in modules:
        for node in ast.walk(module.tree):
            argument = _read_argument(node)
            if argument is None:
                continue
            names = _resolve(argument, module, modules)
            if names is None:
                unresolved.append(f"{_where(module, node)}: {ast.unparse(argument)}")
                continue
            for name in names:
                reads.setdefault(name, []).append(_where(module, node))
    return reads, unresolved


def makefile_variables() -> set[str]:
    return set(re.findall(r"\b(HW3_[A-Z0-9_]+)\b", (REPO / "Makefile").read_text(encoding="utf-8")))


def documented() -> set[str]:
    """The variables docs/environment.md names in backquotes (a table row or the text)."""
    return set(re.findall(r"`\$?([A-Z][A-Z0-9_]*)(?:=[^`]*)?`", DOC.read_text(encoding="utf-8")))


def test_the_reader_finds_reads_of_every_form():
    """The extraction itself, on the forms the code uses: literal, constant, imported constant, loop over a
    constant tuple, helper parameter."""
    reads, unresolved = environment_reads()
    assert "hw3lib/tasks/data.py" in " ".join(reads["HW3_MATH_DATA"])  # os.environ.get(MATH_DATA_ENV)
    assert "hw3lib/core/io.py" in " ".join(reads["HW3_RUNS_DIR"])  # os.environ.get(RUNS_ENV)
    assert "PYTORCH_ALLOC_CONF" in reads  # for name in ALLOC_CONF_VARS (hw3lib.generation.doctor)
    assert {"HW3_LLM_PRICE_PROMPT", "OPENAI_PRICE_PROMPT", "HW3_LLM_BASE_URL"} <= set(reads)  # via _env(*names)
    assert "HW3_SFT_FILE" in reads and "HW3_DEBUG" in reads
    assert not unresolved, "environment reads whose variable name cannot be told:\n" + "\n".join(unresolved)
    assert all(ENV_NAME.match(name) for name in reads), sorted(name for name in reads if not ENV_NAME.match(name))


def test_every_variable_read_is_documented():
    reads, _ = environment_reads()
    missing = sorted(set(reads) - documented())
    assert not missing, (f"docs/{DOC.name} does not mention: "
                         + "; ".join(f"{name} (read at {', '.join(reads[name][:3])})" for name in missing))


def test_every_makefile_variable_is_documented():
    missing = sorted(makefile_variables() - documented())
    assert not missing, f"docs/{DOC.name} does not mention the Makefile's {', '.join(missing)}"


def test_the_page_documents_no_variable_nothing_reads():
    """A row for a variable the code no longer reads is stale (the Makefile's and the ones read by the tools the
    page names as such count as read)."""
    reads, _ = environment_reads()
    text = DOC.read_text(encoding="utf-8")
    rows = set(re.findall(r"^\|\s*`([A-Z][A-Z0-9_]*)`", text, flags=re.MULTILINE))
    external = set(re.findall(r"^\|\s*`([A-Z][A-Z0-9_]*)`[^\n]*\(read by [^)]*\)", text, flags=re.MULTILINE))
    stale = sorted(rows - set(reads) - makefile_variables() - external)
    assert not stale, f"docs/{DOC.name} has rows for variables nothing reads: {', '.join(stale)}"
