"""One memory plan: the rows per forward the GRPO loop trains with are the ones the preflight prints and checks, the
README's fit table shows, and the run records (hw3lib.grpo.memory_plan, hw3lib.core.preflight.forward_rows); the
GPU path's memory terms by hand (K/V head copies, the mask, each model's MLP width, the longest prompt); the
logits at a sampling temperature other than 1 without a float32 copy."""

from __future__ import annotations

import json

import pytest
import torch

from hw3lib.core import memory
from hw3lib.core import preflight as pf
from hw3lib.grpo.config import GRPOConfig
from hw3lib.grpo.memory_plan import longest_prompt_tokens, planned, with_memory_plan

GiB = 2**30


@pytest.fixture
def h100(monkeypatch, tmp_path):
    """A simulated 80 GB card (as the rehearsal and CI see one) and an empty runs folder."""
    monkeypatch.setenv("HW3_SIMULATE_GPU", "H100-80GB")
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    for name in ("HW3_REHEARSAL", "HW3_MODEL", "HW3_MATH_MODEL", "HW3_ENGINE"):
        monkeypatch.delenv(name, raising=False)
    return pf.simulated_device("H100-80GB")


@pytest.mark.parametrize("course", ["nlpdl-hw3", "cs336-a5", "cs336-a5-2026"])
def test_the_loop_trains_the_rows_the_preflight_prints_and_the_table_shows(h100, course, capsys):
    """The course's full-profile GRPO run at the tables' prompt length: with_memory_plan (what `train` calls first),
    the preflight of the resulting config, and the README's fit-table row agree on the rows; the plan fits within
    85% of the card, and one more row would not."""
    cfg = GRPOConfig.for_profile("full", course=course, name=f"plan_{course}",
                                 prompt_tokens=pf.COURSE_PROMPT_TOKENS[course])
    shape = pf.resolve_shape(cfg.model)[0]
    ran = with_memory_plan(cfg)
    report = pf.preflight(ran, "grpo", h100)
    row = pf.fit_row(course, "grpo", pf.nominal_device(80))
    assert ran.forward_rows == report.forward_rows == pf.forward_rows(cfg, "grpo", shape, h100.total_bytes)
    assert f"{ran.forward_rows} rows per forward" in report.summary()
    assert ran.forward_rows >= cfg.micro_train_batch_size
    assert report.fits and max(report.peaks.values()) <= report.budget == int(0.85 * h100.total_bytes)
    one_more = pf.plan_for(ran, "grpo", shape, h100.total_bytes, rows=ran.forward_rows + 1)
    assert not one_more.fits
    # the table's card is torch's 79.2 GiB, the simulated H100's too: the same rows
    assert row["forward_rows"] == ran.forward_rows and row["card_gib"] == round(h100.total_bytes / GiB, 1)


def test_a_resumed_or_shared_run_uses_its_recorded_plan(h100, tmp_path):
    cfg = GRPOConfig.for_profile("full", course="nlpdl-hw3", name="recorded", prompt_tokens=300)
    folder = tmp_path / "runs" / "recorded"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({**cfg.to_dict(), "forward_rows": 7, "prompt_tokens": 321}))
    resumed = with_memory_plan(cfg)
    assert (resumed.forward_rows, resumed.prompt_tokens) == (7, 321)  # what it trained with, not a new choice
    assert pf.preflight(resumed, "grpo", h100).forward_rows == 7
    fresh = with_memory_plan(cfg, overwrite=True)  # its outputs are about to go: plan anew
    assert fresh.forward_rows == planned(cfg).forward_rows != 7 and fresh.prompt_tokens == 300
    # a run made before plans were recorded: nothing adopted (the learner chooses as it always did)
    (folder / "config.json").write_text(json.dumps(cfg.to_dict() | {"forward_rows": None}))
    assert with_memory_plan(cfg) == cfg
    assert with_memory_plan(cfg.replace(forward_rows=3)).forward_rows == 3  # set by hand: kept


def test_the_kv_copies_mask_and_mlp_width_by_hand():
    qwen3, math, olmo = (memory.COURSE_SHAPES[m] for m in ("Qwen/Qwen3-0.6B", "Qwen/Qwen2.5-Math-1.5B",
                                                         "allenai/OLMo-2-0425-1B"))
    # keys and values of the extra heads, bf16: 2 x (16 - 8) x 128 x 2; (12 - 2) heads for Qwen2.5; OLMo-2: none
    assert memory.kv_copy_bytes_per_token_layer(qwen3) == 4096
    assert memory.kv_copy_bytes_per_token_layer(math) == 2 * 10 * 128 * 2 == 5120
    assert memory.kv_copy_bytes_per_token_layer(olmo) == 0
    assert memory.kv_copy_bytes_per_token_layer(qwen3, "float32") == 8192
    # the measured 82,100 at Qwen3-0.6B; Qwen2.5-Math-1.5B: (82,100 - 8 x 3,072) x 1.5 + 8 x 8,960 (its MLP ratio is
    # 5.8, not Qwen3's 3: the old width-only scaling gave 123,150)
    assert memory.layer_activation_bytes(qwen3) == 82_100
    assert memory.layer_activation_bytes(math) == 57_524 * 1.5 + 71_680 == 157_966
    # the masked kernels' measured remainder, 896 bytes at Qwen3's 16 x 128 query width; 12 x 128 for Qwen2.5
    assert memory.masked_attention_bytes_per_token_layer(qwen3) == 896
    assert memory.masked_attention_bytes_per_token_layer(math) == 896 * 1536 / 2048 == 672
    # one microbatch of 3 rows x 100 tokens (60 response) on a GPU: copies + remainder, and a 3 x 100^2 boolean mask
    plain = memory.activation_bytes(qwen3, 300, 60)
    gpu = memory.activation_bytes(qwen3, 300, 60, rows=3, repeats_kv=True)
    assert gpu - plain == 300 * 28 * (4096 + 896) + 3 * 100 ** 2
    # at Qwen3-0.6B's 15 rows of 200 + 1,024 tokens on an H100: the copies alone are 2.0 GiB
    assert 15 * 1224 * 28 * 4096 / GiB == pytest.approx(1.96, abs=0.01)


def test_a_microbatch_is_padded_to_the_datas_longest_prompt(tiny_model_dir):
    """The plan's prompt length is the longest formatted prompt of the run's training and held-out records."""
    from transformers import AutoTokenizer

    from hw3lib.tasks.data import format_prompt, load_task

    cfg = GRPOConfig.for_profile("smoke", n_train_examples=64, n_eval_examples=16)
    train_records, eval_records = load_task(cfg)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    lengths = [len(tokenizer(format_prompt(cfg.prompt, r["question"]), add_special_tokens=False)["input_ids"])
               for r in (*train_records, *eval_records)]
    assert longest_prompt_tokens(cfg) == max(lengths) > sorted(lengths)[len(lengths) // 2]
    # a longer prompt, fewer rows on the same card
    trainer = memory.Trainer(2, 200, 1024, repeats_kv=True)
    shape = memory.COURSE_SHAPES["Qwen/Qwen3-0.6B"]
    longer = memory.Trainer(2, 600, 1024, repeats_kv=True)
    assert memory.trainer_peak(longer.parts(shape)) > memory.trainer_peak(trainer.parts(shape))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logits_at_a_temperature_keep_no_float32_copy(temperature):
    """bf16 logits through label_log_probs at temperature t: the same log-probs, entropy and gradient as dividing a
    float32 copy first (the old way), and autograd keeps only the bf16 logits (no [b, T, V] float32 tensor)."""
    from hw3lib.maths.sft import label_log_probs

    torch.manual_seed(0)
    logits = (3 * torch.randn(2, 5, 97)).to(torch.bfloat16).requires_grad_()
    labels = torch.randint(0, 97, (2, 5))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        ours = label_log_probs(logits, labels, return_token_entropy=True, chunk_tokens=3, temperature=temperature)
    assert {t.dtype for t in saved if t.dim() == 2} == {torch.bfloat16}  # the logits, not a float32 copy
    (grad,) = torch.autograd.grad(ours["log_probs"].sum(), logits)

    reference = logits.detach().clone().requires_grad_()
    scaled = reference.float() / temperature
    log_p = torch.log_softmax(scaled, dim=-1)
    expected = log_p.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    (expected_grad,) = torch.autograd.grad(expected.sum(), reference)
    assert torch.equal(ours["log_probs"], expected)
    torch.testing.assert_close(ours["token_entropy"], -(log_p.exp() * log_p).sum(-1))
    assert torch.equal(grad, expected_grad)


def test_float64_gradcheck_of_the_temperature():
    from hw3lib.maths.sft import label_log_probs

    torch.manual_seed(1)
    logits = torch.randn(1, 3, 7, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 7, (1, 3))
    assert torch.autograd.gradcheck(lambda z: label_log_probs(z, labels, chunk_tokens=2, temperature=0.6)["log_probs"],
                                    (logits,))
