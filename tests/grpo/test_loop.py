"""The GRPO loop (hw3lib.grpo.loop), its config (hw3lib.grpo.config), warm start and CLI.

End-to-end runs use the smoke profile shrunk further (4 questions x 4 samples per step, short
generations) on the warm-started tiny model, in float32 on CPU, so they are deterministic: the
equality tests (resume, Ctrl-C, loss types) compare exact numbers.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hw3lib.grpo.config import GRPOConfig

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))


def tiny_cfg(name: str, **overrides) -> GRPOConfig:
    """The smoke profile (grpo_clip) with tiny batches: 4 questions x 4 samples per GRPO step, two
    optimizer steps of 8 rollouts (2 microbatches of 4) per rollout batch -- off-policy, so old
    log-probs are computed."""
    settings = dict(name=name, n_grpo_steps=2, rollout_batch_size=16, group_size=4, train_batch_size=8,
                    epochs_per_rollout_batch=1, gradient_accumulation_steps=2, n_eval_examples=8, eval_every=2, checkpoint_every=2,
                    n_train_examples=256)
    settings.update(overrides)
    return GRPOConfig.for_profile("smoke", **settings)


def policy_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    checkpoint = run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip()
    return load_file(checkpoint / "policy" / "model.safetensors")


def without_timings(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


# ---- configuration -------------------------------------------------------------------------------------

def test_defaults_are_the_course_settings():
    cfg = GRPOConfig()
    expected = dict(n_grpo_steps=200, learning_rate=1e-5, advantage_eps=1e-6, rollout_batch_size=256, group_size=8,
                    sampling_temperature=1.0, sampling_min_tokens=4, sampling_max_tokens=1024,
                    epochs_per_rollout_batch=1, train_batch_size=256, gradient_accumulation_steps=128,
                    gpu_memory_utilization=0.85, loss_type="reinforce_with_baseline", use_std_normalization=True,
                    weight_decay=0.0, adam_betas=(0.9, 0.95), max_grad_norm=1.0, cliprange=0.2,
                    length_normalization="masked_mean", prompt="r1_zero", monitor_kl=False, wandb_project=None)
    assert {key: getattr(cfg, key) for key in expected} == expected
    assert cfg.n_eval_examples >= 1024
    assert cfg.length_normalization_constant is None  # None: the generation budget (hw3lib.grpo.step)
    # Derived values: 256 // 128 = 2 sequences per microbatch, 32 questions, 128 microbatches, on-policy.
    assert (cfg.micro_train_batch_size, cfg.n_prompts_per_rollout_batch, cfg.n_microbatches_per_rollout_batch,
            cfg.optimizer_steps_per_rollout_batch, cfg.off_policy) == (2, 32, 128, 1, False)
    assert not cfg.needs_old_log_probs


def test_derived_values_off_policy():
    cfg = GRPOConfig(rollout_batch_size=256, train_batch_size=64, gradient_accumulation_steps=16,
                     loss_type="grpo_clip")
    assert (cfg.micro_train_batch_size, cfg.n_microbatches_per_rollout_batch,
            cfg.optimizer_steps_per_rollout_batch) == (4, 64, 4)
    assert cfg.off_policy and cfg.needs_old_log_probs
    assert GRPOConfig(epochs_per_rollout_batch=2, loss_type="grpo_no_clip").needs_old_log_probs
    # On-policy-only losses never need old log-probs, even off-policy.
    assert not GRPOConfig(epochs_per_rollout_batch=2).needs_old_log_probs


@pytest.mark.parametrize("changes, words", [
    (dict(train_batch_size=256, gradient_accumulation_steps=100), ["train_batch_size=256", "gradient_accumulation_steps=100"]),
    (dict(rollout_batch_size=250, group_size=8), ["rollout_batch_size=250", "group_size=8"]),
    (dict(rollout_batch_size=16, train_batch_size=4, gradient_accumulation_steps=1, group_size=8),
     ["train_batch_size=4", "group_size=8"]),
    (dict(rollout_batch_size=256, train_batch_size=96, gradient_accumulation_steps=1),
     ["rollout_batch_size=256", "train_batch_size=96"]),
    (dict(loss_type="ppo"), ["loss_type='ppo'", "grpo_clip"]),
    (dict(length_normalization="sum"), ["length_normalization='sum'"]),
    (dict(prompt="chat"), ["prompt='chat'"]),
    (dict(dataset="math.csv"), ["dataset='math.csv'"]),
    (dict(group_size=1, rollout_batch_size=8, train_batch_size=8, gradient_accumulation_steps=1), ["group_size >= 2"]),
    (dict(name="a/b/c"), ["name='a/b/c'"]),
    (dict(name="../x"), ["name='../x'"]),
])
def test_sanity_checks_name_the_clashing_values(changes, words):
    with pytest.raises(ValueError) as info:
        GRPOConfig(**changes)
    for word in words:
        assert word in str(info.value)


def test_config_is_frozen_and_round_trips(tmp_path):
    cfg = GRPOConfig.for_profile("smoke", loss_type="grpo_clip", monitor_kl=True)
    with pytest.raises(Exception):
        cfg.learning_rate = 1.0
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg.to_dict()))
    assert GRPOConfig.load(path) == cfg
    assert "loss_type = 'grpo_clip'" in cfg.describe()
    with pytest.raises(ValueError, match="unknown fields"):
        GRPOConfig.from_dict({**cfg.to_dict(), "learning_rat": 1.0})


def test_profiles():
    smoke = GRPOConfig.for_profile("smoke")
    assert (smoke.profile, smoke.model, smoke.dataset, smoke.engine, smoke.policy_device) == (
        "smoke", "tiny", "arithmetic", "transformers", "cpu")
    assert smoke.warm_start_steps > 0 and smoke.sampling_max_tokens <= 32 and smoke.group_size == 8
    full = GRPOConfig.for_profile("full")
    assert (full.engine, full.policy_device, full.dataset, full.n_grpo_steps, full.rollout_batch_size) == (
        "vllm", "cuda:0", "gsm8k", 200, 256)
    assert GRPOConfig.for_profile("smoke", n_grpo_steps=3).n_grpo_steps == 3
    with pytest.raises(ValueError, match="unknown settings"):
        GRPOConfig.for_profile("smoke", n_steps=3)


# ---- pure helpers ----------------------------------------------------------------------------------------

# ---- the loop ----------------------------------------------------------------------------------------

def test_resume_and_ctrl_c_reproduce_a_straight_run():
    """4 steps straight == 2 steps + resume + 2 steps == Ctrl-C in step 3 + resume: same metrics
    (timings aside) and identical float32 weights. KL monitoring is on (its reference must be the
    initial policy after a resume too)."""
    from hw3lib.grpo.loop import train

    straight = train(tiny_cfg("straight", n_grpo_steps=4, monitor_kl=True))
    first = straight.train_rows[0]
    assert first["train/kl_k1"] == pytest.approx(0.0, abs=1e-5)  # policy == reference before any update
    assert first["train/kl_k3"] == pytest.approx(0.0, abs=1e-6)
    assert straight.train_rows[-1]["train/kl_k3"] > 0.0
    assert straight.train_rows[1]["time/old_logprobs_s"] == 0.0 < straight.train_rows[0]["time/old_logprobs_s"]
    assert not any(torch.equal(a, b) for a, b in zip(policy_weights(straight.run_dir).values(),
                                                    _initial_weights(straight.config).values()))

    train(tiny_cfg("split", n_grpo_steps=2, monitor_kl=True))
    split = train(tiny_cfg("split", n_grpo_steps=4, monitor_kl=True), resume=True)

    def interrupt(info):
        if info["grpo_step"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(tiny_cfg("ctrl_c", n_grpo_steps=4, monitor_kl=True), callback=interrupt)
    saved = json.loads((split.run_dir.parent / "ctrl_c" / "checkpoints" / "step_000002" / "state.json").read_text())
    assert (saved["grpo_step"], saved["partial_step"]) == (2, False)
    ctrl_c = train(tiny_cfg("ctrl_c", n_grpo_steps=4, monitor_kl=True), resume=True)

    reference = without_timings(straight.metrics)
    assert len(straight.train_rows) == 8 and len(straight.eval_rows) == 3  # 2 optimizer steps per GRPO step
    for other in (split, ctrl_c):
        assert without_timings(other.metrics) == reference
        weights, expected = policy_weights(other.run_dir), policy_weights(straight.run_dir)
        assert weights.keys() == expected.keys()
        assert all(torch.equal(weights[k], expected[k]) for k in expected)
    assert (straight.run_dir / "samples" / "step_0004.jsonl").is_file()
    # Every validated question's outcome is kept (the grids' paired comparisons), matching the logged rate.
    from hw3lib.evaluation.validate import read_outcomes
    last = straight.eval_rows[-1]
    kept = read_outcomes(straight.run_dir, "step_0004", last["eval/n"])
    assert kept is not None and len(kept.answer_rewards) == last["eval/n"] > cfg_saved(straight)
    assert sum(kept.answer_rewards) / last["eval/n"] == pytest.approx(last["eval/answer_reward"])
    saved_config = json.loads((straight.run_dir / "config.json").read_text())
    assert saved_config["n_grpo_steps"] == 4 and saved_config["micro_train_batch_size"] == 4
    # the memory plan the run used, recorded: the tiny model takes a whole optimizer step per forward
    assert saved_config["forward_rows"] == 8 and straight.config.forward_rows == 8


def cfg_saved(result) -> int:
    """How many rollouts the run saved in full per validation (fewer than it validated, in these tests)."""
    return result.config.n_eval_samples_saved


def _initial_weights(cfg):
    from safetensors.torch import load_file

    from hw3lib.models.load import initial_policy_source

    return load_file(Path(initial_policy_source(cfg)) / "model.safetensors")


def test_resume_of_a_finished_run_reuses_it_or_redoes_a_lost_final_validation(monkeypatch, capsys):
    import hw3lib.grpo.loop as train_module
    from hw3lib.core.io import atomic_write_jsonl, read_jsonl

    cfg = tiny_cfg("finished", n_grpo_steps=1, eval_every=1, checkpoint_every=1, n_eval_examples=4)
    done = train_module.train(cfg)
    import hw3lib.models.load as models

    loads = []  # train imports the loader lazily from hw3lib.models.load: watch it there
    original = models.load_model_and_tokenizer
    monkeypatch.setattr(models, "load_model_and_tokenizer", lambda *a, **k: loads.append(a) or original(*a, **k))
    again = train_module.train(cfg, resume=True)  # finished: read back, no model loaded
    assert loads == [] and again.metrics == done.metrics and again.grpo_steps == 1
    # The reuse message names the folder as stored notebook outputs may show it: relative, never absolute.
    printed = capsys.readouterr().out
    assert "runs/finished has finished all 1 GRPO steps with these settings; reusing it" in printed
    assert str(done.run_dir) not in printed
    # Ctrl-C during the final validation: the checkpoint of the last step, without the validation row.
    for metrics in (done.run_dir / "metrics.jsonl", done.checkpoint / "metrics.jsonl"):
        atomic_write_jsonl(metrics, read_jsonl(metrics)[:-1])
    redone = train_module.train(cfg, resume=True)
    assert loads  # this time the policy was loaded to validate
    assert without_timings(redone.eval_rows) == without_timings(done.eval_rows)
    assert len(redone.train_rows) == len(done.train_rows)


def test_resume_refuses_a_different_config():
    from hw3lib.grpo.loop import train

    train(tiny_cfg("mismatch", n_grpo_steps=1, eval_every=1, checkpoint_every=1, n_eval_examples=4))
    with pytest.raises(ValueError, match="learning_rate"):
        train(tiny_cfg("mismatch", n_grpo_steps=2, eval_every=1, checkpoint_every=1, n_eval_examples=4,
                       learning_rate=1.0), resume=True)


def test_grpo_clip_on_policy_has_the_reinforce_gradient():
    """One epoch, one optimizer step per rollout batch: the ratio is 1, so grpo_clip's gradient is
    reinforce_with_baseline's. Off-policy (2 epochs) the first step's ratio uses the separately
    computed old log-probs: still the same gradient, then the ratio moves in the second epoch."""
    from hw3lib.grpo.loop import train

    def capture(into):
        def callback(info):
            if info["step"] == 1:
                into.update({name: p.grad.clone() for name, p in info["policy"].named_parameters()
                             if p.grad is not None})
        return callback

    on_policy = dict(n_grpo_steps=1, n_eval_examples=1, train_batch_size=16, learning_rate=1e-3, lr_warmup_steps=0)
    grads = {}
    for loss_type in ("reinforce_with_baseline", "grpo_clip"):
        grads[loss_type] = {}
        train(tiny_cfg(f"grad_{loss_type}", loss_type=loss_type, **on_policy), callback=capture(grads[loss_type]))
    off = {}
    result = train(tiny_cfg("grad_off_policy", loss_type="grpo_clip", epochs_per_rollout_batch=2, **on_policy),
                   callback=capture(off))
    reinforce = grads["reinforce_with_baseline"]
    assert sum(g.abs().sum().item() for g in reinforce.values()) > 0  # a real, nonzero gradient
    for name, grad in reinforce.items():
        torch.testing.assert_close(grads["grpo_clip"][name], grad, rtol=1e-5, atol=1e-8)
        torch.testing.assert_close(off[name], grad, rtol=1e-3, atol=1e-6)
    first, second = result.train_rows
    assert first["train/ratio_mean"] == pytest.approx(1.0, abs=1e-5) and first["train/clip_fraction"] == 0.0
    assert abs(second["train/ratio_mean"] - 1.0) > 1e-4  # the first update moved the policy off the samples


def test_non_finite_loss_or_gradient_skips_the_update(monkeypatch):
    """A NaN gradient (step 2) and a NaN loss (step 3) are skipped and logged; the weights and
    Adam's moments stay finite and unchanged by those steps."""
    import hw3lib.grpo.loop as train_module
    import hw3lib.grpo.step as train_step

    real_loss = train_step.microbatch_loss
    done = {"steps": 0}  # optimizer steps whose microbatches have run (the callback comes after them)

    def nan_loss_in_step_3(*args, **kwargs):
        loss = real_loss(*args, **kwargs)
        if done["steps"] == 2:  # optimizer step 3's microbatches, however many forwards it takes
            loss = loss * float("nan")
        return loss

    monkeypatch.setattr(train_step, "microbatch_loss", nan_loss_in_step_3)
    snapshots = {}

    def callback(info):
        policy = info["policy"]
        done["steps"] = info["step"]
        snapshots[info["step"]] = {k: v.detach().clone() for k, v in policy.state_dict().items()}
        if info["step"] == 2:
            next(policy.parameters()).grad.fill_(float("nan"))

    result = train_module.train(tiny_cfg("nan", n_grpo_steps=2, eval_every=2, checkpoint_every=2,
                                         n_eval_examples=1), callback=callback)
    skipped = [row["train/skipped_steps"] for row in result.train_rows]
    assert skipped == [0, 1, 2, 2]  # 2 GRPO steps x 2 optimizer steps
    assert math.isnan(result.train_rows[2]["train/loss"])
    for before, after in ((2, 3), (3, 4)):  # weights entering the step == weights leaving it
        assert all(torch.equal(snapshots[before][k], snapshots[after][k]) for k in snapshots[before])
    assert not all(torch.equal(snapshots[1][k], snapshots[2][k]) for k in snapshots[1])  # step 1 did update
    final = policy_weights(result.run_dir)
    assert all(torch.isfinite(v).all() for v in final.values())
    assert not all(torch.equal(final[k], snapshots[4][k]) for k in final)  # step 4 updated again
    optimizer = torch.load(result.checkpoint / "optimizer.pt", weights_only=True)
    assert all(torch.isfinite(t).all() for s in optimizer["state"].values() for t in s.values())


def test_checkpoint_write_is_atomic(monkeypatch, tmp_path):
    """A failure while writing a checkpoint leaves the previous one named by `latest`, intact."""
    import hw3lib.core.runs as runs
    from hw3lib.grpo.loop import train

    result = train(tiny_cfg("atomic", n_grpo_steps=1, eval_every=1, checkpoint_every=1,
                                         n_eval_examples=1))
    from hw3lib.models.load import load_model_and_tokenizer

    policy, tokenizer = load_model_and_tokenizer(str(result.checkpoint / "policy"))
    optimizer = torch.optim.AdamW(policy.parameters())

    def broken_save(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(runs.torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        runs.save_checkpoint(result.run_dir, policy, tokenizer, optimizer,
                             {"grpo_step": 2, "optimizer_step": 2, "skipped_steps": 0, "elapsed_s": 0.0},
                             runs.rng_state())
    assert runs.latest_checkpoint(result.run_dir) == result.checkpoint
    assert not (result.run_dir / "checkpoints" / "step_000002").exists()
    assert (result.checkpoint / "optimizer.pt").is_file()


def test_smoke_grpo_learns():
    """The smoke recipe, shortened to 40 of its 50 steps, learns: the training answer reward (2,560 rollouts per
    quarter of the run) rises by >= 5 points from the first quarter to the last, and the validation (256
    questions, greedy) ends above its start. Measured here, one torch thread as under pytest-xdist: training
    0.224 -> 0.367; validation 0.344, 0.355, 0.344, 0.477, 0.383 at steps 0-40. One run's validation moves by
    several points from machine to machine (float summation order), so the rise itself is asserted on the
    training reward, whose quarter means are ten times less noisy."""
    import statistics

    from hw3lib.grpo.loop import train

    cfg = GRPOConfig.for_profile("smoke", name="learn", n_grpo_steps=40, eval_every=10, checkpoint_every=0)
    result = train(cfg)
    before, after = result.eval_rows[0]["eval/answer_reward"], result.eval_rows[-1]["eval/answer_reward"]
    trained = [row["train/answer_reward"] for row in result.train_rows]
    quarter = len(trained) // 4
    first, last = statistics.fmean(trained[:quarter]), statistics.fmean(trained[-quarter:])
    print(f"validation answer reward {before:.3f} -> {after:.3f}; training {first:.3f} -> {last:.3f}")
    assert before > 0.0  # the warm start gives GRPO something to work with
    assert last - first >= 0.05 and after > before
    rows = result.train_rows
    assert len(rows) == cfg.n_grpo_steps * cfg.epochs_per_rollout_batch * cfg.optimizer_steps_per_rollout_batch
    assert all(math.isfinite(r["train/loss"]) and math.isfinite(r["train/grad_norm"]) for r in rows)
    expected = {"train/loss", "train/grad_norm", "train/entropy", "train/reward", "train/format_reward",
                "train/answer_reward", "train/response_length_mean", "train/response_length_max",
                "train/truncation_rate", "train/zero_variance_group_fraction", "train/lr", "train/skipped_steps",
                "time/generation_s", "time/scoring_s", "time/old_logprobs_s", "time/train_s", "time/weight_sync_s",
                "time/tokens_per_s", "step"}
    assert expected <= rows[0].keys()
    assert {"eval/answer_reward", "eval/format_reward", "eval/response_length"} <= result.eval_rows[0].keys()
    from hw3lib.core.writeup_keys import RESULT_KEYS  # the writeup's `train_loop` result, from this run
    from hw3lib.grpo.results import run_summary

    summary = run_summary(result)
    assert set(RESULT_KEYS["train_loop"]) <= summary.keys() and summary["eval_answer_reward_rise"] == after - before
    # Example rollouts over time: the same validation questions at the first, a middle and the last validation.
    validated = [row["grpo_step"] for row in result.eval_rows]
    examples = summary["example_rollouts"]
    assert len(examples) == 2 and all(e["question"] and e["gold"] for e in examples)
    for example in examples:
        steps = [s["grpo_step"] for s in example["steps"]]
        assert steps[0] == validated[0] and steps[-1] == validated[-1] and steps == sorted(set(steps))
        assert all(s["answer_reward"] in (0.0, 1.0) and s["response"] for s in example["steps"])


# ---- warm start, CLI, benchmark ---------------------------------------------------------------------------

def test_warm_start_is_cached(tmp_path, tiny_model_dir):
    from hw3lib.tasks.data import make_arithmetic_problems
    from hw3lib.models.warmstart import sft_warm_start

    tiny = str(tiny_model_dir)  # the warm start takes a resolved folder (hw3lib.models.load.resolve)
    records = make_arithmetic_problems(16, seed=5, max_operand=9)
    path = sft_warm_start(tiny, records, steps=2, lr=1e-3, batch_size=4, seed=0, out_dir=tmp_path, verbose=False)
    assert (path / "config.json").is_file() and (path / "warm_start.json").is_file()
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert sft_warm_start(tiny, records, steps=2, lr=1e-3, batch_size=4, seed=0, out_dir=tmp_path) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not retrained
    other = sft_warm_start(tiny, records, steps=3, lr=1e-3, batch_size=4, seed=0, out_dir=tmp_path, verbose=False)
    assert other != path


def test_cli_train_one_step():
    from typer.testing import CliRunner

    from hw3lib.cli import app

    args = ["train", "--profile", "smoke", "--steps", "1", "--name", "cli_run", "--set", "rollout_batch_size=16",
            "--set", "group_size=4", "--set", "train_batch_size=16", "--set", "n_eval_examples=4",
            "--loss-type", "reinforce_with_baseline"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "eval/answer_reward" in result.output and "1 GRPO steps" in result.output
    result = CliRunner().invoke(app, ["train", "--profile", "smoke", "--set", "group_size=3"])
    assert result.exit_code != 0 and "group_size=3" in result.output


def test_bench_train_gpu_small_runs_on_cpu(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "bench" / "bench_train_gpu.py"), "--small", "--sequences", "4",
                          "--micro", "2", "4", "--repeats", "1", "--out", str(tmp_path / "train.json")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout.strip().splitlines()[-1])
    assert [r["micro_batch_size"] for r in results] == [2, 4]
    assert all(r["tokens_per_s"] > 0 and r["finite_entropy"] for r in results)
    record = json.loads((tmp_path / "train.json").read_text())  # what a GPU run commits under bench/results/
    assert record["rows"] == results and record["torch"] == torch.__version__ and "command" in record


def test_rehearse_gpu_small_runs_every_phase_on_cpu(tmp_path):
    """The GPU rehearsal's code path (bench/rehearse_gpu.py) with the tiny model on a CPU, in bf16 as on the GPU
    (the engine's own copy, the weight push): every phase runs, GRPO takes 3 steps and the resume a 4th, and each
    memory window carries the model's prediction."""
    out = subprocess.run([sys.executable, str(REPO / "bench" / "rehearse_gpu.py"), "--small", "--device", "cpu",
                          "--dtype", "bfloat16", "--out", str(tmp_path / "rehearse.json")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    phases = json.loads((tmp_path / "rehearse.json").read_text())["phases"]
    assert list(phases) == ["eval", "grpo", "grpo_resume", "sft"]
    assert phases["grpo"]["result"]["steps"] == [1, 2, 3] and phases["grpo_resume"]["result"]["steps"] == [1, 2, 3, 4]
    assert phases["grpo"]["result"]["checkpoints"] and phases["sft"]["result"]["steps"] == 2
    kinds = {name: [w["kind"] for w in phase["windows"]] for name, phase in phases.items()}
    assert kinds["grpo"].count("grpo_train") == 3 and kinds["grpo_resume"].count("grpo_train") == 1
    assert kinds["sft"].count("sft_train") == 2 and kinds["eval"] == ["generate"]
    windows = [w for phase in phases.values() for w in phase["windows"]]
    assert all(w["peak_predicted"] > w["resident_predicted"] > 0 for w in windows)


# ---- nothing lost: the run folder's rules, Ctrl-C in a validation, wandb across resumes -------------------

def test_an_existing_run_is_never_deleted_implicitly():
    """Re-running a finished run reuses it; an unfinished or different one is refused with an error naming
    the folder and the choices; only overwrite=True deletes (and redoes) it."""
    from hw3lib.core.runs import RunExistsError
    from hw3lib.grpo.loop import train

    cfg = tiny_cfg("keep", n_grpo_steps=1, eval_every=1, checkpoint_every=1, n_eval_examples=4)
    done = train(cfg)
    assert train(cfg).metrics == done.metrics  # finished, same settings: read back
    for other, words in ((cfg.replace(n_grpo_steps=2), "resume=True"), (cfg.replace(learning_rate=1e-3), "learning_rate")):
        with pytest.raises(RunExistsError) as error:
            train(other)
        message = str(error.value)
        assert str(done.run_dir) in message and words in message and "overwrite=True" in message
        assert policy_weights(done.run_dir).keys()  # still there
    assert without_timings(train(cfg).metrics) == without_timings(done.metrics)
    redone = train(cfg.replace(learning_rate=1e-3), overwrite=True)
    assert json.loads((redone.run_dir / "config.json").read_text())["learning_rate"] == 1e-3
    (redone.run_dir / "checkpoints" / "latest").unlink()  # metrics without a checkpoint: still refused
    with pytest.raises(RunExistsError, match="no checkpoint") as error:
        train(cfg, resume=True)
    assert "Choose: another name" in str(error.value) and "--resume) to continue" not in str(error.value)
    with pytest.raises(ValueError, match="contradict"):
        train(cfg, resume=True, overwrite=True)


def test_ctrl_c_during_a_mid_run_validation_is_redone_on_resume(monkeypatch):
    import hw3lib.grpo.loop as train_module

    cfg = tiny_cfg("ctrl_c_eval", n_grpo_steps=2, eval_every=1, checkpoint_every=2, n_eval_examples=4)
    straight = train_module.train(cfg.replace(name="eval_straight"))
    real_validate, calls = train_module.validate, {"n": 0}

    def interrupted_second_validation(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:  # the validation after GRPO step 1
            raise KeyboardInterrupt
        return real_validate(*args, **kwargs)

    monkeypatch.setattr(train_module, "validate", interrupted_second_validation)
    with pytest.raises(KeyboardInterrupt):
        train_module.train(cfg)
    monkeypatch.setattr(train_module, "validate", real_validate)
    resumed = train_module.train(cfg, resume=True)
    assert [row["grpo_step"] for row in resumed.eval_rows] == [0, 1, 2]
    assert without_timings(resumed.metrics) == without_timings(straight.metrics)


class _FakeWandb:
    """Stands in for the wandb module: records init calls and every logged row."""

    def __init__(self):
        self.inits, self.logged = [], []

    def init(self, **kwargs):
        self.inits.append(kwargs)
        fake = self

        class Run:
            def log(self, row, step):
                fake.logged.append((step, dict(row)))

            def finish(self):
                pass

        return Run()


def test_a_resumed_run_continues_the_same_wandb_run_and_never_logs_a_row_twice(monkeypatch):
    """A crash in step 4 (after step 3's rows were logged, checkpoint at step 2): the resumed run re-uses
    the wandb id and does not send step 3's redone rows again."""
    import sys

    from hw3lib.grpo.loop import train

    import importlib.machinery
    import types

    fake = _FakeWandb()
    module = types.ModuleType("wandb")
    module.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
    module.init = fake.init
    monkeypatch.setitem(sys.modules, "wandb", module)
    cfg = tiny_cfg("wandb", n_grpo_steps=4, eval_every=4, checkpoint_every=2, n_eval_examples=2,
                   wandb_project="hw3-test")

    def crash(info):
        if info["grpo_step"] == 4:
            raise RuntimeError("machine lost")

    with pytest.raises(RuntimeError, match="machine lost"):
        train(cfg, callback=crash)
    sent_before_resume = len(fake.logged)
    result = train(cfg, resume=True)
    assert len({init["id"] for init in fake.inits}) == 1 and len(fake.inits) == 2
    steps = [(step, "eval/answer_reward" in row) for step, row in fake.logged]
    assert len(steps) == len(set(steps)) == len(result.metrics)  # every row once, none twice
    assert sent_before_resume == 7  # validation 0 + 2 optimizer steps x 3 GRPO steps; step 3 lies past the checkpoint
    assert [s for s, _ in steps] == [row["step"] for row in result.metrics]


def test_bfloat16_run_resumes_exactly_from_its_float32_masters():
    """Mixed precision: 2 steps straight == 1 step + resume + 1 step (float32 masters in the checkpoint,
    bf16 copies in a separate engine), and the checkpoint holds float32 weights."""
    from hw3lib.grpo.loop import train

    settings = dict(n_grpo_steps=2, eval_every=2, checkpoint_every=1, n_eval_examples=4, dtype="bfloat16",
                    learning_rate=1e-5, lr_warmup_steps=0)
    straight = train(tiny_cfg("bf16_straight", **settings))
    train(tiny_cfg("bf16_split", **{**settings, "n_grpo_steps": 1}))
    split = train(tiny_cfg("bf16_split", **settings), resume=True)
    weights, expected = policy_weights(split.run_dir), policy_weights(straight.run_dir)
    assert all(t.dtype == torch.float32 for t in expected.values())
    assert all(torch.equal(weights[k], expected[k]) for k in expected)
    # (the split run also validated after step 1, its final step then)
    assert without_timings(split.train_rows) == without_timings(straight.train_rows)
    assert straight.train_rows[0]["train/logprob_mismatch_mean_abs"] > 0  # bf16 engine vs float32 trainer
