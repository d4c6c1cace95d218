"""The loss variants beyond the handouts in the GRPO step and config (hw3lib.grpo.step, hw3lib.grpo.config):
their config values and checks, the named recipes, DAPO's one token count per optimizer step (the
same update for 1, 2 or 8 microbatches), masked importance sampling and the mismatch KL."""

from __future__ import annotations

import math

import pytest
import torch

from hw3lib.grpo.config import ALGORITHMS, GRPOConfig
from tests.maths.test_logprobs import _cfg, _step_inputs

F64 = torch.float64


# ---- configuration ---------------------------------------------------------------------------------------

def test_new_options_default_off_and_keep_the_course_settings():
    cfg = GRPOConfig()
    assert (cfg.clip_low, cfg.clip_high, cfg.mis, cfg.mis_low, cfg.mis_high, cfg.algorithm) == (None,) * 6
    assert cfg.loss_type == "reinforce_with_baseline" and cfg.length_normalization == "masked_mean"
    assert cfg.clip_bounds == (0.2, 0.2) and cfg.mis_bounds == (0.5, 2.0)
    assert not cfg.needs_old_log_probs


@pytest.mark.parametrize("changes, words", [
    (dict(loss_type="dapo_clip", clip_low=1.5), ["clip_low=1.5", "(0, 1]"]),
    (dict(loss_type="dapo_clip", clip_low=0.0), ["clip_low=0.0"]),
    (dict(loss_type="cispo", clip_high=-0.1), ["clip_high=-0.1", "> 0"]),
    (dict(loss_type="grpo_clip", clip_high=0.28), ["clip_high=0.28", "loss_type='grpo_clip'", "dapo_clip"]),
    (dict(clip_low=0.2), ["clip_low=0.2", "loss_type='reinforce_with_baseline'"]),
    (dict(mis="geometric"), ["mis='geometric'", "token, sequence"]),
    (dict(mis="token", mis_low=1.2), ["mis_low=1.2", "[0, 1)"]),
    (dict(mis="token", mis_high=0.9), ["mis_high=0.9", "> 1"]),
    (dict(mis_high=3.0), ["mis_high=3.0", "mis=None"]),
    (dict(length_normalization="token"), ["length_normalization='token'", "token_mean"]),
    (dict(algorithm="ppo"), ["algorithm='ppo'", "dr_grpo"]),
    (dict(algorithm="dr_grpo"), ["algorithm='dr_grpo' does not hold", "use_std_normalization=True",
                                 "length_normalization='masked_mean'"]),
])
def test_variant_checks_name_the_field(changes, words):
    with pytest.raises(ValueError) as info:
        GRPOConfig(**changes)
    for word in words:
        assert word in str(info.value)


def test_named_recipes():
    base = GRPOConfig.for_profile("smoke")
    dr = base.with_algorithm("dr_grpo")
    assert (dr.algorithm, dr.loss_type, dr.use_std_normalization, dr.length_normalization,
            dr.length_normalization_constant) == ("dr_grpo", "grpo_clip", False, "constant", None)
    dapo = base.with_algorithm("dapo")
    assert (dapo.loss_type, dapo.length_normalization, dapo.clip_bounds) == ("dapo_clip", "token_mean", (0.2, 0.28))
    assert base.with_algorithm("gspo").clip_bounds == (3e-4, 4e-4)
    cispo = base.with_algorithm("cispo")
    assert (cispo.loss_type, cispo.clip_bounds, cispo.length_normalization) == ("cispo", (1.0, 0.28), "token_mean")
    assert set(ALGORITHMS) == {"grpo", "dr_grpo", "dapo", "gspo", "cispo"}
    for name in ALGORITHMS:  # every recipe is a valid config on both profiles' bases and records its name
        assert base.with_algorithm(name).algorithm == name and GRPOConfig().with_algorithm(name).algorithm == name
    # everything else is the base's
    assert dr.replace(algorithm=None, **{k: getattr(base, k) for k in ALGORITHMS["dr_grpo"]}) == base
    with pytest.raises(ValueError, match="algorithm='ppo'"):
        base.with_algorithm("ppo")


def test_mis_and_the_new_ratio_losses_need_old_log_probs_off_policy_only():
    off = dict(train_batch_size=128, gradient_accumulation_steps=64)
    assert GRPOConfig(mis="token", **off).needs_old_log_probs
    assert not GRPOConfig(mis="token").needs_old_log_probs  # on-policy: the current log-probs serve
    for loss_type in ("dapo_clip", "gspo", "cispo"):
        assert GRPOConfig(loss_type=loss_type, **off).needs_old_log_probs


# ---- the loss the loop assembles --------------------------------------------------------------------------

def test_microbatch_loss_token_mean_hand_worked():
    """reinforce_with_baseline, A = (1, 5), responses of 2 and 1 tokens in a step of 6 response tokens:
    -(1 * (-1 - 3) + 5 * -2) / 6 = 14 / 6; each token's gradient is -A / 6, whatever its response's length."""
    from hw3lib.grpo.step import microbatch_loss

    log_probs = torch.tensor([[-1.0, -3.0], [-2.0, -2.0]], dtype=F64, requires_grad=True)
    mask = torch.tensor([[True, True], [True, False]])
    adv = torch.tensor([[1.0], [5.0]], dtype=F64)
    cfg = _cfg(length_normalization="token_mean")
    loss = microbatch_loss(log_probs, mask, cfg, raw_rewards=adv, advantages=adv, old_log_probs=None,
                           tis_weights=None, step_tokens=torch.tensor(6.0))
    assert loss.item() == pytest.approx(14 / 6)
    loss.backward()
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-1 / 6, -1 / 6], [-5 / 6, 0.0]], dtype=F64))
    with pytest.raises(ValueError, match="needs step_tokens"):
        microbatch_loss(log_probs, mask, cfg, raw_rewards=adv, advantages=adv, old_log_probs=None, tis_weights=None)
    # an optimizer step without response tokens: 0, not 0/0
    empty = microbatch_loss(log_probs, torch.zeros_like(mask), cfg, raw_rewards=adv, advantages=adv,
                            old_log_probs=None, tis_weights=None, step_tokens=torch.tensor(0.0))
    assert empty.item() == 0.0


def test_token_mean_one_count_per_step_gives_the_same_update_for_1_2_or_8_microbatches():
    """A tiny float64 parameter tensor (8 responses of lengths 1..8, log p = -softplus(theta)) trained
    with DAPO (dapo_clip + token_mean): the step's accumulated gradient is the same, within 1e-6 (in
    fact ~1e-15), for 1, 2 or 8 microbatches. A count per microbatch (the bug the one count avoids)
    gives a different gradient."""
    from hw3lib.grpo.step import microbatch_loss

    gen = torch.Generator().manual_seed(0)
    theta0 = torch.randn(8, 8, generator=gen, dtype=F64)
    old = -torch.nn.functional.softplus(theta0 + 0.1 * torch.randn(8, 8, generator=gen, dtype=F64))
    mask = torch.arange(8).unsqueeze(0) < torch.arange(1, 9).unsqueeze(1)  # [8, 8] lengths 1..8
    adv = torch.randn(8, 1, generator=gen, dtype=F64)
    step_tokens = mask.sum().to(F64)  # 36, counted once for the whole step

    def step_gradient(accumulation: int, per_microbatch_count: bool = False) -> torch.Tensor:
        cfg = _cfg(rollout_batch_size=8, group_size=2, train_batch_size=8, gradient_accumulation_steps=accumulation,
                   loss_type="dapo_clip", clip_low=0.2, clip_high=0.28, length_normalization="token_mean")
        theta = theta0.clone().requires_grad_()
        size = cfg.micro_train_batch_size
        for start in range(0, 8, size):
            rows = slice(start, start + size)
            count = mask[rows].sum().to(F64) * accumulation if per_microbatch_count else step_tokens
            loss = microbatch_loss(-torch.nn.functional.softplus(theta[rows]), mask[rows], cfg,
                                   raw_rewards=adv[rows], advantages=adv[rows], old_log_probs=old[rows],
                                   tis_weights=None, step_tokens=count)
            loss.backward()
        return theta.grad

    full = step_gradient(1)
    assert full.abs().sum() > 0
    for accumulation in (2, 8):
        torch.testing.assert_close(step_gradient(accumulation), full, rtol=0, atol=1e-6)
        assert (step_gradient(accumulation) - full).abs().max() < 1e-12
    assert (step_gradient(8, per_microbatch_count=True) - full).abs().max() > 1e-3


@pytest.mark.parametrize("algorithm", ["dapo", "cispo", "gspo"])
def test_variant_step_is_the_same_for_1_2_or_8_microbatches_on_the_tiny_model(algorithm):
    """One optimizer step of the tiny model over 8 rollouts of different lengths, off-policy (old
    log-probs moved), as 1, 2 or 8 microbatches: the same gradients (within 1e-6; float32) and the
    same clip fraction and loss. DAPO's and CISPO's token_mean divides by one count for the step."""
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.grpo.step import optimizer_step

    policy, tokenizer = load_model_and_tokenizer("tiny-sft")
    packed, engine_lp, adv, prefix = _step_inputs(policy, tokenizer)
    assert len(set(packed["lengths"].tolist())) > 1
    torch.manual_seed(0)
    old = engine_lp + 0.3 * torch.randn_like(engine_lp)  # ratios far from 1: some tokens / sequences clipped
    results, grads = [], []
    for accumulation in (1, 2, 8):
        cfg = _cfg(rollout_batch_size=8, group_size=2, train_batch_size=8, gradient_accumulation_steps=accumulation,
                   dtype="float32").with_algorithm(algorithm)
        if algorithm == "gspo":
            cfg = cfg.replace(algorithm=None, clip_low=0.02, clip_high=0.02)  # sequence ratios of ~1 +- 0.1
        optimizer = torch.optim.SGD(policy.parameters(), lr=0.0)
        captured = {}
        stats = optimizer_step(policy, optimizer, list(policy.parameters()), cfg, dict(packed), torch.arange(8),
                               raw_rewards=adv, advantages=adv, old_log_probs=old, ref_log_probs=None,
                               engine_log_probs=engine_lp, shared_prefix=prefix, learning_rate=0.0,
                               measure_mismatch=False,
                               before_update=lambda m: captured.update({n: p.grad.clone() for n, p in
                                                                        m.named_parameters() if p.grad is not None}))
        results.append(stats)
        grads.append(captured)
    assert 0.0 < results[0]["clip_fraction"] < 1.0
    assert sum(g.abs().sum().item() for g in grads[0].values()) > 0
    for other, other_grads in zip(results[1:], grads[1:]):
        for key in ("clip_fraction", "loss"):
            assert other[key] == pytest.approx(results[0][key], rel=1e-5, abs=1e-7), key
        for name, grad in grads[0].items():
            torch.testing.assert_close(other_grads[name], grad, rtol=1e-5, atol=1e-6)


# ---- the engine/trainer mismatch -----------------------------------------------------------------------------

def test_logprob_mismatch_kl_hand_worked():
    """The engine scores every sampled token 0.1 nats lower than the trainer (r = pi_trainer / pi_engine
    = e^0.1): KL(engine || trainer) k1 = -0.1 per token, k3 = e^0.1 - 1 - 0.1 = 0.0051709; padding ignored."""
    from hw3lib.grpo.step import logprob_mismatch

    trainer = torch.tensor([[-1.0, -2.0, -5.0], [-0.5, -0.7, -9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    engine = trainer - 0.1
    abs_sum, count, max_ratio, k1, k3 = logprob_mismatch(trainer, engine, mask)
    assert count.item() == 5 and abs_sum.item() == pytest.approx(0.5)
    assert max_ratio.item() == pytest.approx(math.exp(0.1))
    assert k1.item() / 5 == pytest.approx(-0.1, rel=1e-5)
    assert k3.item() / 5 == pytest.approx(math.exp(0.1) - 1.1, rel=1e-4)
    assert all(t.item() == 0.0 for t in logprob_mismatch(trainer, trainer, mask)[3:])  # perfect agreement: 0


def _mis_step(mis, engine_shift, mis_high=None):
    """One on-policy step of the tiny model with the engine's log-probs shifted by `engine_shift` [N, L-1]."""
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.grpo.step import optimizer_step

    policy, tokenizer = load_model_and_tokenizer("tiny-sft")
    packed, engine_lp, adv, prefix = _step_inputs(policy, tokenizer)
    cfg = _cfg(rollout_batch_size=8, group_size=2, train_batch_size=8, gradient_accumulation_steps=2,
               dtype="float32", mis=mis, mis_high=mis_high if mis else None)
    grads = {}
    stats = optimizer_step(policy, torch.optim.SGD(policy.parameters(), lr=0.0), list(policy.parameters()), cfg,
                           dict(packed), torch.arange(8), raw_rewards=adv, advantages=adv, old_log_probs=None,
                           ref_log_probs=None, engine_log_probs=engine_lp + engine_shift(packed), shared_prefix=prefix,
                           learning_rate=0.0, measure_mismatch=True,
                           before_update=lambda m: grads.update({n: p.grad.clone() for n, p in m.named_parameters()
                                                                 if p.grad is not None}))
    return stats, grads, packed


def test_mis_drops_the_tokens_outside_the_band_and_logs_the_fraction():
    """The engine scores the first response token of rows 0-3 4x lower than the trainer (ratio 4 > 2):
    token-level MIS drops exactly those 4 tokens -- the gradient is the one of a step where they are
    outside the response mask -- and sequence-level MIS drops rows 0-3 whole (zero gradient from them)."""
    def shift(packed):
        out = torch.zeros(packed["labels"].shape)
        for row in range(4):
            out[row, int(packed["response_start"][row])] = -math.log(4.0)
        return out

    stats, grads, packed = _mis_step("token", shift)
    tokens = int(packed["response_mask"].sum())
    assert stats["mis_dropped_fraction"] == pytest.approx(4 / tokens)
    # the mismatch shows in the KL: k3 = r - 1 - log r = 4 - 1 - log 4 on those 4 tokens, ~0 elsewhere
    assert stats["mismatch_kl_k3"] / stats["mismatch_tokens"] == pytest.approx(4 * (3 - math.log(4.0)) / tokens,
                                                                               rel=1e-4)
    # the same step without MIS, with those 4 tokens masked out of the loss by hand (and the same normalizers)
    masked = dict(packed)
    masked["response_mask"] = packed["response_mask"].clone()
    for row in range(4):
        masked["response_mask"][row, int(packed["response_start"][row])] = False
    reference = _masked_reference(masked, packed)
    for name, grad in reference.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-7)

    seq_stats, seq_grads, _ = _mis_step("sequence", shift)
    first_four = int(packed["response_mask"][:4].sum())
    assert seq_stats["mis_dropped_fraction"] == pytest.approx(first_four / tokens)
    masked["response_mask"][:4] = False  # rows 0-3 whole
    for name, grad in _masked_reference(masked, packed).items():
        torch.testing.assert_close(seq_grads[name], grad, rtol=1e-5, atol=1e-7)

    none_stats, none_grads, _ = _mis_step("token", shift, mis_high=5.0)  # a band wide enough: nothing dropped
    _, plain_grads, _ = _mis_step(None, shift)
    assert none_stats["mis_dropped_fraction"] == 0.0
    for name, grad in plain_grads.items():
        torch.testing.assert_close(none_grads[name], grad)


def _masked_reference(masked, packed):
    """Gradients of the plain step's loss (reinforce_with_baseline, masked_mean, the advantages of
    `_step_inputs`) written out by hand, with the tokens `masked` leaves out weighted 0 but still counted
    by each response's length (MIS keeps the normalizers)."""
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.maths.logprobs import response_log_probs

    policy, _ = load_model_and_tokenizer("tiny-sft")
    adv = torch.linspace(-1.0, 1.0, 8).unsqueeze(1)
    cols = slice(int(packed["response_start"].min()), int(packed["lengths"].max()))
    log_probs = response_log_probs(policy, packed["input_ids"][:, :cols.stop], packed["labels"][:, cols])["log_probs"]
    full, kept = packed["response_mask"][:, cols], masked["response_mask"][:, cols]
    per_token = torch.where(kept, -adv * log_probs, 0.0)  # [8, T]
    loss = (per_token.sum(-1) / full.sum(-1).clamp(min=1)).sum() / 8  # each response's own full length
    loss.backward()
    return {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}


# ---- end to end ------------------------------------------------------------------------------------------------

def test_each_recipe_and_mis_train_end_to_end_and_log_their_metrics(tmp_path, monkeypatch):
    """Two GRPO steps of each named recipe (and of MIS on the smoke profile's grpo_clip), off-policy (two
    optimizer steps per rollout batch): finite losses, updated weights, and the metrics of what is on --
    the clip fraction for clipping losses, MIS's dropped fraction (0: the float32 engine is the policy)
    and the mismatch KL on every row."""
    from hw3lib.grpo.loop import train
    from tests.grpo.test_loop import tiny_cfg

    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    configs = {name: tiny_cfg(name, n_eval_examples=1).with_algorithm(name) for name in ("dr_grpo", "dapo", "cispo")}
    configs["gspo"] = tiny_cfg("gspo", n_eval_examples=1, loss_type="gspo", clip_low=0.01, clip_high=0.01)
    configs["mis"] = tiny_cfg("mis", n_eval_examples=1, mis="sequence")
    for name, cfg in configs.items():
        rows = train(cfg).train_rows
        assert len(rows) == 4, name
        assert all(math.isfinite(row["train/loss"]) and row["train/skipped_steps"] == 0 for row in rows), name
        assert any(row["train/grad_norm"] > 0 for row in rows), name
        assert all(abs(row["train/mismatch_kl"]) < 1e-6 for row in rows), name
        assert all("train/clip_fraction" in row for row in rows), name  # all five clip their ratio
        assert all(row["train/ratio_mean"] == pytest.approx(1.0, abs=1e-5) for row in rows[::2]), name  # on-policy
        if name == "mis":
            assert all(row["train/mis_dropped_fraction"] == 0.0 for row in rows)
    assert configs["dr_grpo"].length_normalization == "constant" and not configs["dr_grpo"].use_std_normalization
