"""A small decoder-only transformer written in hw3lib itself (nanoGPT-style), its word-level tokenizer,
and save/load of model folders.

    model = GPT(GPTConfig(vocab_size=len(tokenizer)))
    model.save_pretrained("folder"); tokenizer.save_pretrained("folder")
    model, tokenizer = load_own_model("folder")           # or hw3lib.models.load.load_model_and_tokenizer

The architecture is GPT-2's, shrunk: token + learned position embeddings, `n_layer` pre-LayerNorm
blocks (causal multi-head self-attention, GELU MLP), a final LayerNorm and an lm_head tied to the
token embedding. No dropout: GRPO's old/new log-prob ratio needs the same forward twice.

The forward pass speaks just enough of the transformers calling convention for the GRPO loop to
train it unchanged (hw3lib.maths.logprobs): `model(ids, attention_mask=, position_ids=, past_key_values=,
use_cache=, logits_to_keep=)` returns an object with `.logits` `[B, T, V]` and `.past_key_values`,
a `KVCache` with `batch_repeat_interleave` (the shared-prompt-prefix path). Left padding is handled
by the attention mask and positions counted from each row's first real token, as transformers does.

`WordTokenizer`: whitespace-separated words and single punctuation marks are tokens; decoding
joins words with one space and glues punctuation to the word before, so canonical text ("Write a
sentence: apple, red.") round-trips exactly. Its call/decode/save_pretrained mirror a transformers
tokenizer (`tokenizer(texts, add_special_tokens=False)["input_ids"]`, `pad_token_id`, ...).
A folder is an own-model folder when its `config.json` has `"model_type": "hw3_nanogpt"`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from hw3lib.core.io import atomic_write_bytes, atomic_write_json

MODEL_TYPE = "hw3_nanogpt"
EOS_TOKEN = "<|endoftext|>"
UNK_TOKEN = "<unk>"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "vocab.json"
PUNCTUATION = ".,:;!?"
_TOKEN = re.compile(r"<\|endoftext\|>|\n|[A-Za-z0-9'\-]+|[^\sA-Za-z0-9'\-]")


# ---- tokenizer --------------------------------------------------------------------------------------

class WordTokenizer:
    """Word-level tokenizer: one id per word, punctuation mark and newline; `<|endoftext|>` is EOS and pad."""

    padding_side = "left"

    def __init__(self, vocab: Sequence[str]) -> None:
        if list(vocab[:2]) != [EOS_TOKEN, UNK_TOKEN] or len(set(vocab)) != len(vocab):
            raise ValueError(f"vocab must start with {EOS_TOKEN!r}, {UNK_TOKEN!r} and hold no duplicates")
        self.vocab = list(vocab)
        self.ids = {token: index for index, token in enumerate(self.vocab)}
        self.eos_token = self.pad_token = EOS_TOKEN
        self.eos_token_id = self.pad_token_id = 0
        self.unk_token_id = 1
        self.all_special_ids = [0, 1]

    @classmethod
    def train(cls, texts: Iterable[str]) -> "WordTokenizer":
        """A vocabulary of every token in `texts` (sorted, so the same texts give the same ids)."""
        tokens = {token for text in texts for token in _TOKEN.findall(text)} - {EOS_TOKEN, UNK_TOKEN}
        return cls([EOS_TOKEN, UNK_TOKEN, *sorted(tokens)])

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        return [self.ids.get(token, self.unk_token_id) for token in _TOKEN.findall(text)]

    def __call__(self, texts: str | Sequence[str], add_special_tokens: bool = False, **_) -> dict:
        """`{"input_ids": ...}` for one text or a list (no special tokens are ever added)."""
        if isinstance(texts, str):
            return {"input_ids": self.encode(texts)}
        return {"input_ids": [self.encode(text) for text in texts]}

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.ids.get(token, self.unk_token_id)

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False, **_) -> str:
        """Words joined by single spaces, punctuation glued to the word before, newlines kept."""
        out = ""
        for index in (int(i) for i in ids):
            if skip_special_tokens and index in self.all_special_ids:
                continue
            token = self.vocab[index]
            if token in PUNCTUATION or token == "\n" or not out or out.endswith("\n"):
                out += token
            else:
                out += " " + token
        return out

    def batch_decode(self, rows: Iterable[Iterable[int]], **kwargs) -> list[str]:
        return [self.decode(row, **kwargs) for row in rows]

    def save_pretrained(self, folder: str | Path) -> None:
        atomic_write_json(Path(folder) / TOKENIZER_FILE, {"vocab": self.vocab})

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> "WordTokenizer":
        path = Path(folder) / TOKENIZER_FILE
        try:
            return cls(json.loads(path.read_text())["vocab"])
        except (OSError, KeyError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read the word tokenizer ({exc}); re-save the model folder") from None


# ---- model ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GPTConfig:
    """The shape of a `GPT`; saved as the folder's config.json (with `model_type`)."""

    vocab_size: int
    block_size: int = 64
    """Context length (learned position embeddings)."""
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    eos_token_id: int = 0

    @property
    def max_position_embeddings(self) -> int:  # the transformers name, read by the engines
        return self.block_size


class KVCache:
    """Keys and values per layer, `[B, H, T, D]`; grows by concatenation (so gradients flow through it)."""

    def __init__(self) -> None:
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = []

    def get_seq_length(self) -> int:
        return self.layers[0][0].shape[2] if self.layers else 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if layer == len(self.layers):
            self.layers.append((k, v))
        else:
            past_k, past_v = self.layers[layer]
            self.layers[layer] = (torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2))  # [B, H, T+t, D]
        return self.layers[layer]

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Each row repeated `repeats` times (a prefix computed once for batch 1, shared by every row)."""
        self.layers = [(k.repeat_interleave(repeats, dim=0), v.repeat_interleave(repeats, dim=0))
                       for k, v in self.layers]

    def index_select(self, rows: torch.Tensor) -> None:
        """Keep (and reorder) the rows `rows` of the batch."""
        self.layers = [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.layers]


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(cfg.n_embd), nn.LayerNorm(cfg.n_embd)
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(),
                                 nn.Linear(4 * cfg.n_embd, cfg.n_embd))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cache: KVCache | None, layer: int) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)  # 3 x [B, t, C]
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))  # [B, H, t, D]
        if cache is not None:
            k, v = cache.update(layer, k, v)  # [B, H, T, D] with the past
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, H, t, D]
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))  # [B, t, C]
        return x + self.mlp(self.ln_2(x))  # [B, t, C]


class GPT(nn.Module):
    """The decoder-only transformer (see the module docstring)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.config = cfg
        self.name_or_path = MODEL_TYPE
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2
        self.apply(self._init)
        for block in self.blocks:  # GPT-2's scaled init of the residual projections
            nn.init.normal_(block.c_proj.weight, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, past_key_values: KVCache | None = None,
                use_cache: bool = False, logits_to_keep: int = 0, **_) -> SimpleNamespace:
        """Logits of the last `logits_to_keep` positions (0: all) and the cache when `use_cache`.

        `input_ids` `[B, t]`; `attention_mask` `[B, past + t]` (1 = real token, 0 = left padding);
        `position_ids` `[B, t]` (default: from the mask, else past + arange(t)).
        """
        b, t = input_ids.shape
        cache = past_key_values if past_key_values is not None else (KVCache() if use_cache else None)
        past = cache.get_seq_length() if cache is not None else 0
        if past + t > self.config.block_size:
            raise ValueError(f"sequence of {past + t} tokens exceeds the model's block_size={self.config.block_size}")
        device = input_ids.device
        if position_ids is None:
            if attention_mask is not None:
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past:]  # [B, t]
            else:
                position_ids = torch.arange(past, past + t, device=device).expand(b, t)  # [B, t]
        # Causal mask over [past + t] keys; padded keys are hidden, and every query sees itself so a
        # padded query row is never all -inf (its output is unused).
        keys = torch.arange(past + t, device=device)  # [T]
        queries = torch.arange(past, past + t, device=device)  # [t]
        mask = keys[None, :] <= queries[:, None]  # [t, T]
        if attention_mask is not None:
            mask = mask[None] & attention_mask.bool()[:, None, :]  # [B, t, T]
            mask = mask | (keys[None, None, :] == queries[None, :, None])  # [B, t, T]
            mask = mask[:, None]  # [B, 1, t, T]
        x = self.wte(input_ids) + self.wpe(position_ids)  # [B, t, C]
        for layer, block in enumerate(self.blocks):
            x = block(x, mask, cache, layer)  # [B, t, C]
        if logits_to_keep:
            x = x[:, -logits_to_keep:]  # [B, k, C]
        logits = self.lm_head(self.ln_f(x))  # [B, k, V]
        return SimpleNamespace(logits=logits, past_key_values=cache if use_cache else None)

    def save_pretrained(self, folder: str | Path) -> None:
        """config.json + model.safetensors (the tied lm_head is stored once)."""
        from safetensors.torch import save

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {name: tensor.detach().contiguous().cpu()
                   for name, tensor in self.state_dict().items() if name != "lm_head.weight"}
        atomic_write_bytes(folder / WEIGHTS_FILE, save(tensors))
        atomic_write_json(folder / "config.json", {"model_type": MODEL_TYPE, **asdict(self.config)})


def is_own_model(name_or_path) -> bool:
    """True for a `GPT` module or a folder whose config.json names `model_type` hw3_nanogpt."""
    if isinstance(name_or_path, GPT):
        return True
    if not isinstance(name_or_path, (str, Path)):
        return False
    config = Path(name_or_path) / "config.json"
    try:
        return config.is_file() and json.loads(config.read_text()).get("model_type") == MODEL_TYPE
    except (OSError, json.JSONDecodeError):
        return False


def load_own_model(folder: str | Path, device: str = "cpu", dtype: str = "float32") -> tuple[GPT, WordTokenizer]:
    """The model (at `dtype`, on `device`) and the tokenizer saved in `folder` by `save_pretrained`."""
    from safetensors.torch import load_file

    folder = Path(folder)
    raw = json.loads((folder / "config.json").read_text())
    raw.pop("model_type", None)
    try:
        model = GPT(GPTConfig(**raw))
    except TypeError as exc:
        raise ValueError(f"{folder / 'config.json'}: not a GPTConfig ({exc})") from None
    weights = load_file(str(folder / WEIGHTS_FILE))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise ValueError(f"{folder / WEIGHTS_FILE}: weights do not match config.json "
                         f"(missing {sorted(missing)}, unexpected {sorted(unexpected)})")
    model.name_or_path = str(folder)
    return model.to(device=device, dtype=getattr(torch, dtype)), WordTokenizer.from_pretrained(folder)
