"""The `hw3` command line: `hw3 eval ...`, `hw3 train ...`, `hw3 sft ...`, `hw3 expert-iteration ...`,
`hw3 kissing ...`, `hw3 keyword ...`, `hw3 sweep ...`, `hw3 runs prune-optimizer` (free finished runs' AdamW state),
`hw3 doctor` (run it first on a new GPU).

Each sub-command is a thin wrapper over a library function; sub-apps live next to the code they
drive and are registered here.

Errors: what the project refuses (a bad data file, a config value, a run folder that already
holds a run, missing data, a run that does not fit the GPU) ends the command with one line on
stderr, `error: <message>`, and exit status 1; a mistyped option or value with exit status 2.
Any other exception is a bug and keeps its traceback. `hw3 --debug ...` or HW3_DEBUG=1 shows
the traceback of the project's errors too.
"""

from __future__ import annotations

import linecache
import os
from pathlib import Path

import typer
from typer.core import TyperGroup

try:  # typer >= 0.24 carries its own copy of click (the pinned 0.29 does); older ones use click itself
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover
    from click import exceptions as click_errors

DEBUG_ENV = "HW3_DEBUG"

# The project's own error classes (module.qualname, matched along the exception's MRO, so nothing is imported
# to check them and subclasses count: RunMismatchError is a RunExistsError). Their messages name the file,
# setting or folder and what to do.
PROJECT_ERRORS = frozenset({
    "hw3lib.core.cli_options.CommandError",
    "hw3lib.core.io.DataFileError",
    "hw3lib.core.runs.RunExistsError",
    "hw3lib.core.devices.PreflightError",  # hw3lib.core.disk.DiskSpaceError, plan.GpuHoursError are ones
    "hw3lib.tasks.course_grader.CourseGraderError",
    "hw3lib.experiments.parallel.SweepWorkerError",
    "hw3lib.grpo.async_loop.AsyncRunError",
    "hw3lib.workbook.writeup.WriteupCheckError",
    "hw3lib.kissing.llm.LLMError",
    "hw3lib.kissing.sandbox.SandboxUnavailable",
    "hw3lib.kissing.verify.InputError",
    "hw3lib.kissing.deliverables.ReplayRefused",
    "hw3lib.kissing.orbit_requests.RequestError",
    "hw3lib.kissing.orbits.GroupTooLarge",
    "hw3lib.kissing.layered.TooManyOrbits",
})
# hw3lib checks its inputs with `raise ValueError(...)` (and FileNotFoundError, ImportError for a missing
# package, ...) whose message names the setting and the fix. Such an exception counts as the project's when
# the innermost frame is a `raise` statement in hw3lib: the same type raised inside torch or json, or by a
# builtin on a line of hw3lib that is no `raise` (`int("x")`, an unpacking), is a bug and keeps its traceback.
CHECKED_TYPES = (ValueError, OSError, ImportError)
PACKAGE_DIR = Path(__file__).resolve().parent
MAX_JOINED = 600  # a longer multi-line message shows its first and last lines (the whole of it with --debug)


def error_class_names(exc: BaseException) -> set[str]:
    return {f"{cls.__module__}.{cls.__qualname__}" for cls in type(exc).__mro__}


def raised_by_project(exc: BaseException) -> bool:
    """Whether the innermost frame of `exc`'s traceback is a `raise` statement in hw3lib's source."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename
    try:
        inside = Path(filename).resolve().is_relative_to(PACKAGE_DIR)
    except (OSError, ValueError):
        return False
    return inside and linecache.getline(filename, tb.tb_lineno).lstrip().startswith("raise")


def is_project_error(exc: BaseException) -> bool:
    """The project's own refusal (one line, no traceback) rather than a bug (traceback)."""
    if error_class_names(exc) & PROJECT_ERRORS:
        return True
    return isinstance(exc, CHECKED_TYPES) and raised_by_project(exc)


def one_line(message: str) -> str:
    """`message` on one line: its lines joined, or (past MAX_JOINED characters) its first and last lines."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    if not lines:
        return ""
    joined = " ".join(lines)
    if len(joined) <= MAX_JOINED or len(lines) < 3:
        return joined
    return f"{lines[0]} [... {len(lines) - 2} lines; hw3 --debug shows them ...] {lines[-1]}"


def debug_requested(ctx=None) -> bool:
    """`hw3 --debug` or HW3_DEBUG set (to anything but empty or 0)."""
    if os.environ.get(DEBUG_ENV, "").strip() not in ("", "0"):
        return True
    return bool(ctx is not None and ctx.find_root().params.get("debug"))


def _fail(message: str, code: int):
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _usage_line(exc: click_errors.UsageError) -> str:
    hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
    return one_line(exc.format_message()) + hint


class OneLineErrors(TyperGroup):
    """The `hw3` group: turns errors into one line (the module docstring says which) for every sub-command, the
    kissing sub-app's included -- here, in one place, whether `hw3` runs from the shell or a test's CliRunner."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click_errors.NoArgsIsHelpError:
            raise  # `hw3` alone prints the help
        except click_errors.UsageError as exc:  # `hw3 --bogus`
            if debug_requested() or "--debug" in args:
                raise
            _fail(_usage_line(exc), exc.exit_code)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click_errors.NoArgsIsHelpError:
            raise  # `hw3 kissing` alone prints its help
        except click_errors.ClickException as exc:  # a sub-command's bad option or value
            if debug_requested(ctx):
                raise
            _fail(_usage_line(exc) if isinstance(exc, click_errors.UsageError) else one_line(exc.format_message()),
                  exc.exit_code)
        except Exception as exc:  # noqa: BLE001 -- sorted here: a project error or a bug
            if debug_requested(ctx) or not is_project_error(exc):
                raise
            _fail(one_line(str(exc)) or type(exc).__name__, 1)


# pretty_exceptions_enable=False: a bug's traceback is Python's own, not typer's rich one with every local.
app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, cls=OneLineErrors,
                  pretty_exceptions_enable=False)


@app.callback(cls=OneLineErrors)
def _global_options(debug: bool = typer.Option(False, "--debug", help=f"Show the traceback of every error, the "
                                               f"project's refusals included (also: {DEBUG_ENV}=1).")) -> None:
    # Read back by OneLineErrors through the root context's params.
    del debug


def _register() -> None:
    # Sub-apps register themselves lazily so `hw3 --help` stays fast and one broken optional
    # dependency does not take down the other commands.
    import importlib

    for module_name, name in (("hw3lib.evaluation.cli", "eval"), ("hw3lib.grpo.cli", "train"),
                              ("hw3lib.sft.cli", "sft"), ("hw3lib.kissing.cli", "kissing"),
                              ("hw3lib.keywords.cli", "keyword"),
                              ("hw3lib.experiments.cli", "sweep"), ("hw3lib.experiments.prune", "runs"),
                              ("hw3lib.generation.doctor", "doctor")):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.register(app, name)


_register()

if __name__ == "__main__":
    app()
