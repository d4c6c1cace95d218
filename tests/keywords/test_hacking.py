"""hw3lib.keywords.hacking by hand: flags of single responses, rates, the side-by-side table, the reading."""

from __future__ import annotations

import json
import math

import pytest

from hw3lib.core.stats import Noise, unpaired_band
from hw3lib.keywords.hacking import (FlagComparison, HackingFindings, hacking_findings, hacking_rates, hacking_reading,
                                     hacking_table, render_hacking, response_flags, side_by_side)

PROMPT = "Write a sentence that includes the words: green, cat."


def sample(response, finish_reason="eos", gold=("green", "cat"), question=PROMPT):
    return {"question": question, "gold": list(gold), "response": response, "finish_reason": finish_reason}


def test_flags_of_single_responses():
    assert response_flags(sample("The green cat is on the table.\n")) == {
        "inclusion": True, "one_sentence": True, "cut_off": False, "repeats_keyword": False, "hacked": False}
    # the truncated keyword list a run on the course's reward learned: paid, but no sentence
    assert response_flags(sample("There is A green cat cat and the cat cat and the", "length")) == {
        "inclusion": True, "one_sentence": False, "cut_off": True, "repeats_keyword": True, "hacked": True}
    # a sentence that ends exactly at the budget is not cut off
    assert response_flags(sample("A green cat sat near the cat.", "length"))["cut_off"] is False
    assert response_flags(sample("green cat"))["hacked"] is True  # a bare keyword list
    missing = response_flags(sample("The green dog is here."))
    assert not missing["inclusion"] and not missing["hacked"] and missing["one_sentence"]
    with pytest.raises(ValueError, match="'finish_reason'"):
        response_flags({"response": "x", "gold": ["x"]})


def test_rates_and_band_by_hand():
    rates = hacking_rates([sample("The green cat is on the table."), sample("green cat cat and the", "length"),
                           sample("A green dog."), sample("green cat")])
    assert rates == {"n": 4, "inclusion": 0.75, "one_sentence": 0.5, "cut_off": 0.25, "repeats_keyword": 0.25,
                     "hacked": 0.5}
    with pytest.raises(ValueError, match="no samples"):
        hacking_rates([])
    assert hacking_rates([sample("green cat"), sample("A green dog.")], outcomes=True)["outcomes"]["hacked"] == [1, 0]


def _run(folder, steps):
    """A fake run folder: samples/step_XXXX.jsonl for each {step: [responses]}."""
    (folder / "samples").mkdir(parents=True)
    prompts = [PROMPT, "Write a sentence that includes the words: red, cup."]
    golds = [["green", "cat"], ["red", "cup"]]
    for step, responses in steps.items():
        rows = [sample(r, "length" if not r.endswith(".") else "eos", g, q)
                for r, g, q in zip(responses, golds, prompts)]
        (folder / "samples" / f"step_{step:04d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_table_side_by_side_and_reading_from_run_folders(tmp_path):
    runs = {
        "inclusion": _run(tmp_path / "a", {0: ["The green cat sat.", "A red cup."],
                                           50: ["green cat cat and the cat and", "The red cup is here."]}),
        "sentence": _run(tmp_path / "b", {0: ["The green cat sat.", "A red cup."],
                                          50: ["I saw a green cat.", "The red cup is here."]}),
    }
    table = hacking_table(runs)
    assert [(r["run"], r["stage"], r["step"], r["hacked"]) for r in table] == [
        ("inclusion", "after SFT", 0, 0.0), ("inclusion", "after GRPO", 50, 0.5),
        ("sentence", "after SFT", 0, 0.0), ("sentence", "after GRPO", 50, 0.0)]
    assert side_by_side(runs, "inclusion") == [{
        "prompt": PROMPT, "after SFT": "The green cat sat.",
        "after GRPO (inclusion)": "green cat cat and the cat and", "after GRPO (sentence)": "I saw a green cat."}]
    found = hacking_findings(table)
    assert (found.n, found.hacked_start, found.hacked_end, found.cut_off_end) == (2, 0.0, 0.5, 0.5)
    hacked = found.comparisons[0]
    # Paired over the 2 shared prompts: prompt 1 hacked only in `inclusion` (1 vs 0 discordant); diff 0.5,
    # var(d) = 1/2 - 0.25 = 0.25, band 2 sqrt(0.25 / 2) = 0.7071; McNemar 2 x P(Bin(1, 1/2) <= 0) = 1.
    assert (hacked.flag, hacked.course, hacked.gated) == ("hacked", 0.5, 0.0)
    assert hacked.noise.paired and hacked.noise.band == pytest.approx(math.sqrt(0.5))
    assert hacked.noise.p_value == 1.0 and not hacked.noise.beyond  # 2 prompts: a wide band
    assert found.comparisons[2].noise.diff == 0.0  # both runs hold every keyword
    reading = hacking_reading(table)
    assert "from 0.0% after SFT to 50.0% after GRPO" in reading
    assert "Hacked after GRPO: 50.0% (inclusion) vs 0.0% (sentence), a difference of +50.0 points, within noise, " \
           "paired band ±70.7 points (McNemar p = 1)." in reading
    with pytest.raises(ValueError, match="reference='course' is not one of the runs"):
        side_by_side(runs, "course")
    with pytest.raises(ValueError, match="no row for run 'sentence'"):
        hacking_reading(table[:2])
    with pytest.raises(ValueError, match="no samples/step_XXXX.jsonl"):
        hacking_table({"empty": tmp_path})


def test_render_hacking_words_the_findings_and_falls_back_to_the_unpaired_band():
    noise = Noise(0.3, 0.1, paired=True, p_value=0.001)
    found = HackingFindings(100, 0.1, 0.4, 0.2, 0.05, (FlagComparison("hacked", 0.4, 0.1, noise),))
    assert render_hacking(found) == (
        "On the course's reward, responses that hold every keyword but are not one sentence (hacked) went from 10.0% "
        "after SFT to 40.0% after GRPO; 20.0% of the final responses were cut off mid-sentence by the token budget "
        "and 5.0% repeat a keyword. Hacked after GRPO: 40.0% (inclusion) vs 10.0% (sentence), a difference of +30.0 "
        "points, beyond noise, paired band ±10.0 points (McNemar p = 0.001). (100 validation prompts, greedy.)")
    # Rows without per-prompt outcomes (an older table): the unpaired band of the two rates.
    rows = [{"run": run, "stage": stage, "n": 100, "inclusion": 1.0, "one_sentence": 0.5, "cut_off": 0.0,
             "repeats_keyword": 0.0, "hacked": rate} for run, stage, rate in
            (("inclusion", "after SFT", 0.0), ("inclusion", "after GRPO", 0.2), ("sentence", "after GRPO", 0.1))]
    hacked = hacking_findings(rows).comparisons[0]
    assert not hacked.noise.paired and hacked.noise.band == pytest.approx(unpaired_band(0.2, 100, 0.1, 100))
