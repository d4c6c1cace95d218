"""Datasets and prompts: GSM8K, MATH-style jsonl, the R1-Zero prompt, and a synthetic arithmetic task.

- `load_gsm8k(split)` reads `<data_dir>/gsm8k/{train,test}.jsonl` (one `{"question", "answer"}`
  object per line, as in OpenAI's grade-school-math repository) and adds `gold`: the text after
  `####` with thousands separators removed. `data_dir` is the argument, else `$HW3_DATA_DIR`, else
  `<project>/data`. When the files are missing it downloads `openai/gsm8k` (config `main`) from the
  Hugging Face hub once and writes the same jsonl files atomically (`write_gsm8k_split`).
- `load_math(source, split)` reads MATH-style records (`problem`, `solution`) from a jsonl file, a
  folder holding `<split>.jsonl`, a hub dataset id, or `math` ($HW3_MATH_DATA), and adds `answer`:
  the content of the last `\\boxed{...}` (or `\\fbox{...}`) in the solution (`last_boxed_expression`
  / `boxed_content`). It also accepts `{"question", "gold"}` records. Evaluation scores these
  records; `load_questions` turns them into training records.
- `load_task(cfg)`: a GRPO run's (training, held-out) records `{"question", "gold", "answer"}` for
  `gsm8k`, `arithmetic` or any MATH source (one loader, `load_math`, for evaluation and training),
  and keyword inclusion (`keyword` or a keyword dataset folder; hw3lib.keywords.recipe).
- `load_prompt(name)` / `format_prompt(template_or_name, question)`: the prompt templates shipped
  in `hw3lib/tasks/prompts/` (`r1_zero`, `question_only`); `{question}` is substituted with
  `str.replace`, so braces inside questions (LaTeX) are safe.
- `make_arithmetic_problems(n)` / `arithmetic_sft_target(record)`: two-number addition and
  subtraction word problems in GSM8K's record format, small enough for a tiny CPU model to learn,
  and the R1-Zero completion that teaches the answer format.

Every malformed input raises `DataFileError` naming the file, the line and what to do.
"""

from __future__ import annotations

import os
import random
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

from hw3lib.core.io import DataFileError, atomic_write_jsonl, iter_jsonl_numbered, project_root
# The `\boxed{}` parsers live in their own module (the generated MATH task uses them too); re-exported here.
from hw3lib.tasks.boxed import boxed_content, extract_boxed_answer, last_boxed_expression  # noqa: F401

GSM8K_HUB_ID = "openai/gsm8k"
GSM8K_HUB_CONFIG = "main"
GSM8K_SPLITS = ("train", "test")
PROMPT_PLACEHOLDER = "{question}"

_GSM8K_HOW_TO = (
    "Either set HW3_DATA_DIR to a folder holding gsm8k/train.jsonl and gsm8k/test.jsonl, copy "
    "train.jsonl and test.jsonl (from https://github.com/openai/grade-school-math, "
    "grade_school_math/data/) into {folder}, or connect to the internet so the loader can download "
    f"{GSM8K_HUB_ID} from the Hugging Face hub (needs the `datasets` package)."
)


# ---- GSM8K --------------------------------------------------------------------------------------

def resolve_data_dir(path: str | os.PathLike | None = None) -> Path:
    """The data folder: `path`, else $HW3_DATA_DIR, else <project>/data."""
    if path is not None:
        return Path(path)
    env = os.environ.get("HW3_DATA_DIR")
    return Path(env) if env else project_root() / "data"


def gsm8k_path(split: str, data_dir: str | os.PathLike | None = None) -> Path:
    """Where the GSM8K `split` lives: <data_dir>/gsm8k/<split>.jsonl."""
    _check_split(split)
    return resolve_data_dir(data_dir) / "gsm8k" / f"{split}.jsonl"


def load_gsm8k(split: str = "test", data_dir: str | os.PathLike | None = None, limit: int | None = None,
               download: bool = True) -> list[dict]:
    """GSM8K records `{"question", "answer", "gold"}` (the first `limit` of them, file order).

    A missing file is downloaded from the hub when `download` is true; if that fails the error
    names the path looked at and how to obtain the data.
    """
    _check_split(split)
    _check_limit(limit)
    path = gsm8k_path(split, data_dir)
    if not path.is_file():
        _obtain_gsm8k(path.parent, download)
    records = []
    for line, row in iter_jsonl_numbered(path):
        if limit is not None and len(records) >= limit:
            break
        records.append(_gsm8k_record(row, path, line))
    return records


def extract_gsm8k_gold(answer: str) -> str | None:
    """The final answer of a GSM8K worked solution: text after the last `####`, no thousands commas."""
    if "####" not in answer:
        return None
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def write_gsm8k_split(rows: Iterable[dict], path: str | os.PathLike) -> Path:
    """Write hub rows as GSM8K jsonl (`question`, `answer` per line), atomically.

    This is the writing half of the download; it takes any iterable of dicts (a `datasets` split
    or a plain list) so it can be tested without the hub.
    """
    out = []
    for index, row in enumerate(rows):
        if not isinstance(row.get("question"), str) or not isinstance(row.get("answer"), str):
            raise DataFileError(f"{path}: downloaded row {index} lacks string 'question'/'answer' fields "
                                f"(keys: {sorted(row)}); the hub dataset layout may have changed")
        out.append({"question": row["question"], "answer": row["answer"]})
    return atomic_write_jsonl(path, out)


def download_gsm8k(folder: str | os.PathLike) -> list[Path]:
    """Download openai/gsm8k (config main) from the hub and write <folder>/{train,test}.jsonl."""
    splits = _fetch_gsm8k_from_hub()
    return [write_gsm8k_split(splits[split], Path(folder) / f"{split}.jsonl") for split in GSM8K_SPLITS]


def _fetch_gsm8k_from_hub() -> dict[str, Iterable[dict]]:
    """The hub splits as iterables of dicts (imports `datasets` only here: it is slow to import)."""
    from datasets import load_dataset

    dataset = load_dataset(GSM8K_HUB_ID, GSM8K_HUB_CONFIG)
    return {split: dataset[split] for split in GSM8K_SPLITS}


def _obtain_gsm8k(folder: Path, download: bool) -> None:
    how_to = _GSM8K_HOW_TO.format(folder=folder)
    looked_at = " and ".join(str(folder / f"{split}.jsonl") for split in GSM8K_SPLITS)
    if not download:
        raise DataFileError(f"GSM8K not found at {looked_at}. {how_to}")
    try:
        download_gsm8k(folder)
    except Exception as exc:  # offline, no `datasets`, hub errors: all end in the same advice
        raise DataFileError(f"GSM8K not found at {looked_at}, and downloading {GSM8K_HUB_ID} from the "
                            f"Hugging Face hub failed ({type(exc).__name__}: {exc}). {how_to}") from exc


def _gsm8k_record(row: dict, path: Path, line: int) -> dict:
    for key in ("question", "answer"):
        if not isinstance(row.get(key), str):
            raise DataFileError(f"{path}:{line}: missing string field {key!r} (found keys {sorted(row)}); "
                                "each line must be {\"question\": ..., \"answer\": ...}")
    gold = extract_gsm8k_gold(row["answer"])
    if not gold:
        raise DataFileError(f"{path}:{line}: the answer has no final '#### <number>' line; "
                            "GSM8K answers end with '#### <final answer>'")
    return {"question": row["question"], "answer": row["answer"], "gold": gold}


def _check_split(split: str) -> None:
    if split not in GSM8K_SPLITS:
        raise ValueError(f"split={split!r}: GSM8K has splits {GSM8K_SPLITS}")


def _check_limit(limit: int | None) -> None:
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit={limit!r}: pass None (all records) or a non-negative int")


# ---- MATH-style data ----------------------------------------------------------------------------

MATH_DATA_ENV = "HW3_MATH_DATA"
MATH_DATASET_NAME = "math"
_MATH_SHAPES = ("each line must be a MATH-style record {\"problem\": ..., \"solution\": ... \\boxed{answer} ...} "
                "or a question record {\"question\": ..., \"gold\": ...} (see data/README.md)")


def resolve_math_source(source: str | os.PathLike) -> str | os.PathLike:
    """`math` -> the source named by $HW3_MATH_DATA (an error when unset); any other source unchanged."""
    if str(source) != MATH_DATASET_NAME:
        return source
    env = os.environ.get(MATH_DATA_ENV)
    if not env:
        raise DataFileError(f"dataset 'math' means the MATH data named by ${MATH_DATA_ENV}, which is not set: set "
                            f"{MATH_DATA_ENV} to a MATH-style .jsonl file, a folder holding train.jsonl and "
                            "test.jsonl, or a hub dataset id (e.g. HuggingFaceH4/MATH-500), or pass that source "
                            "itself instead of 'math' (see data/README.md)")
    return env


def math_source_file(source: str | os.PathLike, split: str = "test") -> Path | None:
    """The jsonl file that MATH `source` reads for `split` (a folder's `<split>.jsonl`); None for a hub id."""
    source = resolve_math_source(source)
    path = Path(source)
    if path.is_dir():
        return path / f"{split}.jsonl"
    if path.is_file() or str(source).endswith(".jsonl"):
        return path
    return None


def load_math(source: str | os.PathLike, split: str = "test", limit: int | None = None) -> list[dict]:
    """MATH-style records `{"problem", "solution", "answer", ...}` (other fields are kept): what
    evaluation scores and, through `load_questions`, what GRPO trains on.

    `source` is a jsonl file (`split` is then ignored), a folder holding `<split>.jsonl`, a hub
    dataset id (e.g. `HuggingFaceH4/MATH-500`), or `math` (the source named by $HW3_MATH_DATA).
    `answer` is the ground truth: an explicit `gold` field, else the content of the last `\\boxed{}`
    of the solution, else the record's `answer` field (a GSM8K-style `... #### 42` gives `42`).
    Besides `{"problem", "solution"}` records, `{"question", "gold"}` records are accepted
    (`problem` is then copied from `question`; `solution` is present only when the row has one).
    """
    _check_limit(limit)
    path = math_source_file(source, split)
    if path is not None:
        if not path.is_file():
            folder = path.parent if Path(resolve_math_source(source)).is_dir() else None
            where = f"folder {folder} has no {path.name} (a MATH folder holds train.jsonl and test.jsonl)" \
                if folder is not None else f"{path}: file not found"
            raise DataFileError(f"{where}; pass a MATH-style jsonl with 'problem' and 'solution' fields per line "
                                "(see data/README.md), a folder of such files, or a hub dataset id")
        rows: Iterable[tuple[Any, dict]] = ((f"{path}:{line}", row) for line, row in iter_jsonl_numbered(path))
    else:
        hub_id = str(resolve_math_source(source))
        rows = ((f"{hub_id} [{split}] row {index}", dict(row)) for index, row in enumerate(_hub_rows(hub_id, split)))
    records = []
    for where, row in rows:
        if limit is not None and len(records) >= limit:
            break
        records.append(_math_record(row, where))
    return records


def load_questions(source: str | os.PathLike, split: str = "test", limit: int | None = None) -> list[dict]:
    """`load_math(source, split, limit)` as training-task records (`question_record`); an empty source is an error."""
    records = [question_record(record) for record in load_math(source, split, limit)]
    if not records and limit != 0:
        path = math_source_file(source, split)
        where = str(path) if path is not None else f"{resolve_math_source(source)} [{split}]"
        raise DataFileError(f"{where}: no records; {_MATH_SHAPES}")
    return records


def question_record(record: dict) -> dict:
    """A `load_math` record as the training task sees it: `question`, `gold` (the ground truth) and
    `answer` (the worked solution when there is one, else the ground truth), as GSM8K records."""
    return {"question": record["problem"], "gold": record["answer"], "answer": record.get("solution", record["answer"])}


def load_task(cfg: Any) -> tuple[list[dict], list[dict]]:
    """(training records, held-out records) of a GRPO run, each with `question`, `gold` and `answer`.

    `cfg` is a `GRPOConfig` or anything with its fields `dataset`, `eval_dataset`,
    `n_train_examples`, `n_eval_examples`, `seed` and `arithmetic_max_operand`:

    - `gsm8k`: the train split; held out, the test split.
    - `arithmetic`: `n_train_examples` (default 4,096) generated problems; held out, fresh problems
      (another seed) whose question text never occurs in training.
    - `math-synthetic`: the generated MATH-format task (hw3lib.tasks.math_synthetic), 4,096 training
      and 1,024 held-out problems written once per seed under the cache folder, read like MATH data.
    - a MATH source (`math`, a `.jsonl` file, a folder, a hub id; see `load_math`): a folder or hub
      id gives its `train` split, held out its `test` split; a single jsonl file holds out its last
      `n_eval_examples` rows.

    `eval_dataset`, when set, replaces the held-out set: any MATH source, read with `load_math`
    (split `test`). At most `n_train_examples` / `n_eval_examples` records are used, in file order.

    `keyword` or a keyword dataset folder (train.jsonl / validation.jsonl / dataset.json): keyword
    inclusion records, `gold` the list of keywords (`hw3lib.tasks.keyword_data.load_keyword_task`).
    """
    from hw3lib.tasks.keyword_data import is_keyword_folder, load_keyword_task

    if cfg.dataset == "keyword" or is_keyword_folder(cfg.dataset):
        return load_keyword_task(cfg)
    dataset, eval_dataset = cfg.dataset, cfg.eval_dataset
    n_train, n_eval = cfg.n_train_examples, cfg.n_eval_examples
    if dataset == "gsm8k":
        train_records = load_gsm8k("train", limit=n_train)
    elif dataset == "arithmetic":
        train_records = make_arithmetic_problems(n_train or 4096, seed=cfg.seed, max_operand=cfg.arithmetic_max_operand)
    elif dataset == "math-synthetic":  # the MATH course's smoke data: generated once per seed, then read as MATH
        dataset = str(synthetic_math_folder(cfg.seed))
        train_records = load_questions(dataset, "train", n_train)
    elif eval_dataset is None and _is_single_file(dataset):
        rows = load_questions(dataset)  # one file: its last n_eval rows are held out
        if len(rows) <= n_eval:
            raise ValueError(f"{dataset} has {len(rows)} records, not enough to hold out n_eval_examples={n_eval} "
                             "for validation: lower n_eval_examples or pass eval_dataset")
        return rows[:-n_eval][:n_train], rows[-n_eval:]
    else:
        train_records = load_questions(dataset, "train", n_train)
    if eval_dataset is not None:
        return train_records, load_questions(eval_dataset, "test", n_eval)
    if dataset == "gsm8k":
        return train_records, load_gsm8k("test", limit=n_eval)
    if dataset == "arithmetic":
        seen = {record["question"] for record in train_records}
        pool = make_arithmetic_problems(4 * n_eval, seed=cfg.seed + 1_000_003, max_operand=cfg.arithmetic_max_operand)
        return train_records, [record for record in pool if record["question"] not in seen][:n_eval]
    return train_records, load_questions(dataset, "test", n_eval)


def course_questions(course, profile_name: str, split: str = "test", limit: int | None = None,
                     seed: int = 0) -> tuple[list[dict], str]:
    """(records with `question` and `gold`, a label) of a course's evaluation data in a profile.

    GSM8K for the GSM8K course; for the MATH course the MATH data named by $HW3_MATH_DATA (full) or
    the generated MATH-format task (smoke: no MATH data offline). `course` is a hw3lib.core.course.Course.
    """
    if course.dataset == "gsm8k":
        return load_gsm8k(split, limit=limit), f"GSM8K {split}"
    if profile_name == "full":
        return load_questions(MATH_DATASET_NAME, split, limit), f"MATH {split}"
    return load_questions(str(synthetic_math_folder(seed)), split, limit), f"generated MATH-format {split}"


def synthetic_math_folder(seed: int) -> Path:
    """The cached folder of the generated MATH-format task for `seed` (written on first use), at the small
    ranges the tiny CPU model can learn (hw3lib.tasks.math_synthetic.SMALL)."""
    from hw3lib.core.io import cache_dir
    from hw3lib.tasks.math_synthetic import write_math_task

    folder = cache_dir() / "math_synthetic" / f"seed{seed}_train4096_test1024_small_worded3"
    write_math_task(folder, n_train=4096, n_test=1024, seed=seed, small=True)
    return folder


def _is_single_file(source: str | os.PathLike) -> bool:
    """A MATH source that is one jsonl file (not a folder of splits, not a hub id)."""
    return math_source_file(source) is not None and not Path(resolve_math_source(source)).is_dir()


def _hub_rows(dataset_id: str, split: str) -> Iterable[dict]:
    try:
        from datasets import load_dataset

        return load_dataset(dataset_id, split=split)
    except Exception as exc:
        raise DataFileError(f"{dataset_id!r} is not a local file or folder, and loading it as a Hugging Face "
                            f"hub dataset (split {split!r}) failed ({type(exc).__name__}: {exc}); pass a "
                            "path to a MATH-style jsonl file or a folder holding train.jsonl/test.jsonl "
                            "instead (see data/README.md)") from exc


def _math_record(row: dict, where: str) -> dict:
    problem = row.get("problem", row.get("question"))
    if not isinstance(problem, str):
        raise DataFileError(f"{where}: missing string field 'problem' (or 'question'); found keys {sorted(row)}; "
                            f"{_MATH_SHAPES}")
    solution = row.get("solution")
    if solution is not None and not isinstance(solution, str):
        raise DataFileError(f"{where}: 'solution' must be a string, got {type(solution).__name__}; {_MATH_SHAPES}")
    record = {**row, "problem": problem}
    answer = row.get("gold")
    if answer is None and solution is not None:
        answer = extract_boxed_answer(solution) or None
    if answer is None and row.get("answer") is not None:
        answer = row["answer"]
        if isinstance(answer, str) and "####" in answer and solution is None:  # a GSM8K-style worked answer
            record["solution"], answer = answer, extract_gsm8k_gold(answer)
    answer = None if answer is None else str(answer).strip()
    if not answer:
        if solution is None:
            raise DataFileError(f"{where}: missing string field 'solution' (found keys {sorted(row)}) and no "
                                f"'gold' or 'answer' field; {_MATH_SHAPES}")
        raise DataFileError(f"{where}: the solution has no complete, non-empty \\boxed{{...}} answer and the record "
                            "has no 'answer' or 'gold' field; end the solution with \\boxed{<answer>} or add "
                            "an 'answer' field")
    record["answer"] = answer
    return record


def available_prompts() -> list[str]:
    """Names of the prompt templates shipped in hw3lib/tasks/prompts/."""
    folder = resources.files("hw3lib.tasks").joinpath("prompts")
    return sorted(entry.name[: -len(".prompt")] for entry in folder.iterdir() if entry.name.endswith(".prompt"))


# prompt -> the template file it reads, where that is not `prompts/<prompt>.prompt`: the keyword task's two
# prompt rows (hw3lib.tasks.prompt_table) read one file, so they cannot drift apart in anything but their reward.
TEMPLATE_OF = {"keyword_sentence": "keyword"}


def load_prompt(name: str) -> str:
    """The template text of prompt `name` (`r1_zero`, `question_only`, `keyword`; `.prompt` suffix optional).

    A prompt that shares another's template (`keyword_sentence` reads `keyword.prompt`: `TEMPLATE_OF`)
    gets that template."""
    stem = name[: -len(".prompt")] if name.endswith(".prompt") else name
    stem = TEMPLATE_OF.get(stem, stem)
    entry = resources.files("hw3lib.tasks").joinpath("prompts").joinpath(f"{stem}.prompt")
    if "/" in stem or "\\" in stem or not entry.is_file():
        raise ValueError(f"unknown prompt {name!r}; available: {', '.join(available_prompts())}")
    return entry.read_text(encoding="utf-8")


def format_prompt(template_or_name: str, question: str) -> str:
    """Fill `{question}` in a template (or in the shipped template called `template_or_name`)."""
    if not isinstance(question, str):
        raise TypeError(f"question must be a str, got {type(question).__name__}")
    template = template_or_name if PROMPT_PLACEHOLDER in template_or_name else load_prompt(template_or_name)
    return template.replace(PROMPT_PLACEHOLDER, question)


# ---- synthetic arithmetic ------------------------------------------------------------------------

_NAMES = ("Tom", "Ana", "Raj", "Mia", "Leo", "Sara", "Ben", "Lily", "Omar", "Nina")
_ITEMS = ("apples", "stickers", "marbles", "books", "coins", "cards", "pencils", "shells")
_ADD_TEMPLATES = (
    "{name} has {a} {item} and buys {b} more. How many {item} does {name} have now?",
    "{name} picked {a} {item} on Monday and {b} {item} on Tuesday. How many {item} did {name} pick in total?",
    "A box holds {a} {item}. {name} puts in {b} more. How many {item} are in the box now?",
    "{name} found {a} {item} and then got {b} more from a friend. How many {item} does {name} have?",
)
_SUB_TEMPLATES = (
    "{name} has {a} {item} and gives away {b}. How many {item} does {name} have left?",
    "There are {a} {item} in a basket. {name} takes {b} of them. How many {item} are left in the basket?",
    "{name} had {a} {item} and lost {b}. How many {item} does {name} have now?",
    "A shop had {a} {item} and sold {b}. How many {item} does the shop have left?",
)


def make_arithmetic_problems(n: int, seed: int = 0, max_operand: int = 99) -> list[dict]:
    """`n` addition/subtraction word problems with operands in [0, max_operand], GSM8K record format.

    Each record has `question`, `answer` (a one-line worked solution ending in `#### <result>`)
    and `gold`. Subtractions put the larger operand first, so results are non-negative.
    Deterministic for a given `seed`.
    """
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n={n!r}: pass a non-negative int")
    if not isinstance(max_operand, int) or max_operand < 1:
        raise ValueError(f"max_operand={max_operand!r}: pass an int >= 1")
    rng = random.Random(seed)
    records = []
    for _ in range(n):
        a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
        if rng.random() < 0.5:
            template, result, op = rng.choice(_ADD_TEMPLATES), a + b, "+"
        else:
            a, b = max(a, b), min(a, b)
            template, result, op = rng.choice(_SUB_TEMPLATES), a - b, "-"
        question = template.format(name=rng.choice(_NAMES), item=rng.choice(_ITEMS), a=a, b=b)
        records.append({"question": question, "answer": f"{a} {op} {b} = {result}\n#### {result}", "gold": str(result)})
    return records


def arithmetic_sft_target(record: dict) -> str:
    """The R1-Zero completion after the prompt's `<think>`: " 23 + 45 = 68 </think> <answer> 68 </answer>"."""
    working = record["answer"].rsplit("####", 1)[0].strip()
    return f" {working} </think> <answer> {record['gold']} </answer>"
