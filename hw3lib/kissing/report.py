"""report.md and the score-vs-iteration plot of a discovery run, computed from its logged data only.

`write_report(run_dir)` reads `conversation_log.json` (written by `hw3lib.kissing.loops`) and
writes `report.md` next to it with: the methodology (loop, model, settings), a table of the score
after each iteration, the prompts that led to jumps in the best score, the final score, and a
reflection whose every number is computed from the log (failure counts, the largest jump and
the feedback before it, the plateau, tokens and cost, the gap to the known bounds). The plot is
`score_vs_iteration.png`. Nothing here is hard-coded about a particular run.

It reads the log file only, never the loop code: `hw3lib.kissing.loops` imports this module
(to write the report when a run ends), not the other way round.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hw3lib.core.io import DataFileError, atomic_write_text, save_figure
from hw3lib.kissing.replies import strip_thinking

KNOWN_BOUNDS = {"classical": 582, "Ganzhinov 2022": 592, "AlphaEvolve 2025": 593}
"""Published lower bounds for the kissing number in dimension 11 (literature, not results)."""
FAILURE_LABELS = {"invalid": "an invalid set (rejected by the verifier)", "exception": "an exception",
                  "no_code": "no code block", "timeout": "a timeout", "memory": "the memory limit",
                  "cpu": "the CPU limit", "crash": "a crash", "exit": "an early exit",
                  "no_points": "no points returned", "bad_points": "unreadable points"}
REPLAY_LABEL = "replay (test fixture, not a result)"
"""How every table, plot and report labels a run driven by recorded replies (`source: replay`)."""
QUOTE_CHARS = 240
FIGSIZE = (7.2, 3.6)


def load_log(run_dir: str | Path) -> dict:
    path = Path(run_dir) / "conversation_log.json"
    if not path.is_file():
        raise DataFileError(f"{path}: no conversation log; run a loop from hw3lib.kissing.loops first")
    try:
        log = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(log, dict) or not isinstance(log.get("steps"), list) or not isinstance(log.get("messages"), list):
        raise DataFileError(f"{path}: not a conversation log (needs 'steps' and 'messages' lists)")
    return log


def prompt_before(log: dict, step: dict) -> dict:
    """The last user message sent in the request that produced `step` (what the model answered)."""
    users = [i for i in step["sent"] if log["messages"][i]["role"] == "user"]
    return log["messages"][users[-1]]


def jumps(log: dict) -> list[dict]:
    """Iterations where the best score rose: {iteration, before, after, gain, prompt (the message)}."""
    out, before = [], 0.0
    for step in log["steps"]:
        if step["best_score"] > before:
            out.append({"iteration": step["iteration"], "before": before, "after": step["best_score"],
                        "gain": step["best_score"] - before, "prompt": prompt_before(log, step)})
        before = step["best_score"]
    return out


def _quote(text: str, limit: int = QUOTE_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def is_replay(log: dict) -> bool:
    """True unless the log says a live model answered (for logs from before `source` was recorded, the
    responder says: a ChatClient was live; anything else counts as not live)."""
    source = log.get("source") or {"ChatClient": "live"}.get(log.get("responder"), "unknown")
    return source != "live"


def replay_notice(log: dict) -> str:
    """A warning line for reports of runs that were not a live conversation ('' for live runs)."""
    if not is_replay(log):
        return ""
    what = f"recorded replies from `{log['replay_file']}`" if log.get("replay_file") else "recorded replies"
    return (f"**REPLAY: {REPLAY_LABEL}.** No model was queried: the loop replayed {what}, written to test the "
            "plumbing. Its scores show that the loop, the sandbox and the verifier work together; they are not "
            "results of an LLM.")


def _fmt(x: float) -> str:
    return f"{x:g}"


def _describe_prompt(message: dict) -> str:
    if message["step"] is None:
        return "the task prompt"
    return f"the feedback on iteration {message['step']} ('{_quote(message['content'], 160)}')"


def reflection(log: dict) -> list[str]:
    """Statements computed from the log (each a sentence for the report)."""
    steps = log["steps"]
    if not steps:
        return ["The run recorded no iterations."]
    k = len(steps)
    statuses = [s["evaluation"]["status"] for s in steps]
    valid = [s for s in steps if s["evaluation"]["validity"]]
    lines = []
    failures = {status: statuses.count(status) for status in dict.fromkeys(statuses) if status != "valid"}
    failure_text = ", ".join(f"{n} ended in {FAILURE_LABELS.get(status, status)}" for status, n in failures.items())
    lines.append(f"Of {k} iterations, {len(valid)} produced a valid program" + (f"; {failure_text}." if failure_text else "."))
    if valid:
        first = valid[0]
        lines.append(f"The first valid set came at iteration {first['iteration']} "
                     f"({first['evaluation']['num_points']} points).")
    rises = jumps(log)
    if rises:
        largest = max(rises, key=lambda j: j["gain"])
        lines.append(f"The largest jump (+{_fmt(largest['gain'])}, from {_fmt(largest['before'])} to "
                     f"{_fmt(largest['after'])}) came at iteration {largest['iteration']} after "
                     f"{_describe_prompt(largest['prompt'])}.")
        final = steps[-1]["best_score"]
        reached = next(s["iteration"] for s in steps if s["best_score"] == final)
        plateau = k - reached
        lines.append(f"The best score, {_fmt(final)}, was first reached at iteration {reached}"
                     + (f"; the last {plateau} iteration(s) brought no improvement." if plateau else
                        ", the last iteration."))
        gaps = [f"{_fmt(bound - final)} short of the {name} bound {bound}" if final < bound
                else f"at or above the {name} bound {bound}" for name, bound in KNOWN_BOUNDS.items()]
        lines.append(f"It is {'; '.join(gaps)}.")
    else:
        lines.append("No valid set was found, so the final score is 0.")
    # Did feedback about a failure lead to a valid program next time? (Agentic and hybrid loops only.)
    if log["loop"] != "best_of_n":
        after_failure = [(a, b) for a, b in zip(steps, steps[1:]) if not a["evaluation"]["validity"]]
        if after_failure:
            fixed = sum(1 for _, b in after_failure if b["evaluation"]["validity"])
            lines.append(f"After feedback on a failed program, the next program was valid {fixed} of "
                         f"{len(after_failure)} time(s).")
    polished = [s for s in steps if s.get("polish")]
    if polished:
        gains = [s["polish"]["score"] - s["evaluation"]["combined_score"] for s in polished
                 if s["evaluation"]["validity"] and s["polish"]["score"] > 0]
        helped = [s["iteration"] for s in polished if s["polish"]["score"] > s["evaluation"]["combined_score"]]
        if gains:
            lines.append(f"Local search added {_fmt(sum(gains) / len(gains))} points on average to the "
                         f"{len(gains)} valid LLM output(s); it raised the score at iteration(s) "
                         f"{', '.join(map(str, helped)) or 'none'}.")
    usage = log.get("usage") or {}
    tokens = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
    latencies = [s["reply"]["latency_s"] for s in steps]
    eval_s = sum(s["evaluation"]["eval_time"] for s in steps)
    cost = usage.get("cost_usd", 0.0)
    cost_text = f"${cost:.4f}" if cost else "no per-token price set"
    lines.append(f"The model used {usage.get('prompt_tokens', 0)} prompt + {usage.get('completion_tokens', 0)} "
                 f"completion tokens ({tokens} in all, {cost_text}) over "
                 f"{usage.get('calls', k)} call(s) with {usage.get('retries', 0)} retried request(s); mean reply "
                 f"latency {sum(latencies) / k:.2f} s, total evaluation time {eval_s:.2f} s.")
    return lines


def _table(log: dict) -> list[str]:
    hybrid = any(s.get("polish") for s in log["steps"])
    head = ["iteration", "status", "points", "score", *(["polished"] if hybrid else []), "best so far",
            "eval s", "tokens", "evaluator message"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in log["steps"]:
        e, r = s["evaluation"], s["reply"]
        cells = [str(s["iteration"]), e["status"], str(e["num_points"]), _fmt(s["score"]),
                 *([_fmt(s["polish"]["score"]) if s.get("polish") and s["polish"]["status"] != "skipped" else "-"]
                   if hybrid else []),
                 _fmt(s["best_score"]), f"{e['eval_time']:.2f}", str(r["prompt_tokens"] + r["completion_tokens"]),
                 _quote(e["message"], 100).replace("|", "\\|")]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _methodology(log: dict) -> list[str]:
    settings = log.get("settings", {})
    loop = log["loop"]
    what = {
        "agentic": "Agentic refinement: the model writes a program, the sandboxed evaluator runs and verifies it, "
                   "and the exact evaluator message (traceback or verifier verdict) or the score with a request "
                   "for more points is sent back; repeated for each iteration.",
        "best_of_n": "Best-of-N: independent samples of the same prompt (one seed each); every program is "
                     "evaluated and the exact verifier selects the best valid set.",
        "hybrid": "Hybrid: the model proposes a construction or heuristic as a program; its output seeds a local "
                  "search that adds integer points while keeping the set valid; both scores are fed back.",
    }.get(loop, loop)
    task = next((m["content"] for m in log["messages"] if m["role"] == "user" and m["step"] is None), "")
    source = REPLAY_LABEL if is_replay(log) else "live (a model answered every request)"
    return [what, "", f"- model: `{log.get('model')}` ({log.get('responder')}); source: {source}",
            f"- started {log.get('started')}, finished {log.get('finished')}",
            "- settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()),
            "- score: |C| when min ||x - y||^2 >= max ||x||^2 holds exactly over the program's integer points, else 0",
            "", "<details><summary>Task prompt</summary>", "", "````text", task, "````", "", "</details>"]


def reply_prose(content: str) -> str:
    """A reply's text without its <think> block and code fences (what the model said it was doing)."""
    return re.sub(r"```.*?(```|$)", " [code] ", strip_thinking(content), flags=re.DOTALL)


def write_report(run_dir: str | Path) -> Path:
    """Write report.md and score_vs_iteration.png for the run in `run_dir`; return the report path."""
    run_dir = Path(run_dir)
    log = load_log(run_dir)
    steps = log["steps"]
    final = steps[-1]["best_score"] if steps else 0.0
    best = log.get("best")
    plot_path = plot_scores(log, run_dir / "score_vs_iteration.png")
    notice = replay_notice(log)
    title = f"# Kissing number in dimension 11: {log['loop']} run" + (f" ({REPLAY_LABEL})" if notice else "")
    lines = [title, "", *([notice, ""] if notice else []), "## Methodology", "", *_methodology(log), "",
             "## Score after each iteration", "", *_table(log), "", f"![score vs iteration]({plot_path.name})", "",
             "## Prompts that led to jumps", ""]
    rises = jumps(log)
    if not rises:
        lines.append("No iteration raised the best score.")
    for rise in rises:
        lines += [f"### Iteration {rise['iteration']}: {_fmt(rise['before'])} -> {_fmt(rise['after'])} "
                  f"(+{_fmt(rise['gain'])})", ""]
        if rise["prompt"]["step"] is None:
            lines += ["Prompt: the task prompt (quoted under Methodology).", ""]
        else:
            lines += [f"Prompt (the feedback on iteration {rise['prompt']['step']}):", "",
                      *["> " + line for line in rise["prompt"]["content"].splitlines()], ""]
        step = next(s for s in steps if s["iteration"] == rise["iteration"])
        lines += [f"Reply (prose outside the code): {_quote(reply_prose(step['reply']['content']), 400)}", ""]
    lines += ["## Final score", "", f"**{_fmt(final)}**" + (
        f" (iteration {best['iteration']}, `{best['candidate']}`)" if best and best.get("candidate") else ""), "",
        "## Reflection", "", *[f"- {line}" for line in reflection(log)], ""]
    return atomic_write_text(run_dir / "report.md", "\n".join(lines))


def transcript(log: dict, max_chars: int = 700) -> str:
    """The conversation as text, in order: each request's new user message, the reply (thinking and
    code elided) and the evaluation. Long messages are cut to `max_chars`."""
    def cut(text: str) -> str:
        return text if len(text) <= max_chars else text[:max_chars] + f" [... {len(text) - max_chars} more chars]"

    out = [f"[system] {cut(log['messages'][0]['content'])}"] if log["messages"] else []
    shown = {0}
    for step in log["steps"]:
        for i in step["sent"]:
            message = log["messages"][i]
            if i not in shown and message["role"] == "user":
                out.append(f"\n[user, iteration {step['iteration']} prompt] {cut(message['content'])}")
            shown.add(i)
        reply, evaluation = step["reply"], step["evaluation"]
        out.append(f"\n[assistant, iteration {step['iteration']}, {reply['completion_tokens']} tokens] "
                   f"{cut(' '.join(reply_prose(reply['content']).split()))}")
        verdict = f"{evaluation['status']}, score {_fmt(step['score'])}"
        if step.get("polish") and step["polish"]["status"] != "skipped":
            verdict += f" (local search: {step['polish']['message']})"
        out.append(f"[evaluator] {verdict}: {cut(evaluation['message'].strip())}")
    return "\n".join(out)


def plot_scores(log: dict, path: str | Path) -> Path:
    """Save the score-vs-iteration figure as a PNG (atomically, like every other file of the run)."""
    from matplotlib.figure import Figure

    # A bare Figure (no pyplot) leaves the caller's backend alone: a notebook keeps plotting inline.
    fig = Figure(figsize=FIGSIZE)
    draw_scores(fig.subplots(), log)
    stem = Path(path).absolute().with_suffix("")  # absolute: a bare name stays in the cwd, not figures/
    return save_figure(fig, stem, suffixes=(".png",), dpi=110, bbox_inches="tight")[0]


def score_figure(log: dict):
    """The same figure through pyplot, for showing inline in a notebook."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=FIGSIZE)
    draw_scores(ax, log)
    return fig


def draw_scores(ax: Any, log: dict) -> None:
    """Score per iteration (dots; failures at 0), the best so far (steps), polished scores and the known bounds."""
    steps = log["steps"]
    its = [s["iteration"] for s in steps]
    valid = [(s["iteration"], s["score"]) for s in steps if s["score"] > 0]
    failed = [s["iteration"] for s in steps if s["score"] == 0]
    ax.step(its, [s["best_score"] for s in steps], where="post", color="C0", label="best so far")
    if valid:
        ax.scatter(*zip(*valid), color="C2", zorder=3, label="valid candidate")
    if failed:
        ax.scatter(failed, [0] * len(failed), color="C3", marker="x", zorder=3, label="failed (score 0)")
    polished = [(s["iteration"], s["polish"]["score"]) for s in steps if s.get("polish") and s["polish"]["score"] > 0]
    if polished:
        ax.scatter(*zip(*polished), facecolors="none", edgecolors="C1", s=80, zorder=3, label="after local search")
    for (name, bound), style in zip(KNOWN_BOUNDS.items(), (":", "--", "-.")):
        if name != "Ganzhinov 2022":  # 592 and 593 would overlap; 582 and the record bracket them
            ax.axhline(bound, color="grey", linestyle=style, linewidth=0.8, label=f"{name} ({bound})")
    ax.set_xlabel("iteration")
    ax.set_ylabel("score |C|")
    ax.set_title(f"{log['loop']} ({log.get('model')})" + (f"\n{REPLAY_LABEL.upper()}" if is_replay(log) else ""),
                 color="C3" if is_replay(log) else "black")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: never hides a point


def kissing_result(source: str, model: str, construction_scores: dict, search, llm_iterations: int, runs: dict,
                   program_metrics: dict | None, deliverable: dict | None = None) -> dict:
    """The writeup's `kissing` result (hw3lib.core.writeup_keys): each construction's score
    (`<name>_points`), the local search, each LLM loop's best score (`<loop>_best_score`), the stored
    program's score (None when it was not evaluated) and `deliverable`, the summary of its report
    (`hw3lib.kissing.deliverables.writeup_summary`; None when not computed).

    `source`: `live` or `replay`. A replay's loop scores are left out (None) and `llm_label` says
    REPLAY_LABEL: recorded replies test the plumbing and are never reported as results."""
    live = source == "live"
    return {"source": source, "llm_label": "live" if live else REPLAY_LABEL, "model": model,
            **{f"{name}_points": int(score) for name, score in construction_scores.items()},
            "local_search_points": len(search.points), "local_search_iterations": search.iterations,
            "llm_iterations": llm_iterations,
            **{f"{name}_best_score": run.best_score if live else None for name, run in runs.items()},
            "program_py_score": None if program_metrics is None else program_metrics["combined_score"],
            "deliverable": deliverable}
