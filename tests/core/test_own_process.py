"""hw3lib.core.own_process: a run that builds a sleep-mode vLLM engine on a GPU trains in a fresh process (issue 58,
item 3). The child processes here are real (`python -m hw3lib.core.own_process`) and run the small module-level
functions below: pid, output, errors, refused callbacks and Ctrl-C (the child checkpoints, then the caller raises).
This module imports nothing heavy at its top: each child imports it to find its function."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from hw3lib.core import own_process
from hw3lib.core.own_process import is_cuda, needs_own_process, run_in_own_process


# ---- what runs in the children ------------------------------------------------------------------------------

def report(value: int) -> tuple[int, int]:
    print(f"hello from the child, value {value}", flush=True)
    print("a warning line", file=__import__("sys").stderr, flush=True)
    return os.getpid(), 2 * value


def fail(message: str) -> None:
    raise ValueError(message)


def checkpoint_on_interrupt(folder: str) -> None:
    """Wait to be interrupted, then 'save a checkpoint' slowly (a second SIGINT must not cut it short)."""
    folder = Path(folder)
    (folder / "started").write_text(str(os.getpid()))
    try:
        time.sleep(60)
    except KeyboardInterrupt:
        time.sleep(1.0)  # the forwarded and the group's SIGINT both arrive meanwhile
        (folder / "saved").write_text("ok")
        raise


# ---- which runs need a process of their own -------------------------------------------------------------------

def test_a_vllm_run_on_cuda_needs_its_own_process():
    from hw3lib.grpo.config import GRPOConfig
    from hw3lib.sft.config import EIConfig, SFTConfig

    full = GRPOConfig()  # the course's defaults: vLLM colocated on cuda:0
    assert full.engine == "vllm" and needs_own_process(full)
    assert needs_own_process(SFTConfig()) and needs_own_process(EIConfig())
    assert needs_own_process(full.replace(rollout_device="cuda:1", policy_device="cuda:0"))
    assert not needs_own_process(full.replace(engine="transformers"))  # no sleep-mode allocator
    assert not needs_own_process(full.replace(rollout_device="cpu", policy_device="cpu"))  # sleep mode: a no-op
    assert not needs_own_process(GRPOConfig.for_profile("smoke"))  # CPU runs stay in-process, as ever
    assert is_cuda("cuda") and is_cuda("cuda:3") and not is_cuda("cpu")


def test_inside_its_own_process_the_run_trains_there(monkeypatch):
    from hw3lib.grpo.config import GRPOConfig

    cfg = GRPOConfig()
    monkeypatch.setattr(own_process, "_RUN_HERE", cfg)
    assert not needs_own_process(cfg)  # the child runs it, not yet another child
    assert needs_own_process(cfg.replace(name="another"))  # a nested run of another config gets its own


# ---- the boundary itself --------------------------------------------------------------------------------------

def test_the_call_runs_in_another_process_and_its_output_shows_here(capsys):
    pid, doubled = run_in_own_process(report, 21)
    assert pid != os.getpid() and doubled == 42
    out, err = capsys.readouterr()
    assert "hello from the child, value 21" in out  # a notebook cell shows the run's log
    assert "a warning line" in err


def test_the_childs_error_is_raised_here_with_its_type_and_message():
    with pytest.raises(ValueError, match="no run called abc") as caught:
        run_in_own_process(fail, "no run called abc")
    assert any("own process" in note and "ValueError" in note for note in caught.value.__notes__)


def test_a_callback_that_cannot_cross_is_refused_before_anything_starts(monkeypatch):
    monkeypatch.setattr(own_process.subprocess, "Popen", lambda *a, **k: pytest.fail("a process was started"))
    with pytest.raises(TypeError, match="callback .*cannot be sent to the run's own process.*module-level function"):
        run_in_own_process(report, 1, callback=lambda row: None)


def test_ctrl_c_reaches_the_child_once_and_its_checkpoint_completes(tmp_path):
    """Ctrl-C in a terminal or Jupyter reaches both processes (the group), and the caller forwards one more: the
    child turns the first into KeyboardInterrupt and ignores the rest while it saves; the caller then raises."""
    def interrupt() -> None:
        started = tmp_path / "started"
        while not started.is_file() or not started.read_text():
            time.sleep(0.05)
        os.kill(int(started.read_text()), signal.SIGINT)  # the process group's copy
        os.kill(os.getpid(), signal.SIGINT)  # ours, which the caller forwards

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        run_in_own_process(checkpoint_on_interrupt, str(tmp_path))
    assert (tmp_path / "saved").read_text() == "ok"


def not_a_refusal() -> int:
    return int("x")  # a builtin's ValueError: a bug, whatever the type


@pytest.mark.parametrize("call, refusal", [((not_a_refusal,), False), ((__import__("hw3lib.core.course", fromlist=[
    "get_course"]).get_course, "no-such-course"), True)])
def test_a_refusal_stays_a_refusal_and_a_bug_a_bug_for_the_cli(call, refusal):
    """hw3lib.cli prints one line for hw3lib's own `raise` and a traceback for anything else: the boundary must
    not turn a bug in the child into a refusal (the parent re-raises it from its own file)."""
    from hw3lib.cli import is_project_error

    with pytest.raises(ValueError) as caught:
        run_in_own_process(*call)
    assert is_project_error(caught.value) is refusal
