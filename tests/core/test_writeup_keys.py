"""The writeup's inputs: every key the Typst sources read is declared once (hw3lib.core.writeup_keys),
and the producers write what is declared."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from hw3lib.core.writeup_keys import RESULT_KEYS, declared_keys, typst_reads, undeclared_reads, write_result

WRITEUP = Path(__file__).resolve().parents[2] / "writeup"


def test_the_writeup_reads_only_declared_keys():
    reads = typst_reads(WRITEUP)
    assert {"zero_shot", "best_of_n", "train_loop", "keyword", "async_grpo", "sft_ei", "kissing", "grid_*"} <= set(reads)
    assert "accuracy" in reads["zero_shot"] and "rows" in reads["grid_*"]  # the parser sees the real sources
    assert undeclared_reads(WRITEUP) == [], "the writeup reads keys no producer declares (hw3lib.core.writeup_keys)"


def test_parser_follows_aliases_spreads_and_nested_values(tmp_path):
    (tmp_path / "a.typ").write_text(
        '#let z = R.zero_shot\n#z.accuracy and #pct(z.format_rate); ..z.counts.map(c => c.x)\n'
        '#let g = R.grpo_units.length_normalization_example\n#g.masked_mean.join(", ")\n'
        '#R.kissing.source #z.at("seed") #z.at("n", default: 1) xz.nope\n'
        '#let k = R.at(key)\n#k.rows.len() #k.typo\n')
    reads = typst_reads(tmp_path)
    assert reads["zero_shot"] == {"accuracy", "format_rate", "counts", "seed", "n"}
    assert reads["grpo_units"] == {"length_normalization_example"}
    assert reads["kissing"] == {"source"} and reads["grid_*"] == {"rows", "typo"}
    assert undeclared_reads(tmp_path) == ["grid_*.typo", "zero_shot.counts"]


def test_write_result_refuses_a_result_without_its_declared_keys(tmp_path):
    values = {key: 1 for key in RESULT_KEYS["async_grpo"]}
    path = write_result("async_grpo", {**values, "extra": 2}, folder=tmp_path)
    assert json.loads(path.read_text()) == {**values, "extra": 2}
    with pytest.raises(ValueError, match="result 'async_grpo' lacks rows, reading"):
        write_result("async_grpo", {k: v for k, v in values.items() if k not in ("rows", "reading")}, folder=tmp_path)
    with pytest.raises(KeyError, match="unknown writeup result 'nope'"):
        declared_keys("nope")
    assert "answers" in declared_keys("grid_learning_rate")


def _zero_shot_summary():
    from hw3lib.evaluation.evaluate import summarize

    rows = [{"generations": [{"reward": 1.0, "format_reward": 1.0, "answer_reward": 1.0, "num_tokens": 10,
                              "finish_reason": "stop"},
                             {"reward": 0.0, "format_reward": 0.0, "answer_reward": 0.0, "num_tokens": 30,
                              "finish_reason": "length"}]}]
    return {**summarize(rows), "model": "tiny-sft",
            "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": 32, "seed": 0}}


def _producers():
    from hw3lib.evaluation.evaluate import zero_shot_result
    from hw3lib.grpo.async_report import async_result
    from hw3lib.kissing.report import kissing_result
    from hw3lib.workbook.units import grpo_units_result

    from hw3lib.grpo.config import GRPOConfig

    cfg = GRPOConfig.for_profile("smoke")
    t = torch.ones(2, 3)
    return {
        "zero_shot": lambda: zero_shot_result(_zero_shot_summary(), "smoke"),
        "grpo_units": lambda: grpo_units_result(t[0], t[0], t, t, t, 0.5, t[0], t[0]),
        "async_grpo": lambda: async_result(cfg, [{"schedule": "sync"}], "reading"),
        "kissing": lambda: kissing_result("replay", "m", {"starter": 22, "d11_roots": 220, "code_582": 582},
                                          SimpleNamespace(points=[0] * 30, iterations=10), 2,
                                          {"agentic": SimpleNamespace(best_score=22), "best_of_n": SimpleNamespace(
                                              best_score=0), "hybrid": SimpleNamespace(best_score=24)},
                                          {"combined_score": 582}),
    }


@pytest.mark.parametrize("name", ["zero_shot", "grpo_units", "async_grpo", "kissing"])
def test_producers_write_every_declared_key(name, tmp_path):
    result = _producers()[name]()
    saved = json.loads(write_result(name, result, folder=tmp_path).read_text())
    assert set(RESULT_KEYS[name]) <= saved.keys()


def test_zero_shot_result_numbers():
    result = _zero_shot_summary()
    from hw3lib.evaluation.evaluate import zero_shot_result

    z = zero_shot_result(result, "smoke")
    assert (z["accuracy"], z["format_rate"], z["truncation_rate"], z["mean_response_tokens"]) == (0.5, 0.5, 0.5, 20.0)
    assert (z["count_correct"], z["count_unformatted"], z["count_wrong_answer"], z["max_tokens"]) == (1, 1, 0, 32)
    # the questions are named by the run's `task` when notebook 01 stored one, else by its dataset
    assert zero_shot_result({**result, "dataset": "math"}, "smoke")["dataset"] == "math"
    named = zero_shot_result({**result, "dataset": "math", "task": "generated MATH-format test"}, "smoke")
    assert named["dataset"] == "generated MATH-format test"
    assert "data `generated MATH-format test` (1 examples)" in named["settings"]["text"]


def test_settings_state_course_profile_model_data_and_sampling(monkeypatch):
    from hw3lib.core.writeup_keys import config_settings, settings_of
    from hw3lib.grpo.config import GRPOConfig

    monkeypatch.delenv("HW3_COURSE", raising=False)
    s = settings_of("full", "Qwen/Qwen3-0.6B", "gsm8k", 1024, 1.0, 1.0, 1024)
    assert s["text"] == ("course GSM8K with Qwen3-0.6B (`nlpdl-hw3`), profile `full`, model `Qwen/Qwen3-0.6B`, "
                         "data `gsm8k` (1024 examples), sampling temperature 1, top-p 1, at most 1024 tokens")
    monkeypatch.setenv("HW3_COURSE", "math-qwen2.5")
    greedy = settings_of("smoke", "tiny", "math-synthetic", 64, 0.0, 1.0, 96)
    assert greedy["course"] == "cs336-a5" and "sampling greedy (temperature 0), at most 96 tokens" in greedy["text"]
    cfg = GRPOConfig.for_profile("smoke")
    from_cfg = config_settings(cfg)
    assert (from_cfg["n_examples"], from_cfg["temperature"], from_cfg["max_tokens"]) == (
        cfg.n_eval_examples, cfg.eval_temperature, cfg.sampling_max_tokens)


def test_settings_show_local_folders_relative_to_the_cache_or_project(monkeypatch, tmp_path):
    from hw3lib.core.writeup_keys import settings_of

    monkeypatch.setenv("HW3_CACHE_DIR", str(tmp_path / "cache"))
    data = tmp_path / "cache" / "keyword_data" / "procedural_2000_seed0"
    settings = settings_of("smoke", "tiny", str(data), 200, 0.0, 1.0, 12)
    assert settings["dataset"] == "$HW3_CACHE_DIR/keyword_data/procedural_2000_seed0"
    assert str(tmp_path) not in settings["text"] and settings["model"] == "tiny"
