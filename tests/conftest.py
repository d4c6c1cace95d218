"""Shared pytest set-up: point the data loaders at ../shared/data and keep the hub offline.

The repository is cloned with `../shared` beside it (CI and developer machines); tests never
reach the network.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

os.environ.setdefault("HW3_DATA_DIR", str(SHARED_DATA))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    if not (SHARED_DATA / "gsm8k" / "test.jsonl").is_file():
        pytest.fail(f"GSM8K test data not found at {SHARED_DATA}/gsm8k: clone the project next to ../shared")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny offline Qwen3 model + tokenizer (built once, cached by its settings)."""
    from hw3lib.models.tiny import tiny_model_path

    return tiny_model_path()
