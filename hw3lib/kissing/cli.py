"""`hw3 kissing ...`: evaluate a program, verify a point set, run an LLM discovery loop.

    hw3 kissing evaluate program.py [--timeout 60] [--strict]
    hw3 kissing verify points.json [--form auto|integer|rational|angle|zsqrt2]
    hw3 kissing discover --loop agentic|best_of_n|hybrid|orbit --iterations K --out DIR [--replay file.json]
                         [--start data/kissing_number/records/station600.json]
    hw3 kissing report [--folder data/kissing_number] [--overwrite]
    hw3 kissing promote RUN_DIR [--folder data/kissing_number] [--overwrite]

`evaluate` and `verify` print the metrics as JSON and the evaluator's message; they exit 0 for
invalid programs or sets (that is a result, not an error) and 2 with a clear message when the file
is missing or unreadable. `evaluate --strict` refuses (exit 2) to run without the bubblewrap
sandbox instead of falling back to the weaker process sandbox (see hw3lib.kissing.sandbox). `discover` talks to $HW3_LLM_BASE_URL (see hw3lib.kissing.llm) or
replays recorded replies with --replay (a replay is labelled so everywhere and is never a result).
`report` writes data/kissing_number/report.md from a re-run of the search that produced program.py;
`promote` stores a live run's best program, conversation_log.json and reports there (a replay is
refused). Both refuse to replace existing files without --overwrite (see hw3lib.kissing.deliverables).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

LOOP_CHOICES = ("agentic", "best_of_n", "hybrid", "orbit")


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def evaluate(program: Path = typer.Argument(..., help="Python file defining run_code() / get_centers() / points"),
             timeout: float = typer.Option(60.0, "--timeout", help="Wall-clock limit for the program (s)"),
             memory_mb: int = typer.Option(2048, "--memory-mb", help="Address-space limit for the program (MiB)"),
             strict: bool = typer.Option(False, "--strict", help="Refuse to run without the bubblewrap sandbox")):
    """Run a candidate program in the sandbox and print the course's metrics (JSON) and the message."""
    from hw3lib.kissing.evaluator import evaluate_program
    from hw3lib.kissing.sandbox import SandboxUnavailable

    if not program.is_file():
        _fail(f"{program}: no such program file (give the path to a .py file)")
    try:
        metrics = evaluate_program(program, timeout_s=timeout, memory_mb=memory_mb, strict=strict)
    except SandboxUnavailable as exc:
        _fail(f"--strict: {exc}")
    from hw3lib.kissing.messages import clean_text

    message = clean_text(metrics.pop("message"))  # the evaluator cleans it already; a terminal gets no escapes regardless
    typer.echo(json.dumps(metrics, indent=2))
    typer.echo(message)


def verify(points_file: Path = typer.Argument(..., help="JSON file: a list of vectors, {\"points\": [...]} or "
                                              "{\"vectors\": [...]}"),
           dimension: int = typer.Option(11, "--dimension", help="Required dimension"),
           form: str = typer.Option("auto", "--form", help="auto | integer | rational | angle | zsqrt2")):
    """Check a point set exactly in one of the published forms and print its verdict (JSON) and the message.

    integer: the course's form, min ||x - y||^2 >= max ||x||^2; rational: the same for exact rationals
    (JSON decimals are read exactly, or strings "3/7"); angle: cos <= 1/2 for every pair (mixed norms;
    with equal norms it is the min-distance form); zsqrt2: rows [a_0, b_0, a_1, b_1, ...] meaning
    coordinates a_k + b_k sqrt2, min-distance form. auto: zsqrt2 for rows of 2 x dimension entries in a
    {"vectors": ...} record, else integer, else rational (angle is never guessed).
    """
    from decimal import Decimal

    from hw3lib.kissing.verify import FORMS, verify_form

    if form != "auto" and form not in FORMS:
        _fail(f"--form {form!r}: choose auto or one of {', '.join(FORMS)}")
    if not points_file.is_file():
        _fail(f"{points_file}: no such points file")
    try:
        data = json.loads(points_file.read_text(encoding="utf-8"), parse_float=Decimal)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        _fail(f"{points_file}: not valid JSON ({exc}); expected a list of integer vectors")
    if isinstance(data, dict) and not ({"points", "vectors"} & set(data) or {"rational", "sqrt2"} <= set(data)):
        _fail(f"{points_file}: a JSON object needs a 'points' (or 'vectors') key holding the list of vectors")
    result = verify_form(data, form, dimension)
    typer.echo(json.dumps({"valid": result.valid, "form": result.form, "criterion": result.criterion,
                           "num_points": result.num_points, "dimension": result.dimension, "score": result.score,
                           "offending_pair": result.offending_pair, "offending_point": result.offending_point,
                           "min_sq_distance": result.min_sq_distance, "max_sq_norm": result.max_sq_norm,
                           "tight_pairs": result.tight_pairs, "scale": result.scale}, indent=2))
    typer.echo(result.message)


def discover(loop: str = typer.Option("agentic", "--loop", help="agentic | best_of_n | hybrid | orbit"),
             iterations: int = typer.Option(5, "--iterations", min=1, help="Iterations (best_of_n: samples N)"),
             out: Path = typer.Option(..., "--out", help="Run directory for candidates, logs and the report"),
             replay: Path | None = typer.Option(None, "--replay", help="Replay recorded replies from this JSON file"),
             start: Path | None = typer.Option(None, "--start", help="Start from a stored configuration: a record JSON "
                                               "(any published form with an integer copy) or a program .py"),
             timeout: float = typer.Option(60.0, "--timeout",
                                           help="Per-program evaluation limit (s); orbit: per-search deadline"),
             polish_seconds: float = typer.Option(10.0, "--polish-seconds", help="hybrid: local-search time per program"),
             polish_iterations: int | None = typer.Option(None, "--polish-iterations",
                                                          help="hybrid: also stop the search after this many steps"),
             history_turns: int = typer.Option(3, "--history-turns", help="agentic/hybrid: past exchanges resent"),
             workers: int = typer.Option(1, "--workers", help="best_of_n: concurrent requests"),
             seed: int = typer.Option(0, "--seed"),
             overwrite: bool = typer.Option(False, "--overwrite", help="Replace an earlier run in --out"),
             base_url: str | None = typer.Option(None, "--base-url", help="Default: $HW3_LLM_BASE_URL"),
             model: str | None = typer.Option(None, "--model", help="Default: $HW3_LLM_MODEL or the server's model"),
             temperature: float = typer.Option(0.6, "--temperature"),
             max_tokens: int = typer.Option(8192, "--max-tokens")):
    """Run an LLM-guided discovery loop; writes candidates/, evaluations.jsonl, conversation_log.json, report.md."""
    from hw3lib.kissing.llm import ChatClient, LLMError, ScriptedResponder
    from hw3lib.kissing.loops import discover as run_loop

    if loop not in LOOP_CHOICES:
        _fail(f"--loop {loop!r}: choose one of {', '.join(LOOP_CHOICES)}")
    try:
        if replay is not None:
            responder = ScriptedResponder(replay)
        else:
            responder = ChatClient(base_url, model, temperature=temperature, max_tokens=max_tokens)
    except LLMError as exc:
        _fail(str(exc))
    options: dict = {"timeout_s": timeout, "seed": seed, "overwrite": overwrite}
    if start is not None:
        if loop == "orbit":
            _fail("--start: the orbit loop builds its own sets; use it with agentic, best_of_n or hybrid")
        from hw3lib.kissing.scaffold import load_start

        if not start.is_file():
            _fail(f"--start {start}: no such file")
        try:
            options["start"] = load_start(start)
        except ValueError as exc:
            _fail(f"--start: {exc}")
    if loop == "best_of_n":
        options["workers"] = workers
    else:
        options["history_turns"] = history_turns
    if loop == "hybrid":
        options["polish_seconds"] = polish_seconds
        options["polish_iterations"] = polish_iterations
    try:
        result = run_loop(loop, responder, out, iterations, **options)
    except FileExistsError as exc:
        _fail(str(exc))
    except LLMError as exc:
        _fail(f"{exc} (the files written so far are in {out})")
    from hw3lib.kissing.report import REPLAY_LABEL

    label = f"{REPLAY_LABEL.upper()}: " if replay is not None else ""
    typer.echo(f"{label}best score {result.best_score:g} (iteration {result.best_iteration}); "
               f"scores per iteration: {', '.join(f'{s:g}' for s in result.scores)}")
    typer.echo(f"log: {result.log_path}")
    typer.echo(f"report: {result.report_path}")
    if replay is None:
        typer.echo(f"to store it as the submission if it beats data/kissing_number/program.py: "
                   f"hw3 kissing promote {out} --overwrite")


def report(folder: Path | None = typer.Option(None, "--folder", help="Default: data/kissing_number"),
           overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing report.md"),
           iterations: int = typer.Option(5000, "--iterations", help="The search's iterations (as --write-program)"),
           seed: int = typer.Option(0, "--seed")):
    """Write report.md for the stored program.py: method, compute, score history, largest free cap, limits."""
    from hw3lib.kissing.deliverables import write_report

    from hw3lib.kissing.deliverables import default_folder

    target = (folder if folder is not None else default_folder()) / "report.md"
    if target.exists() and not overwrite:
        _fail(f"{target} exists (a clone ships the stored report); regenerate it with `hw3 kissing report "
              "--overwrite` (re-runs the 5000-iteration search and the records check, about 30 s)")
    try:
        path, data = write_report(folder, overwrite=overwrite, iterations=iterations, seed=seed)
    except (FileExistsError, FileNotFoundError, ValueError) as exc:
        _fail(str(exc))
    typer.echo(f"{path}: {data['num_points']} points, largest free cap {data['cap']['angle_deg']:.4f} degrees")


def promote(run_dir: Path = typer.Argument(..., help="A live run's directory (hw3 kissing discover --out)"),
            folder: Path | None = typer.Option(None, "--folder", help="Default: data/kissing_number"),
            overwrite: bool = typer.Option(False, "--overwrite", help="Replace the stored program and its files")):
    """Store a live run's best program and its conversation_log.json (refused for replays and for runs that lose)."""
    from hw3lib.kissing.deliverables import promote_run

    try:
        written = promote_run(run_dir, folder, overwrite=overwrite)
    except (FileExistsError, FileNotFoundError, ValueError) as exc:  # DataFileError is a ValueError
        _fail(str(exc))
    typer.echo("written: " + ", ".join(str(p) for p in written))


def register(app: typer.Typer, name: str) -> None:
    """Add the `kissing` sub-app to the `hw3` command line."""
    sub = typer.Typer(add_completion=False, no_args_is_help=True,
                      help="The 11-dimensional kissing problem: evaluate a program, verify a point set, "
                           "run an LLM-guided discovery loop, write and store the deliverables.")
    sub.command("evaluate")(evaluate)
    sub.command("verify")(verify)
    sub.command("discover")(discover)
    sub.command("report")(report)
    sub.command("promote")(promote)
    app.add_typer(sub, name=name)
