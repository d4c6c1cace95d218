"""LLM-guided discovery loops for the 11-dimensional kissing problem, each fully logged.

Three loops, all talking to a `Responder` (`ChatClient` live, `ScriptedResponder` in CI) and
scoring every candidate with the sandboxed `evaluate_program`:

(a) `agentic_refinement`: generate a program -> evaluate -> send back the exact evaluator message
    (traceback, verifier verdict) or the score with a request for more points -> repeat k times.
    The conversation sent each time is the system and task prompts plus the last
    `history_turns` exchanges (Qwen3-32B has a 32k-token context); when the best program falls
    out of that window its code is quoted in the feedback. Past replies are sent without their
    <think> block, as Qwen3's chat template does.
(b) `best_of_n`: N independent samples of the same prompt (distinct seeds), the exact verifier
    as the selector: the best valid sample wins.
(c) `hybrid`: as (a), but each program's output seeds `search.local_search`, which polishes it
    (adds points, keeps the set valid); the step's score is the better of the two valid sets and
    both numbers are fed back.
(d) `orbit`: the model calls the exact orbit search (`hw3lib.kissing.layered`) instead of writing a
    program: each reply names a group by generators and a pool in a ```json block
    (`hw3lib.kissing.orbit_requests`), the search runs under a deadline and an orbit-count cap, and
    the size, the orbit counts and whether it is proved optimal go back. A found set is stored as a
    program (`candidates/iter_XXX.py`) like any other candidate.

Every run directory holds `candidates/iter_XXX.py` (every extracted program), `evaluations.jsonl`
(one row per iteration), `conversation_log.json` (every message, reply, usage, timing and
evaluation; `steps[i].sent` lists the transcript indices sent for that call; `source` says `live`
for a real model, `replay` for recorded replies, which are never a result), `best_program.py`,
and at the end `report.md` + `score_vs_iteration.png` (hybrid runs also keep the polished points
as `candidates/iter_XXX_polished.json`). Files are rewritten atomically after every iteration,
so an interrupted run leaves a consistent log.

Dependencies point one way: this module uses `replies` (code extraction, <think> stripping),
`evaluator`, `llm`, `search`, `verify` and `report`; none of them imports it.
"""

from __future__ import annotations

import datetime as _dt
import json
import string
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hw3lib.core.io import atomic_write_json, atomic_write_jsonl, atomic_write_text
from hw3lib.kissing.evaluator import evaluate_program
from hw3lib.kissing.sandbox import bwrap_available
from hw3lib.kissing.llm import ChatReply, Responder, responder_source
# NO_CODE_MESSAGE, extract_python_code and strip_thinking stay importable from here (tests, older code).
from hw3lib.kissing.replies import NO_CODE_MESSAGE, Extraction, extract_python_code, strip_thinking  # noqa: F401
from hw3lib.kissing.report import write_report
from hw3lib.kissing.scaffold import StartConfig, scaffold_text, start_preamble
from hw3lib.kissing.core_search import proposed_core

LOOPS = ("agentic", "best_of_n", "hybrid", "orbit")
POLISH_MAX_NORM_SQ = 5  # largest shell the hybrid loop polishes: |x|^2 = 5 has 15,224 vectors (~1.5 s to set up)
PROMPTS_FILE = Path(__file__).with_name("prompts.md")

# ---------------------------------------------------------------------------------------------
# Prompts


def load_prompts(path: str | Path = PROMPTS_FILE) -> dict[str, str]:
    """The `## name` sections of prompts.md as {name: text}."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: prompts file not found (it ships with hw3lib.kissing)")
    sections: dict[str, list[str]] = {}
    current = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return {name: "\n".join(lines).strip() for name, lines in sections.items()}


def fill(template: str, **values: Any) -> str:
    """`string.Template` substitution that names the missing placeholder."""
    try:
        return string.Template(template).substitute({k: str(v) for k, v in values.items()})
    except KeyError as exc:
        raise KeyError(f"prompt placeholder ${exc.args[0]} has no value; pass it or edit prompts.md") from None


def task_prompt(prompts: dict[str, str], *, dimension: int, timeout_s: float, hybrid: bool = False,
                polish_seconds: float = 0.0, start: StartConfig | None = None) -> str:
    task = fill(prompts["task"], dimension=dimension, timeout_s=f"{timeout_s:g}", starter=prompts["starter"])
    if hybrid:
        task = fill(prompts["hybrid_task"], task=task, polish_seconds=f"{polish_seconds:g}")
    if start is not None:  # begin where a stored configuration (a record, ours) stands, described as a scaffold
        task = fill(prompts["start_task"], task=task, scaffold=scaffold_text(start), num_points=start.num_points)
    return task


# ---------------------------------------------------------------------------------------------
# Run recording


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def replaceable(run_dir: str | Path) -> bool:
    """Whether `run_dir` may be emptied for a new run: it holds no log, or a readable log of a replay
    (recorded replies, never a result). A live conversation, or a log that cannot be read, is kept."""
    path = Path(run_dir) / "conversation_log.json"
    if not path.exists():
        return True
    try:
        log = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(log, dict) and log.get("source") == "replay"


def run_directory(base: str | Path) -> Path:
    """Where the next run goes so that re-running a notebook never deletes a live conversation: the first of
    base, base-2, base-3, ... that holds no run or only a replay. A replay re-run (overwrite=True) replaces
    the replay at `base`; a live run re-run gets a new name, and every live conversation stays where it was.
    """
    base = Path(base)
    candidate, k = base, 2
    while not replaceable(candidate):
        candidate, k = base.parent / f"{base.name}-{k}", k + 1
    return candidate


class RunRecorder:
    """Keeps the transcript, the steps and the files of one run directory consistent on disk."""

    OUTPUTS = ("conversation_log.json", "evaluations.jsonl", "best_program.py", "best_points.json", "report.md",
               "score_vs_iteration.png")

    def __init__(self, run_dir: str | Path, *, loop: str, responder: Responder, settings: dict,
                 overwrite: bool = False, start: StartConfig | None = None):
        self.run_dir = Path(run_dir)
        # With a start, every stored program (candidates/, best_program.py) is the START preamble plus the
        # model's code: complete and self-contained, as the course's evaluator runs it.
        self.preamble = start_preamble(start) if start is not None else ""
        if start is not None:
            settings = {**settings, "start": start.settings()}
        if (self.run_dir / "conversation_log.json").exists():
            if not overwrite:
                raise FileExistsError(f"{self.run_dir} already holds a run (conversation_log.json); choose another "
                                      "directory or pass overwrite=True (CLI: --overwrite) to replace it")
            if not replaceable(self.run_dir):  # a live conversation cost money and cannot be re-run: never deleted
                raise FileExistsError(f"{self.run_dir} holds a live conversation (or a log that cannot be read); "
                                      "overwrite=True replaces only replays. Give the run a new directory "
                                      f"(hw3lib.kissing.loops.run_directory picks {run_directory(self.run_dir).name})")
            # Remove only what a run writes, so stale candidates cannot mix with the new ones.
            for name in self.OUTPUTS:
                (self.run_dir / name).unlink(missing_ok=True)
            for old in [*(self.run_dir / "candidates").glob("iter_*"), *(self.run_dir / "cores").glob("iter_*")]:
                old.unlink()  # cores/: growth logs of proposed cores, which would otherwise be resumed
        (self.run_dir / "candidates").mkdir(parents=True, exist_ok=True)
        self.responder = responder
        self.log: dict[str, Any] = {
            "loop": loop, "model": getattr(responder, "model", "unknown"),
            "responder": type(responder).__name__, "source": responder_source(responder),
            **({"replay_file": str(responder.source)} if responder_source(responder) == "replay" else {}),
            "started": _now(), "finished": None,
            "settings": settings, "messages": [], "steps": [], "usage": {}, "best": None,
        }
        self._start = time.perf_counter()

    @property
    def messages(self) -> list[dict]:
        return self.log["messages"]

    @property
    def steps(self) -> list[dict]:
        return self.log["steps"]

    def add_message(self, role: str, content: str, step: int | None) -> int:
        self.messages.append({"index": len(self.messages), "role": role, "content": content, "step": step})
        return len(self.messages) - 1

    def best_step(self) -> dict | None:
        """The first step reaching the highest score (None before any valid set)."""
        valid = [s for s in self.steps if s["score"] > 0]
        return max(valid, key=lambda s: (s["score"], -s["iteration"])) if valid else None

    def write_candidate(self, iteration: int, code: str) -> Path:
        path = self.run_dir / "candidates" / f"iter_{iteration:03d}.py"
        atomic_write_text(path, self.preamble + code)
        return path

    def record(self, step: dict) -> None:
        """Add a finished step and rewrite the evaluations and the log atomically."""
        previous = self.best_step()
        step["best_score"] = max(step["score"], previous["score"] if previous else 0.0)
        self.steps.append(step)
        best = self.best_step()
        if best is not None and best is step and step.get("code"):
            atomic_write_text(self.run_dir / "best_program.py", self.preamble + step["code"])
            polish = step.get("polish") or {}
            if polish.get("points_file") and polish["score"] >= step["evaluation"]["combined_score"]:
                # the polished set is not reproducible from the program alone: keep its points
                text = (self.run_dir / polish["points_file"]).read_text(encoding="utf-8")
                atomic_write_text(self.run_dir / "best_points.json", text)
        self.flush()

    def flush(self, finished: bool = False) -> None:
        best = self.best_step()
        self.log["best"] = None if best is None else {
            "score": best["score"], "iteration": best["iteration"], "candidate": best["candidate"]}
        self.log["usage"] = {**self.responder.usage.to_dict(), "wall_s": time.perf_counter() - self._start}
        if finished:
            self.log["finished"] = _now()
        rows = [{"iteration": s["iteration"], "candidate": s["candidate"], **s["evaluation"],
                 **({"polished_score": s["polish"]["score"]} if s.get("polish") else {}),
                 "score": s["score"], "best_score": s["best_score"]} for s in self.steps]
        atomic_write_jsonl(self.run_dir / "evaluations.jsonl", rows)
        atomic_write_json(self.run_dir / "conversation_log.json", self.log)


def _no_code_evaluation(error: str) -> dict:
    return {"num_points": 0, "dimension": 0, "validity": 0.0, "eval_time": 0.0, "combined_score": 0.0,
            "message": error, "status": "no_code"}


def _evaluate_reply(recorder: RunRecorder, iteration: int, reply: ChatReply, *, timeout_s: float,
                    memory_mb: int) -> tuple[Extraction, str | None, dict]:
    """Extract, store and evaluate the program in `reply` (a no-code reply scores 0 with a clear message).

    A reply with a ```core block proposes a core instead (`core_search.score_proposal`): the remainder optimizer
    grows a set against it, that set is stored as the iteration's program and evaluated like any other, and the
    core's own verdict leads the evaluator's message."""
    core_note = None
    spec_text = proposed_core(strip_thinking(reply.content))
    if spec_text is not None:
        extraction, core_note = _core_program(recorder, iteration, spec_text)
    else:
        extraction = extract_python_code(reply.content)
    if extraction.code is None:
        error = extraction.error
        if reply.finish_reason == "length":
            error += " (Your reply hit the max_tokens limit: think less and write the program sooner.)"
        return extraction, None, _no_code_evaluation(error)
    path = recorder.write_candidate(iteration, extraction.code)
    # strict where bubblewrap works: a sandbox that breaks mid-run must not silently fall back
    evaluation = evaluate_program(path, timeout_s=timeout_s, memory_mb=memory_mb, return_points=True,
                                  strict=bwrap_available())
    points = evaluation.pop("points", None)
    if core_note:
        evaluation["message"] = f"{core_note}. Evaluator: {evaluation['message']}"
    if evaluation["validity"] and points is not None:
        # kept for the hybrid loop's local search, which starts from the program's own output
        atomic_write_json(path.with_name(f"iter_{iteration:03d}_points.json"), {"points": points}, indent=None)
    return extraction, str(path.relative_to(recorder.run_dir)), evaluation


def _core_program(recorder: RunRecorder, iteration: int, spec_text: str) -> tuple[Extraction, str]:
    """(the program printing the set grown against a proposed core, or no code; the core's verdict)."""
    from hw3lib.kissing.core_search import score_proposal
    from hw3lib.kissing.search import program_source

    points, note = score_proposal(spec_text, recorder.run_dir / "cores", f"iter_{iteration:03d}",
                                  cpu_s=recorder.log["settings"].get("core_cpu_s", 20.0))
    if points is None:
        return Extraction(None, note), note
    code = program_source(points, f"the remainder optimizer against the core proposed at iteration {iteration}",
                          written_by="the core proposal of a discovery loop (hw3lib.kissing.loops)")
    return Extraction(code, None), note


def _new_step(iteration: int, sent: list[int], reply: ChatReply, reply_index: int, extraction: Extraction,
              candidate: str | None, evaluation: dict, wall_s: float) -> dict:
    return {"iteration": iteration, "sent": sent, "reply_message": reply_index, "reply": reply.to_dict(),
            "code_found": extraction.code is not None, "code": extraction.code, "candidate": candidate,
            "evaluation": evaluation, "score": float(evaluation["combined_score"]), "polish": None,
            "feedback": None, "feedback_message": None, "wall_s": wall_s}


# ---------------------------------------------------------------------------------------------
# Hybrid: local search polishes the program's output


def program_points(recorder: RunRecorder, step: dict) -> list | None:
    """The points a valid candidate returned (saved beside it by `_evaluate_reply`), or None."""
    path = recorder.run_dir / "candidates" / f"iter_{step['iteration']:03d}_points.json"
    return json.loads(path.read_text())["points"] if path.is_file() else None


def polish_candidate(recorder: RunRecorder, step: dict, *, dimension: int, time_limit_s: float, seed: int,
                     iterations: int | None = None) -> dict:
    """Run the local search from the program's valid output; verify and store the polished set.

    The search runs over the equal-norm shell of the program's largest squared norm (so the set
    stays valid) for `time_limit_s` seconds, or `iterations` steps if that comes first (set it for
    reproducible runs: a time limit depends on the machine).
    """
    from hw3lib.kissing.search import local_search
    from hw3lib.kissing.verify import verify

    evaluation = step["evaluation"]
    base = {"time_limit_s": time_limit_s, "iterations": iterations, "seed": seed, "initial_points": 0, "num_points": 0, "score": 0.0,
            "points_file": None, "search_s": 0.0}
    if not evaluation["validity"]:
        return {**base, "status": "skipped",
                "message": "skipped: the program gave no valid set to start from (fix it first)"}
    points = program_points(recorder, step)
    if points is None:
        return {**base, "status": "skipped", "message": "skipped: the program's points were not saved"}
    # Magnitude cap before any arithmetic: the search enumerates the whole shell, and a shell past
    # POLISH_MAX_NORM_SQ takes longer to build than the polish budget (|x|^2 = 10^6 never finishes).
    largest = max((abs(int(c)) for p in points for c in p), default=0)
    norm_sq = max(sum(int(c) * int(c) for c in p) for p in points) if largest <= POLISH_MAX_NORM_SQ else None
    if norm_sq is None or norm_sq > POLISH_MAX_NORM_SQ:
        return {**base, "status": "skipped", "initial_points": len(points),
                "message": f"skipped: the local search polishes sets of squared norm at most {POLISH_MAX_NORM_SQ} "
                           f"(this one: {'coordinates up to ' + str(largest) if norm_sq is None else norm_sq}); "
                           "scale the set down to small integer coordinates to have it polished"}
    start = time.perf_counter()
    try:
        result = local_search(initial_points=points, norm_sq=norm_sq, seed=seed, iterations=iterations,
                              time_limit_s=time_limit_s, dimension=dimension)
    except ValueError as exc:  # e.g. a shell too large to enumerate for this norm
        return {**base, "status": "skipped", "initial_points": len(points), "message": f"skipped: {exc}"}
    search_s = time.perf_counter() - start
    polished = [[int(c) for c in p] for p in result.points]
    check = verify(polished, dimension=dimension)
    points_file = recorder.run_dir / "candidates" / f"iter_{step['iteration']:03d}_polished.json"
    atomic_write_json(points_file, {"iteration": step["iteration"], "norm_sq": norm_sq, "valid": check.valid,
                                    "points": polished}, indent=None)
    verdict = (f"{len(points)} -> {check.num_points} points on the squared-norm-{norm_sq} shell"
               if check.valid else f"the polished set failed verification ({check.message})")
    return {**base, "status": "valid" if check.valid else "invalid", "initial_points": len(points),
            "num_points": check.num_points, "score": float(check.score), "norm_sq": norm_sq,
            "points_file": str(points_file.relative_to(recorder.run_dir)), "search_s": search_s,
            "message": verdict}


# ---------------------------------------------------------------------------------------------
# Feedback


def _best_program_note(prompts: dict[str, str], recorder: RunRecorder, window_start: int) -> str:
    """Quote the best program when the next request's history window no longer contains it."""
    best = recorder.best_step()
    if best is None or best["iteration"] >= window_start or not best.get("code"):
        return ""
    return "\n\n" + fill(prompts["best_program"], code=best["code"].rstrip()) + "\n"


def feedback_message(prompts: dict[str, str], step: dict, recorder: RunRecorder, window_start: int) -> str:
    """The user message answering `step`: the exact evaluator message and the best score so far."""
    best = recorder.best_step()
    common = {"best_score": f"{best['score']:g}" if best else "0 (no valid set yet)",
              "best_iteration": best["iteration"] if best else "-",
              "best_program": _best_program_note(prompts, recorder, window_start)}
    evaluation = step["evaluation"]
    if step.get("polish") is not None:
        polish = step["polish"]
        program_verdict = (f"VALID, {evaluation['num_points']} points. {evaluation['message']}"
                           if evaluation["validity"] else f"score 0 ({evaluation['status']}): {evaluation['message']}")
        budget = f"{polish['time_limit_s']:g} s" + (f" or {polish['iterations']} steps" if polish["iterations"] else "")
        return fill(prompts["feedback_hybrid"], program_verdict=program_verdict, polish_verdict=polish["message"],
                    polish_budget=budget, **common)
    if evaluation["status"] == "no_code":
        return fill(prompts["feedback_no_code"], message=evaluation["message"], **common)
    if evaluation["validity"]:
        return fill(prompts["feedback_valid"], score=evaluation["num_points"], message=evaluation["message"], **common)
    return fill(prompts["feedback_invalid"], status=evaluation["status"], message=evaluation["message"], **common)


# ---------------------------------------------------------------------------------------------
# The loops


@dataclass(frozen=True)
class DiscoveryResult:
    run_dir: Path
    best_score: float
    best_iteration: int | None
    scores: list[float]
    """Score of each iteration's candidate (0 for invalid ones)."""
    best_scores: list[float]
    """Best score after each iteration."""
    log_path: Path
    report_path: Path


def _finish(recorder: RunRecorder) -> DiscoveryResult:
    recorder.flush(finished=True)
    report_path = write_report(recorder.run_dir)
    best = recorder.best_step()
    return DiscoveryResult(recorder.run_dir, best["score"] if best else 0.0, best["iteration"] if best else None,
                           [s["score"] for s in recorder.steps], [s["best_score"] for s in recorder.steps],
                           recorder.run_dir / "conversation_log.json", report_path)


def _check(iterations: int, loop: str) -> None:
    if not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"{loop}: iterations must be a positive int, got {iterations!r}")


def agentic_refinement(responder: Responder, run_dir: str | Path, iterations: int, *, timeout_s: float = 60,
                       memory_mb: int = 2048, history_turns: int | None = 3, dimension: int = 11,
                       prompts: dict[str, str] | None = None, polish_seconds: float | None = None,
                       polish_iterations: int | None = None, seed: int = 0, overwrite: bool = False,
                       start: StartConfig | None = None) -> DiscoveryResult:
    """Loop (a): program -> evaluation -> exact feedback -> next program, for `iterations` rounds.

    With `polish_seconds` set this is loop (c), `hybrid`: each program's output is polished by the
    local search (for `polish_seconds`, or `polish_iterations` steps if sooner) and both scores are
    fed back. With `start` (`hw3lib.kissing.scaffold.load_start`: a record, our program, any verified
    set) the task describes that configuration's core-and-remainder scaffold and every program runs
    with START, CORE and REMAINDER defined before its code.
    """
    hybrid = polish_seconds is not None
    loop = "hybrid" if hybrid else "agentic"
    _check(iterations, loop)
    if history_turns is not None and history_turns < 1:
        # the latest exchange carries the feedback: without it the loop would not refine anything
        raise ValueError(f"{loop}: history_turns must be >= 1 or None (all), got {history_turns}")
    prompts = prompts or load_prompts()
    settings = {"iterations": iterations, "timeout_s": timeout_s, "memory_mb": memory_mb,
                "history_turns": history_turns, "dimension": dimension, "seed": seed}
    if hybrid:
        settings["polish_seconds"] = polish_seconds
        settings["polish_iterations"] = polish_iterations
    recorder = RunRecorder(run_dir, loop=loop, responder=responder, settings=settings, overwrite=overwrite,
                           start=start)
    system = recorder.add_message("system", prompts["system"], None)
    task = recorder.add_message("user", task_prompt(prompts, dimension=dimension, timeout_s=timeout_s,
                                                   hybrid=hybrid, polish_seconds=polish_seconds or 0.0,
                                                   start=start), None)
    for iteration in range(1, iterations + 1):
        start = time.perf_counter()
        sent, reply, reply_index = _converse(recorder, responder, [system, task], history_turns, iteration)
        extraction, candidate, evaluation = _evaluate_reply(recorder, iteration, reply, timeout_s=timeout_s,
                                                            memory_mb=memory_mb)
        step = _new_step(iteration, sent, reply, reply_index, extraction, candidate, evaluation, 0.0)
        if hybrid:
            step["polish"] = polish_candidate(recorder, step, dimension=dimension, time_limit_s=polish_seconds,
                                              seed=seed + iteration, iterations=polish_iterations)
            step["score"] = max(step["score"], step["polish"]["score"])
        step["wall_s"] = time.perf_counter() - start
        recorder.record(step)
        if iteration < iterations:
            # The window the *next* request will see starts at this iteration minus history_turns - 1.
            window_start = 1 if history_turns is None else iteration - history_turns + 1
            _send_feedback(recorder, step, feedback_message(prompts, step, recorder, window_start))
    return _finish(recorder)


def _converse(recorder: RunRecorder, responder: Responder, opening: list[int], history_turns: int | None,
              iteration: int) -> tuple[list[int], ChatReply, int]:
    """Send the opening messages and the last `history_turns` exchanges; log the reply (without its thinking)."""
    done = len(recorder.steps)
    earlier = recorder.steps if history_turns is None else recorder.steps[max(0, done - history_turns):]
    sent = opening + [i for s in earlier for i in (s["reply_message"], s["feedback_message"])]
    reply = responder.chat([{"role": recorder.messages[i]["role"], "content": recorder.messages[i]["content"]}
                            for i in sent])
    # History carries the reply without its thinking (Qwen3's template drops it too); the log keeps all.
    return sent, reply, recorder.add_message("assistant", strip_thinking(reply.content), iteration)


def _send_feedback(recorder: RunRecorder, step: dict, text: str) -> None:
    step["feedback"] = text
    step["feedback_message"] = recorder.add_message("user", text, step["iteration"])
    recorder.flush()

def best_of_n(responder: Responder, run_dir: str | Path, n: int, *, timeout_s: float = 60, memory_mb: int = 2048,
              dimension: int = 11, workers: int = 1, seed: int = 0,
              prompts: dict[str, str] | None = None, overwrite: bool = False,
              start: StartConfig | None = None) -> DiscoveryResult:
    """Loop (b): `n` independent samples of one prompt; the exact verifier selects the best valid set.
    (`start`: as in `agentic_refinement`.)

    `workers` > 1 sends the requests concurrently (a vLLM server batches them); sample i always
    uses seed `seed + i`, and samples are evaluated and logged in sample order.
    """
    _check(n, "best_of_n")
    prompts = prompts or load_prompts()
    settings = {"iterations": n, "timeout_s": timeout_s, "memory_mb": memory_mb, "dimension": dimension,
                "workers": workers, "seed": seed}
    recorder = RunRecorder(run_dir, loop="best_of_n", responder=responder, settings=settings, overwrite=overwrite,
                           start=start)
    sent = [recorder.add_message("system", prompts["system"], None),
            recorder.add_message("user", task_prompt(prompts, dimension=dimension, timeout_s=timeout_s, start=start),
                                 None)]
    messages = [{"role": recorder.messages[i]["role"], "content": recorder.messages[i]["content"]} for i in sent]

    def sample(i: int) -> tuple[ChatReply, float]:
        start = time.perf_counter()
        return responder.chat(messages, seed=seed + i), time.perf_counter() - start

    if workers > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            samples = list(pool.map(sample, range(n)))
    else:
        samples = [sample(i) for i in range(n)]
    for iteration, (reply, chat_s) in enumerate(samples, start=1):
        start = time.perf_counter()
        reply_index = recorder.add_message("assistant", strip_thinking(reply.content), iteration)
        extraction, candidate, evaluation = _evaluate_reply(recorder, iteration, reply, timeout_s=timeout_s,
                                                            memory_mb=memory_mb)
        recorder.record(_new_step(iteration, list(sent), reply, reply_index, extraction, candidate, evaluation,
                                  chat_s + time.perf_counter() - start))
    return _finish(recorder)


def _orbit_step(recorder: RunRecorder, iteration: int, reply: ChatReply, *, deadline_s: float,
                max_orbits: int, seed: int) -> tuple[Extraction, str | None, dict, str]:
    """Parse the reply's request, run the orbit search, store a found set as a program; (.., evaluation, request)."""
    from hw3lib.kissing.layered import TooManyOrbits, layered_search
    from hw3lib.kissing.orbit_requests import RequestError, parse_request
    from hw3lib.kissing.search import program_source

    start = time.perf_counter()
    try:
        request = parse_request(strip_thinking(reply.content))
    except RequestError as exc:
        return Extraction(None, str(exc)), None, {**_no_code_evaluation(str(exc)), "status": "no_request"}, "none"
    atomic_write_text(recorder.run_dir / "candidates" / f"iter_{iteration:03d}_request.json", request.text + "\n")
    try:
        found = layered_search(list(request.generators), scale=request.scale, parity_blocks=request.parity_blocks,
                               deadline_s=deadline_s, max_vertices=max_orbits, seed=seed)
    except (TooManyOrbits, ValueError, MemoryError) as exc:  # the request is data: any failure goes back as text
        message = f"refused: {exc}. Choose a larger group (fewer, bigger orbits) or a smaller pool."
        return Extraction(None, message), None, {**_no_code_evaluation(message), "status": "refused"}, \
            request.describe()
    message = (f"{found.size} points = 2 + {found.equator_size} + 2 x {found.tropic_size}; "
               f"{found.equator_orbits} of {found.equator_orbits_total} equator orbits and {found.tropic_orbits} of "
               f"{found.tropic_orbits_total} tropic orbits are self-compatible; "
               + ("proved optimal for this group and pool" if found.optimal else
                  f"the best union found within {deadline_s:g} s (not proved optimal)")
               + "; verified exactly.")
    code = program_source(found.points, f"the orbit search on the group of iteration {iteration} of an orbit run",
                          written_by="the `orbit` discovery loop (hw3lib.kissing.loops)")
    path = recorder.write_candidate(iteration, code)
    evaluation = {"num_points": found.size, "dimension": 11, "validity": 1.0 if found.valid else 0.0,
                  "eval_time": time.perf_counter() - start, "combined_score": float(found.size if found.valid else 0),
                  "message": message, "status": "valid" if found.valid else "invalid"}
    return Extraction(code, None), str(path.relative_to(recorder.run_dir)), evaluation, request.describe()


def orbit_guided(responder: Responder, run_dir: str | Path, iterations: int, *, timeout_s: float = 20.0,
                 max_orbits: int = 3000, history_turns: int | None = 3, prompts: dict[str, str] | None = None,
                 seed: int = 0, overwrite: bool = False) -> DiscoveryResult:
    """Loop (d): the model proposes groups, the exact orbit search answers, for `iterations` rounds.

    timeout_s bounds each search's independent-set step (like the other loops' per-program limit); the
    pools are cached between requests and the orbit-graph cap `max_orbits` bounds the rest.
    """
    _check(iterations, "orbit")
    if history_turns is not None and history_turns < 1:
        raise ValueError(f"orbit: history_turns must be >= 1 or None (all), got {history_turns}")
    deadline_s = timeout_s
    prompts = prompts or load_prompts()
    settings = {"iterations": iterations, "deadline_s": deadline_s, "max_orbits": max_orbits,
                "history_turns": history_turns, "dimension": 11, "seed": seed}
    recorder = RunRecorder(run_dir, loop="orbit", responder=responder, settings=settings, overwrite=overwrite)
    system = recorder.add_message("system", prompts["system"], None)
    task = recorder.add_message("user", fill(prompts["orbit_task"], deadline_s=f"{deadline_s:g}",
                                             max_orbits=max_orbits), None)
    for iteration in range(1, iterations + 1):
        start = time.perf_counter()
        sent, reply, reply_index = _converse(recorder, responder, [system, task], history_turns, iteration)
        extraction, candidate, evaluation, request = _orbit_step(recorder, iteration, reply, deadline_s=deadline_s,
                                                                 max_orbits=max_orbits, seed=seed + iteration)
        step = _new_step(iteration, sent, reply, reply_index, extraction, candidate, evaluation, 0.0)
        step["wall_s"] = time.perf_counter() - start
        recorder.record(step)
        if iteration < iterations:
            best = recorder.best_step()
            _send_feedback(recorder, step, fill(
                prompts["feedback_orbit"], request=request, verdict=evaluation["message"],
                best_score=f"{best['score']:g}" if best else "0 (no valid set yet)",
                best_iteration=best["iteration"] if best else "-"))
    return _finish(recorder)


def hybrid(responder: Responder, run_dir: str | Path, iterations: int, *, polish_seconds: float = 10.0,
           **kwargs: Any) -> DiscoveryResult:
    """Loop (c): the LLM proposes starting configurations, the local search polishes them."""
    return agentic_refinement(responder, run_dir, iterations, polish_seconds=polish_seconds, **kwargs)


def discover(loop: str, responder: Responder, run_dir: str | Path, iterations: int, **kwargs: Any) -> DiscoveryResult:
    """Run the loop called `loop` (agentic | best_of_n | hybrid)."""
    if loop == "agentic":
        return agentic_refinement(responder, run_dir, iterations, **kwargs)
    if loop == "best_of_n":
        return best_of_n(responder, run_dir, iterations, **kwargs)
    if loop == "hybrid":
        return hybrid(responder, run_dir, iterations, **kwargs)
    if loop == "orbit":
        return orbit_guided(responder, run_dir, iterations, **kwargs)
    raise ValueError(f"unknown loop {loop!r}: choose one of {', '.join(LOOPS)}")
