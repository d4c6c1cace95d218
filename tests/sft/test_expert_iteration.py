"""Expert iteration (hw3lib.sft.expert_iteration): only correct rollouts are kept and trained on, the entropy
statistic is the policy's token entropy, rounds resume exactly, and the config checks its values."""

from __future__ import annotations

import pytest
import torch

import hw3lib.sft.expert_iteration as ei_module
from hw3lib.sft.expert_iteration import expert_iteration, keep_correct, rollout_entropy
from hw3lib.sft.config import EIConfig


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))


def tiny_cfg(name: str, **overrides) -> EIConfig:
    # tiny-sft answers some arithmetic questions right, so rounds keep a mix of rollouts.
    settings = dict(name=name, model="tiny-sft", warm_start_steps=0, n_ei_steps=2, questions_per_round=8,
                    group_size=4, train_batch_size=8, sampling_max_tokens=24, n_eval_examples=4, eval_every=1,
                    checkpoint_every=1, learning_rate=2e-4)
    return EIConfig.for_profile("smoke", **{**settings, **overrides})


def test_keep_correct_keeps_exactly_reward_one():
    scores = [{"reward": 1.0}, {"reward": 0.0}, {"reward": 0.5}, {"reward": 1.0}]
    assert keep_correct(scores) == [0, 3]


def test_rounds_train_only_on_the_correct_rollouts(monkeypatch):
    trained_rows, rounds = [], []
    original = ei_module.sft_optimizer_step

    def recording_step(policy, optimizer, params, batch, rows, **kwargs):
        trained_rows.append(list(rows))
        return original(policy, optimizer, params, batch, rows, **kwargs)

    monkeypatch.setattr(ei_module, "sft_optimizer_step", recording_step)

    def callback(info):
        rounds.append({"kept": info["kept"], "rewards": [s["reward"] for s in info["scores"]],
                       "steps": list(trained_rows)})
        trained_rows.clear()

    result = expert_iteration(tiny_cfg("keeps", sft_epochs=2), callback=callback)
    assert any(r["kept"] for r in rounds) and any(len(r["kept"]) < len(r["rewards"]) for r in rounds)
    for r in rounds:
        assert r["kept"] == [i for i, reward in enumerate(r["rewards"]) if reward == 1.0]
        trained = [row for step in r["steps"] for row in step]
        assert sorted(trained) == sorted(r["kept"] * 2)  # every kept rollout once per epoch, nothing else
    rows = [row for row in result.metrics if "ei/kept" in row]
    assert [row["ei/kept"] for row in rows] == [len(r["kept"]) for r in rounds]
    assert [row["rollouts"] for row in rows] == [32, 64]
    assert rows[-1]["step"] == sum(len(r["steps"]) for r in rounds) == sum(row["ei/sft_steps"] for row in rows)
    assert [row["round"] for row in result.eval_rows] == [0, 1, 2]


def test_rollout_entropy_is_the_mean_token_entropy_of_a_full_forward():
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.maths.sft import compute_entropy, pack_prompt_and_output_ids

    policy, tokenizer = load_model_and_tokenizer("tiny")
    prompts = [[5, 6, 7, 8], [5, 6, 9]]
    outputs = [[10, 11, 12], [13, 14]]
    packed = pack_prompt_and_output_ids(prompts, outputs, tokenizer.pad_token_id)
    got = rollout_entropy(policy, packed, micro_batch_size=1, shared_prefix=2, temperature=0.7, dtype="float32")
    with torch.no_grad():
        logits = policy(packed["input_ids"]).logits / 0.7  # [2, L-1, V]
    entropy = compute_entropy(logits)  # [2, L-1]
    mask = packed["response_mask"]
    expected = (entropy * mask).sum(1) / mask.sum(1)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_ctrl_c_between_rounds_resumes_to_the_straight_run():
    from safetensors.torch import load_file

    from hw3lib.core.runs import latest_checkpoint

    straight = expert_iteration(tiny_cfg("straight", eval_every=2))

    def interrupt(info):
        if info["round"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        expert_iteration(tiny_cfg("split", eval_every=2), callback=interrupt)
    split = expert_iteration(tiny_cfg("split", eval_every=2), resume=True)
    a = load_file(str(latest_checkpoint(straight.run_dir) / "policy" / "model.safetensors"))
    b = load_file(str(latest_checkpoint(split.run_dir) / "policy" / "model.safetensors"))
    assert all(torch.allclose(a[k], b[k], atol=1e-6, rtol=0) for k in a)
    strip = [{k: v for k, v in row.items() if not k.startswith("time/")} for row in straight.metrics]
    assert [{k: v for k, v in row.items() if not k.startswith("time/")} for row in split.metrics] == strip


def test_config_checks_name_the_values():
    with pytest.raises(ValueError, match="questions_per_round=64 exceeds n_train_examples=10"):
        EIConfig(questions_per_round=64, n_train_examples=10)
    with pytest.raises(ValueError, match="sampling_temperature=0"):
        EIConfig(sampling_temperature=0)
    cfg = EIConfig.for_profile("smoke", group_size=4, questions_per_round=16)
    assert cfg.rollouts_per_round == 64 and cfg.micro_train_batch_size == cfg.train_batch_size
