"""Hostile programs against the evaluator: one test per attack class of issues 14 and 24, under bubblewrap.

Issue 24's classes (at the end): key rings, inotify quotas, memory outside RLIMIT_AS, threads and
ptrace of the sandbox's init -- the last three with the cgroup back end forced off
(HW3_KISSING_CGROUP=off, a host without a usable cgroup) -- and what the parent does with whatever a
program returns (long rows, nesting, many keys, any exit status, undecodable files, escapes).

Each bubblewrap test asserts that the caller gets a result within the timeout plus a few
seconds, that validity is 0 or the correctly verified score, that no process of the program
survives, that no file outside its working directory changed, and that the package's files are
unchanged. The fallback tests at the end run a *harmless probe* of each attack the process
fallback cannot stop and assert that it gets through there, so the list in
`hw3lib.kissing.sandbox.FALLBACK_GAPS` is checked, not just claimed.
"""

from __future__ import annotations

import hashlib
import shutil
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
    kwargs.setdefault("strict", True)
    metrics = evaluate_program(source, timeout_s=timeout, **kwargs)
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
    # refused by its size before parsing, or by its count after
    assert forged["status"] == "bad_points" and "10,000 points" in forged["message"], forged["message"]
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
    (b'{"ok": true, "declared_dimension": 11, "run_time": 0, "points": [[{"x": 1}, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]]}',
     "is dict"),
    (b'[' * 200_000, "more nested lists"),
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


# --- Issue 24: kernel state shared with the host, hosts without a cgroup, a parent that never fails. ---

LIBC_PROBE = ("import ctypes, os\n"
              "libc = ctypes.CDLL(None, use_errno=True)\n"
              "def call(name, *args):\n"
              "    result = getattr(libc, name)(*args)\n"
              "    return 'ok' if result >= 0 else os.strerror(ctypes.get_errno())\n")


def proc_keys() -> set[tuple[str, str]]:
    """(id, description) of every key this process can see."""
    return {(line.split()[0], line.split(None, 8)[-1]) for line in Path("/proc/keys").read_text().splitlines()}


@pytest.fixture
def no_cgroup(monkeypatch):
    """A host without a usable cgroup: the cgroup back end forced off."""
    monkeypatch.setenv("HW3_KISSING_CGROUP", "off")


@needs_bwrap
def test_key_rings_are_unreachable_and_nothing_is_left_behind(outside):
    libc = __import__("ctypes").CDLL(None, use_errno=True)
    secret = b"hw3-secret-" + uuid.uuid4().hex.encode()
    description = b"hw3test_" + uuid.uuid4().hex.encode()
    key = libc.syscall(248, b"user", description, secret, len(secret), -3)  # add_key to our session keyring
    assert key > 0, "the test could not add its own key"
    before = proc_keys()
    source = LIBC_PROBE + (
        "keys = open('/proc/keys').read()\n"
        f"report = ['read session: ' + call('syscall', 250, 11, -3, None, 0),\n"  # keyctl READ
        f"          'read key: ' + call('syscall', 250, 11, {key}, None, 0),\n"
        "          'link root user keyring: ' + call('syscall', 250, 8, -4, -3),\n"  # keyctl LINK
        "          'add_key: ' + call('syscall', 248, b'user', b'left-behind', b'x', 1, -4),\n"
        "          'visible: ' + str(keys.count('\\n'))]\n"
        "raise RuntimeError('KEYS ' + '; '.join(report) + ' ' + keys)\n")
    try:
        metrics = contained(source, outside)
        assert metrics["status"] == "exception" and "KEYS" in metrics["message"], metrics["message"]
        assert metrics["message"].count("Operation not permitted") == 4, metrics["message"]
        assert secret.decode() not in metrics["message"] and description.decode() not in metrics["message"]
        # The kernel collects released session keyrings lazily, and sandboxes the other pytest worker starts meanwhile
        # make their own (empty) ones: what must not appear is a key that holds something -- the program's
        # `left-behind` key, or a keyring it linked it into.
        def held() -> set[tuple[str, str]]:
            return {key for key in proc_keys() - before if not key[1].endswith(": empty")}

        deadline = time.monotonic() + 10
        while held() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not held(), "a key was left behind on the host"
        assert not any("left-behind" in description for _, description in proc_keys())
        buffer = __import__("ctypes").create_string_buffer(256)
        assert libc.syscall(250, 11, key, buffer, 256) == len(secret) and buffer.raw[:len(secret)] == secret
    finally:
        libc.syscall(250, 3, key)  # keyctl REVOKE: the test's own key


@needs_bwrap
def test_inotify_instances_cannot_be_taken_from_the_host(outside):
    source = LIBC_PROBE + (
        "taken, last = 0, 'ok'\n"
        "for _ in range(200):\n"
        "    last = call('inotify_init1', 0)\n"
        "    if last != 'ok':\n"
        "        break\n"
        "    taken += 1\n"
        "raise RuntimeError(f'INOTIFY {taken} {last}')\n")
    metrics = contained(source, outside)
    assert "INOTIFY 0 Operation not permitted" in metrics["message"], metrics["message"]
    libc = __import__("ctypes").CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    assert fd >= 0, "the host cannot create inotify instances after the evaluation"
    os.close(fd)


def shmem_kib() -> int:
    """Host memory held by tmpfs, SysV and memfd pages (/proc/meminfo Shmem)."""
    line = next(l for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("Shmem:"))
    return int(line.split()[1])


@needs_bwrap
def test_memory_outside_rlimit_as_is_bounded_without_a_cgroup(outside, no_cgroup):
    before = shmem_kib()
    source = LIBC_PROBE + (
        "import mmap\n"
        "shm = 0\n"
        "try:\n"
        "    with open('/dev/shm/fill', 'wb') as handle:\n"
        "        for _ in range(16):\n"
        "            handle.write(bytes(4 * 2**20))\n"
        "            handle.flush()\n"
        "            shm += 4 * 2**20\n"
        "except OSError as exc:\n"
        "    shm_error = str(exc)\n"
        "report = [f'shm {shm}', 'memfd: ' + call('memfd_create', b'x', 0),\n"
        "          'sysv: ' + call('shmget', 0, 64 * 2**20, 0o1600), 'mq: ' + call('syscall', 240, b'/q', 0o102, 0o600, None)]\n"
        "try:\n"
        "    open('/dev/new', 'w')\n"
        "except OSError as exc:\n"
        "    report.append(f'dev: {exc.strerror}')\n"
        "raise RuntimeError('MEMORY ' + '; '.join(report))\n")
    with pytest.warns(sb.SandboxWarning, match="total memory"):
        metrics = contained(source, outside, strict=False)
    message = metrics["message"]
    shm = int(re.search(r"MEMORY shm (\d+)", message).group(1))
    assert shm <= sb.SHM_BYTES, message  # /dev/shm is a sized tmpfs
    assert "memfd: Operation not permitted" in message and "sysv: Operation not permitted" in message
    assert "mq: Operation not permitted" in message and "dev: Read-only file system" in message
    assert shmem_kib() - before < 32 * 1024, "shared memory stayed allocated after the evaluation"


@needs_bwrap
def test_threads_are_capped_without_a_cgroup(outside, no_cgroup):
    token = "hw3tok" + uuid.uuid4().hex
    source = (
        "import threading, time, subprocess, sys\n"
        f"subprocess.Popen(['/bin/sleep', '60', {token!r}], start_new_session=True)\n"
        "started = 0\n"
        "try:\n"
        "    for _ in range(400):\n"
        "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "        started += 1\n"
        "except RuntimeError as exc:\n"
        "    pass\n"
        "raise SystemError(f'THREADS {started}')\n")
    state = sb.containment()
    if not state.process_cap:  # root where no uid but root can run the program: strict must refuse
        with pytest.raises(sb.SandboxUnavailable, match="number of processes"):
            evaluate_program(source, timeout_s=TIMEOUT, strict=True)
        return
    with pytest.warns(sb.SandboxWarning, match="total memory"):
        metrics = contained(source, outside, token, strict=False)
    started = int(re.search(r"THREADS (\d+)", metrics["message"]).group(1))
    assert started < sb.MAX_PROCESSES, metrics["message"]


@needs_bwrap
def test_ptrace_of_the_sandbox_init_is_denied_and_the_init_dies_after_a_valid_score(outside, no_cgroup):
    token = "hw3tok" + uuid.uuid4().hex
    source = STARTER + LIBC_PROBE + (
        "import subprocess, sys\n"
        f"subprocess.Popen(['/bin/sleep', '60', {token!r}], start_new_session=True)\n"
        "attach = call('ptrace', 16, 1, None, None)\n"  # PTRACE_ATTACH to bubblewrap's init
        "vm = call('process_vm_readv', 1, None, 0, None, 0, 0)\n"
        "def run_code():\n"
        "    if attach != 'Operation not permitted' or vm != 'Operation not permitted':\n"
        "        raise RuntimeError(f'PTRACE {attach} {vm}')\n"
        "    return starter()\n")
    with pytest.warns(sb.SandboxWarning):
        metrics = contained(source, outside, token, strict=False)
    assert metrics["status"] == "valid" and metrics["combined_score"] == 22.0, metrics["message"]


def test_strict_refuses_a_host_with_neither_memory_nor_process_caps(monkeypatch, no_cgroup):
    monkeypatch.setenv(sb.UID_ENV, "root")  # as root, keep the program at host uid 0: RLIMIT_NPROC cannot bind
    program = STARTER + "def run_code():\n    return starter()\n"
    state = sb.containment()
    assert state.cgroup == "" and not state.memory_cap
    if os.geteuid() != 0:  # a non-root user's sandbox uid is not root: RLIMIT_NPROC caps it
        assert state.process_cap
        return
    assert not state.process_cap
    with pytest.raises(sb.SandboxUnavailable, match="total memory.*number of processes"):
        evaluate_program(program, timeout_s=10, strict=True)
    if sb.bwrap_available():
        with pytest.warns(sb.SandboxWarning, match="total memory.*number of processes"):
            metrics = evaluate_program(program, timeout_s=10)
        assert metrics["status"] == "valid"


def test_the_host_uid_is_not_root_where_a_user_namespace_can_be_made():
    state = sb.containment()
    assert state.seccomp == "", state.seccomp  # pyseccomp and libseccomp are dependencies
    if os.geteuid() == 0 and sb.bwrap_available() and shutil.which("unshare") and shutil.which("setpriv"):
        assert state.host_uid == sb.HOST_UID and state.process_cap


# --- The parent, on whatever a program returns. ---

def forge(payload: bytes) -> str:
    return f"import os, sys\nos.write(int(sys.argv[1]), {payload!r})\nos._exit(0)\n"


@needs_bwrap
def test_a_very_long_row_is_refused_before_any_arithmetic(outside):
    row = b"[" + b",".join([b"2"] * 2_000_000) + b"]"
    metrics = contained("import os, sys\nrow = b'[' + b','.join([b'2'] * 2_000_000) + b']'\n"
                        "os.write(int(sys.argv[1]), b'{\"ok\": true, \"declared_dimension\": 11, \"run_time\": 0, '"
                        "b'\"points\": [' + row + b']}')\nos._exit(0)\n", outside)
    assert metrics["status"] == "bad_points" and metrics["eval_time"] < TIMEOUT, metrics
    assert len(row) > 0
    short = contained(forge(b'{"ok": true, "declared_dimension": 11, "run_time": 0, "points": [[2, 0, 0]]}'), outside)
    assert short["status"] == "invalid" and "dimension 3, expected 11" in short["message"]


@needs_bwrap
def test_nested_brackets_and_many_keys_stay_small(outside):
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    nested = contained("import os, sys\nos.write(int(sys.argv[1]), b'{\"ok\": true, \"points\": [' + b'[],' * 1_500_000"
                       " + b'[]], \"declared_dimension\": 11, \"run_time\": 0}')\nos._exit(0)\n", outside)
    assert nested["status"] == "bad_points" and "more nested lists" in nested["message"]
    keys = contained("import json, os, sys\npayload = {'ok': False, 'kind': 'exception', 'error': 'x'}\n"
                     "payload.update({f'k{i}': 0 for i in range(50_000)})\n"
                     "os.write(int(sys.argv[1]), json.dumps(payload).encode())\nos._exit(0)\n", outside)
    assert keys["status"] == "bad_points" and "50003 keys" in keys["message"]
    assert len(keys["message"]) < 2000, len(keys["message"])
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
    assert grown_mib < 200, f"the parent's peak memory grew by {grown_mib:.0f} MiB"


@needs_bwrap
def test_any_exit_status_is_a_result(outside):
    for status in (200, 255, 129):
        metrics = contained(f"import os\nos._exit({status})\n", outside)
        assert metrics["validity"] == 0.0 and metrics["status"] in ("exit", "crash"), metrics
        assert str(status) in metrics["message"] or "signal" in metrics["message"], metrics["message"]


@needs_bwrap
def test_a_program_file_that_is_not_utf8_gets_a_clear_result(outside, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("programs")
    program = tmp_path / "latin1.py"
    program.write_bytes(b"name = 'caf\xe9'\npoints = [[2] + [0] * 10]\n")
    metrics = contained(str(program), outside)
    assert metrics["status"] == "exception" and "not valid UTF-8" in metrics["message"] and "0xe9" in metrics["message"]
    declared = tmp_path / "declared.py"  # the same bytes with a coding line: Python reads them
    declared.write_bytes(b"# -*- coding: latin-1 -*-\n" + program.read_bytes())
    assert evaluate_program(declared, timeout_s=TIMEOUT, strict=True)["status"] == "valid"


ESCAPES = "\\x1b[2J\\x1b[31mred\\x1b]0;owned\\x07\\r\\x00 \\udc80 end"


@needs_bwrap
def test_escape_sequences_and_surrogates_never_leave_the_evaluator(outside, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("programs")
    source = f"raise RuntimeError('ERR {ESCAPES}')\n"
    metrics = contained(source, outside)
    message = metrics["message"]
    assert "ERR" in message and "end" in message
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", message), repr(message)
    message.encode("utf-8")  # valid UTF-8: no lone surrogate
    json.dumps(metrics, ensure_ascii=False).encode("utf-8")

    from typer.testing import CliRunner

    from hw3lib.cli import app

    program = tmp_path / "escapes.py"
    program.write_text(source)
    shown = CliRunner().invoke(app, ["kissing", "evaluate", str(program), "--timeout", str(TIMEOUT)])
    assert shown.exit_code == 0 and "ERR" in shown.output and "\x1b" not in shown.output, shown.output


def test_the_llm_client_sends_valid_utf8_whatever_a_message_holds():
    import httpx

    from hw3lib.kissing.llm import ChatClient

    bodies = []

    def answer(request):
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]})

    client = ChatClient("http://llm.invalid/v1", "m", transport=httpx.MockTransport(answer))
    reply = client.chat([{"role": "user", "content": "error: \udc80 in the program"}])
    assert reply.content == "ok" and bodies[0]["messages"][0]["content"] == "error: \ufffd in the program"


def test_polishing_large_coordinates_is_refused_at_once(tmp_path):
    from types import SimpleNamespace

    from hw3lib.kissing.loops import polish_candidate

    (tmp_path / "candidates").mkdir()
    points = [[1000 * s if j == i else 0 for j in range(11)] for i in range(11) for s in (1, -1)]
    (tmp_path / "candidates" / "iter_001_points.json").write_text(json.dumps({"points": points}))
    step = {"iteration": 1, "evaluation": {"validity": 1.0, "combined_score": 22.0}}
    start = time.monotonic()
    polish = polish_candidate(SimpleNamespace(run_dir=tmp_path), step, dimension=11, time_limit_s=2.0, seed=0)
    assert time.monotonic() - start < 2.0
    assert polish["status"] == "skipped" and "squared norm at most 5" in polish["message"], polish


# ---------------------------------------------------------------------------------------------
# Inherited file descriptors (issue 44): only stdin, stdout/stderr and the result pipe reach the program

FD_PROBE = (
    "import os, sys\n"
    "fds = sorted(int(f) for f in os.listdir('/proc/self/fd') if os.path.exists(f'/proc/self/fd/{f}'))\n"
    "raise RuntimeError('FDS ' + repr({fd: os.readlink(f'/proc/self/fd/{fd}') for fd in fds})"
    " + ' RESULT ' + sys.argv[1])\n")


def open_fds(message: str) -> tuple[dict, int]:
    match = re.search(r"FDS (\{.*\}) RESULT (\d+)", message)
    assert match, message
    return eval(match.group(1)), int(match.group(2))  # noqa: S307 (a dict literal the probe printed)


def check_only_the_pipes(message: str) -> None:
    fds, result_fd = open_fds(message)
    assert sorted(fds) == sorted({0, 1, 2, result_fd}), fds
    assert fds[0] == "/dev/null" and fds[1] == fds[2] and fds[1].startswith("pipe:")
    assert fds[result_fd].startswith("pipe:") and fds[result_fd] != fds[1]
    assert not any(target.startswith(("user:", "anon_inode:", "socket:")) for target in fds.values())


@needs_bwrap
def test_only_stdin_output_and_result_fds_are_open_inside_bubblewrap(outside):
    metrics = contained(FD_PROBE, outside)
    assert metrics["status"] == "exception"
    check_only_the_pipes(metrics["message"])


def test_only_stdin_output_and_result_fds_are_open_in_the_fallback(fallback_mode):
    with pytest.warns(sb.SandboxWarning):
        metrics = evaluate_program(FD_PROBE, timeout_s=TIMEOUT, sandbox="process")
    check_only_the_pipes(metrics["message"])


def test_the_runner_closes_every_other_descriptor_it_inherits(tmp_path):
    """A launcher that leaks descriptors (as bubblewrap's --userns fd did) is cleaned up by the runner."""
    leaked = [os.open(os.devnull, os.O_RDONLY) for _ in range(3)]
    leaked.append(os.dup2(leaked[0], 300))  # above the runner's RLIMIT_NOFILE of 256
    program = tmp_path / "program.py"
    program.write_text(FD_PROBE)
    result_r, result_w = os.pipe()
    try:
        done = subprocess.run([sys.executable, str(Path(sb.__file__).with_name("_sandbox_runner.py")), str(result_w),
                               str(program), "1024", "10", str(2**20), "64", "100", "128"],
                              pass_fds=[result_w, *leaked], capture_output=True, timeout=60)
        os.close(result_w)
        payload = json.loads(os.read(result_r, 1 << 20))
    finally:
        os.close(result_r)
        for fd in leaked:
            os.close(fd)
    assert done.returncode == 1 and payload["kind"] == "exception"
    fds, result_fd = open_fds(payload["error"])
    assert result_fd == result_w and sorted(fds) == sorted({0, 1, 2, result_w})
