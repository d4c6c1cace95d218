"""CS336 2026's model, allenai/OLMo-2-0425-1B: its real shape (hw3lib.models.real_shape) and its random-weight
stand-in (hw3lib.models.stand_in), the architecture the `cs336-a5-2026` rehearsal trains."""

from __future__ import annotations

import pytest
import torch

from hw3lib.models.stand_in import STAND_IN_SIZES, stand_in_name, stand_in_path, stands_in_for

HUB_ID = "allenai/OLMo-2-0425-1B"


def test_real_shape_is_olmo2_0425_1b_at_full_size():
    from transformers import AutoModelForCausalLM

    from hw3lib.models.real_shape import REAL_SHAPES, real_shape_config

    assert "olmo2-0425-1b" in REAL_SHAPES
    config = real_shape_config("olmo2-0425-1b")
    assert (config.model_type, config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
            config.num_key_value_heads, config.intermediate_size, config.vocab_size,
            config.max_position_embeddings) == ("olmo2", 2048, 16, 16, 16, 8192, 100352, 4096)
    assert config.rope_parameters["rope_theta"] == 500000 and config.rms_norm_eps == 1e-6
    assert not config.tie_word_embeddings and (config.eos_token_id, config.pad_token_id) == (100257, 100277)
    with torch.device("meta"):  # the full model's parameter count without allocating its 6 GB
        model = AutoModelForCausalLM.from_config(config)
    # by hand: embeddings and untied head 2 x 100,352 x 2,048 = 411,041,792; per layer q,k,v,o 4 x 2,048^2,
    # q/k norms 2 x 2,048, MLP 3 x 2,048 x 8,192, two post-norms 2 x 2,048 = 67,117,056, x 16 layers; final norm 2,048
    assert sum(p.numel() for p in model.parameters()) == 411_041_792 + 16 * 67_117_056 + 2048 == 1_484_916_736
    assert real_shape_config("olmo2-0425-1b", layers=2).num_hidden_layers == 2


def test_real_shape_path_refuses_a_shape_without_a_tokenizer():
    from hw3lib.models.real_shape import real_shape_path

    with pytest.raises(ValueError, match="Qwen-vocabulary shapes only"):
        real_shape_path("olmo2-0425-1b", layers=1)


def test_olmo2_stand_in_keeps_the_real_architecture_and_runs():
    from hw3lib.models.load import load_model_and_tokenizer

    assert stand_in_name(HUB_ID) == "stand-in:allenai/OLMo-2-0425-1B"
    model, tokenizer = load_model_and_tokenizer(stand_in_name(HUB_ID))
    assert type(model).__name__ == "Olmo2ForCausalLM" and stands_in_for(str(stand_in_path(HUB_ID))) == HUB_ID
    config = model.config
    assert config.hidden_size == STAND_IN_SIZES[HUB_ID][1]["hidden_size"] == 64
    assert config.num_attention_heads == config.num_key_value_heads == 2  # no grouped-query attention, as OLMo 2
    assert config.hidden_size // config.num_attention_heads == 32  # vLLM's CPU attention needs head_dim >= 32
    assert config.rope_parameters["rope_theta"] == 500000 and config.rms_norm_eps == 1e-6
    assert not config.tie_word_embeddings  # OLMo 2 unties its output head
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    layer = model.model.layers[0]
    assert layer.self_attn.q_norm.weight.shape == (64,)  # OLMo 2 normalizes q and k over all heads together
    assert hasattr(layer, "post_feedforward_layernorm") and not hasattr(layer, "input_layernorm")  # norms after
    assert config.eos_token_id == tokenizer.eos_token_id and config.vocab_size == len(tokenizer)

    ids = tokenizer(["Natalia sold 48 clips in April."], return_tensors="pt")["input_ids"]
    model.float()
    out = model(ids, labels=ids)
    assert out.logits.shape == (1, ids.shape[1], len(tokenizer))
    # random weights: the next-token loss is near ln(vocab)
    assert abs(out.loss.item() - torch.log(torch.tensor(float(len(tokenizer)))).item()) < 0.5


def test_olmo2_stand_in_takes_a_cs336_2026_train_step():
    """The 2026 adapters' whole train step on the stand-in: weights move, gradients are cleared."""
    from hw3lib import adapters_cs336_2026 as course
    from hw3lib.models.load import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(stand_in_name(HUB_ID))
    model.float().train()
    before = [p.detach().clone() for p in model.parameters()]
    prompts = ["Q: 2 + 2 = ?", "Q: 2 + 2 = ?", "Q: 3 + 5 = ?", "Q: 3 + 5 = ?"]
    responses = [" 4", " 5", " 8", " 7"]

    def reward_fn(response, ground_truth):
        correct = float(response.strip() == ground_truth)
        return {"reward": correct, "format_reward": 1.0, "answer_reward": correct}

    loss, meta = course.run_grpo_train_step(model, tokenizer, torch.optim.SGD(model.parameters(), lr=1e-2), 2, 1.0,
                                            reward_fn, prompts, responses, ["4", "4", "8", "8"], 2,
                                            advantage_normalizer="mean")
    assert torch.isfinite(loss) and meta["grad_norm"] > 0 and meta["reward_mean"] == 0.5
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), before))
    assert all(p.grad is None for p in model.parameters())
