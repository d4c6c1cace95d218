"""The keyword-inclusion task's data: word lists, records, the 80/20 split, reading a dataset folder.

Its reward is the course's `keyword_inclusion_reward_fn` (prompt `keyword`, the default) or, as an
option, `keyword_sentence_reward_fn`, which also asks for one sentence (prompt `keyword_sentence`;
both in hw3lib.tasks.rewards, rows of hw3lib.tasks.prompt_table). Kept apart from
hw3lib.keywords.recipe (the generator, SFT and GRPO recipe) so that hw3lib.tasks.data can load the
task without importing models or engines.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from hw3lib.core.io import DataFileError, iter_jsonl_numbered

PROMPT_KIND = "keyword"
"""The default prompt row: the course's reward, every keyword as a whole word."""
SENTENCE_PROMPT_KIND = "keyword_sentence"
"""The option: the same template, the reward gated on the response being one sentence."""
KEYWORD_REWARDS = {"inclusion": PROMPT_KIND, "sentence": SENTENCE_PROMPT_KIND}
"""`--reward` choice -> prompt row (hw3lib.tasks.prompt_table)."""
SPLITS = ("train", "validation")
PROCEDURAL = "procedural"

ADJECTIVES = ("red", "small", "old", "bright", "quiet", "happy", "green", "cold", "warm", "tall",
              "blue", "heavy", "soft", "dark", "young", "busy", "tiny", "golden", "wooden", "gentle")
NOUNS = ("apple", "river", "dog", "cat", "book", "garden", "house", "tree", "car", "bird", "ship", "moon",
         "chair", "window", "bread", "flower", "horse", "city", "road", "lamp", "cake", "forest", "teacher",
         "child", "farmer", "kitten", "ocean", "mountain", "letter", "song", "door", "table", "field",
         "train", "coat", "cup", "box", "bridge", "island", "hat")
TEMPLATES_2 = (  # {a}: the adjective, {n}: the noun
    "The {a} {n} is on the table.",
    "I saw a {a} {n} today.",
    "My friend has a {a} {n}.",
    "There is a {a} {n} near the door.",
    "The {n} looks very {a}.",
    "We all liked the {a} {n}.",
)
TEMPLATES_3 = (  # {a}: the adjective, {n}, {m}: the nouns
    "The {a} {n} sat beside the {m}.",
    "A {a} {n} was found near the {m}.",
    "I put the {a} {n} next to the {m}.",
    "The {m} and the {a} {n} were there.",
)


def keyword_prompt(keywords: Sequence[str]) -> str:
    return f"Write a sentence that includes the words: {', '.join(keywords)}."


def make_keyword_records(n: int, seed: int = 0, three_fraction: float = 0.5) -> list[dict]:
    """`n` records with distinct keyword sets and procedural answers (deterministic for a seed).

    A share `three_fraction` asks for three words (an adjective and two nouns), the rest for two.
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r}: pass a positive int")
    rng = random.Random(seed)
    records, seen = [], set()
    while len(records) < n:
        a, n1, n2 = rng.choice(ADJECTIVES), *rng.sample(NOUNS, 2)
        three = rng.random() < three_fraction
        keywords = [a, n1, n2] if three else [a, n1]
        if frozenset(keywords) in seen:
            continue
        seen.add(frozenset(keywords))
        template = rng.choice(TEMPLATES_3 if three else TEMPLATES_2)
        answer = template.format(a=a, n=n1, m=n2)
        rng.shuffle(keywords)
        records.append({"prompt": keyword_prompt(keywords), "answer": answer, "keywords": keywords,
                        "source": PROCEDURAL})
    return records


def split_records(records: Sequence[dict], seed: int = 0, train_fraction: float = 0.8) -> dict[str, list[dict]]:
    """A seeded shuffle, then the first `train_fraction` for `train` and the rest for `validation`."""
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction={train_fraction} must be in (0, 1)")
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)
    cut = round(train_fraction * len(records))
    if cut in (0, len(records)):
        raise ValueError(f"{len(records)} records cannot be split {train_fraction:.0%}/{1 - train_fraction:.0%}")
    return {"train": [records[i] for i in order[:cut]], "validation": [records[i] for i in order[cut:]]}


def read_split(folder: str | Path, split: str) -> list[dict]:
    """The records of `<folder>/<split>.jsonl`, checked (each needs prompt, answer and keywords)."""
    path = Path(folder) / f"{split}.jsonl"
    if not path.is_file():
        raise DataFileError(f"{path} is missing: write the dataset with `hw3 keyword data --out {folder}`")
    records = []
    for line, row in iter_jsonl_numbered(path):
        keywords = row.get("keywords")
        if not (isinstance(row.get("prompt"), str) and isinstance(row.get("answer"), str) and isinstance(keywords, list)
                and keywords and all(isinstance(k, str) and k.strip() for k in keywords)):
            raise DataFileError(f"{path}:{line}: each line must be {{\"prompt\": str, \"answer\": str, "
                                f"\"keywords\": [non-empty str, ...]}}; found keys {sorted(row)}")
        records.append(row)
    return records


def is_keyword_folder(source) -> bool:
    """A folder written by `write_keyword_dataset` (both splits present)."""
    folder = Path(str(source))
    return all((folder / f"{split}.jsonl").is_file() for split in SPLITS) and (folder / "dataset.json").is_file()


def load_keyword_task(cfg) -> tuple[list[dict], list[dict]]:
    """(train, validation) records `{"question", "gold", "answer"}` for a GRPO run (`gold`: the keywords).

    `cfg.dataset` is a keyword dataset folder, or `keyword`: the procedural dataset built in memory
    (2,000 records, the run's seed). At most `n_train_examples` / `n_eval_examples` records, in order.
    """
    if cfg.dataset == "keyword":
        splits = split_records(make_keyword_records(2000, seed=cfg.seed), seed=cfg.seed)
    else:
        splits = {split: read_split(cfg.dataset, split) for split in SPLITS}

    def task(record: dict) -> dict:
        return {"question": record["prompt"], "gold": list(record["keywords"]), "answer": record["answer"]}

    return ([task(r) for r in splits["train"][:cfg.n_train_examples]],
            [task(r) for r in splits["validation"][:cfg.n_eval_examples]])
