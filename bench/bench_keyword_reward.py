"""The keyword recipe under the course's reward and under the one-sentence gate, over SFT seeds.

Run:  OMP_NUM_THREADS=1 HW3_RUNS_DIR=/tmp/kw_runs PYTHONPATH=. .venv/bin/python bench/bench_keyword_reward.py [--seeds 0 1 2]

For each seed s: the procedural dataset of seed s, the recipe's 400-step SFT of seed s (both cached),
then the recipe's GRPO (hw3lib.keywords.recipe.KEYWORD_GRPO, smoke profile) twice from that SFT:
on the course's `keyword_inclusion_reward_fn` (`reward="inclusion"`) and on `keyword_sentence_reward_fn`
(`reward="sentence"`). Finished runs in $HW3_RUNS_DIR are reused. Prints, per run, the validation
reward it trained on (greedy, 200 held-out prompts) after SFT and after GRPO, and the shares of the
final validation responses that hold every keyword (the course's reward), are one sentence, were cut
off mid-sentence by the token budget, and are hacked (every keyword, not one sentence; hw3lib.keywords.hacking);
then the mean and standard deviation over seeds. Writes bench/results/bench_keyword_reward.json.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from hw3lib.core.benchmark import record_header, write_json

COLUMNS = ("own_reward_start", "own_reward_end", "inclusion_start", "inclusion_end", "one_sentence_end",
           "cut_off_end", "hacked_start", "hacked_end", "seconds")


def run_one(seed: int, reward: str) -> dict:
    from hw3lib.grpo.loop import train
    from hw3lib.keywords.hacking import hacking_table
    from hw3lib.keywords.recipe import KeywordSFT, prepare_keyword_run

    cfg = prepare_keyword_run("smoke", sft=KeywordSFT(seed=seed), reward=reward, verbose=False,
                              name=f"kw_bench_{reward}_seed{seed}")
    result = train(cfg, resume=True)
    start, end = hacking_table({reward: result.run_dir})
    return {"seed": seed, "reward": reward, "prompt": cfg.prompt,
            "own_reward_start": result.eval_rows[0]["eval/reward"],
            "own_reward_end": result.eval_rows[-1]["eval/reward"],
            "inclusion_start": start["inclusion"], "inclusion_end": end["inclusion"],
            "one_sentence_end": end["one_sentence"], "cut_off_end": end["cut_off"],
            "hacked_start": start["hacked"], "hacked_end": end["hacked"], "seconds": result.elapsed_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    rows = [run_one(seed, reward) for reward in ("inclusion", "sentence") for seed in args.seeds]
    print(f"{'reward':<10} {'seed':>4} " + " ".join(f"{c:>16}" for c in COLUMNS))
    for row in rows:
        print(f"{row['reward']:<10} {row['seed']:>4} " + " ".join(f"{row[c]:>16.3f}" for c in COLUMNS))
    summary = {}
    for reward in ("inclusion", "sentence"):
        mine = [row for row in rows if row["reward"] == reward]
        summary[reward] = {c: (statistics.mean(r[c] for r in mine),
                               statistics.stdev(r[c] for r in mine) if len(mine) > 1 else 0.0) for c in COLUMNS}
        print(f"{reward:<10} mean " + " ".join(f"{m:>8.3f}±{s:<7.3f}" for m, s in summary[reward].values()))
    out = Path(__file__).resolve().parent / "results" / "bench_keyword_reward.json"
    write_json(out, {**record_header("bench_keyword_reward"), "seeds": args.seeds, "rows": rows, "mean_std": summary})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
