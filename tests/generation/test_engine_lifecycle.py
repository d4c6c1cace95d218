"""The life of a rollout engine colocated with the trainer, on the real loops (issue 41, "memory-correct phases").

A vLLM engine on the policy's GPU must sleep (level 2) while the trainer computes -- optimizer steps and
no-grad passes alike -- and be woken with vLLM's documented sequence: torch's cache emptied,
`wake_up(tags=["weights"])`, the weights reloaded, `wake_up(tags=["kv_cache"])`, the prefix cache reset
(hw3lib.generation.push_weights). CPU vLLM has no sleep mode, so these tests run the real GRPO, SFT,
expert-iteration loops and the async learner at the smoke profile's tiny sizes with `engine="vllm"` on
the CPU (colocated: same device) and `training_engine` replaced by `RecordingEngine`: a transformers
engine of its own underneath that records every call and refuses, as vLLM does, to generate or take
weights while asleep; `free_cached_memory` (gc.collect + torch.cuda.empty_cache) records "free". The
no-grad passes and optimizer steps are recorded too, with whether the engine slept through them. Also here: the engine's context length, device names, the Ray actors' GPU requests
and the vLLM adapter's sleep/wake/close against a stand-in `vllm.LLM`.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

import hw3lib.generation as generation
import hw3lib.generation.vllm_engine as vllm_engine
from hw3lib.generation import (engine_colocated, normalized_device, push_weights, rollout_max_model_len,
                               same_device, sleep_for_training)

# What `push_weights` does to a colocated engine, as recorded below.
PUSH = ["free", "wake_up(weights)", "load_weights", "free", "wake_up(kv_cache)", "reset_prefix_cache"]
ASLEEP = {"weights", "kv_cache"}


class RecordingEngine:
    """A stand-in for a colocated vLLM engine: generates with `inner` (a transformers engine with its own
    weights), appends every call to `calls`, and keeps vLLM's sleep state -- `generate` needs everything
    awake, `load_weights` the weights (vLLM reloads into the weights' memory)."""

    def __init__(self, inner, calls: list) -> None:
        self.inner, self.calls, self.tokenizer = inner, calls, inner.tokenizer
        self.asleep: set[str] = set()

    def generate(self, prompts, sampling):
        assert not self.asleep, f"generate while {sorted(self.asleep)} asleep"
        self.calls.append("generate")
        return self.inner.generate(prompts, sampling)

    def sleep(self, level: int = 1) -> None:
        self.calls.append(f"sleep({level})")
        self.asleep = set(ASLEEP)

    def wake_up(self, tags=None) -> None:
        self.calls.append(f"wake_up({','.join(tags) if tags else 'all'})")
        self.asleep -= set(tags) if tags else ASLEEP

    def load_weights(self, named_tensors) -> int:
        assert "weights" not in self.asleep, "load_weights while the weights are asleep"
        self.calls.append("load_weights")
        return self.inner.load_weights(named_tensors)

    def reset_prefix_cache(self) -> None:
        self.calls.append("reset_prefix_cache")

    def close(self) -> None:
        self.calls.append("close")


def squash(calls: list[str]) -> list[str]:
    """`calls` with each run of a repeated training event (a microbatch loop's passes, a batch's optimizer
    steps) written once; engine calls are kept as they are."""
    return [call for i, call in enumerate(calls)
            if i == 0 or call != calls[i - 1] or not call.startswith(("train", "no_grad"))]


@pytest.fixture
def recorder(monkeypatch, tmp_path):
    """Every loop's engine becomes a RecordingEngine; `free_cached_memory` records "free". `state` holds the
    calls, the engine, the records the factory was given and the rows of each recorded no-grad pass.
    `state.mark(name)` records a training event, suffixed "(awake)" when the engine was not asleep."""
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    state = SimpleNamespace(calls=[], engine=None, records=None, rows=[])

    def factory(cfg, policy, tokenizer, initial_model, records=()):
        inner = generation.make_engine("transformers", initial_model, device="cpu", dtype="float32",
                                       progress=False, batch_size=cfg.generation_batch_size)
        state.engine, state.records = RecordingEngine(inner, state.calls), list(records)
        return state.engine

    def mark(name: str) -> None:
        state.calls.append(name if state.engine.asleep == ASLEEP else f"{name}(awake)")

    state.mark = mark
    monkeypatch.setattr(generation, "training_engine", factory)
    monkeypatch.setattr(vllm_engine, "free_cached_memory", lambda: state.calls.append("free"))
    return state


def record_no_grad(monkeypatch, state, module) -> None:
    """Record each no-grad forward of `module`'s `response_log_probs` as "no_grad" and its row count."""
    original = module.response_log_probs

    def recording(model, input_ids, *args, **kwargs):
        state.mark("no_grad")
        state.rows.append(input_ids.shape[0])
        return original(model, input_ids, *args, **kwargs)

    monkeypatch.setattr(module, "response_log_probs", recording)


# ---- the loops --------------------------------------------------------------------------------------------

def test_grpo_sleeps_through_training_and_wakes_with_the_weights(recorder, monkeypatch):
    """GRPO with a colocated engine: sample -> sleep(2) -> old log-probs and optimizer steps asleep -> the push
    sequence -> validate / sample. Without the fix the loop called sleep() at level 1 and a bare wake_up()."""
    import hw3lib.grpo.loop as loop
    from tests.grpo.test_loop import tiny_cfg

    original = loop.batched_log_probs
    monkeypatch.setattr(loop, "batched_log_probs", lambda *a, **k: (recorder.mark("no_grad"), original(*a, **k))[1])
    cfg = tiny_cfg("colocated_grpo", model="tiny-sft", warm_start_steps=0, engine="vllm", sampling_max_tokens=8,
                   rollout_batch_size=8, train_batch_size=4, n_eval_examples=2)
    assert engine_colocated(cfg) and cfg.needs_old_log_probs
    loop.train(cfg, callback=lambda info: recorder.mark("train"))
    step = ["generate", "sleep(2)", "no_grad", "train", *PUSH]
    assert squash(recorder.calls) == ["load_weights", "generate", *step, *step, "generate", "close"]
    assert len(recorder.records) == cfg.n_train_examples + cfg.n_eval_examples  # the engine is sized for both


def test_sft_engine_sleeps_except_while_validating(recorder, monkeypatch):
    """SFT: asleep from the start; each validation pushes the weights with the wake sequence, generates, sleeps
    again before log_generations' and the trace NLL's no-grad passes, which run micro_train_batch_size rows at a
    time. Without the fix the engine never slept and the passes ran generation_batch_size (64) rows."""
    import hw3lib.sft.loop as sft_loop
    from tests.sft.test_loop import tiny_cfg

    record_no_grad(monkeypatch, recorder, sft_loop)
    cfg = tiny_cfg("colocated_sft", engine="vllm")
    assert engine_colocated(cfg) and cfg.micro_train_batch_size == 4 < cfg.generation_batch_size
    sft_loop.train_sft(cfg, callback=lambda info: recorder.mark("train"))
    validation = [*PUSH, "generate", "sleep(2)", "no_grad"]
    assert squash(recorder.calls) == ["sleep(2)", *validation, "train", *validation, "train", *validation, "close"]
    assert max(recorder.rows) == cfg.micro_train_batch_size


def test_expert_iteration_engine_sleeps_except_while_generating(recorder, monkeypatch):
    """Expert iteration: each round pushes the weights with the wake sequence, samples, sleeps, then runs the
    entropy pass (micro_train_batch_size rows at a time) and the SFT steps asleep; validations likewise.
    Without the fix the engine never slept and the entropy pass ran generation_batch_size rows."""
    import hw3lib.sft.expert_iteration as ei
    import hw3lib.sft.loop as sft_loop
    from tests.sft.test_expert_iteration import tiny_cfg

    record_no_grad(monkeypatch, recorder, ei)
    record_no_grad(monkeypatch, recorder, sft_loop)
    original_step = ei.sft_optimizer_step
    monkeypatch.setattr(ei, "sft_optimizer_step", lambda *a, **k: (recorder.mark("train"), original_step(*a, **k))[1])
    cfg = tiny_cfg("colocated_ei", engine="vllm", gradient_accumulation_steps=2, generation_batch_size=64)
    assert engine_colocated(cfg) and cfg.micro_train_batch_size == 4
    ei.expert_iteration(cfg)
    assert "train" in recorder.calls  # some rollouts were kept and trained on (asleep: no "train(awake)")
    generation_then_passes = [*PUSH, "generate", "sleep(2)", "no_grad"]  # a round's sampling or a validation
    assert [call for call in squash(recorder.calls) if call != "train"] == [
        "sleep(2)", *generation_then_passes * 5, "close"]  # validation 0, (round, validation) x 2
    assert max(recorder.rows) == cfg.micro_train_batch_size


def test_async_learner_validates_with_a_woken_engine(recorder):
    """The async learner's own validation engine (colocated with its policy): built asleep, woken with the
    weights for each validation and put back to sleep, its training steps asleep. Run without Ray: the actor
    classes are plain classes. Without the fix the engine never slept and was pushed the weights every step."""
    from hw3lib.generation import make_engine
    from hw3lib.grpo.async_loop import Learner
    from hw3lib.grpo.loop import sample_rollout_batch
    from hw3lib.core.io import runs_dir
    from tests.grpo.test_loop import tiny_cfg

    cfg = tiny_cfg("colocated_async", model="tiny-sft", warm_start_steps=0, engine="vllm", sampling_max_tokens=8,
                   rollout_batch_size=8, train_batch_size=4, n_eval_examples=2, n_grpo_steps=1, eval_every=1)
    learner = Learner(cfg, str(runs_dir() / cfg.name), None, {}, torch.get_num_threads(),
                      callback=lambda info: recorder.mark("train"))
    assert learner.start() == 0
    sampler = make_engine("transformers", learner.learner.initial_model, progress=False)
    batch = sample_rollout_batch(sampler, cfg, learner.train_records, learner.learner.reward_fn, 1, 0)
    learner.train(batch, {}, time.time())
    learner.close()
    validation = [*PUSH, "generate", "sleep(2)"]
    assert squash(recorder.calls) == ["sleep(2)", *validation, "train", *validation, "close"]


# ---- the pieces: push_weights, free_cached_memory, the vLLM adapter ---------------------------------------

def test_push_weights_sequence_and_plain_push(recorder):
    engine = RecordingEngine(SimpleNamespace(tokenizer=None, load_weights=lambda named: len(list(named))),
                             recorder.calls)
    recorder.engine = engine
    sleep_for_training(engine, colocated=False)
    assert push_weights(engine, [("a", torch.zeros(1))], colocated=False) == 1
    assert recorder.calls == ["load_weights"]  # an engine on its own device: no sleep, a plain push
    recorder.calls.clear()
    sleep_for_training(engine, colocated=True)
    assert push_weights(engine, [("a", torch.zeros(1)), ("b", torch.zeros(1))], colocated=True) == 2
    assert recorder.calls == ["sleep(2)", *PUSH] and not engine.asleep


def test_free_cached_memory_collects_and_empties_only_with_cuda(monkeypatch):
    import gc

    calls = []
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append("gc.collect"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    vllm_engine.free_cached_memory()
    assert calls == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    vllm_engine.free_cached_memory()
    assert calls == ["gc.collect", "empty_cache"]


class FakeLLM:
    """The part of `vllm.LLM` the adapter's sleep/wake/close touch, recording calls; `wake_up` answers
    whether everything is awake, as vLLM 0.32 does."""

    def __init__(self, calls: list) -> None:
        self.calls, self.asleep = calls, set()
        self.llm_engine = SimpleNamespace(engine_core=SimpleNamespace(shutdown=lambda: calls.append("shutdown")))

    def sleep(self, level):
        self.calls.append(f"llm.sleep({level})")
        self.asleep = set(ASLEEP)

    def wake_up(self, tags=None):
        self.calls.append(f"llm.wake_up({tags})")
        self.asleep -= set(tags) if tags else ASLEEP
        return not self.asleep

    def reset_prefix_cache(self):
        self.calls.append("llm.reset_prefix_cache")


def fake_vllm_engine(calls: list, sleep_mode: bool):
    from hw3lib.generation.vllm_engine import VLLMEngine

    engine = object.__new__(VLLMEngine)  # the adapter around a stand-in LLM: no engine is started
    engine.llm, engine.sleep_mode, engine._asleep, engine._hooks_before = FakeLLM(calls), sleep_mode, False, set()
    return engine


def test_vllm_engine_wakes_by_tags_and_generates_only_fully_awake():
    from hw3lib.generation import SamplingConfig

    calls = []
    engine = fake_vllm_engine(calls, sleep_mode=True)
    engine.sleep(level=2)
    engine.wake_up(tags=["weights"])
    with pytest.raises(RuntimeError, match="asleep"):
        engine.generate(["x"], SamplingConfig())
    engine.wake_up(tags=("kv_cache",))
    engine.reset_prefix_cache()
    assert calls == ["llm.sleep(2)", "llm.wake_up(['weights'])", "llm.wake_up(['kv_cache'])", "llm.reset_prefix_cache"]
    assert engine._asleep is False
    calls.clear()
    cpu = fake_vllm_engine(calls, sleep_mode=False)  # vLLM on CPU: no sleep mode, the calls are no-ops
    cpu.sleep(level=2)
    cpu.wake_up(tags=["weights"])
    assert calls == [] and cpu._asleep is False


def test_vllm_engine_close_frees_torch_cache_after_shutdown(monkeypatch):
    """Without the fix `close` dropped the engine but left its memory in torch's cache."""
    calls = []
    monkeypatch.setattr(vllm_engine, "free_cached_memory", lambda: calls.append("free"))
    monkeypatch.setattr(vllm_engine, "_release_compiled_model", lambda hooks: calls.append("release_hooks"))
    engine = fake_vllm_engine(calls, sleep_mode=False)
    engine.close()
    engine.close()  # a second close does nothing
    assert calls == ["shutdown", "release_hooks", "free"] and engine.llm is None


# ---- the engine's context length ---------------------------------------------------------------------------

class WordTokenizer:
    """One token per space-separated word (and records whether special tokens were asked for)."""

    def __call__(self, texts, add_special_tokens=True):
        assert add_special_tokens is False  # as the engines encode prompts
        return {"input_ids": [text.split() for text in texts]}


def test_rollout_max_model_len_by_hand():
    tokenizer = WordTokenizer()
    prompts = ["a b c", " ".join(["w"] * 70)]  # 3 and 70 tokens
    assert rollout_max_model_len(tokenizer, prompts, 100) == 256  # 70 + 100 = 170 -> next multiple of 128
    assert rollout_max_model_len(tokenizer, prompts, 58) == 128  # 128 exactly: no rounding
    assert rollout_max_model_len(tokenizer, prompts, 1024, multiple=64) == 1152  # 1094 -> 1152
    assert rollout_max_model_len(tokenizer, prompts, 1024, context=1024) == 1024  # capped at the model's context


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
def test_training_engine_sizes_vllm_for_the_runs_prompts(monkeypatch, tiny_model_dir, device):
    """On every device: the longest formatted prompt plus the budget, rounded. Without the fix: None on CUDA
    (Qwen3-0.6B's 40,960 tokens), 1,024 on CPU."""
    from hw3lib.generation import training_engine
    from hw3lib.grpo.config import GRPOConfig
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.tasks.data import format_prompt

    captured = {}
    monkeypatch.setattr(generation, "make_engine", lambda kind, model, **kw: captured.update(kw, kind=kind))
    cfg = GRPOConfig.for_profile("smoke", engine="vllm", sampling_max_tokens=40, policy_device=device,
                                 rollout_device=device)
    policy, tokenizer = load_model_and_tokenizer("tiny")
    records = [{"question": "Tom has 3 apples."}, {"question": "Ana has " + "many " * 30 + "coins. How many?"}]
    lengths = [len(tokenizer(format_prompt("r1_zero", r["question"]), add_special_tokens=False)["input_ids"])
               for r in records]
    training_engine(cfg, policy, tokenizer, "tiny", records=records)
    assert captured["kind"] == "vllm" and captured["device"] == device.split(":")[0]
    assert captured["max_model_len"] == -(-(max(lengths) + 40) // 128) * 128
    assert captured["enable_sleep_mode"] is None  # colocated: sleep mode where the platform has it
    with pytest.raises(ValueError, match="records"):
        training_engine(cfg, policy, tokenizer, "tiny")


# ---- device names --------------------------------------------------------------------------------------------

def test_device_names_compare_with_the_missing_index_as_zero():
    from hw3lib.evaluation.cli import device_defaults
    from hw3lib.grpo.config import GRPOConfig

    assert torch.device("cuda") != torch.device("cuda:0")  # why normalized_device exists
    assert normalized_device("cuda") == torch.device("cuda:0") and normalized_device("cpu") == torch.device("cpu")
    assert same_device("cuda", "cuda:0") and not same_device("cuda:0", "cuda:1") and not same_device("cpu", "cuda")
    cfg = GRPOConfig(engine="vllm", policy_device="cuda", rollout_device="cuda:0")
    assert engine_colocated(cfg)  # without the fix the GRPO loop took these for two devices
    assert not engine_colocated(cfg.replace(policy_device="cuda:1"))
    assert not engine_colocated(cfg.replace(engine="transformers"))
    assert device_defaults("cuda:0", None, None) == ("cuda:0", "bfloat16", 0.85)  # was float32 and 0.2
    assert device_defaults("cpu", None, None) == ("cpu", "float32", 0.2)


# ---- the async run's Ray actors ------------------------------------------------------------------------------

def test_ray_actors_ask_for_their_gpus():
    from hw3lib.grpo.async_loop import actor_options
    from hw3lib.grpo.config import GRPOConfig

    keep_names = {"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}}

    def options(policy: str, rollout: str):
        return actor_options(GRPOConfig(policy_device=policy, rollout_device=rollout))

    cpu = {"num_cpus": 1, "max_restarts": 0}
    assert options("cpu", "cpu") == (cpu, cpu)
    shared = {**cpu, "num_gpus": 0.5, "runtime_env": keep_names}
    assert options("cuda:0", "cuda:0") == options("cuda", "cuda:0") == (shared, shared)
    own = {**cpu, "num_gpus": 1, "runtime_env": keep_names}
    assert options("cuda:1", "cuda:0") == (own, own)
    assert options("cuda:0", "cpu") == (own, cpu)
