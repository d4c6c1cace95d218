"""Asynchronous GRPO's start on one GPU (hw3lib.grpo.async_start, hw3lib.grpo.async_loop): the learner's rows fit
beside the generator's awake engine, engine builds never overlap, every wait on an actor has a limit, and GPUs Ray
did not register are refused before any actor is created. Recording stand-ins: no Ray cluster, no GPU."""

from __future__ import annotations

import pytest

from hw3lib.grpo import async_start
from hw3lib.grpo.async_start import ActorCallTimeout, check_ray_gpus, start_actors


class _Handle:
    """A stand-in actor handle: `pid.remote()` records that something waited for the actor."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log
        log.append(f"create {name}")
        self.pid = self

    def remote(self):
        self.log.append(f"wait {self.name}")
        return self.name


def _started(cfg, monkeypatch):
    log: list[str] = []
    monkeypatch.setattr(async_start, "get", lambda ref, what, timeout=None: log.append(f"got {ref}") or ref)
    learner, generator = start_actors(cfg, lambda: _Handle("generator", log), lambda: _Handle("learner", log))
    return log, learner, generator


def test_on_a_gpu_the_generators_engine_is_built_before_the_learner_loads(monkeypatch):
    from hw3lib.grpo.config import GRPOConfig

    gpu = GRPOConfig.for_profile("full", course="nlpdl-hw3")
    assert gpu.engine == "vllm" and gpu.policy_device == "cuda:0"
    log, learner, generator = _started(gpu, monkeypatch)
    # the generator exists and has finished its constructor (its engine's build and profiling) before the learner
    # is even created; then the learner's load is waited for too
    assert log == ["create generator", "wait generator", "got generator", "create learner", "wait learner",
                   "got learner"]
    assert (learner.name, generator.name) == ("learner", "generator")
    cpu = GRPOConfig.for_profile("smoke")
    log, _, _ = _started(cpu, monkeypatch)
    assert log == ["create learner", "create generator"]  # CPU engines do not profile device memory: both at once


def test_every_wait_has_a_limit_and_says_which_call(monkeypatch):
    import ray

    def never(ref, timeout=None):
        assert timeout == 12.0
        raise ray.exceptions.GetTimeoutError("timed out")

    monkeypatch.setattr(ray, "get", never)
    monkeypatch.setenv("HW3_RAY_TIMEOUT_S", "12")
    with pytest.raises(ActorCallTimeout, match=r"the learner's GRPO step 3 did not finish within 12 s.*HW3_RAY_TIMEOUT_S"):
        async_start.get(object(), "the learner's GRPO step 3")
    monkeypatch.setenv("HW3_RAY_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match="HW3_RAY_TIMEOUT_S='soon'"):
        async_start.call_timeout()
    monkeypatch.delenv("HW3_RAY_TIMEOUT_S")
    assert async_start.call_timeout() == async_start.DEFAULT_TIMEOUT_S


def test_the_async_loop_has_no_unbounded_wait():
    """Every `ray.get` in the async loop and its helpers passes a timeout (through `get` or explicitly)."""
    import ast
    import inspect

    from hw3lib.grpo import async_loop

    tree = ast.parse(inspect.getsource(async_loop))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("get", "wait") \
                and getattr(node.func.value, "id", None) == "ray":
            assert any(keyword.arg == "timeout" for keyword in node.keywords), ast.unparse(node)


def test_gpus_ray_did_not_register_are_refused_in_one_line():
    shared = [{"num_cpus": 1, "num_gpus": 0.5}, {"num_cpus": 1, "num_gpus": 0.5}]
    check_ray_gpus(shared, registered=1.0)  # one GPU, half each: fine
    with pytest.raises(RuntimeError, match=r"ask Ray for 1 GPU\(s\) but Ray registered 0") as refused:
        check_ray_gpus(shared, registered=0.0)
    assert "\n" not in str(refused.value)
    with pytest.raises(RuntimeError, match="ask Ray for 2 GPU"):
        check_ray_gpus([{"num_gpus": 1}, {"num_gpus": 1}], registered=1.0)
    check_ray_gpus([{"num_cpus": 1}, {"num_cpus": 1}], registered=0.0)  # CPU actors ask for none


def test_the_async_learner_trains_the_rows_that_fit_beside_the_awake_generator(monkeypatch, tmp_path):
    """train_async plans the learner's rows with the async plan (the generator's engine awake beside it) and checks
    exactly that plan: fewer rows than a synchronous run of the same config, whose engine sleeps while it trains."""
    from hw3lib.core import preflight as pf
    from hw3lib.grpo import async_loop
    from hw3lib.grpo.async_loop import AsyncConfig, train_async
    from hw3lib.grpo.config import GRPOConfig

    monkeypatch.setenv("HW3_SIMULATE_GPU", "H100-80GB")
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    for name in ("HW3_REHEARSAL", "HW3_MODEL", "HW3_MATH_MODEL"):
        monkeypatch.delenv(name, raising=False)
    checked = []

    class Checked(Exception):
        pass

    def check_fits(kind, cfg):
        checked.append(cfg)
        raise Checked

    monkeypatch.setattr(async_loop, "check_fits", check_fits)
    cfg = GRPOConfig.for_profile("full", course="nlpdl-hw3", name="async_rows", loss_type="grpo_clip",
                                 gpu_memory_utilization=0.35, prompt_tokens=400)
    with pytest.raises(Checked):
        train_async(cfg, AsyncConfig())
    shape = pf.resolve_shape(cfg.model)[0]
    card = pf.simulated_device("H100-80GB").total_bytes
    (planned,) = checked
    assert planned.forward_rows == pf.forward_rows(cfg, "async", shape, card) < pf.forward_rows(cfg, "grpo", shape, card)
    assert pf.plan_for(planned, "async", shape, card).fits
    assert not pf.plan_for(planned, "async", shape, card, rows=planned.forward_rows + 1).fits


def test_the_one_gpu_async_default_fits_each_course_model(monkeypatch):
    """The notebook's async config on one 80 GB card: the memory model picks a share (and checkpointing) that fits
    within the headroom; the 1.5B models need a smaller share and checkpointing than Qwen3-0.6B's 0.35."""
    from hw3lib.core import preflight as pf
    from hw3lib.grpo.async_report import one_gpu_settings
    from hw3lib.grpo.config import GRPOConfig

    monkeypatch.setenv("HW3_SIMULATE_GPU", "H100-80GB")
    for name in ("HW3_REHEARSAL", "HW3_MODEL", "HW3_MATH_MODEL"):
        monkeypatch.delenv(name, raising=False)
    card = pf.simulated_device("H100-80GB")
    chosen = {}
    for course in ("nlpdl-hw3", "cs336-a5", "cs336-a5-2026"):
        cfg = GRPOConfig.for_profile("full", course=course, loss_type="grpo_clip",
                                     prompt_tokens=pf.COURSE_PROMPT_TOKENS[course])
        settings = one_gpu_settings(cfg)
        chosen[course] = (settings["gpu_memory_utilization"], settings["gradient_checkpointing"])
        assert pf.preflight(cfg.replace(**settings), "async", card).fits
        assert not pf.plan_for(cfg, "async", pf.resolve_shape(cfg.model)[0], card.total_bytes).fits or course == "nlpdl-hw3"
    assert chosen == {"nlpdl-hw3": (0.35, False), "cs336-a5": (0.25, True), "cs336-a5-2026": (0.25, False)}
