"""Shared pytest set-up: point the data loaders at ../shared/data, keep the hub offline, and send every
output to a temporary folder.

The repository is cloned with `../shared` beside it (CI and developer machines); tests never
reach the network, and never write to the checkout's runs/, figures/ or writeup/ (a workbook's results):
`_outputs_in_tmp` points $HW3_OUTPUT_DIR and $HW3_RUNS_DIR (hw3lib.core.io.isolated_output_env) at a
session-wide temporary folder; tests that need their own still set HW3_RUNS_DIR per test.
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

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Under pytest-xdist (`-n 2`: one worker per core) each worker, and every process it starts, computes on one
    # thread: two workers of two torch threads each on 2 cores spend their time waiting at thread barriers.
    for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[_threads] = "1"
    import torch

    torch.set_num_threads(1)


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


@pytest.fixture(scope="session", autouse=True)
def _outputs_in_tmp(tmp_path_factory):
    """Every run, figure and writeup a test makes lands in a temporary folder, not in the checkout."""
    from hw3lib.core.io import isolated_output_env

    with pytest.MonkeyPatch.context() as patch:
        for key, value in isolated_output_env(tmp_path_factory.mktemp("outputs")).items():
            patch.setenv(key, value)
        yield
