"""Reading an LLM's reply: drop its <think> block and pick out the program it wrote.

Pure text functions shared by `hw3lib.kissing.loops` (which evaluates the extracted program and
sends replies back without their thinking) and `hw3lib.kissing.report` (which quotes the prose
of replies); no hw3lib imports, so both can depend on it without depending on each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_ENTRY_POINT = re.compile(r"^\s*(def\s+(run_code|get_centers)\s*\(|points\s*=)", re.MULTILINE)
NO_CODE_MESSAGE = ("I could not find a ```python code block in your reply, so nothing was evaluated. "
                   "Reply with the complete program inside one ```python ... ``` block.")


def strip_thinking(text: str) -> str:
    """Drop Qwen3's <think>...</think> blocks (an unclosed one runs to the end of the text)."""
    text = _THINK.sub("", text)
    if "<think>" in text:
        text = text[:text.index("<think>")]
    return text.strip()


@dataclass(frozen=True)
class Extraction:
    code: str | None
    """The chosen program, or None."""
    error: str | None
    """Why no program was found (fed back to the model verbatim)."""
    num_blocks: int = 0


def extract_python_code(text: str) -> Extraction:
    """The program in a reply: among ```python fences (thinking excluded), the last one that defines
    run_code/get_centers/points, else the longest; unlabelled fences only when no labelled one exists."""
    visible = strip_thinking(text)
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(visible)]
    python = [body for lang, body in blocks if lang in ("python", "py", "python3")]
    if not python:
        python = [body for lang, body in blocks if lang == ""]
    python = [body.strip("\n") for body in python if body.strip()]
    if not python:
        if re.search(r"```[ \t]*(python|py)", visible):
            return Extraction(None, "Your reply was cut off inside the ```python block (no closing ```), so "
                                    "nothing was evaluated. Reply with a shorter, complete program in one "
                                    "```python block.")
        return Extraction(None, NO_CODE_MESSAGE)
    with_entry = [body for body in python if _ENTRY_POINT.search(body)]
    code = with_entry[-1] if with_entry else max(python, key=len)
    return Extraction(code + "\n", None, len(python))
