"""Zero-shot evaluation: summary numbers by hand, category sampling, resuming, and the `hw3 eval` command."""

from __future__ import annotations

import json

import pytest

from hw3lib.evaluation.evaluate import (
    CATEGORIES,
    RunMismatchError,
    category_of,
    check_out_dir,
    category_table,
    evaluate,
    example_key,
    load_run,
    sample_by_category,
    summarize,
)
from hw3lib.generation import Sample, SamplingConfig
from hw3lib.core.runs import RunExistsError


def _gen(fmt, ans, tokens=3, finish="stop", lp=-1.0):
    return {"text": "t", "reward": float(fmt and ans), "format_reward": float(fmt), "answer_reward": float(ans),
            "num_tokens": tokens, "finish_reason": finish, "mean_logprob": lp}


def _row(index, generations):
    return {"index": index, "key": f"{index}-x", "question": f"q{index}", "prompt": f"p{index}",
            "ground_truth": str(index), "generations": generations}


# 2 examples x 3 samples: categories correct, wrong_answer, unformatted | wrong_answer, unformatted, answer_without_format
ROWS = [
    _row(0, [_gen(1, 1, tokens=4), _gen(1, 0, tokens=6), _gen(0, 0, tokens=10, finish="length")]),
    _row(1, [_gen(1, 0, tokens=2), _gen(0, 0, tokens=8, finish="eos"), _gen(0, 1, tokens=6)]),
]


def test_category_of_covers_the_four_cases():
    assert [category_of(_gen(f, a)) for f, a in ((1, 1), (1, 0), (0, 0), (0, 1))] == [key for key, _ in CATEGORIES]


def test_summarize_by_hand():
    summary = summarize(ROWS)
    assert summary["counts"] == {"correct": 1, "wrong_answer": 2, "unformatted": 2, "answer_without_format": 1}
    assert summary["num_examples"] == 2 and summary["n"] == 3 and summary["num_samples"] == 6
    assert summary["accuracy"] == pytest.approx(2 / 6)  # answer reward 1 in samples 0/0 and 1/2
    assert summary["format_rate"] == pytest.approx(3 / 6)
    assert summary["mean_reward"] == pytest.approx(1 / 6)
    assert summary["mean_response_tokens"] == pytest.approx(36 / 6)
    assert summary["truncation_rate"] == pytest.approx(1 / 6)
    assert summary["finish_reasons"] == {"eos": 1, "length": 1, "stop": 4}
    table = category_table(summary)
    assert [r["count"] for r in table] == [1, 2, 2, 1] and sum(r["share"] for r in table) == pytest.approx(1)


def test_plot_categories_writes_png_and_pdf(tmp_path):
    import matplotlib.pyplot as plt

    from hw3lib.evaluation.evaluate import plot_categories

    plt.close(plot_categories(summarize(ROWS), tmp_path / "cats"))
    assert (tmp_path / "cats.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "cats.pdf").read_bytes()[:4] == b"%PDF"


def test_sample_by_category_is_seeded_capped_and_complete():
    rows = [_row(i, [_gen(1, 0), _gen(0, 0), _gen(1, 0)]) for i in range(20)] + [_row(20, [_gen(1, 1)] * 3)]
    picked = sample_by_category(rows, k=10, seed=0)
    assert list(picked) == [key for key, _ in CATEGORIES]
    assert len(picked["wrong_answer"]) == 10 and len(picked["unformatted"]) == 10
    assert len(picked["correct"]) == 3 and picked["answer_without_format"] == []  # fewer than k: all of them
    assert all(item["category"] == key for key, items in picked.items() for item in items)
    assert picked == sample_by_category(rows, k=10, seed=0)  # seeded
    chosen = [(item["index"], item["sample"]) for item in picked["wrong_answer"]]
    assert chosen == sorted(chosen) and len(set(chosen)) == 10  # distinct, shown in example order
    other = [(item["index"], item["sample"]) for item in sample_by_category(rows, k=10, seed=1)["wrong_answer"]]
    assert other != chosen  # a different seed draws a different sample (40 members, 10 drawn)
    assert chosen != [(i, s) for i in range(20) for s in (0, 2)][:10]  # not simply the first ten


class ScriptedEngine:
    """Deterministic fake engine: the response depends only on the prompt, the seed and the sample index."""

    model_name = "scripted"

    def __init__(self, fail_after: int | None = None):
        self.calls, self.prompts_seen, self.fail_after = 0, [], fail_after

    def generate(self, prompts, sampling):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.calls += 1
        self.prompts_seen.extend(prompts)
        out = []
        for prompt in prompts:
            digit = (len(prompt) + sampling.seed) % 3
            out.append([Sample(text=f"</think> <answer>{digit + j}</answer>", token_ids=[1, 2, 3][: 1 + j % 3],
                               logprobs=[-0.5] * (1 + j % 3), finish_reason="stop") for j in range(sampling.n)])
        return out


def _answer_reward(response, ground_truth):
    formatted = response.endswith("</answer>")
    correct = formatted and response.split("<answer>")[-1].removesuffix("</answer>") == ground_truth
    return {"reward": float(correct), "format_reward": float(formatted), "answer_reward": float(correct)}


EXAMPLES = [{"question": f"What is {i} plus {i}?" + " really" * i, "gold": str(i % 4)} for i in range(7)]


def test_evaluate_writes_rows_and_summary(tmp_path):
    engine = ScriptedEngine()
    sampling = SamplingConfig(n=2, max_tokens=8, seed=3)
    summary = evaluate(engine, _answer_reward, EXAMPLES, "r1_zero", sampling, tmp_path / "run", batch_size=3,
                       metadata={"dataset": "toy"}, progress=False)
    rows, saved = load_run(tmp_path / "run")
    assert saved == summary and summary["dataset"] == "toy" and summary["model"] == "scripted"
    assert engine.calls == 3  # 7 examples in chunks of 3
    assert [row["index"] for row in rows] == list(range(7))
    assert rows[2]["question"] == EXAMPLES[2]["question"] and EXAMPLES[2]["question"] in rows[2]["prompt"]
    assert rows[2]["key"] == example_key(2, rows[2]["prompt"]) and rows[2]["ground_truth"] == "2"
    assert set(rows[0]["generations"][0]) == {"text", "reward", "format_reward", "answer_reward", "num_tokens",
                                              "finish_reason", "mean_logprob"}
    assert summary["num_samples"] == 14 and summary["n"] == 2 and summary["format_rate"] == 1.0
    correct = sum(g["answer_reward"] for row in rows for g in row["generations"])
    assert summary["accuracy"] == pytest.approx(correct / 14)
    assert summary["sampling"]["seed"] == 3 and summary["sampling"]["stop"] == ["</answer>"]
    assert summary["time"]["examples_generated"] == 7 and summary["time"]["examples_resumed"] == 0
    assert not (tmp_path / "run" / "checkpoint").exists()


def test_evaluate_names_a_missing_field(tmp_path):
    with pytest.raises(ValueError, match="no examples"):
        evaluate(ScriptedEngine(), _answer_reward, [], "r1_zero", SamplingConfig(), tmp_path, progress=False)
    with pytest.raises(KeyError, match="example 0 has no 'problem' field"):
        evaluate(ScriptedEngine(), _answer_reward, EXAMPLES, "r1_zero", SamplingConfig(), tmp_path,
                 question_key="problem", progress=False)


def test_evaluate_resumes_after_interruption_and_reuses_finished_runs(tmp_path):
    sampling = SamplingConfig(n=2, max_tokens=8, seed=0)
    full = evaluate(ScriptedEngine(), _answer_reward, EXAMPLES, "r1_zero", sampling, tmp_path / "full",
                    batch_size=2, progress=False)

    crashing = ScriptedEngine(fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        evaluate(crashing, _answer_reward, EXAMPLES, "r1_zero", sampling, tmp_path / "resumed", batch_size=2,
                 progress=False)
    assert len(list((tmp_path / "resumed" / "checkpoint").glob("chunk_*.jsonl"))) == 2
    assert not (tmp_path / "resumed" / "summary.json").exists()

    again = ScriptedEngine()
    resumed = evaluate(again, _answer_reward, EXAMPLES, "r1_zero", sampling, tmp_path / "resumed", batch_size=2,
                       progress=False)
    assert again.calls == 2 and len(again.prompts_seen) == 3  # only chunks [4, 5] and [6]
    assert resumed["time"]["examples_resumed"] == 4
    assert load_run(tmp_path / "resumed")[0] == load_run(tmp_path / "full")[0]
    strip = lambda s: {k: v for k, v in s.items() if k != "time"}  # noqa: E731
    assert strip(resumed) == strip(full)

    # A finished run is reused as is; a longer example list generates only the new examples.
    idle = ScriptedEngine()
    evaluate(idle, _answer_reward, EXAMPLES, "r1_zero", sampling, tmp_path / "resumed", batch_size=2, progress=False)
    assert idle.calls == 0
    more = ScriptedEngine()
    extended = EXAMPLES + [{"question": "What is 9 plus 9?", "gold": "2"}]
    evaluate(more, _answer_reward, extended, "r1_zero", sampling, tmp_path / "resumed", batch_size=2, progress=False)
    assert len(more.prompts_seen) == 1 and len(load_run(tmp_path / "resumed")[0]) == 8


def _snapshot(folder):
    """Every file under `folder` with its bytes and mtime: to show that nothing was touched."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_evaluate_reuses_a_finished_run_with_the_same_settings(tmp_path):
    sampling = SamplingConfig(n=2, max_tokens=8, seed=0)
    first = evaluate(ScriptedEngine(), _answer_reward, EXAMPLES, "r1_zero", sampling, tmp_path, batch_size=3,
                     progress=False)
    before = _snapshot(tmp_path)
    idle = ScriptedEngine()
    again = evaluate(idle, _answer_reward, EXAMPLES, "r1_zero", sampling, tmp_path, batch_size=3, progress=False)
    assert idle.calls == 0 and again == first == load_run(tmp_path)[1]  # the saved summary, its timing kept
    assert _snapshot(tmp_path) == before  # nothing rewritten
    assert check_out_dir(_answer_reward, EXAMPLES, "r1_zero", sampling, tmp_path, model_name="scripted") == 7


OTHER_CALLS = {  # what differs -> (evaluate's changed arguments, words the error names)
    "sampling": (dict(sampling=SamplingConfig(n=4, max_tokens=8, seed=0)), "sampling.n: saved 2 vs now 4"),
    "seed": (dict(sampling=SamplingConfig(n=2, max_tokens=8, seed=1)), "sampling.seed: saved 0 vs now 1"),
    "model": (dict(model_name="other"), "model: saved 'scripted' vs now 'other'"),
    "reward": (dict(reward_fn=lambda r, g: _answer_reward(r, g)), "reward_fn"),
    "prompt": (dict(prompt_template="question_only"), "prompt: example 0's prompt differs"),
    "fewer examples": (dict(examples=EXAMPLES[:5]), "it holds example 5, but 5 examples are given now"),
    "other questions": (dict(examples=[{**e, "question": e["question"] + "?"} for e in EXAMPLES]),
                        "example 0's question"),
    "other answers": (dict(examples=[{**e, "gold": "9"} for e in EXAMPLES]), "example 0's ground truth"),
}


@pytest.mark.parametrize("what", list(OTHER_CALLS))
def test_evaluate_refuses_a_run_made_otherwise_and_changes_nothing(tmp_path, what):
    base = dict(reward_fn=_answer_reward, examples=EXAMPLES, prompt_template="r1_zero",
                sampling=SamplingConfig(n=2, max_tokens=8, seed=0), model_name=None)
    evaluate(ScriptedEngine(), out_dir=tmp_path, batch_size=3, progress=False, **base)
    (tmp_path / "notes.txt").write_text("mine")
    before = _snapshot(tmp_path)
    changes, words = OTHER_CALLS[what]
    engine = ScriptedEngine()
    with pytest.raises(RunExistsError) as caught:
        evaluate(engine, out_dir=tmp_path, batch_size=3, progress=False, **{**base, **changes})
    message = str(caught.value)
    assert isinstance(caught.value, RunMismatchError)
    assert str(tmp_path) in message and words in message
    assert "another out_dir" in message and "overwrite=True" in message and "--overwrite" in message
    assert engine.calls == 0 and _snapshot(tmp_path) == before
    check = {**base, **changes, "model_name": changes.get("model_name", "scripted")}
    with pytest.raises(RunExistsError, match="overwrite=True"):  # the same refusal, without an engine
        check_out_dir(check["reward_fn"], check["examples"], check["prompt_template"], check["sampling"], tmp_path,
                      model_name=check["model_name"])

    redo = ScriptedEngine()  # overwrite=True: deletes evaluate's outputs (only them) and starts over
    summary = evaluate(redo, out_dir=tmp_path, batch_size=3, progress=False, overwrite=True, **{**base, **changes})
    assert redo.calls > 0 and summary["time"]["examples_resumed"] == 0
    assert summary["num_examples"] == len(changes.get("examples", EXAMPLES)) and load_run(tmp_path)[1] == summary
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_evaluate_overwrite_redoes_a_run_with_the_same_settings(tmp_path):
    sampling = SamplingConfig(n=1, max_tokens=8, seed=0)
    evaluate(ScriptedEngine(), _answer_reward, EXAMPLES, "r1_zero", sampling, tmp_path, batch_size=3, progress=False)
    redo = ScriptedEngine()
    summary = evaluate(redo, _answer_reward, EXAMPLES, "r1_zero", sampling, tmp_path, batch_size=3, progress=False,
                       overwrite=True)
    assert redo.calls == 3 and summary["time"]["examples_generated"] == 7


def test_evaluate_refuses_a_checkpoint_made_otherwise(tmp_path):
    sampling = SamplingConfig(n=2, max_tokens=8, seed=0)
    with pytest.raises(KeyboardInterrupt):
        evaluate(ScriptedEngine(fail_after=1), _answer_reward, EXAMPLES, "r1_zero", sampling, tmp_path, batch_size=2,
                 progress=False)
    (tmp_path / "checkpoint" / "notes.txt").write_text("mine")  # not evaluate's: never deleted
    before = _snapshot(tmp_path)
    for kwargs in (dict(sampling=SamplingConfig(n=1, max_tokens=8, seed=0)), dict(examples=EXAMPLES[:1])):
        call = {"sampling": sampling, "examples": EXAMPLES, **kwargs}
        with pytest.raises(RunExistsError, match="checkpoint"):
            evaluate(ScriptedEngine(), _answer_reward, call["examples"], "r1_zero", call["sampling"], tmp_path,
                     batch_size=2, progress=False)
        assert _snapshot(tmp_path) == before  # the finished chunk [0, 1] is kept

    resumed = ScriptedEngine()  # the same settings resume it, and remove only the checkpoint's own files
    summary = evaluate(resumed, _answer_reward, EXAMPLES, "r1_zero", sampling, tmp_path, batch_size=2, progress=False)
    assert resumed.calls == 3 and summary["time"]["examples_resumed"] == 2
    assert [p.name for p in (tmp_path / "checkpoint").iterdir()] == ["notes.txt"]


def test_evaluate_refuses_generations_without_a_summary(tmp_path):
    (tmp_path / "generations.jsonl").write_text(json.dumps(ROWS[0]) + "\n")
    with pytest.raises(RunExistsError, match="no summary.json"):
        evaluate(ScriptedEngine(), _answer_reward, EXAMPLES, "r1_zero", SamplingConfig(), tmp_path, progress=False)
    assert (tmp_path / "generations.jsonl").read_text() == json.dumps(ROWS[0]) + "\n"


@pytest.fixture(scope="module")
def tiny_engine(tiny_model_dir):
    from hw3lib.generation import make_engine

    engine = make_engine("transformers", "tiny", progress=False)
    yield engine
    engine.close()


class CrashAfter:
    """Wraps an engine, counts generate calls and raises after `limit` of them (a killed run)."""

    def __init__(self, engine, limit=None):
        self.engine, self.limit, self.calls, self.prompts = engine, limit, 0, 0

    def generate(self, prompts, sampling):
        if self.limit is not None and self.calls >= self.limit:
            raise RuntimeError("killed")
        self.calls += 1
        self.prompts += len(prompts)
        return self.engine.generate(prompts, sampling)


def test_resumed_tiny_model_run_equals_uninterrupted_run(tmp_path, tiny_engine, shared_data_dir):
    from hw3lib.tasks.data import load_gsm8k
    from hw3lib.tasks.rewards import r1_zero_reward_fn

    examples = load_gsm8k("test", limit=5)
    sampling = SamplingConfig(n=2, temperature=1.0, max_tokens=8, seed=7)
    kwargs = dict(batch_size=2, model_name="tiny", progress=False)
    full = evaluate(CrashAfter(tiny_engine), r1_zero_reward_fn, examples, "r1_zero", sampling, tmp_path / "a", **kwargs)
    with pytest.raises(RuntimeError, match="killed"):
        evaluate(CrashAfter(tiny_engine, limit=1), r1_zero_reward_fn, examples, "r1_zero", sampling, tmp_path / "b",
                 **kwargs)
    counting = CrashAfter(tiny_engine)
    resumed = evaluate(counting, r1_zero_reward_fn, examples, "r1_zero", sampling, tmp_path / "b", **kwargs)
    assert (counting.calls, counting.prompts) == (2, 3)  # chunks [2, 3] and [4]; chunk [0, 1] was kept
    rows_a, rows_b = load_run(tmp_path / "a")[0], load_run(tmp_path / "b")[0]
    assert rows_a == rows_b
    assert len({g["text"] for row in rows_a for g in row["generations"]}) > 1  # real sampling, not one fixed text
    assert {k: v for k, v in full.items() if k != "time"} == {k: v for k, v in resumed.items() if k != "time"}


def test_hw3_eval_command(tmp_path, tiny_model_dir, shared_data_dir):
    from typer.testing import CliRunner

    from hw3lib.cli import app

    out = tmp_path / "cli_run"
    result = CliRunner().invoke(app, ["eval", "--model", "tiny", "--dataset", "gsm8k", "--split", "test",
                                      "--prompt", "r1_zero", "--n", "2", "--max-tokens", "6", "--limit", "3",
                                      "--engine", "transformers", "--device", "cpu", "--no-progress",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_examples"] == 3 and summary["num_samples"] == 6 and summary["dataset"] == "gsm8k"
    assert summary["sampling"]["max_tokens"] == 6 and summary["model"] == "tiny"
    assert all(g["num_tokens"] <= 6 for row in load_run(out)[0] for g in row["generations"])
    assert "over 6 samples" in result.output and '"accuracy"' in result.output

    # Other settings in the same --out: a one-line error naming the folder; nothing changed.
    before = _snapshot(out)
    other = ["eval", "--model", "tiny", "--n", "1", "--max-tokens", "6", "--limit", "3", "--device", "cpu",
             "--no-progress", "--out", str(out)]
    result = CliRunner().invoke(app, other)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert str(out) in result.output and "sampling.n: saved 2 vs now 1" in result.output
    assert "--overwrite" in result.output and _snapshot(out) == before
    result = CliRunner().invoke(app, [*other, "--overwrite"])  # explicit: redone with n=1
    assert result.exit_code == 0, result.output
    assert json.loads((out / "summary.json").read_text())["num_samples"] == 3


def test_hw3_eval_command_on_a_math_file(tmp_path, tiny_model_dir):
    from typer.testing import CliRunner

    from hw3lib.cli import app

    math_file = tmp_path / "math.jsonl"
    math_file.write_text(json.dumps({"problem": "What is $\\frac{1}{2} + \\frac{1}{2}$?",
                                     "solution": "It is $\\boxed{1}$."}) + "\n"
                         + json.dumps({"problem": "Simplify $\\sqrt{4}$.", "solution": "$\\boxed{2}$"}) + "\n")
    out = tmp_path / "math_run"
    result = CliRunner().invoke(app, ["eval", "--dataset", "math", "--math-path", str(math_file), "--prompt",
                                      "question_only", "--max-tokens", "4", "--device", "cpu", "--no-progress",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows, summary = load_run(out)
    assert [row["ground_truth"] for row in rows] == ["1", "2"] and rows[1]["question"] == "Simplify $\\sqrt{4}$."
    assert summary["dataset"] == "math" and summary["prompt"] == "question_only"
    assert summary["sampling"]["stop"] == [] and summary["reward_fn"] == "question_only_reward_fn"


def test_hw3_eval_math_needs_a_path(tmp_path):
    from typer.testing import CliRunner

    from hw3lib.cli import app

    result = CliRunner().invoke(app, ["eval", "--dataset", "math", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "--math-path" in result.output
