"""`\\boxed{}` answers in LaTeX text: find the last box, take its content (MATH's answer convention).

Used by the MATH loader (hw3lib.tasks.data), the rewards and the generated MATH-format task; a module
of its own so that all of them can import it without importing each other.
"""

from __future__ import annotations

import re

_BRACE_TOKENS = re.compile(r"\\.|[{}]", re.DOTALL)  # an escaped character (`\{`, `\\`) or a brace


def last_boxed_expression(text: str) -> str | None:
    """The last `\\boxed{...}` / `\\fbox{...}` (or `\\boxed 5`) in `text`, braces included; None if absent.

    Braces are matched by depth, so nested groups like `\\boxed{\\frac{1}{2}}` come out whole;
    escaped braces `\\{ \\}` do not count. An unclosed box yields None.
    """
    if not isinstance(text, str):
        return None
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    command_end = start + (len("\\boxed") if text.startswith("\\boxed", start) else len("\\fbox"))
    brace = command_end
    while brace < len(text) and text[brace] in " \t":
        brace += 1
    if brace < len(text) and text[brace] != "{":
        if brace == command_end:  # `\boxedX`: another command, not a box
            return None
        words = text[brace:].split("$", 1)[0].split()  # `\boxed 5`: the argument is the next word
        return f"{text[start:command_end]} {words[0]}" if words else None
    if brace >= len(text):
        return None
    depth = 0
    for match in _BRACE_TOKENS.finditer(text, brace):
        token = match.group()
        if token == "{":
            depth += 1
        elif token == "}":
            depth -= 1
            if depth == 0:
                return text[start:match.end()]
    return None


def boxed_content(boxed: str) -> str | None:
    """`\\boxed{X}` -> `X` (also `\\fbox{X}`, `\\boxed X`); None when `boxed` is not a box."""
    for command in ("\\boxed", "\\fbox"):
        if not boxed.startswith(command):
            continue
        rest = boxed[len(command):]
        inner = rest.lstrip(" \t")
        if inner.startswith("{") and inner.endswith("}"):
            return inner[1:-1].strip()
        if rest[:1] in (" ", "\t") and inner:
            return inner.strip()
    return None


def extract_boxed_answer(text: str) -> str | None:
    """The content of the last complete box in `text`, or None."""
    boxed = last_boxed_expression(text)
    return boxed_content(boxed) if boxed is not None else None


# ---- prompts ------------------------------------------------------------------------------------
