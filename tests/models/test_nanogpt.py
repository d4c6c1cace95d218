"""hw3lib's own transformer (hw3lib.models.nanogpt) and its rollout engine (hw3lib.generation.own_engine).

A randomly initialised model is enough here: equality of log-probs, caches and save/load does not
need a trained one. Learning is tested in tests/keywords/test_recipe.py.
"""

from __future__ import annotations

import pytest
import torch

from hw3lib.generation import SamplingConfig, make_engine
from hw3lib.generation.own_engine import OwnModelEngine
from hw3lib.maths.logprobs import response_log_probs
from hw3lib.models.nanogpt import GPT, GPTConfig, WordTokenizer, is_own_model, load_own_model

TEXTS = ["Write a sentence that includes the words: apple, red.\nThe red apple is on the table.",
         "Write a sentence that includes the words: cat, dog, old.\nThe old cat sat beside the dog!"]
PROMPTS = ["Write a sentence that includes the words: apple, red.\n",
           "Write a sentence that includes the words: cat, dog, old.\n", "The"]


@pytest.fixture(scope="module")
def model_and_tokenizer():
    tokenizer = WordTokenizer.train(TEXTS)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=len(tokenizer), block_size=40, n_layer=2, n_head=2, n_embd=32))
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def folder(model_and_tokenizer, tmp_path_factory):
    model, tokenizer = model_and_tokenizer
    path = tmp_path_factory.mktemp("own") / "model"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_tokenizer_round_trips_canonical_text_and_marks_unknown_words():
    tokenizer = WordTokenizer.train(TEXTS)
    for text in TEXTS:
        assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    ids = tokenizer("The purple apple.<|endoftext|>")["input_ids"]
    assert ids[1] == tokenizer.unk_token_id and ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == "The apple."
    assert tokenizer(["a", "The red"])["input_ids"][1] == [tokenizer.ids["The"], tokenizer.ids["red"]]


def test_save_load_round_trip(model_and_tokenizer, folder):
    model, tokenizer = model_and_tokenizer
    loaded, loaded_tokenizer = load_own_model(folder)
    assert is_own_model(folder) and not is_own_model(folder.parent)
    assert loaded_tokenizer.vocab == tokenizer.vocab
    assert loaded.lm_head.weight.data_ptr() == loaded.wte.weight.data_ptr()  # still tied
    ids = torch.tensor([tokenizer(TEXTS[0])["input_ids"]])
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=0, atol=0)
    from hw3lib.models.load import load_model_and_tokenizer

    via_models, _ = load_model_and_tokenizer(str(folder))
    assert isinstance(via_models, GPT)


def test_left_padding_and_kv_cache_match_a_plain_forward(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    ids = tokenizer(TEXTS[1])["input_ids"]
    full = model(torch.tensor([ids])).logits[0]  # [L, V]
    padded = torch.tensor([[0, 0, 0] + ids])
    mask = torch.tensor([[0, 0, 0] + [1] * len(ids)])
    out = model(padded[:, :8], attention_mask=mask[:, :8], use_cache=True)
    rest = model(padded[:, 8:], attention_mask=mask, past_key_values=out.past_key_values, use_cache=True)
    stitched = torch.cat([out.logits[0, 3:], rest.logits[0]])  # [L, V]
    torch.testing.assert_close(stitched, full, rtol=0, atol=1e-5)


def test_shared_prefix_path_gives_the_full_forward_values_and_gradients(model_and_tokenizer):
    """hw3lib.maths.logprobs runs a shared prompt prefix once through the cache: same numbers as no sharing."""
    model, tokenizer = model_and_tokenizer
    rows = [tokenizer(PROMPTS[0] + tail)["input_ids"] for tail in ("The red apple.", "A red apple is red.")]
    width = max(map(len, rows))
    full = torch.tensor([r + [0] * (width - len(r)) for r in rows])  # right padding, as the loop packs
    input_ids, labels = full[:, :-1], full[:, 1:]
    results = []
    for prefix in (0, 10):
        model.zero_grad()
        out = response_log_probs(model, input_ids, labels[:, 12:], shared_prefix=prefix, temperature=0.7)
        out["log_probs"].sum().backward()
        results.append((out["log_probs"].detach(), model.wte.weight.grad.clone()))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=0, atol=1e-5)
    torch.testing.assert_close(results[1][1], results[0][1], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("temperature,min_tokens", [(0.7, 3), (1.0, 0), (0.0, 0)])
def test_generation_log_probs_equal_a_fresh_forward(model_and_tokenizer, temperature, min_tokens):
    """Engine log-probs (left-padded batch, KV cache) = log softmax(logits / T) of a fresh, unpadded forward
    of prompt + continuation, within 1e-4 -- past the min-tokens EOS ban, which the engine applies."""
    model, tokenizer = model_and_tokenizer
    engine = OwnModelEngine(model, tokenizer, progress=False)
    sampling = SamplingConfig(n=3, temperature=temperature, max_tokens=12, min_tokens=min_tokens, stop=(), seed=3)
    compared = 0
    for prompt, samples in zip(PROMPTS, engine.generate(PROMPTS, sampling)):
        prompt_ids = tokenizer(prompt)["input_ids"]
        for sample in samples:
            assert len(sample.token_ids) == len(sample.logprobs) >= 1
            ids = torch.tensor([prompt_ids + sample.token_ids])
            labels = ids[:, len(prompt_ids):]
            fresh = response_log_probs(model, ids[:, :-1], labels, temperature=temperature or 1.0)["log_probs"][0]
            engine_lp = torch.tensor(sample.logprobs)
            keep = slice(min_tokens, None)  # the ban renormalises the first min_tokens distributions
            torch.testing.assert_close(engine_lp[keep], fresh[keep].detach(), rtol=0, atol=1e-4)
            compared += len(sample.logprobs[keep])
    assert compared > 20


def test_stop_strings_cut_text_tokens_and_log_probs(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    engine = OwnModelEngine(model, tokenizer, progress=False)
    greedy = SamplingConfig(n=1, temperature=0, max_tokens=10, stop=())
    free = engine.generate([PROMPTS[0]], greedy)[0][0]
    assert free.finish_reason == "length" and len(free.token_ids) == 10
    # The first word of the greedy continuation that does not occur earlier in its text becomes the stop string.
    cut = next(t for t in range(1, 10) if tokenizer.vocab[free.token_ids[t]] not in
               tokenizer.decode(free.token_ids[:t]) and tokenizer.vocab[free.token_ids[t]] not in "\n")
    stop = tokenizer.vocab[free.token_ids[cut]]
    for include in (True, False):
        sampling = SamplingConfig(n=1, temperature=0, max_tokens=10, stop=(stop,), include_stop_str_in_output=include)
        sample = engine.generate([PROMPTS[0]], sampling)[0][0]
        assert sample.finish_reason == "stop"
        assert sample.token_ids == free.token_ids[:cut + 1] and sample.logprobs == free.logprobs[:cut + 1]
        full_text = tokenizer.decode(free.token_ids[:cut + 1])
        assert sample.text == (full_text if include else full_text[:-len(stop)])
    # Not before min_tokens: a stop completed by token `cut` is ignored when min_tokens > cut.
    late = engine.generate([PROMPTS[0]], SamplingConfig(n=1, temperature=0, max_tokens=10, min_tokens=cut + 1,
                                                        stop=(stop,)))[0][0]
    assert len(late.token_ids) > cut + 1


def test_seeds_reproduce_and_leave_the_global_rng_alone(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    engine = OwnModelEngine(model, tokenizer, progress=False)

    def draw(seed):
        sampling = SamplingConfig(n=4, temperature=1.0, max_tokens=8, stop=(), seed=seed)
        return [s.token_ids for samples in engine.generate(PROMPTS[:2], sampling) for s in samples]

    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    first = draw(0)
    assert torch.rand(1) == before  # the engine's own generator, not the global one
    assert draw(0) == first
    assert draw(1) != first
    assert len({tuple(ids) for ids in first}) > 1  # the n samples of a prompt differ


def test_engine_dispatch_and_weight_push(model_and_tokenizer, folder):
    model, tokenizer = model_and_tokenizer
    engine = make_engine("transformers", folder, progress=False)
    assert isinstance(engine, OwnModelEngine) and engine.model is not model
    with pytest.raises(ValueError, match="vLLM cannot load"):
        make_engine("vllm", folder)
    changed = GPT(model.config)  # other random weights
    greedy = SamplingConfig(n=1, temperature=0, max_tokens=8, stop=())
    assert engine.load_weights(changed.state_dict().items()) > 0
    wrapped = OwnModelEngine(changed.eval(), tokenizer, progress=False)
    assert wrapped.load_weights(changed.state_dict()) == 0  # shares storage: nothing to copy
    assert engine.generate(PROMPTS, greedy) == wrapped.generate(PROMPTS, greedy)
    with pytest.raises(KeyError, match="no tensor named"):
        engine.load_weights({"nope": torch.zeros(1)})
