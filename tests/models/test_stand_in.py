"""The full-profile rehearsal's stand-ins (hw3lib.models.stand_in) and its profile (hw3lib.core.profile)."""

from __future__ import annotations

import json

import pytest

from hw3lib.models.stand_in import STAND_IN_SIZES, stand_in_name, stand_in_path, stands_in_for


@pytest.mark.parametrize("hub_id, arch", [("Qwen/Qwen3-0.6B", "Qwen3ForCausalLM"),
                                          ("Qwen/Qwen2.5-Math-1.5B", "Qwen2ForCausalLM")])
def test_stand_in_keeps_the_real_architecture(hub_id, arch):
    from hw3lib.models.load import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(stand_in_name(hub_id))
    assert type(model).__name__ == arch
    config = model.config
    assert config.hidden_size == STAND_IN_SIZES[hub_id][1]["hidden_size"] == 64
    assert config.num_attention_heads == 2 and config.num_key_value_heads == 1
    assert config.hidden_size // config.num_attention_heads == 32  # vLLM's CPU attention needs head_dim >= 32
    assert config.tie_word_embeddings and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert config.eos_token_id == tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert config.vocab_size == len(tokenizer)
    q_proj = model.model.layers[0].self_attn.q_proj
    assert (q_proj.bias is not None) == (arch == "Qwen2ForCausalLM")  # Qwen2's q/k/v biases, Qwen3's none
    if arch == "Qwen3ForCausalLM":
        assert hasattr(model.model.layers[0].self_attn, "q_norm")  # Qwen3's per-head q/k RMS norms


def test_stand_in_names_the_model_it_stands_in_for():
    folder = stand_in_path("Qwen/Qwen3-0.6B")
    assert stands_in_for(str(folder)) == "Qwen/Qwen3-0.6B" == stands_in_for("stand-in:Qwen/Qwen3-0.6B")
    assert json.loads((folder / "hw3lib_stand_in.json").read_text())["stands_in_for"] == "Qwen/Qwen3-0.6B"
    assert stands_in_for("tiny") is None
    with pytest.raises(ValueError, match="no stand-in"):
        stand_in_name("Qwen/Qwen3-8B")


def test_rehearsal_profile_is_the_full_profile_on_cpu(monkeypatch):
    from hw3lib.core.profile import get_profile

    monkeypatch.setenv("HW3_REHEARSAL", "1")
    prof = get_profile("full")
    assert (prof.name, prof.engine, prof.device, prof.dtype, prof.rehearsal) == ("full", "vllm", "cpu", "bfloat16", True)
    assert prof.model == "stand-in:Qwen/Qwen3-0.6B" and prof.math_model == "stand-in:Qwen/Qwen2.5-Math-1.5B"
    assert "HW3_REHEARSAL=1" in prof.reason
    monkeypatch.delenv("HW3_REHEARSAL")
    assert not get_profile("full").rehearsal and get_profile("full").model == "Qwen/Qwen3-0.6B"


def test_rehearsal_configs_keep_the_course_settings_and_cut_the_counts(monkeypatch):
    from hw3lib.grpo.config import GRPOConfig
    from hw3lib.sft.config import EIConfig, SFTConfig

    monkeypatch.setenv("HW3_REHEARSAL", "1")
    cfg, course = GRPOConfig.for_profile("full", course="gsm8k-qwen3"), GRPOConfig()
    assert (cfg.profile, cfg.engine, cfg.dataset, cfg.dtype) == ("full", "vllm", "gsm8k", "bfloat16")
    assert (cfg.loss_type, cfg.learning_rate, cfg.group_size) == (course.loss_type, course.learning_rate,
                                                                  course.group_size)
    assert (cfg.n_grpo_steps, cfg.rollout_batch_size, cfg.micro_train_batch_size) == (2, 32, 4)
    assert cfg.policy_device == cfg.rollout_device == "cpu"  # colocated, as on one GPU
    math = GRPOConfig.for_profile("full", course="math-qwen2.5")
    assert (math.dataset, math.model) == ("math", "stand-in:Qwen/Qwen2.5-Math-1.5B")
    assert SFTConfig.for_profile("full").n_sft_steps == 2 and EIConfig.for_profile("full").n_ei_steps == 1
