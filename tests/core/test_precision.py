"""The master-weights design (hw3lib.core.precision) against the path it replaces, autocast over the float32
masters: the same loss and gradients, the same update, no vocabulary-sized zero-fill per microbatch, the
engine fed the working copy's own bf16 tensors, and a GRPO run's trajectory unchanged."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hw3lib.core.precision import MasterEmbedding, MasterWeights
from hw3lib.maths.logprobs import autocast_for, response_log_probs


@pytest.fixture()
def tiny(tiny_model_dir):
    from hw3lib.models.load import load_model_and_tokenizer

    torch.manual_seed(0)
    policy, _ = load_model_and_tokenizer(str(tiny_model_dir))
    return policy


def microbatches(policy, n: int = 2, rows: int = 4, length: int = 40, prefix: int = 6) -> list[torch.Tensor]:
    """`n` microbatches of token ids sharing their first `prefix` tokens (the prompt template)."""
    generator = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(n):
        ids = torch.randint(3, policy.config.vocab_size, (rows, length), generator=generator)  # [b, L]
        ids[:, :prefix] = torch.arange(3, 3 + prefix)
        batches.append(ids)
    return batches


def accumulate(model, policy, batches, dtype: str, prefix: int = 6) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Backward of each microbatch's mean response NLL through `model`: (losses, `policy`'s float32 gradients)."""
    for p in policy.parameters():
        p.grad = None
    losses = []
    for ids in batches:
        with autocast_for(dtype, "cpu"):
            out = response_log_probs(model, ids, ids[:, 10:], shared_prefix=prefix)  # labels: the last 30 columns
        loss = -out["log_probs"].mean()  # []
        loss.backward()
        losses.append(loss.item())
    return losses, {name: p.grad.clone() for name, p in policy.named_parameters()}


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_loss_and_float32_gradients_match_autocast_over_the_masters(tiny, dtype):
    batches = microbatches(tiny)
    losses, grads = accumulate(tiny, tiny, batches, dtype)  # today's path: autocast casts the masters
    working = MasterWeights(tiny, dtype)
    new_losses, new_grads = accumulate(working.model, tiny, batches, dtype)
    # The matmuls see the same bf16 weights: the same losses, and float32 gradients up to summation order.
    assert new_losses == losses
    assert all(g.dtype == torch.float32 for g in new_grads.values())
    for name, grad in grads.items():
        assert torch.allclose(new_grads[name], grad, rtol=1e-5, atol=1e-7), name
    # bf16: every Linear (the tied head included) has a bf16 copy; float32: nothing is copied.
    linear = sum(isinstance(m, nn.Linear) for m in tiny.modules())
    assert len(working.pairs) == (linear if dtype == "bfloat16" else 0)
    assert all(low.dtype == torch.bfloat16 and low.grad is None for _, low in working.pairs)  # freed by the hook


def test_gradient_checkpointing_gives_the_same_gradients(tiny):
    from hw3lib.models.load import enable_gradient_checkpointing

    batches = microbatches(tiny)
    enable_gradient_checkpointing(tiny)
    tiny.train()
    _, grads = accumulate(tiny, tiny, batches, "bfloat16")  # checkpointed: the full forward, no shared prefix
    working = MasterWeights(tiny, "bfloat16")
    working.model.train()
    assert working.model.is_gradient_checkpointing
    _, new_grads = accumulate(working.model, tiny, batches, "bfloat16")
    for name, grad in grads.items():
        assert torch.allclose(new_grads[name], grad, rtol=1e-5, atol=1e-7), name


def test_refresh_is_the_one_cast_and_the_engine_gets_the_copy(tiny):
    working = MasterWeights(tiny, "bfloat16")
    optimizer = torch.optim.AdamW(tiny.parameters(), lr=1e-2)
    accumulate(working.model, tiny, microbatches(tiny), "bfloat16")
    optimizer.step()
    stale = [(master, low) for master, low in working.pairs if not torch.equal(low, master.detach().bfloat16())]
    assert stale  # the update moved the masters; the copy follows only at refresh
    working.refresh()
    assert all(torch.equal(low, master.detach().bfloat16()) for master, low in working.pairs)
    pushed = dict(working.engine_weights())
    assert pushed.keys() == tiny.state_dict().keys()
    assert all(t.dtype == torch.bfloat16 for t in pushed.values())
    copies = {low.data_ptr() for _, low in working.pairs}
    assert pushed["lm_head.weight"].data_ptr() in copies
    # The tied embedding is sent as the head's copy (same storage, same values as casting the master).
    assert pushed["model.embed_tokens.weight"].data_ptr() == pushed["lm_head.weight"].data_ptr()
    assert all(torch.equal(pushed[k], v.bfloat16()) for k, v in tiny.state_dict().items())


def test_embedding_gradient_has_no_dense_fill_per_microbatch_and_the_same_update():
    """A tied embedding (vocabulary 4,096, width 32) stepped by AdamW after 3 microbatches: the same update as
    nn.Embedding's dense gradient, with padding rows left out, and no [V, H] fill or zeros in the backward
    of a microbatch once the step's gradient exists."""

    class TiedLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(4096, 32, padding_idx=0)
            self.norm = nn.LayerNorm(32)
            self.head = nn.Linear(32, 4096, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, ids):
            return self.head(self.norm(self.embed(ids)))  # [b, L, V]

    def step(model, params, batches):
        optimizer = torch.optim.AdamW(params, lr=1e-2)
        for ids in batches:
            nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.roll(1, 1).flatten()).backward()
        optimizer.step()

    torch.manual_seed(0)
    reference = TiedLM()
    ours = TiedLM()
    ours.load_state_dict(reference.state_dict())
    batches = [torch.randint(0, 4096, (4, 16)) for _ in range(3)]  # token 0, the padding row, occurs
    step(reference, list(reference.parameters()), batches)
    working = MasterWeights(ours, "float32")
    assert isinstance(working.model.embed, MasterEmbedding) and working.model.head.weight is ours.embed.weight
    step(working.model, list(ours.parameters()), batches)
    for (name, expected), actual in zip(reference.state_dict().items(), ours.state_dict().values()):
        assert torch.allclose(actual, expected, rtol=1e-5, atol=1e-6), name

    # The backward of a later microbatch: no vocabulary-sized fill (nn.Embedding's dense backward has one).
    def vocabulary_fills(model) -> int:
        nn.functional.cross_entropy(model(batches[0]).flatten(0, 1), batches[0].flatten()).backward()  # the step's first
        with torch.profiler.profile(record_shapes=True) as profile:
            nn.functional.cross_entropy(model(batches[1]).flatten(0, 1), batches[1].flatten()).backward()
        return sum(1 for event in profile.events() if event.name in ("aten::fill_", "aten::zero_", "aten::zeros")
                   and [4096, 32] in event.input_shapes)

    assert vocabulary_fills(working.model) == 0
    assert vocabulary_fills(reference) > 0  # the check sees the dense backward's fill


def test_a_policy_with_frozen_weights_runs_as_it_is(tiny):
    """LoRA's case: frozen base weights, small trainable adapters -- no copy, autocast as before."""
    for name, p in tiny.named_parameters():
        p.requires_grad_("norm" in name)
    working = MasterWeights(tiny, "bfloat16")
    assert working.model is tiny and working.pairs == []
    working.refresh()  # nothing to do


def test_grpo_trajectory_matches_autocast_over_the_masters(monkeypatch, tmp_path):
    """Three bf16 GRPO steps (two optimizer steps each, two microbatches each, old log-probs, engine pushes)
    through the working copy and through today's path: the same rollouts and, within float32 noise, the same
    losses and gradient norms."""
    from hw3lib.grpo import loop
    from hw3lib.grpo.config import GRPOConfig

    class AutocastOverMasters:  # the path before hw3lib.core.precision: no copy, autocast casts the masters
        def __init__(self, policy, dtype):
            self.model, self.pairs = policy, []

        def refresh(self):
            pass

    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    settings = dict(n_grpo_steps=3, rollout_batch_size=16, group_size=4, train_batch_size=8, epochs_per_rollout_batch=1,
                    gradient_accumulation_steps=2, n_eval_examples=4, eval_every=3, checkpoint_every=0,
                    n_train_examples=256, dtype="bfloat16", learning_rate=1e-4, lr_warmup_steps=0)
    ours = loop.train(GRPOConfig.for_profile("smoke", name="working_copy", **settings)).train_rows
    monkeypatch.setattr(loop, "MasterWeights", AutocastOverMasters)
    before = loop.train(GRPOConfig.for_profile("smoke", name="autocast", **settings)).train_rows
    assert len(ours) == len(before) == 6
    for new, old in zip(ours, before):
        assert new["train/reward"] == old["train/reward"]  # the engine sampled the same rollouts
        assert new["train/response_length_mean"] == old["train/response_length_mean"]
        assert new["train/loss"] == pytest.approx(old["train/loss"], rel=1e-3, abs=1e-5)
        assert new["train/grad_norm"] == pytest.approx(old["train/grad_norm"], rel=1e-3)
        assert new["train/logprob_mismatch_mean_abs"] == pytest.approx(old["train/logprob_mismatch_mean_abs"], rel=1e-3)
