"""Make untrusted text safe to show, log and send: valid UTF-8, no control characters, bounded length.

A sandboxed program chooses the text of its own error messages (a traceback, what it printed, the
keys of a forged result). That text reaches the evaluator's result, the discovery loops' logs, the
next LLM request and `hw3 kissing evaluate`'s terminal, so before it goes anywhere:

* lone surrogates (which `json`, `httpx` and terminals refuse to encode) become U+FFFD;
* terminal escape sequences (ESC [ ... letter, ESC ] ... BEL/ST) are removed whole, and every other
  control character except newline and tab is removed (carriage returns included: they can overwrite
  what a terminal shows);
* the text is cut to `limit` characters, keeping the head and the tail (a traceback's last line
  says what went wrong) with a note saying how much was left out.

Pure functions, stdlib only, so the evaluator, the loops, the LLM client and the CLI can all use them.
"""

from __future__ import annotations

import re

MESSAGE_LIMIT = 4000  # characters of a message kept (head + tail)

# CSI (ESC [ params final), OSC (ESC ] ... BEL or ESC \), and any other two-byte ESC sequence.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?|\x9b[0-?]*[ -/]*[@-~]")
# C0 controls except \t and \n, DEL, and C1 controls (U+0080..U+009F: some terminals act on them).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


_SURROGATES = re.compile("[\ud800-\udfff]")


def valid_unicode(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD, so it always encodes as UTF-8."""
    return _SURROGATES.sub("\ufffd", text)


def clean_text(text: str | bytes, limit: int = MESSAGE_LIMIT) -> str:
    """Untrusted text made valid, free of control characters and at most about `limit` characters."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    elif not isinstance(text, str):
        text = str(text)
    dropped = 0
    if len(text) > 4 * limit:  # cut first so the regexes below never scan megabytes
        dropped = len(text) - 4 * limit
        text = text[:2 * limit] + text[-2 * limit:]
    text = _CONTROLS.sub("", _ESCAPES.sub("", valid_unicode(text)))
    if len(text) > limit:
        head = limit // 4
        tail = max(0, limit - head - 60)
        dropped += len(text) - head - tail
        text = f"{text[:head]}\n[... {dropped:,} characters left out ...]\n{text[len(text) - tail:]}"
    return text
