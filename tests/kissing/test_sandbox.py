"""Hostile programs against the evaluator: one test per attack class of issue 14, under bubblewrap.

Each bubblewrap test asserts that the caller gets a result within the timeout plus a few
seconds, that validity is 0 or the correctly verified score, that no process of the program
survives, that no file outside its working directory changed, and that the package's files are
unchanged. The fallback tests at the end run a *harmless probe* of each attack the process
fallback cannot stop and assert that it gets through there, so the list in
`hw3lib.kissing.sandbox.FALLBACK_GAPS` is checked, not just claimed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from hw3lib.kissing import evaluate_program
from hw3lib.kissing import sandbox as sb
from hw3lib.kissing.evaluator import parse_result

TIMEOUT = 3.0
SLACK = 5.0  # seconds beyond the timeout the caller may take (start-up, verification floor, clean-up)
PACKAGE = Path(sb.__file__).resolve().parent  # hw3lib/kissing: the code whose files must not change
STARTER = ("import numpy as np\n"
           "def starter():\n    e = 2 * np.eye(11, dtype=np.int64)\n    return np.vstack([e, -e])\n")
SECRET = "sk-test-" + uuid.uuid4().hex

needs_bwrap = pytest.mark.skipif(not sb.bwrap_available(), reason=f"bubblewrap unavailable: {sb.bwrap_problem()}")


def test_ci_runs_the_real_sandbox():
    """CI installs bubblewrap (.ci/run): there the suite must exercise it, not skip to the fallback."""
    if not os.environ.get("CI"):
        pytest.skip("outside CI, machines without bubblewrap test the fallback only")
    assert sb.bwrap_available(), f"CI has no working bubblewrap: {sb.bwrap_problem()}"


def package_hashes() -> dict:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(PACKAGE.rglob("*.py"))}


def survivors(token: str) -> list[int]:
    """PIDs whose command line carries `token` (the hostile program tags every process it starts)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.fixture
def outside(tmp_path):
    """A folder outside the program's workdir holding a sentinel file; checked unchanged afterwards."""
    (tmp_path / "sentinel.txt").write_text("original")
    return tmp_path


def contained(source: str, outside: Path, token: str = "", timeout: float = TIMEOUT, **kwargs) -> dict:
    """Evaluate `source` under bubblewrap and assert the common containment properties."""
    before = package_hashes()
    start = time.monotonic()
    metrics = evaluate_program(source, timeout_s=timeout, strict=True, **kwargs)
    elapsed = time.monotonic() - start
    assert elapsed < timeout + SLACK, f"the caller took {elapsed:.1f} s"
    assert metrics["sandbox"] == "bwrap"
    assert metrics["validity"] == 0.0 or (metrics["combined_score"] == 22.0 and metrics["status"] == "valid"), metrics
    assert package_hashes() == before, "the package's files changed"
    assert sorted(p.name for p in outside.iterdir()) == ["sentinel.txt"]
    assert (outside / "sentinel.txt").read_text() == "original"
    if token:
        time.sleep(0.3)  # the kernel reaps a dying PID namespace asynchronously
        assert survivors(token) == [], "processes of the program outlived the evaluation"
    return metrics


@needs_bwrap
def test_processes_do_not_outlive_the_evaluation(outside):
    token = "hw3tok" + uuid.uuid4().hex
    source = STARTER + (
        "import os, subprocess, sys\n"
        f"TOKEN = {token!r}\n"
        "sleeper = [sys.executable, '-c', 'import time; time.sleep(60)', TOKEN]\n"
        "subprocess.Popen(sleeper, start_new_session=True)\n"  # a new session
        "if os.fork() == 0:\n"  # a double fork: the daemon's parent exits at once
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execv(sys.executable, sleeper)\n"
        "    os._exit(0)\n"
        "def run_code():\n    return starter()\n")
    metrics = contained(source, outside, token)
    assert metrics["status"] == "valid"  # the program's own answer is still scored correctly
    # The same program that outlives a timeout instead of returning: still nothing survives.
    contained(source.replace("def run_code():\n    return starter()\n", "import time\ntime.sleep(60)\n"),
              outside, token, timeout=2.0)


@needs_bwrap
def test_no_writes_outside_the_workdir_or_into_the_package(outside):
    token = "hw3tok" + uuid.uuid4().hex
    # /tmp is excluded: inside the sandbox it is a private tmpfs, so that write may succeed there.
    targets = [PACKAGE / "verify.py", outside / "sentinel.txt", outside / "new.txt", Path.home() / token,
               Path.cwd() / token]
    # Inside the sandbox a path under /tmp (a checkout in /tmp, say) lands in the private tmpfs, so the
    # program only reports writes elsewhere; the host-side checks below cover every target.
    reported = [str(t) for t in targets if not str(t).startswith("/tmp/")]
    source = STARTER + (
        "import os\n"
        f"TARGETS = {reported!r}\n"
        "done = []\n"
        "for path in TARGETS:\n"
        "    try:\n"
        "        with open(path, 'a') as handle:\n"
        "            handle.write('\\n# pwned: duplicates are valid\\n')\n"
        "        done.append(path)\n"
        "    except OSError:\n"
        "        pass\n"
        "open('scratch.txt', 'w').write('the workdir itself is writable')\n"
        f"open('/tmp/{token}', 'w').write('private /tmp')\n"
        "def run_code():\n"
        "    assert open('scratch.txt').read().startswith('the workdir'), 'workdir not writable'\n"
        "    if done:\n        raise RuntimeError(f'wrote {done}')\n"
        "    return starter()\n")
    metrics = contained(source, outside)
    assert metrics["status"] == "valid", metrics["message"]  # every write outside failed, the workdir worked
    assert not any(t.exists() for t in targets[3:] + [Path("/tmp") / token])
    # A later evaluation still uses the untouched verifier: duplicates stay invalid.
    later = contained("def run_code():\n    return [[2] + [0] * 10] * 2\n", outside)
    assert later["status"] == "invalid" and "identical" in later["message"]


class Listener:
    """A loopback TCP listener in the test's own network namespace; stops by itself after `life_s`."""

    def __init__(self, life_s: float = TIMEOUT + SLACK):
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen()
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.stop_at = time.monotonic() + life_s
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while time.monotonic() < self.stop_at:
            try:
                conn, _ = self.server.accept()
                self.connections += 1
                conn.close()
            except OSError:
                pass
        self.server.close()

    def close(self):
        self.stop_at = 0
        self.thread.join()


NETWORK_ATTACK = (
    "import _socket, ctypes, os\n"  # _socket: below the runner's socket patch
    "def reach(port):\n"
    "    s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)\n"
    "    s.settimeout(1)\n"
    "    try:\n"
    "        s.connect(('127.0.0.1', port))\n"
    "        return 'REACHED'\n"
    "    except OSError as exc:\n"
    "        return f'no ({exc})'\n"
    "    finally:\n"
    "        s.close()\n"
    "def attack(port, parent):\n"
    "    report = ['direct: ' + reach(port)]\n"
    "    libc = ctypes.CDLL(None, use_errno=True)\n"
    "    for pid in (1, parent, os.getppid()):\n"  # re-enter another namespace (works for host root)
    "        try:\n"
    "            fd = os.open(f'/proc/{pid}/ns/net', os.O_RDONLY)\n"
    "        except OSError as exc:\n"
    "            report.append(f'{pid}: cannot open ({exc})')\n"
    "            continue\n"
    "        if libc.setns(fd, 0x40000000) == 0:\n"  # CLONE_NEWNET
    "            report.append(f'{pid}: setns ok, ' + reach(port))\n"
    "        else:\n"
    "            report.append(f'{pid}: setns failed ({os.strerror(ctypes.get_errno())})')\n"
    "    raise RuntimeError('NETWORK ' + '; '.join(report))\n")


@needs_bwrap
def test_network_is_unreachable_even_by_reentering_the_parents_namespace(outside):
    listener = Listener()
    try:
        metrics = contained(NETWORK_ATTACK + f"attack({listener.port}, {os.getpid()})\n", outside)
    finally:
        listener.close()
    assert "NETWORK direct: no" in metrics["message"], metrics["message"]
    assert "REACHED" not in metrics["message"] and listener.connections == 0


CHILD_PARENT = (
    "import json, sys\n"
    "from hw3lib.kissing import evaluate_program\n"
    "import os\n"
    "source = sys.stdin.read().replace('PARENT_PID', str(os.getpid()))\n"
    "metrics = evaluate_program(source, timeout_s=float(sys.argv[1]), sandbox=sys.argv[2])\n"
    "print(json.dumps(metrics))\n")


def evaluate_in_a_child(source: str, mode: str, timeout: float = TIMEOUT) -> tuple[int, dict | None, float]:
    """Evaluate from a sacrificial parent process started with SECRET in its environment."""
    env = {**os.environ, "HW3_LLM_API_KEY": SECRET, "PYTHONWARNINGS": "ignore"}
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", CHILD_PARENT, str(timeout), mode], input=source, env=env,
                              capture_output=True, text=True, timeout=timeout + 20)
    except subprocess.TimeoutExpired:
        return -1, None, time.monotonic() - start
    lines = done.stdout.strip().splitlines()
    return done.returncode, (json.loads(lines[-1]) if done.returncode == 0 and lines else None), \
        time.monotonic() - start


ENV_ATTACK = (
    "import os\n"
    "found = [k + '=' + v for k, v in os.environ.items()]\n"
    "for pid in ['PARENT_PID', str(os.getppid()), 'self'] + [p for p in os.listdir('/proc') if p.isdigit()]:\n"
    "    try:\n"
    "        found.append(open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace'))\n"
    "    except OSError:\n"
    "        pass\n"
    "raise RuntimeError('ENV ' + ' | '.join(found))\n")


@needs_bwrap
def test_the_parents_environment_is_not_readable():
    code, metrics, elapsed = evaluate_in_a_child(ENV_ATTACK, "bwrap")
    assert code == 0 and elapsed < TIMEOUT + SLACK + 10  # + the sacrificial parent's start-up
    assert metrics["status"] == "exception" and "ENV " in metrics["message"]
    assert SECRET not in metrics["message"]


SIGNAL_ATTACK = (
    "import os, signal\n"
    "report = []\n"
    "for pid in (PARENT_PID, os.getppid()):\n"
    "    for sig in (signal.SIGSTOP, signal.SIGKILL):\n"
    "        try:\n"
    "            os.kill(pid, sig)\n"
    "            report.append(f'{pid} {sig.name} sent')\n"
    "        except OSError as exc:\n"
    "            report.append(f'{pid} {sig.name} refused ({type(exc).__name__})')\n"
    "raise RuntimeError('SIGNAL ' + '; '.join(report))\n")


@needs_bwrap
def test_the_parent_cannot_be_signalled():
    code, metrics, elapsed = evaluate_in_a_child(SIGNAL_ATTACK, "bwrap")
    assert code == 0, "the evaluating process was stopped or killed"
    assert elapsed < TIMEOUT + SLACK + 10
    # The real parent's PID does not exist in the sandbox's PID namespace; its own init ignores these.
    assert metrics["validity"] == 0.0 and "SIGKILL refused" in metrics["message"], metrics["message"]


@needs_bwrap
def test_replacing_the_parents_files_changes_nothing(outside):
    # The old evaluator read result.json and stderr.txt from the workdir: a FIFO there hung it.
    source = STARTER + (
        "import os\n"
        "for name in ('result.json', 'stderr.txt', '../result.json', '../stderr.txt', '/opt/hw3/runner.py'):\n"
        "    try:\n"
        "        os.mkfifo(name)\n"
        "    except OSError:\n"
        "        pass\n"
        "open('points.json', 'w').write('[' * 100000)\n"
        "def run_code():\n    return starter()\n")
    metrics = contained(source, outside)
    assert metrics["status"] == "valid" and metrics["combined_score"] == 22.0


@needs_bwrap
def test_fork_bomb_is_capped_and_cleaned_up(outside):
    if not sb.process_cap_available():
        pytest.skip("root without a writable pids cgroup: the bomb would not be capped (see sandbox.py)")
    token = "hw3tok" + uuid.uuid4().hex
    # Each process forks up to 6 children, 4 generations deep (1555 at most even uncapped).
    source = (
        "import os, sys, time\n"
        f"TOKEN = {token!r}\n"
        "def bomb(depth):\n"
        "    for _ in range(6):\n"
        "        try:\n"
        "            if os.fork() == 0:\n"
        "                if depth < 4:\n"
        "                    bomb(depth + 1)\n"
        "                os.execv('/bin/sleep', ['sleep', '60', TOKEN])\n"
        "        except OSError:\n"
        "            time.sleep(0.05)\n"
        "bomb(0)\n"
        "time.sleep(0.5)\n"
        "raise RuntimeError(f'PROCESSES {len([p for p in os.listdir(\"/proc\") if p.isdigit()])}')\n")
    metrics = contained(source, outside, token)
    assert metrics["validity"] == 0.0
    if "PROCESSES" in metrics["message"]:  # or it was killed before reporting (a timeout): also contained
        count = int(re.search(r"RuntimeError: PROCESSES (\d+)", metrics["message"]).group(1))
        assert count <= sb.MAX_PROCESSES + 2, metrics["message"]  # + bwrap's init and the runner


@needs_bwrap
def test_disk_bomb_is_bounded_by_the_tmpfs_sizes(outside):
    source = (
        "import os\n"
        "written = 0\n"
        "for folder in ('.', '/tmp'):\n"
        "    for i in range(1000):\n"
        "        try:\n"
        "            with open(f'{folder}/fill{i}', 'wb') as handle:\n"
        "                handle.write(bytes(8 * 2**20))\n"
        "            written += 8 * 2**20\n"
        "        except OSError as exc:\n"
        "            err = exc\n"
        "            break\n"
        "raise RuntimeError(f'WROTE {written} ({err})')\n")
    metrics = contained(source, outside)
    written = int(re.search(r"RuntimeError: WROTE (\d+)", metrics["message"]).group(1))
    assert 0 < written <= sb.WORKDIR_BYTES + sb.TMP_BYTES and "No space left" in metrics["message"]


@needs_bwrap
def test_output_flood_is_cut_off(outside):
    metrics = contained("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", outside)
    assert metrics["status"] == "output" and "printed more than 16 MiB" in metrics["message"]


@needs_bwrap
def test_verification_denial_of_service_is_refused_or_bounded(outside):
    # 300,000 valid-looking points: refused by count, before any verification.
    many = contained("def run_code():\n    return [[2] + [0] * 10] * 300_000\n", outside, timeout=10)
    assert many["status"] == "bad_points" and "limit of 10,000" in many["message"]
    # Forged straight into the result pipe (bypassing the runner's own check): the parent refuses too.
    forged = contained("import os, sys\nos.write(int(sys.argv[1]), b'{\"ok\": true, \"declared_dimension\": 11, '"
                       "b'\"run_time\": 0, \"points\": [' + b','.join([b'[2,0,0,0,0,0,0,0,0,0,0]'] * 300_000) + b']}')\n"
                       "os._exit(0)\n", outside, timeout=10)
    assert forged["status"] == "bad_points" and "limit of 10,000" in forged["message"]
    # 10,000 distinct 120-bit points (the slow exact path) finish or time out within the deadline.
    big = contained("import random\nrandom.seed(0)\ndef run_code():\n"
                    "    return [[random.getrandbits(120) for _ in range(11)] for _ in range(10_000)]\n",
                    outside, timeout=TIMEOUT)
    assert big["status"] in ("invalid", "timeout"), big


@needs_bwrap
@pytest.mark.parametrize("payload, needle", [
    (b'{"ok": true, "declared_dimension": 11, "run_time": 0, "points": [[true, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]]}',
     "True is a boolean"),
    (b'{"ok": true, "declared_dimension": 11, "run_time": 0, "points": [[2.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]]}',
     "2.0 is a float"),
    (b'{"ok": true, "declared_dimension": 11, "run_time": 0, "points": [[{"x": 1}]]}', "is dict"),
    (b'[' * 200_000, "not one JSON document"),
    (b'{"ok": false, "kind": "valid", "error": "all good"}', "unknown failure kind"),
    (b'{"ok": true, "points": [], "declared_dimension": 11, "run_time": 0, "score": 593}', "keys"),
    (b'{"ok": true, "points": [[1' + b'0' * 5000 + b']], "declared_dimension": 11, "run_time": 0}',
     "not one JSON document"),
])
def test_forged_results_and_type_confusion(outside, payload, needle):
    source = f"import os, sys\nos.write(int(sys.argv[1]), {payload!r})\nos._exit(0)\n"
    metrics = contained(source, outside)
    assert metrics["validity"] == 0.0 and metrics["status"] == "bad_points"
    assert needle in metrics["message"], metrics["message"]


@needs_bwrap
def test_a_forged_valid_claim_is_verified_not_believed(outside):
    # The program claims success with duplicate points: the parent's own exact check says no.
    payload = b'{"ok": true, "declared_dimension": 11, "run_time": 0, "points": [[2,0,0,0,0,0,0,0,0,0,0],' \
              b'[2,0,0,0,0,0,0,0,0,0,0]]}'
    metrics = contained(f"import os, sys\nos.write(int(sys.argv[1]), {payload!r})\nos._exit(0)\n", outside)
    assert metrics["status"] == "invalid" and "identical" in metrics["message"]


def test_parse_result_schema_without_a_sandbox():
    ok = parse_result(b'{"ok": true, "points": [[2, 0], [0, 2]], "declared_dimension": null, "run_time": 0.1}')
    assert ok == {"ok": True, "points": [[2, 0], [0, 2]], "declared_dimension": None}
    assert parse_result(b'{"ok": true, "points": [[2]], "declared_dimension": true, "run_time": 0}')["kind"] == "bad_points"
    failure = parse_result(b'{"ok": false, "kind": "exception", "error": "' + b"x" * 9000 + b'"}')
    assert failure["kind"] == "exception" and len(failure["error"]) == 4000
    assert "limit of 3" in parse_result(b'{"ok": true, "points": [[1],[2],[3],[4]], "declared_dimension": null, '
                                        b'"run_time": 0}', max_points=3)["error"]


def test_strict_refuses_the_fallback():
    with pytest.raises(sb.SandboxUnavailable, match="strict mode refuses the process fallback"):
        evaluate_program("points = [[2]]", strict=True, sandbox="process")
    with pytest.raises(ValueError, match="choose 'auto', 'bwrap' or 'process'"):
        evaluate_program("points = [[2]]", sandbox="docker")


# --- The process fallback: what it cannot stop (harmless probes that must get through). ---


@pytest.fixture
def fallback_mode(monkeypatch):
    monkeypatch.setenv(sb.MODE_ENV, "process")


def test_fallback_warns_and_lists_the_gaps(fallback_mode):
    with pytest.warns(sb.SandboxWarning, match="processes started in a new session"):
        metrics = evaluate_program(STARTER + "def run_code():\n    return starter()\n", timeout_s=10)
    assert metrics["sandbox"] == "process" and metrics["status"] == "valid"


@pytest.mark.filterwarnings("ignore::hw3lib.kissing.sandbox.SandboxWarning")
def test_fallback_cannot_stop_survivors_or_outside_writes(fallback_mode, tmp_path):
    token = "hw3tok" + uuid.uuid4().hex
    source = STARTER + (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)', {token!r}], start_new_session=True)\n"
        f"open({str(tmp_path / 'outside.txt')!r}, 'w').write('written from the sandbox')\n"
        "def run_code():\n    return starter()\n")
    metrics = evaluate_program(source, timeout_s=10)
    time.sleep(0.3)
    left = survivors(token)
    try:
        assert metrics["status"] == "valid"
        assert left, "expected the new-session child to survive the fallback"
        assert (tmp_path / "outside.txt").read_text() == "written from the sandbox"
    finally:
        for pid in left:  # started (indirectly) by this test: clean up
            os.kill(pid, 9)


def test_fallback_cannot_hide_the_environment_or_stop_signals():
    probe = ("import os\nreport = []\n"
             "try:\n    report.append(open('/proc/PARENT_PID/environ', 'rb').read().decode(errors='replace'))\n"
             "except OSError as exc:\n    report.append(str(exc))\n"
             "os.kill(PARENT_PID, 0)\nreport.append('CAN SIGNAL THE PARENT')\n"  # signal 0: a check, no harm
             "raise RuntimeError(' | '.join(report))\n")
    code, metrics, _ = evaluate_in_a_child(probe, "process", timeout=10)
    assert code == 0 and "CAN SIGNAL THE PARENT" in metrics["message"]
    assert SECRET in metrics["message"]  # read from /proc/<parent>/environ


@pytest.mark.skipif(os.geteuid() != 0, reason="re-entering the parent's network namespace needs host root")
@pytest.mark.filterwarnings("ignore::hw3lib.kissing.sandbox.SandboxWarning")
def test_fallback_as_root_cannot_stop_network_reentry(fallback_mode):
    listener = Listener()
    try:
        metrics = evaluate_program(NETWORK_ATTACK + f"attack({listener.port}, {os.getpid()})\n", timeout_s=10)
    finally:
        listener.close()
    assert "REACHED" in metrics["message"] and listener.connections >= 1, metrics["message"]


def test_cli_strict_refuses_without_bubblewrap_and_runs_with_it(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from hw3lib.cli import app

    program = tmp_path / "program.py"
    program.write_text(STARTER + "def run_code():\n    return starter()\n")
    monkeypatch.setenv(sb.MODE_ENV, "process")  # as if bubblewrap were missing: --strict must refuse
    refused = CliRunner().invoke(app, ["kissing", "evaluate", str(program), "--strict"])
    assert refused.exit_code == 2 and "strict mode refuses the process fallback" in refused.output
    if sb.bwrap_available():
        monkeypatch.setenv(sb.MODE_ENV, "auto")
        ran = CliRunner().invoke(app, ["kissing", "evaluate", str(program), "--strict", "--timeout", "10"])
        assert ran.exit_code == 0 and '"sandbox": "bwrap"' in ran.output and '"combined_score": 22.0' in ran.output
