"""The `orbit` discovery loop: the model calls the exact orbit search with a JSON request (replayed replies)."""

import json

import pytest

from hw3lib.kissing.evaluator import evaluate_program
from hw3lib.kissing.llm import ScriptedResponder
from hw3lib.kissing.loops import discover
from hw3lib.kissing.orbit_requests import NO_REQUEST_MESSAGE, RequestError, parse_request

CYCLE = list(range(1, 10)) + [0]
IDENTITY = list(range(10))


def request(generators, pool="integers", **extra):
    return "I expect symmetry to help.\n```json\n" + json.dumps({"generators": generators, "pool": pool, **extra}) + \
        "\n```"


def test_requests_are_parsed_and_checked():
    parsed = parse_request(request([{"permutation": CYCLE}, {"reflection": [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]}],
                                   pool="halves", parity_blocks=[8, 2]))
    assert parsed.scale == 2 and parsed.parity_blocks == (8, 2) and len(parsed.generators) == 2
    assert parsed.generators[1].denominator == 2  # the reflection in (1,1,1,1,0,...) has entries in Z/2
    for bad, message in [
        (request([{"permutation": [0] * 10}]), "must list 0..9 once each"),
        (request([{"permutation": CYCLE, "signs": [2] * 10}]), "+1 or -1"),
        (request([{"reflection": [9] + [0] * 9}]), "entries in"),
        (request([{"permutation": CYCLE}], pool="thirds"), "'pool' must be one of"),
        (request([{"permutation": CYCLE}], pool=["halves"]), "'pool' must be one of"),
        (request([{"permutation": CYCLE}], parity_blocks=[True] * 10), "positive integers"),
        (request([{"permutation": CYCLE}] * 9), "1 to 8 generators"),
        (request([{"permutation": CYCLE}], parity_blocks=[3, 3]), "adding up to 10"),
        ("```json\n{not json}\n```", "not valid JSON"),
        ("no request here", NO_REQUEST_MESSAGE[:40]),
    ]:
        with pytest.raises(RequestError, match=None) as info:
            parse_request(bad)
        assert message in str(info.value), (bad, str(info.value))


def test_the_orbit_loop_searches_refuses_and_feeds_back(tmp_path):
    replies = [
        request([{"permutation": CYCLE}, {"permutation": IDENTITY, "signs": [-1] + [1] * 9}]),  # C10 and signs
        request([{"permutation": [0] * 10}]),
        "I think a bigger group helps.",
        request([{"permutation": IDENTITY}]),  # the trivial group: every vector its own orbit, too many
    ]
    responder = ScriptedResponder(replies)
    result = discover("orbit", responder, tmp_path / "run", 4, timeout_s=10, max_orbits=3000)
    assert result.scores == [502.0, 0.0, 0.0, 0.0] and result.best_score == 502.0
    assert "layered frame" in responder.requests[0][1]["content"]  # the prompt describes the search
    log = json.loads(result.log_path.read_text())
    assert log["loop"] == "orbit" and log["source"] == "replay"
    first, second, third, fourth = log["steps"]
    assert "502 points = 2 + 340 + 2 x 80" in first["feedback"] and "proved optimal" in first["feedback"]
    assert "must list 0..9 once each" in second["feedback"]
    assert NO_REQUEST_MESSAGE in third["feedback"]
    assert fourth["evaluation"]["status"] == "refused" and "max_vertices=3000" in fourth["evaluation"]["message"]
    # the found set is stored as a program that the sandboxed evaluator scores the same
    assert evaluate_program(tmp_path / "run" / "best_program.py", timeout_s=60)["combined_score"] == 502
    assert (tmp_path / "run" / "candidates" / "iter_001_request.json").is_file()
