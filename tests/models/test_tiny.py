"""hw3lib.models.tiny: the offline tiny model loads like a hub checkpoint and is deterministic."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hw3lib.models.load import load_model_and_tokenizer, resolve_model
from hw3lib.models.tiny import TinySettings, tiny_model_path


def test_tiny_model_loads_through_auto_classes(tiny_model_dir):
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["model_type"] == "qwen3" and config["head_dim"] >= 32
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    text = "Natalia sold 48/2 = 24 clips. </think> <answer> 72 </answer>"
    ids = tokenizer(text).input_ids
    assert tokenizer.decode(ids) == text
    # digits are split one per token, as in Qwen's tokenizer
    assert [tokenizer.decode([i]) for i in tokenizer("1234").input_ids] == ["1", "2", "3", "4"]
    logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), config["vocab_size"])


def test_tiny_model_is_cached_by_settings(tiny_model_dir):
    assert tiny_model_path() == tiny_model_dir
    assert TinySettings(seed=1).key() != TinySettings().key()
    assert resolve_model("tiny") == str(tiny_model_dir)


def test_same_seed_builds_identical_weights(tmp_path, monkeypatch, tiny_model_dir):
    monkeypatch.setenv("HW3_CACHE_DIR", str(tmp_path))
    rebuilt = tiny_model_path()
    assert rebuilt != tiny_model_dir
    a = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    b = AutoModelForCausalLM.from_pretrained(rebuilt).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (rebuilt / "tokenizer.json").read_text() == (tiny_model_dir / "tokenizer.json").read_text()


def test_loader_pads_on_the_left():
    model, tokenizer = load_model_and_tokenizer("tiny")
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    assert next(model.parameters()).dtype == torch.float32


def test_missing_model_path_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_model(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        resolve_model(str(tmp_path))


def test_tiny_sft_half_follows_the_format_on_gsm8k(shared_data_dir):
    """`tiny-sft` is the cached brief-SFT model; on GSM8K it closes the R1-Zero format in some
    samples and not in others (what notebook 01's smoke run relies on to show every category)."""
    from hw3lib.tasks.data import format_prompt, load_gsm8k
    from hw3lib.evaluation.evaluate import category_of
    from hw3lib.generation import SamplingConfig, make_engine
    from hw3lib.tasks.rewards import r1_zero_reward_fn
    from hw3lib.models.warmstart import TINY_SFT_STEPS

    path = resolve_model("tiny-sft")
    assert resolve_model("tiny-sft") == path  # cached
    assert json.loads((Path(path) / "warm_start.json").read_text())["steps"] == TINY_SFT_STEPS
    records = load_gsm8k("test", limit=16)
    engine = make_engine("transformers", "tiny-sft", progress=False)
    sampling = SamplingConfig(n=4, temperature=1.0, max_tokens=48, stop=("</answer>",),
                              include_stop_str_in_output=True, seed=0)
    outputs = engine.generate([format_prompt("r1_zero", r["question"]) for r in records], sampling)
    categories = [category_of(r1_zero_reward_fn(s.text, r["gold"])) for r, samples in zip(records, outputs)
                  for s in samples]
    for category in ("wrong_answer", "unformatted"):
        assert categories.count(category) >= 0.15 * len(categories), categories
