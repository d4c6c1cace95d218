"""An LLM's request to the orbit search: a JSON block naming a group by generators and a pool, checked strictly.

The `orbit` discovery loop (hw3lib.kissing.loops.orbit_guided) lets the model call the layered orbit search
(hw3lib.kissing.layered) instead of writing a program. Its reply carries one ```json block:

    {"generators": [{"permutation": [1, 2, 3, 4, 5, 6, 7, 8, 9, 0], "signs": [1, -1, 1, 1, 1, 1, 1, 1, 1, 1]},
                    {"reflection": [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]}],
     "pool": "halves", "parity_blocks": [8, 2]}

- a generator is a signed permutation of the 10 coordinates (x[i] goes to position permutation[i] with sign
  signs[i]; signs default to all +1) or the reflection in an integer root;
- `pool` is "integers" (rational vectors with denominator 1) or "halves" (denominator 2), optionally with
  `parity_blocks`.
The request is data, not code: it is parsed here, checked (sizes, types, at most `MAX_GENERATORS` generators,
small roots), and every failure is an error message the model can act on. The search then runs in-process
under its own limits (a deadline and a cap on orbit-graph vertices).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from hw3lib.kissing.orbits import Element, reflection, signed_permutation

DIMENSION = 10
MAX_GENERATORS = 8
MAX_ROOT_ENTRY = 4
POOL_SCALES = {"integers": 1, "halves": 2}
_JSON_FENCE = re.compile(r"```[ \t]*json[ \t]*\n(.*?)```", re.DOTALL)
NO_REQUEST_MESSAGE = ("I could not find a ```json block with an orbit-search request in your reply, so nothing was "
                      "searched. Reply with one ```json ... ``` block holding {\"generators\": [...], \"pool\": ...}.")


class RequestError(ValueError):
    """The request cannot be searched; the message says what to fix."""


@dataclass(frozen=True)
class OrbitRequest:
    generators: tuple[Element, ...]
    scale: int
    parity_blocks: tuple[int, ...] | None
    text: str  # the JSON as the model wrote it

    def describe(self) -> str:
        blocks = f", parity blocks {list(self.parity_blocks)}" if self.parity_blocks else ""
        pool = "integers" if self.scale == 1 else "halves"
        return f"{len(self.generators)} generators, pool {pool}{blocks}"


def _int_list(value, name: str, length: int) -> list[int]:
    if not isinstance(value, list) or len(value) != length or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise RequestError(f"{name} must be a list of {length} integers, got {json.dumps(value)[:120]}")
    return value


def _generator(index: int, item) -> Element:
    where = f"generators[{index}]"
    if not isinstance(item, dict):
        raise RequestError(f"{where} must be an object with 'permutation' (and 'signs') or 'reflection'")
    if "reflection" in item:
        root = _int_list(item["reflection"], f"{where}.reflection", DIMENSION)
        if not any(root) or max(abs(v) for v in root) > MAX_ROOT_ENTRY:
            raise RequestError(f"{where}.reflection must be a nonzero root with entries in [-{MAX_ROOT_ENTRY}, "
                               f"{MAX_ROOT_ENTRY}]")
        return reflection(root)
    if "permutation" not in item:
        raise RequestError(f"{where} has neither 'permutation' nor 'reflection'")
    permutation = _int_list(item["permutation"], f"{where}.permutation", DIMENSION)
    if sorted(permutation) != list(range(DIMENSION)):
        raise RequestError(f"{where}.permutation must list 0..9 once each, got {permutation}")
    signs = _int_list(item.get("signs", [1] * DIMENSION), f"{where}.signs", DIMENSION)
    if any(s not in (1, -1) for s in signs):
        raise RequestError(f"{where}.signs must be +1 or -1 entries, got {signs}")
    return signed_permutation(permutation, signs)


def parse_request(reply: str) -> OrbitRequest:
    """The last ```json block of `reply` as a checked request (RequestError says what is wrong)."""
    blocks = _JSON_FENCE.findall(reply)
    if not blocks:
        raise RequestError(NO_REQUEST_MESSAGE)
    text = blocks[-1].strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(f"the ```json block is not valid JSON: {exc.msg} at line {exc.lineno}, column "
                           f"{exc.colno}") from None
    if not isinstance(data, dict):
        raise RequestError("the request must be a JSON object with 'generators' and 'pool'")
    items = data.get("generators")
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_GENERATORS:
        raise RequestError(f"'generators' must be a list of 1 to {MAX_GENERATORS} generators")
    pool = data.get("pool", "integers")
    if not isinstance(pool, str) or pool not in POOL_SCALES:
        raise RequestError(f"'pool' must be one of {sorted(POOL_SCALES)}, got {json.dumps(pool)}")
    blocks_value = data.get("parity_blocks")
    if blocks_value is not None:
        if not isinstance(blocks_value, list) or not all(
                isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in blocks_value) \
                or sum(blocks_value) != DIMENSION:
            raise RequestError(f"'parity_blocks' must be positive integers adding up to {DIMENSION}, got "
                               f"{json.dumps(blocks_value)}")
    generators = tuple(_generator(i, item) for i, item in enumerate(items))
    return OrbitRequest(generators, POOL_SCALES[pool], None if blocks_value is None else tuple(blocks_value), text)
