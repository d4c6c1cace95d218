"""AdamW's state created before the first forward (issue 58, item 4; hw3lib.core.lifecycle.materialize_adamw_state):
the same update, bit for bit, as torch's lazy creation at the first step -- fused (what `adamw` builds on CPU and
CUDA), foreach and amsgrad, a parameter without gradients, a skipped step -- and a resumed run's loaded state left
as it is. `TrainingRun` does it where the parameters are on a GPU only; on CPU the optimizer stays lazy."""

from __future__ import annotations

import copy

import pytest
import torch

import hw3lib.core.lifecycle as lifecycle
from hw3lib.core.lifecycle import TrainingRun, adamw, materialize_adamw_state
from hw3lib.sft.config import SFTConfig


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
        self.unused = torch.nn.Linear(2, 2)  # never in the forward: no gradient, lazily no state

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return Net()


def steps(net: torch.nn.Module, optimizer: torch.optim.Optimizer, n: int = 4, skip: int | None = None) -> None:
    generator = torch.Generator().manual_seed(1)
    for i in range(n):
        optimizer.zero_grad(set_to_none=True)
        net(torch.randn(8, 6, generator=generator)).pow(2).mean().backward()
        if i != skip:  # a non-finite step is skipped by the loops: no optimizer.step()
            optimizer.step()


def same_state(a: torch.optim.Optimizer, b: torch.optim.Optimizer) -> bool:
    sa, sb = a.state_dict()["state"], b.state_dict()["state"]
    return all(all(t.dtype == sb[i][k].dtype and t.device == sb[i][k].device and torch.equal(t, sb[i][k])
                   for k, t in state.items()) for i, state in sa.items() if i in sb)


@pytest.mark.parametrize("options", [{"fused": True}, {"foreach": True}, {"foreach": False, "amsgrad": True}])
def test_materialized_state_gives_the_same_update_bit_for_bit(options):
    lazy_net, early_net = model(), model()
    lazy = torch.optim.AdamW(lazy_net.parameters(), lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95), **options)
    early = torch.optim.AdamW(early_net.parameters(), lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95), **options)
    assert materialize_adamw_state(early) == len(list(early_net.parameters()))
    steps(lazy_net, lazy, skip=1)
    steps(early_net, early, skip=1)
    for p, q in zip(lazy_net.parameters(), early_net.parameters()):
        assert torch.equal(p, q)
    assert same_state(lazy, early)  # step counters (dtype and device too) and moments
    assert len(lazy.state) == len(early.state) - 2  # the unused layer: zeros, never stepped


def test_a_loaded_state_is_left_as_it_is():
    net = model()
    optimizer = adamw(list(net.parameters()), SFTConfig.for_profile("smoke"))
    steps(net, optimizer, n=2)
    saved = copy.deepcopy(optimizer.state_dict())
    resumed = adamw(list(net.parameters()), SFTConfig.for_profile("smoke"))
    resumed.load_state_dict(saved)
    created = materialize_adamw_state(resumed)
    assert created == 2  # only the unused layer's weight and bias, which had none
    assert same_state(optimizer, resumed) and resumed.state_dict()["state"].keys() >= saved["state"].keys()


@pytest.mark.parametrize("gpu", [False, True])
def test_a_training_run_materializes_on_a_gpu_only(monkeypatch, tmp_path, gpu):
    monkeypatch.setattr(lifecycle, "on_gpu", lambda params: gpu)
    net = model()
    run = TrainingRun(SFTConfig.for_profile("smoke", name="adamw_state"), tmp_path / "run", None, net, None,
                      fresh_state={"step": 0, "elapsed_s": 0.0})
    assert len(run.optimizer.state) == (len(run.params) if gpu else 0)  # CPU: lazy, checkpoints as before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the lent device machine)")
def test_on_a_gpu_fused_adamw_is_the_same_and_its_moments_come_before_the_first_forward():
    lazy_net, early_net = model().cuda(), model().cuda()
    cfg = SFTConfig.for_profile("smoke")
    lazy, early = adamw(list(lazy_net.parameters()), cfg), adamw(list(early_net.parameters()), cfg)
    assert early.defaults["fused"]
    before = torch.cuda.memory_allocated()
    materialize_adamw_state(early)
    assert torch.cuda.memory_allocated() - before >= 2 * 4 * sum(p.numel() for p in early_net.parameters())
    for net, optimizer in ((lazy_net, lazy), (early_net, early)):
        generator = torch.Generator(device="cuda").manual_seed(1)
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            net(torch.randn(8, 6, generator=generator, device="cuda")).pow(2).mean().backward()
            optimizer.step()
    assert all(torch.equal(p, q) for p, q in zip(lazy_net.parameters(), early_net.parameters()))
    assert same_state(lazy, early)
