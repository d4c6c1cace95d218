"""hw3lib.core.cost: an engine vLLM runs eager (CS336 2026's OLMo-2, through its Transformers backend) decodes
`EAGER_DECODE_FACTOR` times slower (issue 58, item 6), by hand."""

from __future__ import annotations

import dataclasses

import pytest

from hw3lib.core import cost

# tests/core/test_cost.py's roofline toy: prefill 0.0816 s, each decode step 4.608 s (bandwidth-bound)
TOY = cost.Shape("s", params=1100, layers=1, hidden=10, vocab=10, kv_heads=1, head_dim=1)
ACC = cost.Accelerator("toy", peak_flops=1e6, bandwidth=1e3, compute_efficiency=0.5, bandwidth_efficiency=0.5)


def test_an_eager_engine_decodes_slower_by_the_stated_factor():
    assert cost.EAGER_DECODE_FACTOR == 1.5
    assert cost.generation_seconds(TOY, 4, 5, 3, ACC) == pytest.approx(0.0816 + 3 * 4.608)  # graphed
    # the prefill is not slowed, each of the 3 decode steps is: 0.0816 + 3 x 4.608 x 1.5
    assert cost.generation_seconds(TOY, 4, 5, 3, ACC, eager=True) == pytest.approx(0.0816 + 20.736)
    olmo_named = dataclasses.replace(TOY, name="OLMo-2-0425-1B")
    assert cost.served_eager(olmo_named) and not cost.served_eager(TOY)
    assert cost.generation_seconds(olmo_named, 4, 5, 3, ACC) == pytest.approx(0.0816 + 20.736)
    assert cost.generation_seconds(olmo_named, 4, 5, 3, ACC, eager=False) == pytest.approx(0.0816 + 13.824)


def test_the_course_models_vllm_serves_eager_are_those_it_has_no_implementation_of():
    shapes = cost.COURSE_SHAPES
    assert [shapes[hub].name for hub in shapes if cost.served_eager(shapes[hub])] == ["OLMo-2-0425-1B"]


def test_cs336_2026s_plan_costs_olmos_generation_eager(monkeypatch):
    from hw3lib.experiments.plan import notebook_plan

    eager = notebook_plan("01", "full", "cs336-a5-2026").total[0]  # zero-shot: generation only
    monkeypatch.setattr(cost, "EAGER_DECODE_FACTOR", 1.0)
    graphed = notebook_plan("01", "full", "cs336-a5-2026").total[0]
    assert 1.0 < eager / graphed <= 1.5  # the decode steps x 1.5, the prefill unchanged
