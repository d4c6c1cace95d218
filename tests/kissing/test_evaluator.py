"""Sandboxed program evaluator: accepted program shapes, every failure mode, and the stored result."""

from __future__ import annotations

from pathlib import Path

import pytest

from hw3lib.kissing import evaluate_program

REPO_ROOT = Path(__file__).resolve().parents[2]
STORED_PROGRAM = REPO_ROOT / "data" / "kissing_number" / "program.py"
STORED_TARGET = 598  # our core search's best (data/kissing_number/core_search), above the classical 582

STARTER_BODY = "\n".join([
    "import numpy as np",
    "def starter():",
    "    eye = 2 * np.eye(11, dtype=np.int64)",
    "    return np.vstack([eye, -eye])",
])
KEYS = {"num_points", "dimension", "validity", "eval_time", "combined_score", "message", "status", "sandbox"}


@pytest.mark.parametrize("tail", [
    "def run_code():\n    return (starter(), 11)\n",
    "def run_code():\n    return (starter(),)\n",
    "def run_code():\n    return starter()\n",
    "def run_code():\n    return [list(map(int, p)) for p in starter()], 11\n",
    "def get_centers():\n    return starter()\n",
    "points = starter().tolist()\n",
    "points = starter().tolist()\nif __name__ == '__main__':\n    raise SystemExit('main block must not run')\n",
    "def run_code():\n    return (list(p) for p in starter())\n",  # a generator of points
])
def test_accepted_shapes_score_the_starter(tail):
    metrics = evaluate_program(STARTER_BODY + "\n" + tail, timeout_s=20)
    assert set(metrics) == KEYS
    assert metrics["validity"] == 1.0 and metrics["combined_score"] == 22.0, metrics["message"]
    assert metrics["num_points"] == 22 and metrics["dimension"] == 11 and metrics["status"] == "valid"


def test_return_points_gives_the_programs_exact_points():
    metrics = evaluate_program(STARTER_BODY + "\ndef run_code():\n    return starter()\n", timeout_s=20,
                               return_points=True)
    assert metrics["validity"] == 1.0 and set(metrics) == KEYS | {"points"}
    assert sorted(map(tuple, metrics["points"])) == sorted(
        tuple(2 * s if j == i else 0 for j in range(11)) for i in range(11) for s in (1, -1))


def test_program_from_a_path_and_cwd_is_a_scratch_dir(tmp_path):
    program = tmp_path / "candidate.py"
    program.write_text(STARTER_BODY + "\nimport os\nopen('scratch.txt', 'w').write(os.getcwd())\n"
                       "def run_code():\n    assert os.environ['HOME'] == os.getcwd()\n"
                       "    assert 'SECRET_TOKEN' not in os.environ\n    return starter()\n")
    import os

    os.environ["SECRET_TOKEN"] = "do-not-leak"
    try:
        for form in (program, str(program)):
            metrics = evaluate_program(form, timeout_s=20)
            assert metrics["validity"] == 1.0, metrics["message"]
    finally:
        del os.environ["SECRET_TOKEN"]
    assert not (tmp_path / "scratch.txt").exists() and not (REPO_ROOT / "scratch.txt").exists()
    with pytest.raises(FileNotFoundError, match="no such program file"):
        evaluate_program(str(tmp_path / "missing.py"))


@pytest.mark.parametrize("source, status, needle", [
    ("while True:\n    pass\n", "timeout", "timeout: the program ran longer than 2 s"),
    ("blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 2**20))\n", "memory", "memory limit (400 MiB)"),
    ("def run_code():\n    return 1 / 0\n", "exception", "ZeroDivisionError"),
    ("import sys\ndef run_code():\n    sys.exit(3)\n", "exit", "sys.exit(3)"),
    ("import os\nos._exit(4)\n", "exit", "exited (code 4)"),
    ("x = 1\n", "no_points", "defines none of run_code(), get_centers()"),
    ("def run_code():\n    return None\n", "no_points", "returned None"),
    ("def run_code(:\n", "exception", "SyntaxError"),
    ("import socket\ndef run_code():\n    socket.create_connection(('127.0.0.1', 9))\n", "exception",
     "network access is disabled"),
    ("import socket\ndef run_code():\n    socket.socket()\n", "exception", "network access is disabled"),
    ("open('big.bin', 'wb').write(bytes(65 * 2**20))\n", "exception", "File too large"),  # RLIMIT_FSIZE
    ("def run_code():\n    return {'points': [[2] + [0] * 10]}\n", "bad_points", "run_code() returned a dict"),
    ("def run_code():\n    return 'points'\n", "bad_points", "run_code() returned a str"),
    # Booleans, floats and other objects are not integers on the result channel (exact types).
    ("def run_code():\n    return [[2] + [0] * 10, [0, 1.5] + [0] * 9]\n", "bad_points",
     "point 1, coordinate 1: 1.5 is a float, not an integer"),
    ("import numpy as np\npoints = 2 * np.eye(11)\n", "bad_points", "point 0, coordinate 0: 2.0 is a float"),
    ("def run_code():\n    return [[True] + [False] * 10]\n", "bad_points", "True is a boolean, not an integer"),
    ("def run_code():\n    return [[2] + [0] * 9 + [object()]]\n", "bad_points", "is a string (not a number)"),
    ("def run_code():\n    return [[2] + [0] * 10] * 10_001\n", "bad_points", "10001 points is more than the limit of 10,000"),
    ("def run_code():\n    return [[2**200] + [0] * 10]\n", "bad_points", "has 201 bits; the limit is 128 bits"),
    ("print('x' * 2**20 * 17)\n", "output", "printed more than 16 MiB"),
])
def test_failures_give_zero_and_a_clear_message(source, status, needle):
    metrics = evaluate_program(source, timeout_s=2, memory_mb=400)
    assert metrics["validity"] == 0.0 and metrics["combined_score"] == 0.0
    assert metrics["status"] == status, metrics
    assert needle in metrics["message"], metrics["message"]


def test_traceback_points_at_the_program_line():
    metrics = evaluate_program("def run_code():\n    x = [1]\n    return x[5]\n", timeout_s=10)
    assert 'File "program.py", line 3, in run_code' in metrics["message"]
    assert "_sandbox_runner" not in metrics["message"]


@pytest.mark.parametrize("source, needle", [
    ("def run_code():\n    return [[1, 0], [0, 1]]\n", "dimension 2, expected 11"),
    ("def run_code():\n    return ([[2] + [0] * 10, [0, 2] + [0] * 9], 12)\n", "declares dimension 12"),
    ("def run_code():\n    return [[1] + [0] * 10, [1, 1] + [0] * 9]\n", "min squared distance 1 (points 0 and 1)"),
])
def test_invalid_points_are_reported(source, needle):
    metrics = evaluate_program(source, timeout_s=10)
    assert metrics["validity"] == 0.0 and metrics["status"] == "invalid"
    assert needle in metrics["message"], metrics["message"]


def test_huge_integers_round_trip_exactly():
    # Coordinates 9e12 (squares overflow int64). The third point's norm exceeds the min distance
    # by exactly 1, which only exact arithmetic after an exact JSON round trip can see.
    big = 9 * 10**12
    body = f"B = {big}\ndef run_code():\n    p = [B, 0] + [0] * 9\n    q = [0, B] + [0] * 9\n"
    valid = evaluate_program(body + "    return [p, q, [0, 0, B, B] + [0] * 7]\n", timeout_s=10)
    invalid = evaluate_program(body + "    return [p, q, [0, 0, B, B, 1] + [0] * 6]\n", timeout_s=10)
    assert valid["validity"] == 1.0 and valid["num_points"] == 3
    assert invalid["validity"] == 0.0 and str(2 * big**2 + 1) in invalid["message"]


def test_stored_program_is_valid_and_reaches_the_target():
    metrics = evaluate_program(STORED_PROGRAM, timeout_s=60)
    assert metrics["validity"] == 1.0, metrics["message"]
    assert metrics["dimension"] == 11 and metrics["num_points"] >= STORED_TARGET


def test_the_handouts_evaluator_command(tmp_path):
    """`python data/kissing_number/evaluator.py PROGRAM` (the course's command): the course's metrics as
    JSON, exit 0 for the stored 582-point program, exit 1 for an invalid set, 2 for a missing file."""
    import json
    import subprocess
    import sys

    script = REPO_ROOT / "data" / "kissing_number" / "evaluator.py"

    def run(program):
        done = subprocess.run([sys.executable, str(script), str(program)], capture_output=True, text=True, timeout=180)
        return done.returncode, done.stdout

    code, out = run(STORED_PROGRAM)
    metrics = json.loads(out[:out.rindex("}") + 1])
    assert code == 0 and (metrics["num_points"], metrics["dimension"], metrics["validity"],
                          metrics["combined_score"]) == (STORED_TARGET, 11, 1.0, float(STORED_TARGET))
    duplicate = tmp_path / "duplicate.py"
    duplicate.write_text("points = [[2] + [0] * 10, [2] + [0] * 10]\n")
    code, out = run(duplicate)
    metrics = json.loads(out[:out.rindex("}") + 1])
    assert code == 1 and (metrics["validity"], metrics["combined_score"]) == (0.0, 0.0) and "identical" in out
    assert run(tmp_path / "missing.py")[0] == 2
