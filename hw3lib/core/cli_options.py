"""What every `hw3` training command shares: a config built from a profile, the options given and `--set` items.

`hw3 train`, `hw3 sft`, `hw3 expert-iteration` and `hw3 keyword` all build their config the same way:
the profile's settings, then the options that were given on the command line (None: not given), then
`--set KEY=VALUE` items (values parsed as JSON when they parse). Errors become typer usage errors.
"""

from __future__ import annotations

import json
from typing import Optional

import typer


def config_from_profile(cls, profile: Optional[str], set_: Optional[list[str]] = None, **options):
    """`cls.for_profile(profile, ...)` (a config dataclass with `for_profile`) with `overrides_from(...)`;
    errors become usage errors."""
    try:
        return cls.for_profile(profile, **overrides_from(set_, **options))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


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
