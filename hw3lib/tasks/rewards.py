"""Reward functions for verifiable math, and the answer-equivalence check behind them.

Rewards return `{"reward", "format_reward", "answer_reward"}` as floats:

- `r1_zero_reward_fn(response, ground_truth)`: the course's strict R1-Zero contract. Format 1 iff
  the response contains `"</think> <answer>"` (one space, exactly) and `"</answer>"`. The answer
  is the text after the last `<answer>` with every `</answer>` removed, stripped; if it holds a
  `\\boxed{}` the box's content is the answer (an unclosed box: format 1, answer 0). Reward 1 iff
  formatted and equivalent to the ground truth (a str/int/float, or a list/tuple of acceptable
  answers: any one suffices).
- `question_only_reward_fn(response, ground_truth)`: for the question-only prompt; the answer is
  the last `\\boxed{}` or else the last number in the response; format 1 iff one was found.
- `keyword_inclusion_reward_fn(response, keywords)`: the course's keyword reward, 1 iff every
  keyword occurs as a whole word, case-insensitively; `keyword_sentence_reward_fn` (an option)
  pays it only to a response that `is_one_sentence`.

`answers_equivalent(pred, gold)` decides in two stages:

1. Fast exact path (no sympy). Both sides are normalised (math delimiters, `\\text{}` wrappers,
   spacing commands, `\\dfrac`, currency and percent signs, degree marks, a trailing full stop,
   a short assignment `x = 18` are removed; a leading `~` means "approximately" and becomes
   `\\approx`, elsewhere it is a LaTeX space) and parsed as a plain number when they are one: an
   integer or decimal with optional sign, valid thousands separators (`1,000`), an exponent,
   `a/b`, or `\\frac{a}{b}`, optionally followed (after spaces or one hyphen) by a unit: one or
   more words of letters only, the first of at least two letters (so `3x` stays algebra), joined
   by spaces, `/` or `-`, with an optional full stop and `^2`/`^3` (`18 dollars`, `5 cm`,
   `18 red apples`, `18 km/h`, `18 dollars per week`, `18-year-old`). No word of the unit may be
   in `CLAIM_WORDS`: alternatives and conjunctions (`or`, `and`, `plus`, `times`, ...), ranges
   (`to`, `between`, `from`), bounds (`least`, `most`, `more`, `less`, `than`, `over`, `under`,
   `up`, `max`), approximations (`about`, `approximately`, `around`, `roughly`), hedges (`not`,
   `maybe`), and number words (`two`, `twenty`, `hundred`, `thousand`, `dozen`, `half`,
   `squared`); the one exception is `times` as the whole unit (`18 times`, a count). So
   `18 or more`, `18 and twenty` and `18 thousand` are not plain numbers. A percent sign or
   unit names the unit the question asked for, so only the magnitude is compared: `18%`,
   `18 dollars` and `18 dollars per week` all equal `18`. Plain numbers are compared as exact
   `Fraction`s, so `0.5 == 1/2` and `18.00 == \\frac{36}{2}`, but `0.333 != 1/3`.
   Then answers that change the claim are rejected for good (with `fast=False` too, since
   math-verify accepts `18 or more`, `\\geq 18`, `\\approx 18` and `3 * 6` as 18): a prediction
   holding a claim word (anywhere, so prefixes count: `at least 18`, `about 18`) that the gold
   answer does not itself contain; and, when the gold answer is a plain number, a prediction with
   a relation or approximation sign (`<`, `\\leq`, `\\geq`, `\\approx`, `\\sim`, `\\pm`, ...) or with a
   binary arithmetic operator (`+`, `-`, `*`, `\\times`, `\\cdot`, `\\div`, `×`, `÷`; binary means
   after a digit, letter or closing bracket, so `-3` and `2^{-1}` are fine, and `/` is a fraction
   bar) after its last `=`: arithmetic left undone (`18 + 2`, `3 * 6`, `18-20`) is not an answer,
   while `3 \\times 6 = 18` is left to math-verify. When the gold answer is a plain number the
   prediction must otherwise be a plain number too, or a closed-form expression without free
   letters (`\\sqrt{324}`, `2^{10}`): a prediction with free letters (`18x`, `eighteen`,
   `exactly 18`) cannot equal a number and is rejected here.
2. Only when stage 1 cannot decide (LaTeX/symbolic answers such as `\\sqrt{2}/2` vs
   `\\frac{\\sqrt2}{2}`, intervals, sets), math-verify's `parse` + `verify` decide. With
   `fast=False` math-verify is also asked whenever stage 1 says "not equal" for any reason other
   than a changed claim (it then accepts numbers equal to 6 decimal places, the course's slower,
   more lenient grading).

Bounding time. A length cap alone is not enough: sympy never finishes `2^{2^{2^{2^{2^{99}}}}}`.
math-verify's own timeouts use `signal.alarm`, which raises outside the main thread, so they are
disabled (`parsing_timeout=None`, `timeout_seconds=None`) and we bound each check ourselves:

- an answer longer than `MAX_ANSWER_CHARS` characters is non-equivalent (no sympy on huge
  input; scanning a response for tags and boxes is linear-time string search);
- every symbolic check goes to a lazily started persistent child process (`python -c ...`,
  started with `subprocess`, so daemonic pool workers may use it too) that runs math-verify under
  our own `setitimer` deadline of `SYMBOLIC_TIMEOUT_S` in its own main thread (the deadline's
  exception derives from BaseException so math-verify's `except Exception` cannot swallow it);
  the caller waits on the pipe (`select`, POSIX) with a margin and kills the child if it
  overruns; the next check starts a new one. A signal interrupts Python code only: a single C
  call (sympy raising an integer to a huge power inside `2^{2^{2^{99}}}`) would hang an
  in-process check -- and with it the training loop -- so the check is never run in the
  caller's process. Calls from several threads are serialised by a lock; a forked process gets
  a fresh verifier rather than its parent's pipes; the caller's own timers are never touched.

Garbage never raises: None, empty, huge, unbalanced-brace and lone-surrogate inputs grade 0.
Results of the symbolic stage are cached per (prediction, gold) pair, timeouts included.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable

from hw3lib.tasks.data import extract_boxed_answer

logger = logging.getLogger(__name__)

MAX_ANSWER_CHARS = 400
"""Answers (after extraction) longer than this are never equivalent: bounds the symbolic work."""


def _timeout_from_env() -> float:
    raw = os.environ.get("HW3_SYMBOLIC_TIMEOUT_S", "5")
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise ValueError(f"HW3_SYMBOLIC_TIMEOUT_S={raw!r}: set it to a positive number of seconds (default 5)")
    return value


SYMBOLIC_TIMEOUT_S = _timeout_from_env()
"""Wall-clock deadline for one math-verify parse+verify of a (prediction, gold) pair, in seconds
($HW3_SYMBOLIC_TIMEOUT_S, default 5 like math-verify's own). A first, untimed warm-up call per
process pays math-verify's import and grammar set-up (about 1.5 s), so the deadline only
measures the check itself."""
_CHILD_START_TIMEOUT_S = 120.0  # importing sympy + math-verify in the child on a loaded 2-core box
_CHILD_MARGIN_S = 5.0  # the child enforces the deadline itself; this margin covers the pipe and scheduling


def _scores(format_reward: float, answer_reward: float) -> dict[str, float]:
    return {"reward": float(format_reward * answer_reward), "format_reward": float(format_reward),
            "answer_reward": float(answer_reward)}


# ---- reward functions ---------------------------------------------------------------------------

def is_r1_zero_formatted(response: Any) -> bool:
    """The course's strict format check: both "</think> <answer>" and "</answer>" occur."""
    return isinstance(response, str) and "</think> <answer>" in response and "</answer>" in response


def extract_r1_zero_answer(response: Any) -> str | None:
    """The answer `r1_zero_reward_fn` grades, or None (unformatted, empty, or an unclosed `\\boxed{`).

    The text after the last `<answer>` with `</answer>` removed; the content of a `\\boxed{}` in it.
    """
    if not is_r1_zero_formatted(response):
        return None
    answer = response.rsplit("<answer>", 1)[1].replace("</answer>", "").strip()
    if "\\boxed" in answer or "\\fbox" in answer:
        return extract_boxed_answer(answer)
    return answer or None


def r1_zero_reward_fn(response: str, ground_truth: Any, fast: bool = True) -> dict[str, float]:
    """Strict R1-Zero reward: format 1 iff "</think> <answer>" and "</answer>" occur; see the module doc."""
    if not is_r1_zero_formatted(response):
        return _scores(0.0, 0.0)
    answer = extract_r1_zero_answer(response)
    if answer is None:
        return _scores(1.0, 0.0)
    return _scores(1.0, float(answers_equivalent(answer, ground_truth, fast=fast)))


# The last number of a free-form response: optional minus (not one glued to a preceding word or
# number, as in "5-3"), digits with valid thousands separators or plain digits, decimals, `/b`.
_LAST_NUMBER = re.compile(r"(?:(?<![\w)])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?")


def extract_question_only_answer(response: Any) -> str | None:
    """The answer `question_only_reward_fn` grades: the last `\\boxed{}`, else the last number, else None."""
    if not isinstance(response, str):
        return None
    boxed = extract_boxed_answer(response)
    if boxed is not None:
        return boxed
    numbers = _LAST_NUMBER.findall(response)
    return numbers[-1] if numbers else None


# A number as GSM8K writes one: optional minus (not one glued to a word or number, as in "5-3"),
# digits with or without thousands commas, decimals. A fraction "48/2" is two numbers.
_GSM8K_NUMBER = re.compile(r"(?:(?<![\w)])-)?\d[\d,]*(?:\.\d+)?")


def parse_gsm8k_response(model_output: str) -> str | None:
    """The course's `parse_gsm8k_response`: the last number in `model_output`, as a string without
    thousands commas (and without a trailing comma or period), or None when there is none.

    "Natalia sold 48/2 = 24 clips in May. ... 48+24 = 72 clips altogether" -> "72"; number words
    ("seventy-two") are not numbers -> None.
    """
    numbers = _GSM8K_NUMBER.findall(model_output)
    if not numbers:
        return None
    return numbers[-1].replace(",", "")


def question_only_reward_fn(response: str, ground_truth: Any, fast: bool = True) -> dict[str, float]:
    """Reward for the question-only prompt: the last `\\boxed{}` or else the last number is the answer."""
    answer = extract_question_only_answer(response)
    if answer is None:
        return _scores(0.0, 0.0)
    return _scores(1.0, float(answers_equivalent(answer, ground_truth, fast=fast)))


def keyword_inclusion_reward_fn(response: str, keywords: str | Iterable[str]) -> dict[str, float]:
    """1 iff every keyword occurs in `response` as a whole word (case-insensitive).

    "Whole word" is `\\b` semantics written as lookarounds (`(?<!\\w)kw(?!\\w)`), which is the same
    for keywords that start and end with a letter or digit and still works for ones like "C++".
    """
    words = [keywords] if isinstance(keywords, str) else list(keywords)
    if not words or not all(isinstance(word, str) and word.strip() for word in words):
        raise ValueError(f"keywords={keywords!r}: pass one or more non-empty strings")
    text = response if isinstance(response, str) else ""
    found = all(re.search(rf"(?<!\w){re.escape(word.strip())}(?!\w)", text, re.IGNORECASE) for word in words)
    return {"reward": float(found), "format_reward": 1.0, "answer_reward": float(found)}


def is_one_sentence(response: Any) -> bool:
    """A single sentence: non-empty once stripped, ending with `.`, `!` or `?` and holding no other one
    (nor a line break)."""
    text = response.strip() if isinstance(response, str) else ""
    return bool(text) and text[-1] in ".!?" and not any(mark in text[:-1] for mark in ".!?\n")


def keyword_sentence_reward_fn(response: str, keywords: str | Iterable[str]) -> dict[str, float]:
    """An option beyond the course: `keyword_inclusion_reward_fn` (answer) for one sentence (format).

    format_reward = 1 iff `is_one_sentence(response)`; reward = format x answer. Why the format
    part: with inclusion alone (the course's reward), GRPO on the small model drifts to run-on
    keyword lists ("There is A green cat cat and the cat cat and the") that hit the token budget and
    contain the keywords -- the task asks for a sentence, and a cut-off list is not one (measured in
    hw3lib.keywords.hacking and notebook 04).
    """
    answer = keyword_inclusion_reward_fn(response, keywords)["answer_reward"]
    sentence = float(is_one_sentence(response))
    return {"reward": sentence * answer, "format_reward": sentence, "answer_reward": answer}


# ---- equivalence: stage 1, exact plain numbers --------------------------------------------------

_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_DROPPED = re.compile(r"\\[,!;:]|\\left\b|\\right\b|\^\s*\{?\s*\\circ\s*\}?|°|\\?\$|\\?%|\\?€|\\?£")
_SPACES = re.compile(r"\\quad\b|\\qquad\b|\\ |~|\s+")
_ASSIGNMENT = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,2}\s*=\s*([^=]+)$")
_PLAIN_NUMBER = re.compile(
    r"""(?P<sign>[-+])?\s*
    (?:
        \\frac\s*\{\s*(?P<frac_num>[-+]?\d+)\s*\}\s*\{\s*(?P<frac_den>[-+]?\d+)\s*\}
      | \\frac(?P<short_num>\d)(?P<short_den>\d)
      | (?P<number>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE](?P<exponent>[-+]?\d{1,3}))?
        (?:\s*/\s*(?P<denominator>\d+(?:\.\d+)?))?
    )
    (?:(?:\s*|-)(?P<unit>[^\W\d_]{2,}(?:[\s/-][^\W\d_]+)*)\.?(?:\^\{?[23]\}?)?)?  # "dollars", "km/h", "cm^2"
    """,
    re.VERBOSE,
)
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")
_LETTER = re.compile(r"[^\W\d_]")
_WORD = re.compile(r"[^\W\d_]+")

# Words that change what an answer claims, so an answer holding one is not the bare number next to
# it (see the module doc). Compared lower-cased, as whole words; "times" alone after a number
# ("18 times", a count) is a unit.
CLAIM_WORDS = frozenset("""
    or and nor either plus minus times multiplied divided over under
    to through thru till until between from
    least most more less fewer than greater smaller larger bigger higher lower above below beyond
    exceeding exceeds within up upto minimum maximum max
    about approximately approx around roughly nearly almost circa estimated estimate ish
    not no except excluding maybe perhaps possibly probably
    zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
    sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety
    hundred hundreds thousand thousands million millions billion billions trillion trillions
    dozen dozens half halves tenths hundredths thousandths squared cubed negative
""".split())
# With a plain-number gold answer: a relation or approximation sign anywhere ("\\geq 18", "\\approx 18",
# "< 18", "18 \\pm 2"), or a binary arithmetic operator after the last "=" ("3 * 6", "18 - 20",
# "18 dollars + 2"; a leading sign as in "-3" or "2^{-1}" is not binary; "/" is a fraction bar).
_RELATION = re.compile(r"[<>≤≥≈≠±∓≲≳]|\\(?:leq?|geq?|leqslant|geqslant|lt|gt|neq?|approx|sim|simeq|cong|"
                       r"lesssim|gtrsim|pm|mp|propto)(?![A-Za-z])")
_BINARY_OPERATOR = re.compile(r"[\w)}\]!.]\s*[-+*×·÷∗]|\\(?:times|cdot|div|ast|oplus)(?![A-Za-z])")


def normalize_answer(text: str) -> str:
    """Strip presentation that does not change a value: delimiters, \\text{}, spacing, $, %, degrees."""
    text = text.strip()
    for _ in range(3):  # nested wrappers like "$\boxed{18}$"
        for left, right in _DELIMITERS:
            if len(text) > len(left) + len(right) and text.startswith(left) and text.endswith(right):
                text = text[len(left):-len(right)].strip()
        if text.startswith(("\\boxed", "\\fbox")):
            text = extract_boxed_answer(text) or text
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("{,}", ",").replace("\u2212", "-")
    text = _TEXT_WRAPPER.sub(r" \1 ", text)
    text = _DROPPED.sub("", text).strip()
    if text.startswith("~"):  # a leading tilde is "approximately", not a LaTeX tie
        text = "\\approx " + text[1:]
    text = _SPACES.sub(" ", text).strip().rstrip(".").strip()
    assignment = _ASSIGNMENT.match(text)
    return assignment.group(1).strip() if assignment else text


def parse_plain_number(text: str) -> Fraction | None:
    """The exact value of a normalised plain number (see the module doc), or None if it is not one."""
    match = _PLAIN_NUMBER.fullmatch(text)
    if match is None:
        return None
    unit = match["unit"]
    if unit is not None and unit.lower() != "times" and not CLAIM_WORDS.isdisjoint(_WORD.findall(unit.lower())):
        return None  # "18 or more", "18 and twenty", "18 thousand": not a unit
    numerator = match["frac_num"] or match["short_num"]
    if numerator is not None:
        denominator = int(match["frac_den"] or match["short_den"])
        value = Fraction(int(numerator), denominator) if denominator else None
    else:
        value = Fraction(match["number"].replace(",", ""))
        if match["exponent"]:
            value *= Fraction(10) ** int(match["exponent"])
        if match["denominator"]:
            denominator = Fraction(match["denominator"])
            value = value / denominator if denominator else None
    if value is None:
        return None
    return -value if match["sign"] == "-" else value


# ---- equivalence: entry point -------------------------------------------------------------------

def answers_equivalent(pred: Any, gold: Any, fast: bool = True) -> bool:
    """Whether the predicted answer equals the gold answer (a value or a list/tuple of them). Never raises."""
    try:
        if isinstance(gold, (list, tuple)):
            return any(answers_equivalent(pred, option, fast) for option in gold)
        pred_text, gold_text = _answer_text(pred), _answer_text(gold)
        if not pred_text or not gold_text:
            return False
        pred_norm, gold_norm = normalize_answer(pred_text), normalize_answer(gold_text)
        if not pred_norm or not gold_norm:
            return False
        pred_value, gold_value = parse_plain_number(pred_norm), parse_plain_number(gold_norm)
        if pred_value is not None and gold_value is not None and pred_value == gold_value:
            return True
        if pred_norm == gold_norm:
            return True
        if _changes_the_claim(pred_norm, gold_norm, gold_is_number=gold_value is not None):
            return False  # final, also with fast=False: math-verify accepts e.g. "18 or more" and "3 * 6"
        if fast and gold_value is not None and (pred_value is not None or _has_free_letters(pred_norm)):
            return False  # two different exact numbers, or letters that no number equals
        return _symbolic_equivalent(pred_norm, gold_norm)
    except Exception:  # noqa: BLE001 - a grader must grade, not crash a training run
        logger.debug("answers_equivalent failed; graded as not equivalent", exc_info=True)
        return False


def _answer_text(value: Any) -> str | None:
    """A bounded, valid-UTF-8 string for `value`, or None (None, empty, over MAX_ANSWER_CHARS)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value[: 4 * MAX_ANSWER_CHARS + 4].decode("utf-8", "replace")
    elif isinstance(value, float):
        value = repr(value)  # 0.1 -> "0.1", so Fraction sees the decimal the user wrote
    elif not isinstance(value, str):
        value = str(value)
    value = value.strip()
    if not value or len(value) > MAX_ANSWER_CHARS:
        return None
    return value.encode("utf-8", "replace").decode("utf-8")  # lone surrogates ("\udcff") become "?"


def _changes_the_claim(pred: str, gold: str, gold_is_number: bool) -> bool:
    """Whether `pred` says something other than a value: see CLAIM_WORDS, _RELATION, _BINARY_OPERATOR."""
    pred_words = set(_WORD.findall(_LATEX_COMMAND.sub(" ", pred).lower())) & CLAIM_WORDS
    if pred_words and not pred_words <= set(_WORD.findall(_LATEX_COMMAND.sub(" ", gold).lower())):
        return True  # a claim word the gold answer does not itself use
    if not gold_is_number:
        return False  # symbolic gold answers ("x \\geq 2", "2 + \\sqrt{3}") are math-verify's to compare
    return _RELATION.search(pred) is not None or _BINARY_OPERATOR.search(pred.rsplit("=", 1)[-1]) is not None


def _has_free_letters(text: str) -> bool:
    return _LETTER.search(_LATEX_COMMAND.sub("", text)) is not None


# ---- equivalence: stage 2, math-verify under a deadline -----------------------------------------

class _SymbolicTimeout(BaseException):
    """Raised by our SIGALRM handler; BaseException so that math-verify's `except Exception` lets it out."""


class _DropTimeoutDisabledWarning(logging.Filter):
    """math-verify warns once that we disabled its (signal-based) timeouts; we bound time ourselves."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


def _math_verify_equivalent(pred: str, gold: str) -> bool:
    """math-verify's verdict on two normalised answers, with its signal-based timeouts disabled."""
    from math_verify import parse, verify

    for name in ("math_verify.parser", "math_verify.grader"):
        log = logging.getLogger(name)
        if not any(isinstance(f, _DropTimeoutDisabledWarning) for f in log.filters):
            log.addFilter(_DropTimeoutDisabledWarning())
    gold_parsed = parse(f"${gold}$", parsing_timeout=None)
    pred_parsed = parse(f"${pred}$", parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


def _call_with_deadline(seconds: float, func, *args) -> Any:
    """Run `func(*args)` in the main thread under a SIGALRM deadline, restoring the caller's timer.

    Raises _SymbolicTimeout when the deadline passes (also if it fires while we clean up).
    """
    def on_alarm(signum, frame):
        raise _SymbolicTimeout()

    previous_handler = signal.signal(signal.SIGALRM, on_alarm)
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    started = time.monotonic()
    try:
        return func(*args)
    finally:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
        finally:
            signal.signal(signal.SIGALRM, previous_handler if previous_handler is not None else signal.SIG_DFL)
            if previous_delay > 0:  # the caller had an alarm pending (e.g. a test timeout): put it back
                remaining = max(previous_delay - (time.monotonic() - started), 1e-3)
                signal.setitimer(signal.ITIMER_REAL, remaining, previous_interval)


@functools.lru_cache(maxsize=65536)
def _symbolic_equivalent(pred: str, gold: str) -> bool:
    """math-verify's verdict from the killable child process (see the module docstring)."""
    return _verifier_process().equivalent(pred, gold, SYMBOLIC_TIMEOUT_S)


class _VerifierProcess:
    """A persistent child process answering math-verify checks for callers outside the main thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._buffer = b""

    def equivalent(self, pred: str, gold: str, timeout_s: float) -> bool:
        """The child's verdict; it applies `timeout_s` itself, we wait `timeout_s + _CHILD_MARGIN_S`."""
        with self._lock:
            try:
                proc = self._running()
                proc.stdin.write(json.dumps([pred, gold, timeout_s]).encode("ascii") + b"\n")
                proc.stdin.flush()
                return self._read_line(timeout_s + _CHILD_MARGIN_S) == b"1"
            except (OSError, TimeoutError, ValueError) as exc:
                logger.warning("symbolic check of %r vs %r failed in the verifier process (%s); graded as "
                               "not equivalent and the process is restarted", pred[:80], gold[:80], exc)
                self._stop()
                return False

    def _running(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        package_parent = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")])))
        self._buffer = b""
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from hw3lib.tasks.rewards import _serve_symbolic_checks; _serve_symbolic_checks()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, bufsize=0,
        )
        if self._read_line(_CHILD_START_TIMEOUT_S) != b"ready":
            raise OSError("the verifier process did not start")
        return self._proc

    def _read_line(self, timeout_s: float) -> bytes:
        deadline = time.monotonic() + timeout_s
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer within {timeout_s:.0f}s")
            readable, _, _ = select.select([fd], [], [], remaining)
            if readable:
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise OSError("the verifier process exited")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.strip()

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def close(self) -> None:
        with self._lock:
            self._stop()


_VERIFIER: _VerifierProcess | None = None
_VERIFIER_LOCK = threading.Lock()


def _verifier_process() -> _VerifierProcess:
    global _VERIFIER
    with _VERIFIER_LOCK:
        if _VERIFIER is None:
            _VERIFIER = _VerifierProcess()
        return _VERIFIER


def _forget_verifier_after_fork() -> None:
    """A forked child must not share the parent's pipes or a lock some parent thread held."""
    global _VERIFIER, _VERIFIER_LOCK
    _VERIFIER, _VERIFIER_LOCK = None, threading.Lock()


def _close_verifier() -> None:
    if _VERIFIER is not None:
        _VERIFIER.close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_verifier_after_fork)
atexit.register(_close_verifier)


def _serve_symbolic_checks() -> None:
    """The verifier child's loop: JSON `[pred, gold, timeout_s]` per stdin line -> `1`/`0` per stdout line."""
    reply = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # stray prints from libraries go to stderr, never into the reply pipe
    _math_verify_equivalent("\\sqrt{4}", "2")  # warm up before announcing readiness (see SYMBOLIC_TIMEOUT_S)
    reply.write(b"ready\n")
    for line in sys.stdin.buffer:
        try:
            pred, gold, timeout_s = json.loads(line)
            ok = _call_with_deadline(float(timeout_s), _math_verify_equivalent, str(pred), str(gold))
        except (_SymbolicTimeout, Exception):  # noqa: BLE001 - any failure grades as "not equivalent"
            ok = False
        reply.write(b"1\n" if ok else b"0\n")
