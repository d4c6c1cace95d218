"""hw3lib.core.runs.config_differences: what blocks a resume, and options added after a run was saved."""

from __future__ import annotations

from hw3lib.core.lifecycle import field_defaults
from hw3lib.core.runs import config_differences
from hw3lib.grpo.config import GRPOConfig


def test_a_changed_setting_is_named_with_both_values():
    assert config_differences({"learning_rate": 1e-5, "seed": 0}, {"learning_rate": 3e-5, "seed": 0}) == [
        "learning_rate: saved 1e-05 vs now 3e-05"]


def test_a_setting_added_later_counts_as_its_default():
    cfg = GRPOConfig()
    saved = cfg.to_dict()
    del saved["monitor_kl"]  # a run saved before the option existed
    assert config_differences(saved, cfg.to_dict()) == ["monitor_kl: saved None vs now False"]  # without defaults
    assert config_differences(saved, cfg.to_dict(), defaults=field_defaults(cfg)) == []
    # ... but turning the new option on is still a difference
    on = cfg.replace(monitor_kl=True)
    assert config_differences(saved, on.to_dict(), defaults=field_defaults(cfg)) == [
        "monitor_kl: saved False vs now True"]


def test_field_defaults_are_the_class_defaults():
    defaults = field_defaults(GRPOConfig.for_profile("smoke"))
    assert defaults["learning_rate"] == GRPOConfig().learning_rate and defaults["adam_betas"] == (0.9, 0.95)
    assert defaults["eval_temperature"] == 1.0  # the class default, not the smoke profile's 0.0


def test_a_plan_left_to_choose_matches_the_recorded_one_and_a_set_one_must_agree():
    from hw3lib.core.runs import config_differences

    saved = {"learning_rate": 1e-5, "forward_rows": 13, "prompt_tokens": 400}
    assert config_differences(saved, {"learning_rate": 1e-5, "forward_rows": None, "prompt_tokens": None}) == []
    assert config_differences(saved, {"learning_rate": 1e-5, "forward_rows": 13, "prompt_tokens": 400}) == []
    assert config_differences(saved, {"learning_rate": 1e-5, "forward_rows": 7, "prompt_tokens": 400}) == [
        "forward_rows: saved 13 vs now 7"]
