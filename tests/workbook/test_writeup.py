"""hw3lib.workbook.writeup: the PDF is built from the exported JSON and figures, nothing typed by hand; check_writeup
finds its sections and those still "Not run yet"; tiny real grids reported by hw3lib.experiments.report appear in it
with their figures and numbers; the zero-shot failure review (hw3lib.evaluation.zero_shot_review) and its verdict."""

import json
import shutil

import pytest

from hw3lib.experiments.grids import GRIDS, Grid, run_grid
from hw3lib.experiments.render import pct
from hw3lib.experiments.report import report_grid
from hw3lib.core.io import DataFileError, project_root
from hw3lib.core.writeup_keys import settings_of
from hw3lib.grpo.config import GRPOConfig
from hw3lib.workbook.writeup import (GRID_SECTIONS, SECTIONS, WriteupCheckError, build_writeup, check_writeup, collect_results,
                            pdf_sections, sections_of_notebooks)
from hw3lib.evaluation.zero_shot_review import (classify_unformatted, classify_wrong_answer, review_zero_shot,
                                     write_zero_shot_review)


def _workbook_copy(tmp_path):
    root = tmp_path / "wb"
    (root / "figures").mkdir(parents=True)
    shutil.copytree(project_root() / "writeup", root / "writeup",
                    ignore=shutil.ignore_patterns("*.pdf", "results.json"))
    return root


def test_writeup_builds_with_no_results_yet(tmp_path):
    root = _workbook_copy(tmp_path)
    pdf = build_writeup(root)
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert json.loads((root / "writeup" / "results.json").read_text())["results"] == {}


def test_writeup_reads_exported_numbers(tmp_path):
    root = _workbook_copy(tmp_path)
    summary = {"profile": "smoke", "model": "tiny", "num_examples": 32, "n": 1, "num_samples": 32,
               "accuracy": 0.125, "format_rate": 0.5, "mean_response_tokens": 40.0, "truncation_rate": 0.25,
               "count_correct": 4, "count_wrong_answer": 12, "count_unformatted": 16, "temperature": 1.0,
               "max_tokens": 48, "dataset": "gsm8k",
               "settings": {"text": "course GSM8K with Qwen3-0.6B (`gsm8k-qwen3`), profile `smoke`"}}  # notebook 01's keys
    (root / "figures" / "zero_shot.json").write_text(json.dumps(summary))
    collected = collect_results(root / "figures")
    assert collected["results"]["zero_shot"] == summary
    assert build_writeup(root).stat().st_size > 1000


def test_bad_result_file_is_named(tmp_path):
    root = _workbook_copy(tmp_path)
    (root / "figures" / "broken.json").write_text("{not json")
    with pytest.raises(DataFileError, match="broken.json: not valid JSON"):
        build_writeup(root)


# ---- sections and the PDF check ---------------------------------------------------------------------------

TITLES = [title for title, _ in SECTIONS]


def test_an_empty_writeup_has_every_section_and_each_says_not_run_yet(tmp_path):
    root = _workbook_copy(tmp_path)
    check = check_writeup(build_writeup(root), must_be_run=TITLES, raise_on_failure=False)
    assert list(check["sections"]) == TITLES  # in order, nothing else at the top level
    assert check["missing"] == [] and check["not_run"] == TITLES
    with pytest.raises(WriteupCheckError, match="still saying \"Not run yet\": Zero-shot evaluation; Best-of-N"):
        check_writeup(root / "writeup" / "writeup.pdf", must_be_run=TITLES[:2])
    with pytest.raises(WriteupCheckError, match="sections missing: No such section"):
        check_writeup(root / "writeup" / "writeup.pdf", required_sections=["No such section", TITLES[0]])
    with pytest.raises(FileNotFoundError, match="build the writeup first"):
        check_writeup(tmp_path / "absent.pdf")


def test_sections_of_notebooks_and_grid_titles():
    assert sections_of_notebooks(["01", "03"]) == ["Zero-shot evaluation", "The GRPO building blocks"]
    grid_titles = sections_of_notebooks(["05"])
    assert grid_titles[:-1] == list(GRID_SECTIONS.values()) and grid_titles[-1].startswith("SFT")
    assert list(GRID_SECTIONS) == [name for name in GRIDS]  # one section per grid, in the grids' order
    assert (project_root() / "writeup" / "grids.typ").read_text().count("#grid-section(\"") == len(GRIDS)


# ---- the zero-shot review ---------------------------------------------------------------------------------

def test_zero_shot_failures_are_classified_by_the_rule():
    assert classify_unformatted("3 + 4 = 7 </think>\n<answer> 7 </answer>", "stop") == (
        "parser",
        "complete `</think>` ... `<answer>...</answer>` structure, but separated by '\\n' instead of one space")
    assert classify_unformatted("3 + 4 = 7 </think> 7 </answer>", "stop") == (
        "model", "no `<answer>` after the last `</think>` (wrote '7 </answer>')")
    assert classify_unformatted("3 + 4 = 7 and then", "length") == (
        "model", "hit the token budget before closing the answer")
    assert classify_unformatted("3 + 4 = 7 </think> so <answer> 7 </answer>", "stop")[0] == "model"
    assert classify_wrong_answer("</think> <answer> The total is 18 </answer>", "18")[0] == "parser"
    assert classify_wrong_answer("</think> <answer> 17 </answer>", "18") == ("model", "answered '17', gold '18'")


def _zero_shot_run(run_dir):
    """A finished evaluation folder by hand: 12 unformatted (3 with a newline separator), 11 formatted but wrong
    (2 with the gold number in words around it), 1 correct."""
    from hw3lib.evaluation.evaluate import summarize

    texts = ([("1 + 1 </think> 2 </answer>", 0.0)] * 9 + [("1 + 1 </think>\n<answer> 2 </answer>", 0.0)] * 3
             + [("1 + 1 </think> <answer> 3 </answer>", 1.0)] * 9
             + [("1 + 1 </think> <answer> so it is 2 </answer>", 1.0)] * 2
             + [("1 + 1 </think> <answer> 2 </answer>", 1.0)])
    rows = [{"index": i, "question": "1 + 1?", "ground_truth": "2", "generations": [{
        "text": text, "format_reward": fmt, "answer_reward": float(i == len(texts) - 1),
        "reward": float(i == len(texts) - 1), "num_tokens": 9, "finish_reason": "stop"}]}
        for i, (text, fmt) in enumerate(texts)]
    run_dir.mkdir(parents=True)
    (run_dir / "generations.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (run_dir / "summary.json").write_text(json.dumps({**summarize(rows), "profile": "smoke", "model": "tiny-sft",
                                                      "dataset": "gsm8k"}))


def test_zero_shot_review_inspects_ten_per_category(tmp_path):
    _zero_shot_run(tmp_path / "zs")
    review = review_zero_shot(tmp_path / "zs", k=10, seed=0)
    unformatted, wrong = review["categories"]["unformatted"], review["categories"]["wrong_answer"]
    assert review["inspected"] == 20 and (unformatted["members"], wrong["members"]) == (12, 11)
    assert unformatted["model"] + unformatted["parser"] == 10 and unformatted["parser"] <= 3
    assert wrong["model"] + wrong["parser"] == 10 and wrong["parser"] <= 2
    assert (unformatted["verdict"], wrong["verdict"]) == ("model", "model")
    assert all(e["fault"] == ("parser" if "\n<answer>" in e["tail"] or "so it is" in e["tail"] else "model")
               for e in review["examples"])
    # The one correct response (the last row) is shown as the "correct" category's example.
    assert review["correct_examples"] == [{"index": 23, "sample": 0, "ground_truth": "2",
                                           "tail": "1 + 1 </think> <answer> 2 </answer>"}]
    with pytest.raises(ValueError, match="at least one"):
        review_zero_shot(tmp_path / "zs", k=0)


# ---- end to end: tiny real grids, reported, in the built PDF ----------------------------------------------

REPORTED = ("baselines", "kl_drift")
ZERO_SHOT = {"profile": "smoke", "model": "tiny", "num_examples": 24, "n": 1, "num_samples": 24, "accuracy": 0.04,
             "format_rate": 0.5, "mean_response_tokens": 9.0, "truncation_rate": 0.0, "count_correct": 1,
             "count_wrong_answer": 11, "count_unformatted": 12, "temperature": 1.0, "max_tokens": 48, "dataset": "gsm8k",
             "settings": settings_of("smoke", "tiny", "gsm8k", 24, 1.0, 1.0, 48)}


def _tiny_grid(name: str, changes: dict[str, dict]) -> Grid:
    """2 GRPO steps of 2 questions x 4 samples, validated on 4 questions after every step."""
    base = GRPOConfig.for_profile("smoke", name="base", n_grpo_steps=2, rollout_batch_size=8, group_size=4,
                                  train_batch_size=8, epochs_per_rollout_batch=1, gradient_accumulation_steps=2,
                                  n_eval_examples=4, eval_every=1, checkpoint_every=1, n_train_examples=256,
                                  loss_type="reinforce_with_baseline")
    configs = {label: base.replace(name=f"{name}/{label}", **change) for label, change in changes.items()}
    return Grid(name, "smoke", base, configs, changes, next(iter(changes)), GRIDS[name].question,
                {label: [label] for label in changes})


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """Two tiny grids trained for real, reported with report_grid into a workbook copy, and its PDF built."""
    import matplotlib

    import hw3lib.core.io

    matplotlib.use("Agg")
    tmp = tmp_path_factory.mktemp("reported")
    root = _workbook_copy(tmp)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HW3_RUNS_DIR", str(tmp / "runs"))
        patch.setattr(hw3lib.core.io, "figures_dir", lambda: root / "figures")
        grids = {"baselines": _tiny_grid("baselines", {"reinforce_with_baseline": {},
                                                       "no_baseline": {"loss_type": "no_baseline"}}),
                 "kl_drift": _tiny_grid("kl_drift", {"kl": {"monitor_kl": True}})}
        summaries = {name: report_grid(run_grid(grid)) for name, grid in grids.items()}
        _zero_shot_run(tmp / "zero_shot")
        (root / "figures" / "zero_shot.json").write_text(json.dumps(ZERO_SHOT))
        write_zero_shot_review(tmp / "zero_shot")
    pdf = build_writeup(root)
    return root, summaries, pdf


def test_reported_grids_appear_with_their_figures_and_absent_ones_say_not_run_yet(reported):
    from pypdf import PdfReader

    root, summaries, pdf = reported
    ran = [GRID_SECTIONS[name] for name in REPORTED] + ["Zero-shot evaluation"]
    check = check_writeup(pdf, must_be_run=ran)  # raises if a reported section is missing or not run
    assert [title for title, done in check["sections"].items() if done] == [
        "Zero-shot evaluation", GRID_SECTIONS["baselines"], GRID_SECTIONS["kl_drift"]]
    # Every figure report_grid produced is in results.json and drawn in the PDF (nothing else made a figure here).
    produced = sorted(name for summary in summaries.values() for name in summary["figures"])
    assert len(produced) == 5 and sorted(p.name for p in (root / "figures").glob("*.png")) == produced
    collected = json.loads((root / "writeup" / "results.json").read_text())
    assert collected["figures"] == produced
    assert {name: collected["results"][f"grid_{name}"]["figures"] for name in REPORTED} == {
        name: summaries[name]["figures"] for name in REPORTED}
    reader = PdfReader(pdf)
    assert sum(len(page.images) for page in reader.pages) == len(produced)
    sections = {title: " ".join(text.split()) for title, text in pdf_sections(pdf).items()}
    assert not any("has not been produced" in sections[GRID_SECTIONS[name]] for name in REPORTED)
    # Each figure gets its kind's caption (the kind read back from its file name).
    assert "Training entropy, gradient norm, response length" in sections[GRID_SECTIONS["baselines"]]
    assert "KL to the initial policy (k3 solid, k1 dashed)" in sections[GRID_SECTIONS["kl_drift"]]


def test_numbers_in_the_pdf_come_from_the_results_json(reported):
    root, summaries, pdf = reported
    sections = {title: " ".join(text.split()) for title, text in pdf_sections(pdf).items()}
    collected = json.loads((root / "writeup" / "results.json").read_text())["results"]
    for name in REPORTED:
        text, summary = sections[GRID_SECTIONS[name]], collected[f"grid_{name}"]
        assert "Produced by the smoke profile: model tiny on arithmetic (the CPU smoke profile" in text
        for row in summary["rows"]:  # each table row as formatted from the JSON's raw numbers
            assert (row["text"]["start"], row["text"]["end"]) == (pct(row["start"]), pct(row["end"]))
            assert f"{row['label']} {row['text']['status']} {row['text']['start']} {row['text']['end']}" in text
        for answer in summary["answers"]:  # the sentences, with the `code` marks rendered
            assert " ".join(answer.replace("`", "").split()) in text
    zero_shot = sections["Zero-shot evaluation"]
    review = collected["zero_shot_review"]
    assert f"{review['inspected']} failures inspected" in zero_shot and "verdict model" in zero_shot
    kl = collected["grid_kl_drift"]["configs"]["kl"]["metrics"]["train/kl_k3"]["last"]
    assert f"k3 = {kl:.3g}" in sections[GRID_SECTIONS["kl_drift"]]


def test_the_seed_band_is_stated_in_the_first_grids_section(reported, tmp_path):
    """Issue 42: the base recipe's run-to-run variation, measured in notebook 05, is shown where the grids start."""
    root, _, _ = reported
    copy = tmp_path / "wb"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("*.pdf", "results.json"))
    grid = json.loads((copy / "figures" / "grid_baselines.json").read_text())
    (copy / "figures" / "grid_learning_rate.json").write_text(json.dumps({**grid, "grid": "learning_rate"}))
    band = {"profile": "smoke", "seeds": [0, 1, 2], "runs": ["a", "b", "c"], "n_grpo_steps": 50, "n_eval": 256,
            "values": [0.582, 0.5, 0.541], "mean": 0.541, "sd": 0.041, "band": 0.1136, "multiplier": 4.526537}
    (copy / "figures" / "seed_band.json").write_text(json.dumps(band))
    text = " ".join(pdf_sections(build_writeup(copy))[GRID_SECTIONS["learning_rate"]].split())
    assert ("seeds 0, 1, 2 ended at 58.2%, 50%, 54.1% after 50 GRPO steps on 256 questions: mean 54.1%, sd 4.1 "
            "points, so two single runs of one config differ by chance by up to ±11.4 points") in text
    # A single run's rise varies only at its end: 4.1 x 4.53 = 18.6 points, no sqrt 2.
    assert "A single run's rise from its start (the KL drift, the leaderboard) is held to ±18.6 points" in text


# ---- the student's own words ------------------------------------------------------------------------------

def test_student_answers_appear_verbatim_and_are_never_written(tmp_path):
    from hw3lib.workbook.writeup import ANSWER_KEYS

    root = _workbook_copy(tmp_path)
    answers = root / "writeup" / "answers"
    mine = "The masked mean favours short correct answers.\n\nSecond paragraph: 7 tokens vs 3 tokens."
    (answers / "best_of_n.md").write_text(mine)
    before = {p.name: p.read_bytes() for p in answers.iterdir()}
    sections = pdf_sections(build_writeup(root))
    assert {p.name: p.read_bytes() for p in answers.iterdir()} == before  # read, never written
    best = " ".join(sections["Best-of-N test-time scaling"].split())
    assert "Your answer (writeup/answers/best_of_n.md, included verbatim):" in best
    assert "The masked mean favours short correct answers." in best and "7 tokens vs 3 tokens." in best
    for title, key in ANSWER_KEYS.items():  # every section has the box; the empty ones say where to write
        text = " ".join(sections[title].split())
        assert f"writeup/answers/{key}.md" in text, title
        assert ("Not written yet" in text) == (key != "best_of_n"), title
        assert "computed from the runs by hw3lib" in text, title


def test_an_answer_file_with_an_unknown_name_is_refused(tmp_path):
    root = _workbook_copy(tmp_path)
    (root / "writeup" / "answers" / "bestofn.md").write_text("typo")
    with pytest.raises(DataFileError, match="bestofn.md: no section has the key 'bestofn'; rename it to one of "
                                            "zero_shot.md, best_of_n.md"):
        build_writeup(root)
    (root / "writeup" / "answers" / "bestofn.md").unlink()
    (root / "writeup" / "answers" / "kissing.md").write_bytes(b"caf\xe9")
    with pytest.raises(DataFileError, match="kissing.md: not UTF-8 text"):
        build_writeup(root)


def test_the_answers_readme_lists_every_key():
    import re

    from hw3lib.workbook.writeup import ANSWER_KEYS

    readme = (project_root() / "writeup" / "answers" / "README.md").read_text()
    assert set(re.findall(r"`(\w+)\.md`", readme)) == set(ANSWER_KEYS.values())
    assert list(ANSWER_KEYS) == TITLES  # one key per section, in the writeup's order


# ---- required items: a section with runs must answer every deliverable -----------------------------------

def test_missing_items_names_each_absent_deliverable():
    from hw3lib.workbook.writeup import missing_items

    text = "Settings: course x. Solving or recognizing? Best@4 missed ... Your answer (writeup/answers/...)"
    assert missing_items("Best-of-N test-time scaling", text) == []
    assert missing_items("Best-of-N test-time scaling", "Settings: x") == ['"Your answer"', '"Solving or recognizing?"']
    assert missing_items("Zero-shot evaluation", "Settings: Model or parser? Your answer") == [
        '"An example of the correct category" or "No response was correct"']
    assert missing_items("Zero-shot evaluation", "Settings: Model or parser? No response was correct. Your answer") == []
    # Typst's typographic apostrophe reads back from the PDF as U+2019; the check reads it as the straight one.
    sft = "SFT at several data sizes, and expert iteration"
    assert '"The handout\'s thresholds"' not in missing_items(sft, "The handout\u2019s thresholds (15%)")
    assert '"The handout\'s thresholds"' in missing_items(sft, "The thresholds")


def test_the_check_fails_a_run_section_that_lacks_an_item(tmp_path):
    from hw3lib.evaluation.best_of_n import best_of_n_result
    from hw3lib.generation import SamplingConfig
    from hw3lib.core.writeup_keys import write_result
    from hw3lib.evaluation.best_of_n import SampleResults, best_of_n_metrics
    import numpy as np

    root = _workbook_copy(tmp_path)
    correct = np.array([[0, 1, 0, 1], [0, 1, 1, 0]], dtype=bool)
    logprob = np.array([[-0.5, -0.4, -0.2, -0.2], [np.nan, -3.0, -1.0, -0.5]])
    metrics = best_of_n_metrics(SampleResults(correct, logprob, [["1"] * 4, ["2"] * 4]), ns=(1, 2, 4))
    write_result("best_of_n", best_of_n_result(metrics, "smoke", "tiny", "arithmetic", SamplingConfig(n=4, max_tokens=32)),
                 folder=root / "figures")
    title = "Best-of-N test-time scaling"
    check = check_writeup(build_writeup(root), must_be_run=[title])
    assert check["sections"][title] and check["incomplete"] == {}
    source = root / "writeup" / "writeup.typ"  # a writeup that drops the deliverable fails, naming it
    source.write_text(source.read_text().replace("*Solving or recognizing?*", "*Misses.*"))
    with pytest.raises(WriteupCheckError, match='section "Best-of-N test-time scaling" lacks: "Solving or recognizing\\?"'):
        check_writeup(build_writeup(root), must_be_run=[title])


def test_the_other_courses_writeup_is_built_in_its_own_folder(tmp_path, monkeypatch):
    """HW3_COURSE=math-qwen2.5: the PDF goes to courses/math-qwen2.5/writeup/, never over the default course's."""
    from hw3lib.core.io import isolated_output_env
    from hw3lib.workbook.writeup import build_writeup

    for key, value in isolated_output_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HW3_COURSE", "math-qwen2.5")
    pdf = build_writeup()
    assert pdf == tmp_path.resolve() / "courses" / "cs336-a5" / "writeup" / "writeup.pdf" and pdf.is_file()
    assert not (tmp_path / "writeup" / "writeup.pdf").exists()


def test_the_writeup_marks_the_sections_beyond_the_courses_handout():
    """Issue 43: each preset's writeup follows its own handout's sections; the others are marked as extras."""
    from hw3lib.workbook.writeup import course_summary, handout_asks

    cse, cs336, nlpdl = course_summary("cse599o-a3"), course_summary("cs336-a5"), course_summary("nlpdl-hw3")
    assert cse["handout"] == "CSE 599-O A3" and cs336["name"] == "cs336-a5"
    assert {"best_of_n", "sft_ei", "leaderboard", "kissing", "algorithms"} <= set(cse["extras"])
    assert not {"async_grpo", "keyword", "kl_drift", "learning_rate"} & set(cse["extras"])
    assert {"async_grpo", "keyword", "kl_drift", "algorithms"} <= set(cs336["extras"])
    assert not {"sft_ei", "leaderboard", "baselines"} & set(cs336["extras"])
    assert "best_of_n" not in nlpdl["extras"] and "sft_ei" in nlpdl["extras"]
    # SFT and expert iteration share one section: either handout item asks for it
    assert handout_asks("SFT at several data sizes, and expert iteration", {"expert_iteration"})
    assert not handout_asks("Zero-shot evaluation", {"grpo_loop"})
