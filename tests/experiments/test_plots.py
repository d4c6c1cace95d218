"""hw3lib.experiments.plots: each plot kind writes figures/<grid>_<kind>.png|pdf with stable names, from grid results
built by hand (no training), and the per-step averaging it plots is right."""

from __future__ import annotations


import pytest

from hw3lib.experiments.grids import GridResult, build_grid
from hw3lib.core.lifecycle import RunResult


@pytest.fixture
def figures(tmp_path, monkeypatch):
    import hw3lib.core.io

    monkeypatch.setattr(hw3lib.core.io, "figures_dir", lambda: tmp_path)  # save_figure's bare stems land here
    return tmp_path


def _metrics(steps: int, kl: bool, clip: bool, rise: float) -> list[dict]:
    rows = [{"step": 0, "grpo_step": 0, "eval/answer_reward": 0.3, "eval/n": 64, "time/elapsed_s": 0.5,
             "time/eval_s": 0.5}]
    for g in range(1, steps + 1):
        for k in range(2):  # two optimizer steps per GRPO step
            row = {"step": 2 * (g - 1) + k + 1, "grpo_step": g, "train/loss": 0.1, "train/grad_norm": 0.5 + k,
                   "train/entropy": 1.0 - 0.1 * g, "train/reward": 0.3, "train/response_length_mean": 20.0 + g,
                   "time/generation_s": 2.0 if k == 0 else 0.0, "time/scoring_s": 0.1 if k == 0 else 0.0,
                   "time/old_logprobs_s": 0.2 if k == 0 else 0.0, "time/train_s": 1.0,
                   "time/weight_sync_s": 0.05 if k == 1 else 0.0, "time/elapsed_s": 3.0 * g}
            if clip:
                row["train/clip_fraction"] = 0.1 * k
            if kl:
                row.update({"train/kl_k1": 0.01 * g, "train/kl_k3": 0.012 * g})
            rows.append(row)
        if g % 2 == 0:
            rows.append({"step": 2 * g, "grpo_step": g, "eval/answer_reward": 0.3 + rise * g / steps, "eval/n": 64,
                         "time/elapsed_s": 3.0 * g + 0.5, "time/eval_s": 0.5})
    return rows


def _result(name: str, kl: bool = False, diverged: str | None = None) -> GridResult:
    grid = build_grid(name, "smoke")
    results, records = {}, {}
    for i, (label, cfg) in enumerate(grid.configs.items()):
        metrics = _metrics(4, kl=kl, clip=cfg.loss_type == "grpo_clip", rise=0.1 * (i + 1))
        results[label] = RunResult(run_dir=None, config=cfg, metrics=metrics, steps=4, optimizer_steps=8,
                                   skipped_steps=0, elapsed_s=12.5, checkpoint=None)
        records[label] = {"run": cfg.name, "status": "finished", "wall_clock_s": 12.5, "shared": i == 0}
    if diverged:
        records[diverged].update(status="diverged", stopped_at=4, reason="train/loss = nan")
    return GridResult(grid, results, records)


def _is_png_and_pdf(stem) -> bool:
    return (stem.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            and stem.with_suffix(".pdf").read_bytes()[:5] == b"%PDF-")


def test_plot_grid_writes_the_stable_names_each_grid_needs(figures):
    import matplotlib

    matplotlib.use("Agg")
    from hw3lib.experiments.plots import plot_grid

    assert plot_grid(_result("sync_strategy")) == {"reward": "sync_strategy_reward", "metrics": "sync_strategy_metrics",
                                                   "time_per_step": "sync_strategy_time_per_step"}
    assert plot_grid(_result("kl_drift", kl=True)) == {"reward": "kl_drift_reward", "metrics": "kl_drift_metrics",
                                                       "kl": "kl_drift_kl"}
    assert plot_grid(_result("learning_rate", diverged="lr_0.02")) == {"reward": "learning_rate_reward",
                                                                        "metrics": "learning_rate_metrics"}
    stems = ("sync_strategy_reward", "sync_strategy_metrics", "sync_strategy_time_per_step", "kl_drift_reward",
             "kl_drift_metrics", "kl_drift_kl", "learning_rate_reward", "learning_rate_metrics")
    written = sorted(path.name for path in figures.iterdir())
    assert written == sorted(f"{stem}{suffix}" for stem in stems for suffix in (".png", ".pdf"))
    assert all(_is_png_and_pdf(figures / stem) for stem in ("sync_strategy_time_per_step", "kl_drift_kl",
                                                             "learning_rate_reward"))


def test_plotted_series_and_legend_marks(figures):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hw3lib.experiments.plots import per_grpo_step, plot_metrics, plot_reward, plot_time_per_step

    rows = _metrics(2, kl=False, clip=True, rise=0.2)
    # Grad norms 0.5 and 1.5 in each GRPO step: mean 1.0; clip fractions 0 and 0.1: mean 0.05.
    assert per_grpo_step(rows, "train/grad_norm") == ([1, 2], [1.0, 1.0])
    assert per_grpo_step(rows, "train/clip_fraction") == ([1, 2], [0.05, 0.05])
    rows[1]["train/grad_norm"] = float("nan")  # a skipped step's NaN is left out, not averaged in
    assert per_grpo_step(rows, "train/grad_norm") == ([1, 2], [1.5, 1.0])
    assert per_grpo_step(rows, "train/kl_k3") == ([], [])

    result = _result("learning_rate", diverged="lr_0.02")
    fig = plot_reward(result)
    legend = [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
    assert "lr_0.02 (diverged @ 4)" in legend and "lr_6e-05 (shared)" in legend
    by_step = fig.axes[0].get_lines()[0]
    assert list(by_step.get_xdata()) == [0, 2, 4]
    assert list(fig.axes[1].get_lines()[0].get_xdata()) == pytest.approx([0.5 / 60, 6.5 / 60, 12.5 / 60])
    plt.close(fig)
    fig = plot_metrics(result)  # no KL logged: that panel says so
    assert any(t.get_text() == "not logged by these runs" for t in fig.axes[-1].texts)
    plt.close(fig)
    fig = plot_time_per_step(_result("sync_strategy"))
    # Per GRPO step: generation 2 + scoring 0.1 + old log-probs 0.2 + train 2 x 1.0 + sync 0.05 = 4.35 s,
    # plus validation 0.5 s every other step (steps 2 and 4 of 4): 4.6 s on average.
    totals = [t.get_text() for t in fig.axes[0].texts]
    assert totals == ["4.6s", "4.6s"]
    assert sum(p.get_height() for p in fig.axes[0].patches) / 2 == pytest.approx(4.6)
    plt.close(fig)
