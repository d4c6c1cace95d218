"""The `smoke` profile's model: a tiny Qwen3-architecture causal LM built offline.

`tiny_model_path()` trains a byte-level BPE tokenizer (digits split one per token, as Qwen's
tokenizer does) on GSM8K text, initialises a `Qwen3ForCausalLM` from a small `Qwen3Config` with a
fixed seed, and saves both with `save_pretrained` into the cache (`$HW3_CACHE_DIR/tiny/<key>`,
the key hashing every setting), so the result loads back through `AutoModelForCausalLM` /
`AutoTokenizer` exactly like a hub checkpoint. It is built once and reused.

The name `tiny` resolves to that folder in `hw3lib.models.load.resolve`; load it with
`hw3lib.models.load.load_model_and_tokenizer("tiny")`. `qwen3_0p6b_config()` is the real
Qwen3-0.6B shape, for measuring speed and memory with random weights.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from hw3lib.core.io import build_folder_once, cache_dir

# Bump when the build recipe changes so stale caches are not reused.
BUILD_VERSION = 1
EOS_TOKEN = "<|endoftext|>"


@dataclass(frozen=True)
class TinySettings:
    """Everything that determines the tiny model; hashed into its cache key."""

    seed: int = 0
    vocab_size: int = 1024
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32  # vLLM's CPU attention needs >= 32; Qwen3Config's default would be 128
    max_position_embeddings: int = 1024
    tokenizer_examples: int = 2000  # GSM8K train records the BPE is trained on

    def key(self) -> str:
        blob = json.dumps({"build": BUILD_VERSION, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def tiny_model_path(settings: TinySettings | None = None) -> Path:
    """Directory of the tiny model + tokenizer for `settings`, building it on first use."""
    settings = settings or TinySettings()
    target = cache_dir() / "tiny" / settings.key()
    if (target / "config.json").is_file() and (target / "tokenizer.json").is_file():
        return target
    return build_folder_once(target, lambda staging: _build(settings, staging), marker="tokenizer.json")


def _tokenizer_corpus(settings: TinySettings) -> list[str]:
    """GSM8K questions and worked answers plus the R1-Zero tags, so they tokenize compactly."""
    from hw3lib.tasks.data import load_gsm8k, load_prompt

    records = load_gsm8k("train", limit=settings.tokenizer_examples)
    corpus = [load_prompt("r1_zero")] * 20
    for record in records:
        corpus.append(record["question"])
        corpus.append(record["answer"])
        corpus.append(f" {record['answer'].split('####')[0].strip()} </think> <answer> {record['gold']} </answer>")
    return corpus


def build_tokenizer(settings: TinySettings):
    """Byte-level BPE trained on GSM8K text, wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=settings.vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_tokenizer_corpus(settings), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        clean_up_tokenization_spaces=False,
        model_max_length=settings.max_position_embeddings,
    )


def tiny_config(settings: TinySettings, vocab_size: int, eos_token_id: int):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=settings.hidden_size,
        intermediate_size=settings.intermediate_size,
        num_hidden_layers=settings.num_hidden_layers,
        num_attention_heads=settings.num_attention_heads,
        num_key_value_heads=settings.num_key_value_heads,
        head_dim=settings.head_dim,
        max_position_embeddings=settings.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=eos_token_id,
        torch_dtype="float32",
    )


def qwen3_0p6b_config():
    """The shape of Qwen/Qwen3-0.6B (for GPU speed and memory measurements with random weights)."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
        rope_theta=1_000_000.0, tie_word_embeddings=True, rms_norm_eps=1e-6,
        bos_token_id=151643, eos_token_id=151643, pad_token_id=151643,
    )


def quiet_transformers() -> None:
    """Silence transformers' save/load progress bars (they clutter notebooks and logs)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _build(settings: TinySettings, out: Path) -> None:
    import torch
    from transformers import GenerationConfig, Qwen3ForCausalLM

    quiet_transformers()
    tokenizer = build_tokenizer(settings)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    config = tiny_config(settings, vocab_size=len(tokenizer), eos_token_id=eos_id)
    torch.manual_seed(settings.seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "hw3lib_tiny.json").write_text(json.dumps(asdict(settings), indent=2) + "\n")
