"""What every `hw3` training command shares: a config built from a profile, the options given and `--set` items.

`hw3 train`, `hw3 sft`, `hw3 expert-iteration` and `hw3 keyword` all build their config the same way:
the profile's settings, then the options that were given on the command line (None: not given), then
`--set KEY=VALUE` items (values parsed as JSON when they parse). A setting the config refuses is a
`CommandError`, which `hw3` prints as one line (hw3lib.cli). `check_run_folder` applies the run folder's
rules (hw3lib.core.lifecycle.open_run) before anything is loaded and says, in one line, how to resume,
extend or start a new run when the folder already holds one.
"""

from __future__ import annotations

import json
from typing import Optional

import typer


class CommandError(Exception):
    """What a command refuses, said in one line (`hw3` prints `error: <message>`, no traceback; hw3lib.cli)."""


def config_from_profile(cls, profile: Optional[str], set_: Optional[list[str]] = None, **options):
    """`cls.for_profile(profile, ...)` (a config dataclass with `for_profile`) with `overrides_from(...)`;
    a value the config refuses is a CommandError (its checks raise ValueError or TypeError naming the field)."""
    overrides = overrides_from(set_, **options)
    try:
        return cls.for_profile(profile, **overrides)
    except ValueError as exc:  # only the config's own checks run here: no model, no data
        if type(exc) is not ValueError:  # PreflightError ($HW3_SIMULATE_GPU), ...: their message says what to do
            raise
        raise CommandError(f"{exc} (--help lists the options; --set takes any config field)") from exc
    except TypeError as exc:  # a --set value of the wrong type, met by a check comparing it
        raise CommandError(f"a setting has the wrong type ({exc}): check the --set values "
                           f"(given: {', '.join(set_ or []) or 'none'})") from exc


def check_run_folder(cfg, resume: bool, overwrite: bool) -> None:
    """Before a training command loads anything: the run folder's rules (hw3lib.core.lifecycle.open_run, which
    only reads here), with a refusal turned into one line saying how to resume, extend or start a new run."""
    from hw3lib.core.lifecycle import open_run, run_folder
    from hw3lib.core.runs import RunExistsError

    if resume and overwrite:
        raise CommandError("--resume and --overwrite contradict each other: pick one (--resume continues the run "
                           "in the folder, --overwrite deletes its outputs and starts over)")
    if overwrite:
        return
    run_dir = run_folder(cfg)
    if _counter_of_latest(run_dir) not in (None, cfg.COUNTER):  # another command's run (GRPO steps vs SFT steps)
        raise CommandError(run_folder_advice(run_dir, cfg, resume))
    try:
        open_run(run_dir, cfg, resume, overwrite=False)
    except (RunExistsError, ValueError) as exc:  # the folder rules' refusals (a ValueError: cannot resume)
        raise CommandError(run_folder_advice(run_dir, cfg, resume)) from exc


def run_folder_advice(run_dir, cfg, resume: bool) -> str:
    """One line: what `run_dir` holds and the options that go on from it (--resume, --resume --steps N,
    --name, --overwrite), only those that work for this folder."""
    from hw3lib.core.io import shown_path
    from hw3lib.core.lifecycle import COUNTER_WORDS, field_defaults
    from hw3lib.core.runs import config_differences, latest_checkpoint

    shown = shown_path(run_dir)
    new_name = f"--name {cfg.name.rsplit('/', 1)[-1]}_2 (any new name) starts a new run beside it"
    start_over = "--overwrite deletes its outputs and starts over"
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        return (f"{shown} holds outputs of a run that stopped before its first checkpoint, so there is nothing to "
                f"resume: {new_name}; {start_over}")
    state = json.loads((checkpoint / "state.json").read_text())
    saved = json.loads((checkpoint / "config.json").read_text())
    if cfg.COUNTER not in state:
        return (f"{shown} holds a run of another command (its checkpoint counts "
                f"{', '.join(COUNTER_WORDS[key] + 's' for key in COUNTER_WORDS if key in state) or 'something else'}"
                f"): {new_name}; {start_over}")
    word = COUNTER_WORDS.get(cfg.COUNTER, cfg.COUNTER)
    done, planned = state[cfg.COUNTER], saved.get(cfg.TOTAL_FIELD)
    where = f"{shown} already holds a run at {word} {done} of {planned}"
    differing = config_differences(saved, cfg.to_dict(), defaults=field_defaults(cfg))
    if differing:
        return (f"{where} made with other settings ({'; '.join(differing)}): with its settings (its config.json) "
                f"the command reuses or (--resume) continues it; {new_name}; {start_over}")
    extend = f"--resume --steps N with N > {done} extends it"
    if done > cfg.total_steps:  # past this --steps: only a longer run continues it
        asked = f"--steps {cfg.total_steps} is fewer than it has"
        return f"{where}; {asked}: {extend}; {new_name}; {start_over}"
    if done == cfg.total_steps:  # its last validation is missing (a finished run with these settings is reused)
        return f"{where} without its last validation: --resume finishes it; {extend}; {new_name}; {start_over}"
    if resume:  # open_run refused a resume for another reason than settings or length
        return f"{where} and cannot be resumed as asked: {new_name}; {start_over}"
    return f"{where}: --resume continues it to {word} {cfg.total_steps}; {new_name}; {start_over}"


def overrides_from(set_: Optional[list[str]], **options) -> dict:
    """The options that were given (None: not given), then the `--set KEY=VALUE` items, as one dict."""
    overrides = {key: value for key, value in options.items() if value is not None}
    for item in set_ or []:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--set")
        overrides[key.strip()] = _parse_value(text)
    return overrides


def _parse_value(text: str):
    """A --set value: JSON when it parses (numbers, true/false/null, lists -> tuples), else the string."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text
    return tuple(value) if isinstance(value, list) else value


def _counter_of_latest(run_dir) -> Optional[str]:
    """The step counter (`grpo_step`, `step`, `round`) the run's latest checkpoint holds; None without one."""
    from hw3lib.core.lifecycle import COUNTER_WORDS
    from hw3lib.core.runs import latest_checkpoint

    checkpoint = latest_checkpoint(run_dir) if run_dir.is_dir() else None
    if checkpoint is None:
        return None
    state = json.loads((checkpoint / "state.json").read_text())
    return next((key for key in COUNTER_WORDS if key in state), "unknown")
