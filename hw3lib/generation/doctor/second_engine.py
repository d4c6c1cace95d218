"""The doctor's `second engine` check: another engine built in the same process after the first closed.

A notebook kernel or a grid worker builds engine after engine in one process (an evaluation, then a run; a run,
then its resume). With sleep mode vLLM allocates through its process-global `CuMemAllocator`, and a new engine's
`load_model` asserts "CuMem allocator can only be used for one instance per process" while any memory of an
earlier engine is still tracked by it. So after the cycle's engine is closed the doctor reads what the
allocator still tracks (`sleep_pool_bytes`): anything means FAIL with the advice (`SINGLETON_ADVICE`: one
sleep-mode engine per process), without starting an engine that would assert. Otherwise a second engine
starts, as the first did (sleep mode on where the platform has it), generates greedily once and closes: its
tokens must be the first engine's first ones (the same weights from disk, the same seed). On CPU vLLM has no
sleep mode and no such allocator: the second engine is still built, which checks that a closed engine leaves
nothing that stops the next.
"""

from __future__ import annotations

from hw3lib.generation.doctor.report import FAIL, MIB, OK, SINGLETON_ADVICE, SKIPPED, explain


def sleep_pool_bytes() -> int | None:
    """Bytes vLLM's sleep-mode allocator still tracks in this process (None: no allocator was ever created, as on
    CPU or without sleep mode)."""
    try:
        from vllm.device_allocator.cumem import CuMemAllocator
    except Exception:  # no CUDA build of vLLM (the CPU build has no cumem extension), or no vLLM
        return None
    instance = CuMemAllocator.instance
    return None if instance is None else int(instance.get_current_usage())


def check_second_engine(cycle, restore_tol: float) -> None:
    """Record the `second engine` line (module docstring); `cycle` is the closed `Cycle`, whose first outputs
    the second engine's greedy tokens are compared with (log-probs within `restore_tol`)."""
    from hw3lib.generation.doctor.weights import logprob_change

    name = "second engine"
    if cycle.engine is not None or "first" not in cycle.outputs:
        cycle.report.add(name, SKIPPED, "the first engine did not generate and close")
        return
    held = sleep_pool_bytes()
    if held:
        cycle.report.add(name, FAIL, f"the closed engine's sleep-mode memory is still tracked ({held / MIB:.0f} "
                                     f"MiB): another engine in this process would fail to load -> {SINGLETON_ADVICE}")
        return
    try:
        cycle.engine = cycle.start_engine(cycle.model_path, device=cycle.device, dtype=cycle.dtype, eager=cycle.eager)
    except Exception as exc:
        cycle.report.add(name, FAIL, f"after the first closed: {explain(exc)}")
        return
    second, failure = None, None
    try:
        second = cycle.generate()
    except Exception as exc:
        failure = f"it started but did not generate: {explain(exc)}"
    engine, cycle.engine = cycle.engine, None
    try:
        engine.close()
    except Exception as exc:
        failure = failure or f"it did not close: {explain(exc)}"
    if failure:
        cycle.report.add(name, FAIL, failure)
        return
    cycle.outputs["second_engine"] = second
    error, changed = logprob_change(cycle.outputs["first"], second)
    good = changed == 0 and error <= restore_tol
    cycle.report.add(name, OK if good else FAIL, f"built in this process after the first closed: greedy again, max "
                                                 f"|change| {error:.2g} from the first engine's (tolerance "
                                                 f"{restore_tol:g}), {changed} continuations differ")
