"""The keyword-inclusion task (hw3lib.keywords.recipe): dataset, split, reward, generator path, SFT + GRPO learning."""

from __future__ import annotations

import json

import pytest

from hw3lib.keywords.recipe import (KEYWORD_GRPO, KeywordSFT, generate_answers, keyword_config, keyword_sft,
                                   prepare_keyword_run, write_keyword_dataset)
from hw3lib.tasks.keyword_data import make_keyword_records, read_split, split_records
from hw3lib.tasks.prompt_table import reward_fn_for
from hw3lib.tasks.rewards import is_one_sentence, keyword_inclusion_reward_fn, keyword_sentence_reward_fn
from hw3lib.core.runs import RunExistsError


@pytest.fixture(autouse=True)
def _runs_in_tmp(monkeypatch, tmp_path):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return write_keyword_dataset(tmp_path_factory.mktemp("kw") / "data", n=2000, seed=0)


@pytest.fixture(scope="module")
def sft_model(data_dir):
    """The recipe's SFT (400 steps): partly able to copy the keywords. Cached by content in the cache
    folder, as the tiny model is, so notebook 04 reuses it."""
    return keyword_sft(data_dir, KeywordSFT(), verbose=False)


def test_records_ask_for_their_keywords_and_the_procedural_answer_has_them():
    records = make_keyword_records(300, seed=1)
    assert records[0]["prompt"] == f"Write a sentence that includes the words: {', '.join(records[0]['keywords'])}."
    assert {len(r["keywords"]) for r in records} == {2, 3}
    assert len({frozenset(r["keywords"]) for r in records}) == 300  # distinct keyword sets
    assert all(r["source"] == "procedural" for r in records)
    for record in records:  # the reward function on every dataset row: each answer earns it
        assert keyword_inclusion_reward_fn(record["answer"], record["keywords"])["reward"] == 1.0
        assert keyword_sentence_reward_fn(record["answer"], record["keywords"]) == {
            "reward": 1.0, "format_reward": 1.0, "answer_reward": 1.0}
    assert make_keyword_records(300, seed=1) == records  # deterministic


def test_keyword_sentence_reward_by_hand():
    assert keyword_sentence_reward_fn("The red apple is on the table.", ["apple", "red"])["reward"] == 1.0
    assert keyword_sentence_reward_fn("The red apples are here.", ["apple", "red"]) == {
        "reward": 0.0, "format_reward": 1.0, "answer_reward": 0.0}  # "apples" is not the word "apple"
    assert keyword_sentence_reward_fn("I cup and the busy house and the", ["cup", "busy", "house"]) == {
        "reward": 0.0, "format_reward": 0.0, "answer_reward": 1.0}  # a run-on list cut by the budget
    assert keyword_sentence_reward_fn("A red apple. A red cup.", ["apple", "red"])["format_reward"] == 0.0
    assert keyword_sentence_reward_fn("", ["apple"])["reward"] == 0.0
    assert is_one_sentence(" Is it red?\n") and not is_one_sentence("red apple") and not is_one_sentence(None)


def test_the_course_reward_is_the_default_and_the_sentence_gate_an_option(data_dir, sft_model):
    """The handout's keyword reward is keyword_inclusion_reward_fn: the recipe, its config and `hw3 keyword
    train` train on it unless asked for the one-sentence gate."""
    assert KEYWORD_GRPO["prompt"] == "keyword"
    default = keyword_config(sft_model, data_dir, "smoke")
    assert (default.prompt, default.name) == ("keyword", "keyword_smoke")
    assert reward_fn_for(default.prompt) is keyword_inclusion_reward_fn
    gated = keyword_config(sft_model, data_dir, "smoke", reward="sentence")
    assert (gated.prompt, gated.name) == ("keyword_sentence", "keyword_sentence_smoke")
    assert reward_fn_for(gated.prompt) is keyword_sentence_reward_fn
    assert keyword_config(sft_model, data_dir, "smoke", reward="sentence", name="mine").name == "mine"
    # a truncated keyword list (from a run on the course's reward): paid by the default, refused by the option
    hacked = "There is A green cat cat and the cat cat and the"
    assert reward_fn_for(default.prompt)(hacked, ["green", "cat"])["reward"] == 1.0
    assert reward_fn_for(gated.prompt)(hacked, ["green", "cat"])["reward"] == 0.0
    with pytest.raises(ValueError, match="reward='course': choose inclusion .* or sentence"):
        keyword_config(sft_model, data_dir, "smoke", reward="course")
    with pytest.raises(ValueError, match="choose inclusion"):
        prepare_keyword_run("smoke", data="/nonexistent", reward="gate")  # refused before any data or SFT


def test_cli_train_takes_the_reward_and_refuses_an_unknown_one():
    from typer.testing import CliRunner

    from hw3lib.cli import app

    result = CliRunner().invoke(app, ["keyword", "train", "--reward", "gate", "--profile", "smoke"])
    assert result.exit_code == 1 and "choose inclusion" in result.output
    helped = CliRunner().invoke(app, ["keyword", "train", "--help"])
    assert "--reward" in helped.output and "keyword_inclusion_reward_fn" in helped.output


def test_split_is_80_20_disjoint_and_written_atomically(data_dir, tmp_path):
    train, validation = read_split(data_dir, "train"), read_split(data_dir, "validation")
    assert (len(train), len(validation)) == (1600, 400)
    assert not {frozenset(r["keywords"]) for r in train} & {frozenset(r["keywords"]) for r in validation}
    info = json.loads((data_dir / "dataset.json").read_text())
    assert info["source"] == "procedural" and info["n_train"] == 1600
    assert write_keyword_dataset(data_dir, n=2000, seed=0) == data_dir  # same settings: reused
    with pytest.raises(RunExistsError):
        write_keyword_dataset(data_dir, n=500, seed=0)  # different settings: refused, nothing deleted
    assert len(read_split(data_dir, "train")) == 1600
    splits = split_records(list(range(10)), seed=0)
    assert sorted(splits["train"] + splits["validation"]) == list(range(10)) and len(splits["train"]) == 8
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "train.jsonl").write_text('{"prompt": "x", "answer": "y"}\n')
    with pytest.raises(Exception, match=r"train.jsonl:1: .*keywords"):
        read_split(tmp_path / "bad", "train")


def test_load_task_and_config(data_dir, sft_model):
    from hw3lib.tasks.data import load_task
    from hw3lib.grpo.config import GRPOConfig

    cfg = keyword_config(sft_model, data_dir, "smoke", n_eval_examples=50)
    train, validation = load_task(cfg)
    assert len(train) == 1600 and len(validation) == 50
    assert validation[0]["gold"] == read_split(data_dir, "validation")[0]["keywords"]
    with pytest.raises(ValueError, match="warm_start_steps"):
        GRPOConfig.for_profile("smoke", model=str(sft_model), dataset=str(data_dir), prompt="keyword")


def test_generator_path_keeps_only_answers_with_every_keyword(data_dir, sft_model, tmp_path):
    """A model answers through the rollout engine (here the SFT'd own model, so no download is needed)."""
    from hw3lib.generation import make_engine

    records = read_split(data_dir, "validation")[:40]
    engine = make_engine("transformers", sft_model, progress=False)
    kept = generate_answers(records, engine, "own-sft", samples_per_prompt=2)
    assert 0 < len(kept) <= len(records)
    assert all(keyword_inclusion_reward_fn(r["answer"], r["keywords"])["reward"] == 1.0 for r in kept)
    assert all(r["source"] == "generator:own-sft" for r in kept)
    folder = write_keyword_dataset(tmp_path / "gen", n=60, seed=2, generator=str(sft_model))
    assert json.loads((folder / "dataset.json").read_text())["source"] == f"generator:{sft_model}"


def test_grpo_trains_the_own_model_and_raises_the_reward(data_dir, sft_model):
    """The unchanged GRPO loop on the own model, on the course's reward: validation reward rises, engine and
    trainer agree; then the gated run from the same SFT, and the hacking rates read from both runs' samples."""
    from hw3lib.models.load import load_model_and_tokenizer
    from hw3lib.models.nanogpt import GPT
    from hw3lib.grpo.loop import train

    cfg = keyword_config(sft_model, data_dir, "smoke", name="kw_test", n_grpo_steps=30, eval_every=30,
                         n_eval_examples=100, checkpoint_every=0)
    assert cfg.prompt == "keyword"  # the course's reward
    result = train(cfg)
    start, end = result.eval_rows[0]["eval/reward"], result.eval_rows[-1]["eval/reward"]
    assert start < 0.8  # the SFT leaves room
    assert end > start + 0.1, (start, end)
    mismatch = max(row["train/logprob_mismatch_mean_abs"] for row in result.train_rows)
    assert mismatch < 1e-4  # engine log-probs = trainer log-probs (same weights, same temperature)
    policy, _ = load_model_and_tokenizer(str(result.run_dir / "checkpoints" / "step_000030" / "policy"))
    assert isinstance(policy, GPT)
    # the writeup's `keyword` result, from the same run
    from hw3lib.core.writeup_keys import RESULT_KEYS
    from hw3lib.keywords.recipe import keyword_result

    summary = keyword_result(cfg, policy, read_split(data_dir, "train"), sft_model, result)
    assert (summary["eval_reward_start"], summary["eval_reward_end"], summary["grpo_steps"]) == (start, end, 30)
    assert summary["max_logprob_mismatch"] == mismatch and summary["steps"] == [0, 30]
    assert summary["reward_fn"] == "keyword_inclusion_reward_fn"
    gated = train(keyword_config(sft_model, data_dir, "smoke", reward="sentence", name="kw_test_gated",
                                 n_grpo_steps=20, eval_every=20, n_eval_examples=100, checkpoint_every=0))
    _check_hacking_rates_match_the_runs({"inclusion": result, "sentence": gated})
    from hw3lib.keywords.hacking import hacking_result

    full = {**summary, **hacking_result({"inclusion": result.run_dir, "sentence": gated.run_dir})}
    assert set(RESULT_KEYS["keyword"]) <= full.keys()


def _check_hacking_rates_match_the_runs(runs):
    """Every validation response is saved, so the rates read back from the samples equal the logged metrics:
    inclusion = the course's reward (each run's answer part), inclusion and one sentence = the gated reward."""
    from hw3lib.grpo.results import load_samples
    from hw3lib.keywords.hacking import hacking_table, response_flags

    rows = {(row["run"], row["stage"]): row for row in hacking_table({k: r.run_dir for k, r in runs.items()})}
    for label, run in runs.items():
        for stage, eval_row in (("after SFT", run.eval_rows[0]), ("after GRPO", run.eval_rows[-1])):
            row = rows[(label, stage)]
            assert row["n"] == 100 and row["step"] == eval_row["grpo_step"]
            assert row["inclusion"] == pytest.approx(eval_row["eval/answer_reward"])
            assert row["cut_off"] <= eval_row["eval/truncation_rate"] + 1e-9  # cut off: at the budget, no sentence
            flags = [response_flags(s) for s in load_samples(run.run_dir, eval_row["grpo_step"])]
            paid = [f["inclusion"] and f["one_sentence"] for f in flags] if label == "sentence" else \
                [f["inclusion"] for f in flags]
            assert sum(paid) / len(paid) == pytest.approx(eval_row["eval/reward"])


def test_cli_writes_the_dataset_and_refuses_to_replace_a_different_one(tmp_path):
    from typer.testing import CliRunner

    from hw3lib.cli import app

    out = tmp_path / "kw"
    result = CliRunner().invoke(app, ["keyword", "data", "--out", str(out), "--n", "50"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["n_train"] == 40 and len(read_split(out, "validation")) == 10
    refused = CliRunner().invoke(app, ["keyword", "data", "--out", str(out), "--n", "60"])
    assert refused.exit_code == 1 and "--overwrite" in refused.output
    replaced = CliRunner().invoke(app, ["keyword", "data", "--out", str(out), "--n", "60", "--overwrite"])
    assert replaced.exit_code == 0 and len(read_split(out, "train")) == 48
