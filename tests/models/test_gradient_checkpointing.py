"""Gradient checkpointing (`gradient_checkpointing=True` in any run config): the same gradients, the
flag reaches the policy of every loop, and a model that cannot do it is refused by name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from hw3lib.models.load import enable_gradient_checkpointing, load_model_and_tokenizer, load_training_policy


def loss_and_grads(model, input_ids):
    model.train()
    logits = model(input_ids).logits  # [B, T, V]
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), input_ids[:, 1:].flatten())
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def test_same_loss_and_gradients_with_and_without():
    plain, _ = load_model_and_tokenizer("tiny")
    checkpointed, _ = load_model_and_tokenizer("tiny")
    enable_gradient_checkpointing(checkpointed)
    assert checkpointed.is_gradient_checkpointing and not plain.is_gradient_checkpointing
    input_ids = torch.randint(0, plain.config.vocab_size, (3, 40), generator=torch.Generator().manual_seed(0))
    loss_a, grads_a = loss_and_grads(plain, input_ids)
    loss_b, grads_b = loss_and_grads(checkpointed, input_ids)
    torch.testing.assert_close(loss_a, loss_b)
    assert grads_a.keys() == grads_b.keys() and len(grads_a) > 10
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-5, atol=1e-6, msg=name)


def test_the_run_flag_reaches_the_training_policy():
    on = SimpleNamespace(policy_device="cpu", gradient_checkpointing=True)
    off = SimpleNamespace(policy_device="cpu", gradient_checkpointing=False)
    assert load_training_policy("tiny", on)[0].is_gradient_checkpointing
    assert not load_training_policy("tiny", off)[0].is_gradient_checkpointing


def test_a_grpo_run_with_checkpointing_matches_one_without(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    from hw3lib.grpo.loop import train
    from tests.grpo.test_loop import tiny_cfg

    plain = train(tiny_cfg("plain", n_eval_examples=2))
    checkpointed = train(tiny_cfg("checkpointed", n_eval_examples=2, gradient_checkpointing=True))
    for a, b in zip(plain.train_rows, checkpointed.train_rows):
        assert a["train/loss"] == pytest.approx(b["train/loss"], rel=1e-4, abs=1e-6)
        assert a["train/grad_norm"] == pytest.approx(b["train/grad_norm"], rel=1e-4)


def test_a_model_without_it_is_refused():
    with pytest.raises(ValueError, match="gradient_checkpointing=True: Linear does not support it"):
        enable_gradient_checkpointing(torch.nn.Linear(2, 2))
