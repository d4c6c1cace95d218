"""hw3lib.core.course: the course selector, and the settings the handouts fix (one assertion per default)."""

from __future__ import annotations

import pytest

from hw3lib.core.course import COURSE_NAMES, SECTIONS, get_course, section_table, sections_to_run
from hw3lib.grpo.config import GRPOConfig
from hw3lib.sft.config import EIConfig, SFTConfig


def test_default_environment_aliases_and_errors(monkeypatch):
    monkeypatch.delenv("HW3_COURSE", raising=False)
    assert get_course().name == "nlpdl-hw3"
    monkeypatch.setenv("HW3_COURSE", "cse599o-a3")
    assert get_course().name == "cse599o-a3" and get_course("cs336-a5").dataset == "math"
    # the old names (data and model) stay as aliases of a preset
    assert get_course("gsm8k-qwen3") is get_course("nlpdl-hw3") and get_course("math-qwen2.5") is get_course("cs336-a5")
    monkeypatch.setenv("HW3_COURSE", "math-qwen2.5")
    assert get_course().name == "cs336-a5"
    with pytest.raises(ValueError, match="unknown course 'cs336'.*nlpdl-hw3, cse599o-a3, cs336-a5, cs336-a5-2026"
                                         ".*gsm8k-qwen3 = nlpdl-hw3.*HW3_COURSE"):
        get_course("cs336")
    assert COURSE_NAMES == ("nlpdl-hw3", "cse599o-a3", "cs336-a5", "cs336-a5-2026")


def test_each_preset_asks_its_own_handouts_sections():
    """Issue 43: the two MATH courses no longer share one section list (the union of both handouts)."""
    cse, cs336, cs336_2026 = get_course("cse599o-a3"), get_course("cs336-a5"), get_course("cs336-a5-2026")
    assert {"async_grpo", "kl_drift", "keyword"} <= set(cse.sections)
    assert not {"sft", "expert_iteration", "leaderboard"} & set(cse.sections)
    assert {"sft", "expert_iteration", "leaderboard"} <= set(cs336.sections)
    assert not {"async_grpo", "kl_drift", "keyword"} & set(cs336.sections)
    assert (cse.dataset, cs336.dataset, cs336_2026.dataset) == ("math", "math", "gsm8k")
    # every section is some handout's, apart from none: the union of the presets covers the workbook
    assert set().union(*(get_course(name).sections for name in COURSE_NAMES)) == set(SECTIONS)
    assert cs336_2026.adapters == "hw3lib.adapters_cs336_2026" and get_course("nlpdl-hw3").adapters == "hw3lib.adapters"


def test_cs336_2026_trains_olmo_in_full_its_stand_in_in_the_rehearsal_and_the_tiny_model_in_smoke(monkeypatch):
    from hw3lib.core.profile import get_profile

    for variable in ("HW3_MODEL", "HW3_REHEARSAL"):
        monkeypatch.delenv(variable, raising=False)
    crs = get_course("cs336-a5-2026")
    assert crs.model_for(get_profile("full")) == "allenai/OLMo-2-0425-1B"
    assert crs.model_for(get_profile("smoke")) == get_profile("smoke").model
    cfg = GRPOConfig.for_profile("full", course="cs336-a5-2026")
    assert (cfg.model, cfg.dataset) == ("allenai/OLMo-2-0425-1B", "gsm8k")
    assert GRPOConfig.for_profile("smoke", course="cs336-a5-2026").model == GRPOConfig.for_profile("smoke").model
    monkeypatch.setenv("HW3_MODEL", "my/olmo")  # the user's own model still wins
    assert crs.model_for(get_profile("full")) == "my/olmo"
    monkeypatch.delenv("HW3_MODEL")
    monkeypatch.setenv("HW3_REHEARSAL", "1")
    assert crs.model_for(get_profile("full")) == "stand-in:allenai/OLMo-2-0425-1B"


@pytest.mark.parametrize("cls", [GRPOConfig, SFTConfig, EIConfig])
def test_full_profile_data_and_model_follow_the_course(cls):
    gsm8k = cls.for_profile("full", course="gsm8k-qwen3")
    math = cls.for_profile("full", course="math-qwen2.5")
    assert (gsm8k.dataset, gsm8k.model) == ("gsm8k", "Qwen/Qwen3-0.6B")
    assert (math.dataset, math.model) == ("math", "Qwen/Qwen2.5-Math-1.5B")
    # explicit settings still win
    assert cls.for_profile("full", course="math-qwen2.5", model="my/model").model == "my/model"


@pytest.mark.parametrize("cls", [GRPOConfig, SFTConfig, EIConfig])
def test_smoke_profile_keeps_the_cpu_recipe_and_swaps_the_math_task(cls):
    gsm8k = cls.for_profile("smoke", course="gsm8k-qwen3")
    math = cls.for_profile("smoke", course="math-qwen2.5")
    assert gsm8k.dataset == "arithmetic" and math.dataset == "math-synthetic"
    assert math.model == gsm8k.model  # the smoke recipe's tiny model, not the GSM8K-SFT'd `tiny-sft`
    # A worked MATH-format solution is up to 92 tokens: the arithmetic recipe's 32 would cut nearly all of them.
    assert (gsm8k.sampling_max_tokens, math.sampling_max_tokens) == (32, 96)
    assert cls.for_profile("smoke", course="gsm8k-qwen3", dataset="math-synthetic").sampling_max_tokens == 96
    if hasattr(cls, "warm_start_steps"):  # GRPO and EI: a longer warm start on the harder task
        assert (gsm8k.warm_start_steps, math.warm_start_steps) == (125, 200)
    # The MATH track validates as its course does (sampled at T=1) on 512 held-out problems; GSM8K's stays greedy.
    assert (gsm8k.eval_temperature, gsm8k.n_eval_examples) == (0.0, 256)
    assert (math.eval_temperature, math.n_eval_examples) == (1.0, 512)


@pytest.mark.parametrize("cls", [GRPOConfig, SFTConfig, EIConfig])
def test_cis_short_notebook_setting_validates_on_fewer_examples_in_smoke_only(cls, monkeypatch):
    monkeypatch.setenv("HW3_NOTEBOOK_SHORT", "1")
    for course in ("gsm8k-qwen3", "math-qwen2.5"):
        assert cls.for_profile("smoke", course=course).n_eval_examples == 64
        assert cls.for_profile("smoke", course=course, n_eval_examples=100).n_eval_examples == 100  # overrides win
        assert cls.for_profile("full", course=course).n_eval_examples >= 1024  # the full profile never shortens
    if cls is not SFTConfig:  # GRPO and EI: a shorter warm start
        assert cls.for_profile("smoke", course="math-qwen2.5").warm_start_steps == 60
    if cls is GRPOConfig:  # a quarter of the recipe's rollout batch, in the recipe's shape
        short = cls.for_profile("smoke")
        assert (short.rollout_batch_size, short.train_batch_size, short.optimizer_steps_per_rollout_batch) == (64, 16, 4)
    monkeypatch.setenv("HW3_NOTEBOOK_SHORT", "0")
    assert cls.for_profile("smoke").n_eval_examples == 256
    if cls is GRPOConfig:
        assert cls.for_profile("smoke").rollout_batch_size == 256


def test_the_courses_evaluation_settings_in_the_full_profile():
    for cls in (GRPOConfig, SFTConfig, EIConfig):
        cfg = cls.for_profile("full")
        assert cfg.eval_temperature == 1.0 and cfg.sampling_max_tokens == 1024 and cfg.n_eval_examples >= 1024
        assert cfg.prompt == "r1_zero"
    from hw3lib.evaluation.validate import validation_label
    from hw3lib.tasks.prompt_table import stop_strings_for

    assert stop_strings_for("r1_zero") == ("</answer>",)
    assert validation_label(GRPOConfig.for_profile("full")) == "sampled at T=1, top-p 1.0, 1024 tokens"
    # smoke validates greedily, and says so
    assert validation_label(GRPOConfig.for_profile("smoke")) == "greedy, 32 tokens"
    assert validation_label(GRPOConfig.for_profile("smoke", course="math-qwen2.5")) == "sampled at T=1, top-p 1.0, 96 tokens"


def test_the_math_handouts_sft_and_expert_iteration_settings():
    from hw3lib.sft.experiments import EI_VARIANTS, SFT_SIZES

    assert SFT_SIZES == (128, 256, 512, 1024, None)
    assert EIConfig().n_ei_steps == 5 and EIConfig().questions_per_round == 512
    base = EIConfig()
    sizes = {variant.get("questions_per_round", base.questions_per_round) for variant in EI_VARIANTS.values()}
    assert sizes == {512, 1024, 2048}
    assert {"group_size"} <= {key for variant in EI_VARIANTS.values() for key in variant}  # G varied
    assert {"sft_epochs"} <= {key for variant in EI_VARIANTS.values() for key in variant}  # SFT epochs varied


def test_the_broad_off_policy_sweep_is_under_50_steps():
    from hw3lib.experiments.grids import grid_base

    assert grid_base("off_policy", "full").n_grpo_steps < 50
    assert grid_base("learning_rate", "full").n_grpo_steps == 200


def test_sections_and_their_table():
    gsm8k, math = get_course("gsm8k-qwen3"), get_course("cs336-a5")
    assert gsm8k.covers("best_of_n") and gsm8k.covers("kissing") and not gsm8k.covers("expert_iteration")
    assert math.covers("expert_iteration") and not math.covers("keyword") and not math.covers("best_of_n")
    with pytest.raises(ValueError, match="unknown section"):
        gsm8k.covers("dpo")
    table = section_table(math)
    assert table.count("\n") == len(SECTIONS) + 1 and "| 05 expert iteration | yes |" in table
    assert "| 02 Best-of-N | extra |" in table and "in the CS336 A5 (2025) handout" in table


def test_course_questions_per_course_and_profile(tmp_path, monkeypatch, shared_data_dir):
    import json

    from hw3lib.core.profile import get_profile
    from hw3lib.tasks.data import course_questions

    monkeypatch.setenv("HW3_CACHE_DIR", str(tmp_path / "cache"))
    gsm8k, math = get_course("gsm8k-qwen3"), get_course("math-qwen2.5")
    records, label = course_questions(gsm8k, "smoke", limit=3)
    assert label == "GSM8K test" and len(records) == 3 and records[0]["gold"].lstrip("-").isdigit()
    records, label = course_questions(math, "smoke", limit=5)
    assert label == "generated MATH-format test" and len(records) == 5
    assert all("$" in r["question"] for r in records)  # LaTeX problems, \boxed answers
    math_file = tmp_path / "math.jsonl"
    math_file.write_text(json.dumps({"problem": "What is $1+1$?", "solution": "$\\boxed{2}$"}) + "\n")
    monkeypatch.setenv("HW3_MATH_DATA", str(math_file))
    records, label = course_questions(math, "full")
    assert label == "MATH test" and records == [{"question": "What is $1+1$?", "gold": "2",
                                                 "answer": "$\\boxed{2}$"}]
    assert math.model_for(get_profile("full")) == "Qwen/Qwen2.5-Math-1.5B"
    assert gsm8k.model_for(get_profile("full")) == "Qwen/Qwen3-0.6B"


def test_each_course_has_its_own_runs_folder(tmp_path, monkeypatch):
    from hw3lib.core.io import runs_dir

    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("HW3_COURSE", raising=False)
    assert runs_dir() == tmp_path / "runs"  # the default course keeps the folder the workbook always used
    monkeypatch.setenv("HW3_COURSE", "cse599o-a3")
    assert runs_dir() == tmp_path / "runs" / "math-qwen2.5" and runs_dir().is_dir()
    monkeypatch.setenv("HW3_COURSE", "cs336-a5")  # the other MATH course trains the same runs: it shares them
    assert runs_dir() == tmp_path / "runs" / "math-qwen2.5"
    monkeypatch.setenv("HW3_COURSE", "gsm8k-qwen3")  # an alias of the default preset: the default folder
    assert runs_dir() == tmp_path / "runs"
    monkeypatch.setenv("HW3_COURSE", "cs336-a5-2026")  # OLMo in the full profile; smoke's tiny model as NLPDL's
    monkeypatch.setenv("HW3_PROFILE", "full")
    assert runs_dir() == tmp_path / "runs" / "gsm8k-olmo"
    monkeypatch.setenv("HW3_PROFILE", "smoke")
    assert runs_dir() == tmp_path / "runs"


def test_sections_to_run_the_handouts_by_default_and_everything_when_asked(monkeypatch):
    """Issue 41: Run-All on a GPU started every section, extras included; issue 46: `make workbook` in smoke ran every
    course's sections (69.6 minutes on 2 cores). The extras are opt-in in both profiles; CI asks for them."""
    for variable in ("HW3_EXTRAS", "HW3_REHEARSAL"):
        monkeypatch.delenv(variable, raising=False)
    gsm8k, math = get_course("gsm8k-qwen3"), get_course("math-qwen2.5")
    assert sections_to_run(gsm8k, "full") == set(gsm8k.sections) and "leaderboard" not in sections_to_run(gsm8k, "full")
    assert sections_to_run("math-qwen2.5", "full") == set(math.sections)
    assert sections_to_run(gsm8k, "smoke") == set(gsm8k.sections) and sections_to_run(math, "smoke") == set(math.sections)
    assert sections_to_run(gsm8k, "full", extras=True) == sections_to_run(gsm8k, "smoke", extras=True) == set(SECTIONS)
    monkeypatch.setenv("HW3_EXTRAS", "1")
    assert sections_to_run(gsm8k, "full") == set(SECTIONS)
    assert sections_to_run(gsm8k, "full", extras=False) == set(gsm8k.sections)  # and over the environment
    monkeypatch.setenv("HW3_EXTRAS", "no")
    assert sections_to_run(math, "smoke") == set(math.sections)
    monkeypatch.setenv("HW3_EXTRAS", "maybe")
    with pytest.raises(ValueError, match="HW3_EXTRAS='maybe'"):
        sections_to_run(math, "smoke")
    monkeypatch.setenv("HW3_COURSE", "math-qwen2.5")
    assert sections_to_run(None, "full", extras=False) == set(math.sections)  # None: the course from $HW3_COURSE
    monkeypatch.delenv("HW3_EXTRAS")
    monkeypatch.setenv("HW3_REHEARSAL", "1")  # the full profile's CPU rehearsal (CI) walks a student's Run-All
    assert sections_to_run(gsm8k, "full") == set(gsm8k.sections)
