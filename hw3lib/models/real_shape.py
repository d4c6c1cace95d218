"""Random-weight models of the full profile's real shapes, built offline: the rehearsal's and the real-width test's.

The full profile trains `Qwen/Qwen3-0.6B` (GSM8K) and `Qwen/Qwen2.5-Math-1.5B` (MATH), which this
machine cannot download. What breaks at their size is the size itself -- 151,936-entry logits, a
gigabyte of weights to push and checkpoint -- and that needs no trained weights. `real_shape_path(name,
layers)` builds, once per setting, a checkpoint folder that loads like the hub's:

- the model's real configuration (`real_shape_config`), random weights (seeded), `num_hidden_layers`
  cut to `layers` when given (same width and vocabulary), saved in bfloat16 as the hub's are;
- a byte-level BPE tokenizer whose ids span the whole 151,936-entry vocabulary, `<|endoftext|>` at
  Qwen's id 151,643 (`real_vocab_tokenizer`): the GSM8K-trained merges of hw3lib.models.tiny, then
  filler tokens, each the merge of two letter tokens, so that every id decodes to word-like text
  which re-encodes to about as many tokens (a random model samples every id).

The shapes (`REAL_SHAPES`): Qwen3-0.6B is `hw3lib.models.tiny.qwen3_0p6b_config` (28 layers, width 1,024,
16 query / 8 KV heads of 128, MLP 3,072, tied embeddings: 596,049,920 parameters). Qwen2.5-Math-1.5B
(a Qwen2 model) has 28 layers, width 1,536, 12 query / 2 KV heads, MLP 8,960, biases on q/k/v,
RoPE base 10,000, 4,096 positions, tied embeddings (1,543,714,304 parameters); sources: the model's
hub config as LitGPT transcribes it (`litgpt/config.py`, "Qwen2.5-Math-1.5B{}"), and the Qwen2.5
report's tied embeddings for the 1.5B size (the untied count, 1.78B, would not be the published 1.54B).

Folders live under `$HW3_CACHE_DIR/real_shape/<name>-<layers>L-<key>/`.

Random weights never answer right, so every reward is 0: every GRPO advantage would be 0 (no update, a
push of unchanged weights) and expert iteration would keep nothing. `write_stand_in_grader(folder)` writes
a grader file for the workbook's own hook, `$HW3_COURSE_GRADER` (hw3lib.tasks.course_grader), whose
reward is drawn from a hash of the response (1 for about half of them), so the training paths run in full.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from hw3lib.core.io import build_folder_once, cache_dir

BUILD_VERSION = 1
VOCAB_SIZE = 151936
EOS_ID = 151643  # Qwen's <|endoftext|>
EOS_TOKEN = "<|endoftext|>"
TRAINED_MERGES_VOCAB = 8192  # BPE entries trained on GSM8K text before the filler tokens
REAL_SHAPES = ("qwen3-0.6b", "qwen2.5-math-1.5b", "olmo2-0425-1b")
# OLMo 2's own ids (its dolma2 tokenizer: <|endoftext|> 100,257, <|pad|> 100,277). Its 100,352-entry vocabulary has
# no real-vocabulary tokenizer here: `real_shape_path` builds the Qwen shapes only; OLMo is a config and a stand-in.
OLMO2_VOCAB_SIZE, OLMO2_EOS_ID, OLMO2_PAD_ID = 100352, 100257, 100277


def real_shape_config(name: str, layers: int | None = None):
    """The transformers config of a full-profile model (`REAL_SHAPES`), with `layers` decoder layers (None: all)."""
    from transformers import Qwen2Config

    from hw3lib.models.tiny import qwen3_0p6b_config

    if name == "qwen3-0.6b":
        config = qwen3_0p6b_config()
    elif name == "qwen2.5-math-1.5b":
        config = Qwen2Config(
            vocab_size=VOCAB_SIZE, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
            num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=4096, rope_theta=10000.0,
            rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False, sliding_window=4096,
            max_window_layers=28, bos_token_id=EOS_ID, eos_token_id=EOS_ID, pad_token_id=EOS_ID)
    elif name == "olmo2-0425-1b":
        # CS336 2026's model, allenai/OLMo-2-0425-1B (an Olmo2 model): 16 layers, width 2,048, 16 query = 16 KV
        # heads of 128, MLP 8,192, RMS norms on q and k and after (not before) attention and MLP, RoPE base
        # 500,000, 4,096 positions, untied embeddings: 1,484,916,736 parameters. Source: the model's hub config
        # (as copied with its fine-tunes, e.g. CodeAtCMU/OLMo-2-0425-1B_full_sft_code_data_120K_remove_comments).
        from transformers import Olmo2Config

        config = Olmo2Config(
            vocab_size=OLMO2_VOCAB_SIZE, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=4096, rope_theta=500000.0,
            rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, bos_token_id=OLMO2_EOS_ID,
            eos_token_id=OLMO2_EOS_ID, pad_token_id=OLMO2_PAD_ID)
    else:
        raise ValueError(f"unknown real shape {name!r}: choose one of {', '.join(REAL_SHAPES)}")
    if layers is not None:
        if not 1 <= layers <= config.num_hidden_layers:
            raise ValueError(f"layers={layers}: {name} has 1 to {config.num_hidden_layers} decoder layers")
        config.num_hidden_layers = layers
        if hasattr(config, "layer_types") and config.layer_types is not None:
            config.layer_types = config.layer_types[:layers]
        if hasattr(config, "max_window_layers"):
            config.max_window_layers = min(config.max_window_layers, layers)
    config.dtype = "bfloat16"
    return config


def course_shapes() -> dict:
    """The full profile's three models as the cost model sees them (`hw3lib.core.cost.Shape`), by hub id."""
    from hw3lib.core.cost import Shape

    return {"Qwen/Qwen3-0.6B": Shape.from_config("Qwen3-0.6B", real_shape_config("qwen3-0.6b")),
            "Qwen/Qwen2.5-Math-1.5B": Shape.from_config("Qwen2.5-Math-1.5B", real_shape_config("qwen2.5-math-1.5b")),
            "allenai/OLMo-2-0425-1B": Shape.from_config("OLMo-2-0425-1B", real_shape_config("olmo2-0425-1b"))}


def _key(name: str, layers: int | None, seed: int) -> str:
    blob = json.dumps({"build": BUILD_VERSION, "name": name, "layers": layers, "seed": seed,
                       "merges_vocab": TRAINED_MERGES_VOCAB}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def real_shape_path(name: str = "qwen3-0.6b", layers: int | None = None, seed: int = 0) -> Path:
    """The checkpoint folder of `name` with `layers` decoder layers (None: the real depth), built on first use."""
    if real_shape_config(name, layers).vocab_size != VOCAB_SIZE:  # checks the arguments before anything is built
        raise ValueError(f"real_shape_path builds Qwen-vocabulary shapes only; {name} has no tokenizer here: use "
                         "real_shape_config, or its stand-in (hw3lib.models.stand_in)")
    depth = layers if layers is not None else "all"
    target = cache_dir() / "real_shape" / f"{name}-{depth}L-{_key(name, layers, seed)}"
    return build_folder_once(target, lambda staging: _build(name, layers, seed, staging), marker="tokenizer.json")


def real_vocab_tokenizer():
    """The rehearsal's tokenizer (built once into the cache, then loaded): every id of the real vocabulary."""
    from transformers import AutoTokenizer

    folder = build_folder_once(cache_dir() / "real_shape" / f"tokenizer-{_key('tokenizer', None, 0)}",
                               _build_tokenizer, marker="tokenizer.json")
    return AutoTokenizer.from_pretrained(folder)


def _filler_merges(vocab: dict[str, int], count: int, seed: int = 0) -> list[tuple[str, str]]:
    """`count` new (left, right) merges of two letter tokens (left may start a word, right continues it)
    whose concatenation is not in `vocab` yet: byte-level BPE can produce each, so each decodes to text."""
    letters = [token for token in vocab if token.lstrip("Ġ").isascii() and token.lstrip("Ġ").isalpha()]
    lefts = sorted(letters)
    rights = sorted(token for token in letters if not token.startswith("Ġ"))
    rng = random.Random(seed)
    merges, seen = [], set(vocab)
    while len(merges) < count:
        left, right = rng.choice(lefts), rng.choice(rights)
        if left + right not in seen:
            seen.add(left + right)
            merges.append((left, right))
    return merges


def _build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from hw3lib.models.tiny import TinySettings, build_tokenizer

    template = build_tokenizer(TinySettings(vocab_size=TRAINED_MERGES_VOCAB)).backend_tokenizer
    trained = json.loads(template.to_str())
    vocab = {token: index for token, index in trained["model"]["vocab"].items() if token != EOS_TOKEN}
    vocab = {token: index for index, token in enumerate(sorted(vocab, key=vocab.get))}  # ids 0..k-1
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in trained["model"]["merges"]]
    fillers = _filler_merges(vocab, VOCAB_SIZE - 1 - len(vocab))
    for left, right in fillers:
        vocab[left + right] = len(vocab) if len(vocab) < EOS_ID else len(vocab) + 1  # skip Qwen's EOS id
    vocab[EOS_TOKEN] = EOS_ID
    assert sorted(vocab.values()) == list(range(VOCAB_SIZE))
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges + fillers))
    backend.pre_tokenizer, backend.decoder = template.pre_tokenizer, template.decoder  # digits split, byte-level
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN,
                                        clean_up_tokenization_spaces=False, model_max_length=40960)
    tokenizer.save_pretrained(out)


def _build(name: str, layers: int | None, seed: int, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from hw3lib.models.tiny import quiet_transformers

    quiet_transformers()
    tokenizer = real_vocab_tokenizer()
    config = real_shape_config(name, layers)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # initialised in float32, saved in bf16
    model.generation_config = GenerationConfig(bos_token_id=EOS_ID, eos_token_id=EOS_ID, pad_token_id=EOS_ID)
    model.to(torch.bfloat16).save_pretrained(out)
    del model
    tokenizer.save_pretrained(out)
    (out / "hw3lib_real_shape.json").write_text(json.dumps({"name": name, "layers": layers, "seed": seed}) + "\n")


STAND_IN_GRADER = """\"\"\"A stand-in for the course's grader (hw3lib.models.real_shape): a reward from a hash of the response.\"\"\"
import hashlib


def r1_zero_reward_fn(response, ground_truth, fast=True):
    byte = hashlib.sha256(response.encode()).digest()[0]
    reward = 1.0 if byte % 2 else byte / 512
    return {"reward": reward, "format_reward": float(byte % 2), "answer_reward": float(byte % 2)}


question_only_reward_fn = r1_zero_reward_fn
"""


def write_stand_in_grader(folder: str | Path) -> Path:
    """Write the stand-in grader into `folder`; point `$HW3_COURSE_GRADER` at the returned file."""
    path = Path(folder) / "stand_in_grader.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STAND_IN_GRADER)
    return path
