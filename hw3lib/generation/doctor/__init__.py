"""`hw3 doctor`: a one-minute check of the rollout cycle on this machine -- run it first on a new GPU.

A GRPO step with vLLM colocated (hw3lib.grpo.loop) generates, puts the engine to sleep for the training
half, wakes it and pushes the new weights into it. Each of those can fail on a student's GPU in a way
that only shows an hour into a run, or never shows at all (a push that silently does nothing trains on
a stale policy's samples without an error; a sampler whose log-probs are not the trainer's biases every
importance ratio). The doctor runs that cycle once with the real vLLM engine -- on a GPU compiled, as training
engines run, on the course's model when it is cached locally (else the tiny model, or `--model`) -- then builds
a second engine in the same process, and prints one line per check as it goes: `ok`, `FAIL` (what happened,
and the fix where one is known) or `skipped (reason)`; then a summary; the exit code is 1 when a check failed.
`--json PATH` saves the results. docs/gpu_first_session.md explains each line.

The checks, by kind (each module's docstring says what its lines check and why):

- hw3lib.generation.doctor.environment: versions, device, dtype, allocator, model; memory readings.
- hw3lib.generation.doctor.cycle: engine start, generate, sleep, sleeping engine, wake up, push weights,
  log-probs moved, restored, close, memory returned -- the training loops' colocated sequence.
- hw3lib.generation.doctor.sampled: T=1 log-probs -- T=1 samples with seeds, n=4, min_tokens=4, against the
  trainer's `response_log_probs` of the same tokens.
- hw3lib.generation.doctor.second_engine: second engine -- vLLM's sleep-mode allocator is one per process.
- hw3lib.generation.doctor.weights / report: the pushed weights; the report's lines.

A recording stand-in of the engine runs every check on CPU in tests/test_doctor.py, with torch.cuda answering
as a GPU would where the CUDA path differs.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

from hw3lib.generation.doctor.cycle import (CPU_MEMORY_FRACTION, CPU_RETURN_TOL, CUDA_RETURN_TOL, MAX_MODEL_LEN,
                                            MAX_TOKENS, MOVED_MIN, PROMPTS, RESTORE_TOL, RESTORE_TOL_LOW, Cycle,
                                            engine_share, start_vllm)
from hw3lib.generation.doctor.environment import (ALLOC_CONF_VARS, VLLM_MIN_CAPABILITY, check_allocator,
                                                  check_environment, choose_model, device_info, memory_in_use,
                                                  vllm_toggles_expandable_segments)
from hw3lib.generation.doctor.report import FAIL, GIB, HINTS, MIB, OK, SKIPPED, Check, Report, explain
from hw3lib.generation.doctor.weights import (NOISE_SCALE, NOISE_SEED, cast_weights, logprob_change, noisy_weights,
                                              original_weights, policy_weights, trainer_policy, weight_bytes)

__all__ = ["ALLOC_CONF_VARS", "CPU_MEMORY_FRACTION", "CPU_RETURN_TOL", "CUDA_RETURN_TOL", "Check", "Cycle", "FAIL",
           "GIB", "HINTS", "MAX_MODEL_LEN", "MAX_TOKENS", "MIB", "MOVED_MIN", "NOISE_SCALE", "NOISE_SEED", "OK",
           "PROMPTS", "RESTORE_TOL", "RESTORE_TOL_LOW", "Report", "SKIPPED", "VLLM_MIN_CAPABILITY", "cast_weights",
           "check_allocator", "check_environment", "choose_model", "device_info", "engine_share", "explain",
           "logprob_change", "memory_in_use", "noisy_weights", "original_weights", "policy_weights", "register",
           "run_doctor", "start_vllm", "trainer_policy", "vllm_toggles_expandable_segments", "weight_bytes"]


def run_doctor(model: str | None = None, *, device: str | None = None, json_path: str | os.PathLike | None = None,
               eager: bool | None = None, start_engine: Callable | None = None,
               echo: Callable[[str], None] = print) -> dict:
    """Run every check (module docstring), print one line each and a summary, and return the results
    (`ok`, `exit_code`, `checks`, `environment`, `logprobs`, `figures`, `memory_bytes`, `seconds`), also written
    to `json_path` when given. `model`: default the course's model on a GPU when it is cached locally, else tiny
    (`choose_model`). `device`: default cuda when torch sees a GPU. `eager`: default eager on CPU, compiled on
    CUDA (as training engines run). `start_engine(model_path, device=, dtype=, eager=)` builds each engine
    (default `start_vllm`; tests pass a recording one)."""
    import torch

    from hw3lib.models.load import resolve_model

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    eager = device != "cuda" if eager is None else eager
    report = Report(echo)
    report.note(f"hw3 doctor: the rollout cycle on {device}")
    env = check_environment(report, device)
    model = choose_model(report, model, device)
    model_path = resolve_model(model)  # `tiny` is built here on first use (~10 s)
    policy, tokenizer = trainer_policy(model)
    cycle = Cycle(report, start_engine or start_vllm, model_path, policy_weights(policy), device=device,
                  dtype=env["dtype"], eager=eager, policy=policy, tokenizer=tokenizer)
    cycle.run()
    result = {"ok": report.count(FAIL) == 0, "exit_code": int(report.count(FAIL) > 0),
              "seconds": round(report.elapsed(), 1), "model": model, "model_path": model_path, "eager": eager,
              "environment": env, "checks": [asdict(check) for check in report.checks], "logprobs": cycle.outputs,
              "figures": cycle.figures, "memory_bytes": cycle.memory}
    verdict = "ready for a GPU run" if result["ok"] else "see docs/gpu_first_session.md for each FAIL"
    report.note(f"summary: {report.count(OK)} ok, {report.count(SKIPPED)} skipped, {report.count(FAIL)} FAIL "
                f"in {result['seconds']:.0f} s: {verdict}")
    if json_path is not None:
        from hw3lib.core.io import atomic_write_json

        atomic_write_json(json_path, result)
        report.note(f"results written to {json_path}")
    return result


def register(parent, name: str) -> None:
    """Add `hw3 doctor` to the `hw3` app (the command is defined here: it is the package's only entry point)."""
    import typer

    @parent.command(name)
    def doctor_command(
        model: Optional[str] = typer.Option(None, help="`tiny` (built offline), a local model folder or a hub id "
                                            "(default: on a GPU the course's model when it is cached locally, "
                                            "else tiny)."),
        device: Optional[str] = typer.Option(None, help="cuda or cpu (default: cuda when torch sees a GPU)."),
        json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the results to this JSON file."),
        compile_: Optional[bool] = typer.Option(None, "--compile/--eager", help="Compile and capture CUDA graphs "
                                                "as training does, or start eager (default: compiled on CUDA, "
                                                "eager on CPU)."),
    ) -> None:
        """Check the vLLM rollout cycle on this machine in about a minute: generate, sample against the trainer's
        log-probs, sleep, wake up, push new weights, generate again, close, build a second engine. Run it first
        on a new GPU; the exit code is 1 when a check failed."""
        # vLLM logs every engine setting at INFO: keep the doctor's lines readable unless the user asks
        # (VLLM_LOGGING_LEVEL=INFO); it only applies before vLLM is first imported, i.e. in a fresh process.
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        result = run_doctor(model, device=device, json_path=json_path, eager=None if compile_ is None else not compile_)
        raise typer.Exit(result["exit_code"])
