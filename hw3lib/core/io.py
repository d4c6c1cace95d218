"""Small file helpers: project paths, atomic writes, and jsonl reading with good errors.

Every file the workbook writes goes through `atomic_write_*`: the content is written to a
temporary file in the same directory and renamed over the target, so an interrupted run never
leaves a half-written file behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator


class DataFileError(ValueError):
    """A data file is missing or malformed; the message names the file, line and fix."""


def project_root() -> Path:
    """The workbook checkout: the nearest parent of the cwd (or of this package) holding pyproject.toml.

    Notebooks run with their own folder as the cwd, so paths like `figures/` must be resolved
    against the project, not the cwd.
    """
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for candidate in (start, *start.parents):
            if (candidate / "pyproject.toml").is_file() and (candidate / "hw3lib").is_dir():
                return candidate
    return Path.cwd()


def cache_dir() -> Path:
    """Where built artefacts (the tiny model, ...) are cached: $HW3_CACHE_DIR or ~/.cache/hw3lib."""
    path = Path(os.environ.get("HW3_CACHE_DIR", Path.home() / ".cache" / "hw3lib"))
    path.mkdir(parents=True, exist_ok=True)
    return path


OUTPUT_ENV = "HW3_OUTPUT_DIR"
"""Where the workbook's outputs go (`runs/`, `figures/`, `writeup/`'s PDF); default: the checkout."""
RUNS_ENV = "HW3_RUNS_DIR"
"""Where runs go when set (overrides `$HW3_OUTPUT_DIR/runs`)."""


def output_root() -> Path:
    """The folder holding the workbook's outputs -- `runs/`, `figures/`, `writeup/writeup.pdf` -- read here
    only: $HW3_OUTPUT_DIR, else the checkout (`project_root()`). `make test` and pytest point it at a
    temporary folder (`isolated_output_env`), so tests never touch a workbook's results."""
    env = os.environ.get(OUTPUT_ENV)
    return Path(env) if env else project_root()


def shown_path(path: str | os.PathLike) -> str:
    """`path` as printed in notebook outputs and logs: relative to the runs folder's parent, the output root,
    the checkout or the cache ($HW3_CACHE_DIR/...), so stored outputs never carry a machine's absolute path."""
    path = Path(path)
    runs = Path(os.environ.get(RUNS_ENV) or output_root() / "runs")
    bases = ((runs.parent, ""), (output_root(), ""), (project_root(), ""),
             (Path(os.environ.get("HW3_CACHE_DIR", Path.home() / ".cache" / "hw3lib")), "$HW3_CACHE_DIR/"))
    for base, prefix in bases:
        try:
            return prefix + str(path.resolve().relative_to(base.resolve()))
        except ValueError:
            continue
    return str(path) if not path.is_absolute() else ".../" + "/".join(path.parts[-2:])


def shown_model(model: str) -> str:
    """A model as printed: a local folder (a warm start in the cache) by `shown_path`, a hub name or `tiny` as is."""
    return shown_path(model) if Path(model).is_absolute() else model


def isolated_output_env(folder: str | os.PathLike) -> dict[str, str]:
    """The environment that sends every output (runs, figures, writeup) under `folder` instead of the
    checkout: what `make test`'s notebooks (`python -m hw3lib.workbook.isolated`) and pytest
    (tests/conftest.py) run with."""
    folder = Path(folder).resolve()
    return {OUTPUT_ENV: str(folder), RUNS_ENV: str(folder / "runs")}


def runs_dir() -> Path:
    """Where runs write their outputs: $HW3_RUNS_DIR, else `output_root()`/runs (<project>/runs), and for a
    course ($HW3_COURSE, hw3lib.core.course) that trains another model or data than the default one, its own
    subfolder (`runs/math-qwen2.5/`, `Course.runs_folder`), so runs of different settings, which share names,
    never meet in one folder, while presets of one setting (the two MATH courses) share their runs."""
    from hw3lib.core.course import DEFAULT_SETTING, get_course

    path = Path(os.environ.get(RUNS_ENV) or output_root() / "runs")
    crs = get_course()
    if crs.full_model:  # its runs folder depends on the profile (a model of its own only in the full one)
        from hw3lib.core.profile import default_profile_name

        folder = crs.runs_folder(default_profile_name())
    else:
        folder = crs.runs_folder("smoke")
    if folder != DEFAULT_SETTING:
        path = path / folder
    path.mkdir(parents=True, exist_ok=True)
    return path


def course_output_root() -> Path:
    """Where one course's figures and writeup go: `output_root()` for the default course (figures/,
    writeup/writeup.pdf), and `output_root()`/courses/<course> for another ($HW3_COURSE), so running the
    second course's workbook never overwrites the first one's figures or PDF."""
    from hw3lib.core.course import DEFAULT_COURSE, default_course_name

    name = default_course_name()
    return output_root() if name == DEFAULT_COURSE else output_root() / "courses" / name


def figures_dir() -> Path:
    """Where notebooks export their plots and the writeup's JSON: `course_output_root()`/figures
    (<project>/figures for the default course, <project>/courses/<course>/figures for another)."""
    path = course_output_root() / "figures"
    path.mkdir(parents=True, exist_ok=True)
    return path


def build_folder_once(target: Path, build: Callable[[Path], None], marker: str = "config.json") -> Path:
    """`target`, built by `build(staging)` into a temporary sibling folder and renamed into place, unless
    it already holds `marker` (a finished build). An interrupted build is never mistaken for a finished
    one. Processes wanting the same folder at once (CI's pytest and four notebook walks share one cache)
    take turns on a lock file beside it, so one builds and the others find its result; where no lock can be
    taken (no `fcntl`) both build and the first rename wins (same content)."""
    if (target / marker).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(target.parent / f".{target.name}.lock"):
        if not (target / marker).is_file():  # another process may have built it while we waited
            _build_and_rename(target, build, marker)
    return target


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive `flock` on `path` (created if missing; released when the file closes, also when the
    process dies, so a killed builder never leaves it held)."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system: no lock, builds may overlap (still safe, see build_folder_once)
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _build_and_rename(target: Path, build: Callable[[Path], None], marker: str) -> None:
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        build(staging)
        try:
            staging.rename(target)
        except OSError:  # a concurrent builder won the race; its result is identical
            if not (target / marker).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` via a temporary file and a rename (never half-written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, default=_json_default) + "\n")


def atomic_write_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> Path:
    text = "".join(json.dumps(row, default=_json_default) + "\n" for row in rows)
    return atomic_write_text(path, text)


def append_jsonl(path: str | os.PathLike, row: Any) -> None:
    """Append one row and flush (for metrics logs; a torn last line is skipped by read_jsonl)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row, default=_json_default) + "\n")
        handle.flush()


def iter_jsonl(path: str | os.PathLike, *, allow_torn_tail: bool = False) -> Iterator[dict]:
    """Yield one dict per non-empty line; a bad line raises DataFileError naming file and line.

    `allow_torn_tail` skips an unparsable *last* line (what a killed writer leaves behind).
    """
    return (row for _, row in iter_jsonl_numbered(path, allow_torn_tail=allow_torn_tail))


def iter_jsonl_numbered(path: str | os.PathLike, *, allow_torn_tail: bool = False) -> Iterator[tuple[int, dict]]:
    """`iter_jsonl` with each row's 1-based line number, for callers that check fields and must name the line."""
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"{path}: file not found")
    with open(path, "rb") as handle:
        lines = handle.read().split(b"\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if allow_torn_tail and number - 1 == last:
                return
            raise DataFileError(f"{path}:{number}: not valid JSON ({exc}); fix or remove this line") from None
        if not isinstance(row, dict):
            raise DataFileError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        yield number, row


def read_json(path: str | os.PathLike, what: str = "file") -> Any:
    """The JSON in `path`, or None when there is no such file; invalid JSON is a ValueError naming the file and
    the position (`what` says what the file should have been, e.g. "orbit-search log")."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a readable {what} ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
                         "move it away or restore it") from None


def read_jsonl(path: str | os.PathLike, *, allow_torn_tail: bool = False) -> list[dict]:
    return list(iter_jsonl(path, allow_torn_tail=allow_torn_tail))


def save_figure(fig, path_stem: str | os.PathLike, suffixes: Iterable[str] = (".pdf", ".png"), **savefig_kwargs) -> list[Path]:
    """Save a matplotlib figure as `<stem><suffix>` for each suffix, atomically; returns the paths.

    A bare stem (no folder) goes to `figures/`; a path with folders is used as given. Each file is
    rendered into memory first, so a crash mid-plot never leaves a torn PDF/PNG for the writeup.
    """
    from io import BytesIO  # the standard library's io (absolute import), not this module

    stem = Path(path_stem)
    if stem.parent == Path("."):
        stem = figures_dir() / stem
    written = []
    for suffix in suffixes:
        buffer = BytesIO()
        fig.savefig(buffer, format=suffix.lstrip("."), **savefig_kwargs)
        written.append(atomic_write_bytes(stem.with_name(stem.name + suffix), buffer.getvalue()))
    return written


def _json_default(obj: Any) -> Any:
    """Make numpy/torch scalars, paths and dataclasses JSON-serialisable."""
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"cannot serialise {type(obj).__name__} to JSON")
