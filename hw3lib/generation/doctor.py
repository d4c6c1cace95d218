"""`hw3 doctor`: a one-minute check of the rollout cycle on this machine -- run it first on a new GPU.

A GRPO step with vLLM colocated (hw3lib.grpo.loop) generates, puts the engine to sleep for the training
half, wakes it and pushes the new weights into it. Each of those can fail on a student's GPU in a way
that only shows an hour into a run, or never shows at all (a push that silently does nothing trains on
a stale policy's samples without an error). The doctor runs that cycle once, on the tiny model (or
`--model`) with the real vLLM engine, and prints one line per check as it goes -- `ok`, `FAIL` (what
happened, and the fix where one is known) or `skipped (reason)` -- then a summary; the exit code is 1
when a check failed. `--json PATH` saves the results. docs/gpu_first_session.md explains each line.

- versions: python, torch, transformers, vLLM (imported: a broken install fails here, not mid-run).
- device: a CUDA GPU's name, memory, compute capability and count, as `hw3lib.core.preflight.detect_device`
  reads them for every run (FAIL below 7.0, where vLLM does not run), else the CPU's cores and memory.
- dtype: `hw3lib.core.preflight.supported_dtype`, every run's rule: bfloat16 at compute capability >= 8.0,
  else float32 (vLLM refuses bf16 below 8.0: T4, V100).
- allocator: `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` made vLLM's sleep mode refuse to start
  before the pinned 0.32, which switches it off around its own memory pool (vllm/device_allocator/cumem.py):
  FAIL on CUDA with an older vLLM, else reported.
- engine start: a `VLLMEngine` at that dtype (0.3 of the GPU's memory; 0.2 of the machine's on CPU;
  eager unless `--compile`, so the check stays near a minute).
- generate: greedy continuations of a few prompts with the sampled tokens' log-probs.
- sleep: `sleep_for_training` (hw3lib.generation: level 2, weights and KV cache dropped), as every
  training loop calls it; on CUDA the memory in use must fall by at least half of what the engine took.
- wake up / push weights: `push_weights(..., colocated=True)`, the loops' sequence: wake the weights,
  reload them in place (`engine.load_weights`, vLLM's `reload_weights`), wake the KV cache, reset the
  prefix cache. The new weights are the same model plus seeded noise at NOISE_SCALE x each tensor's std,
  at the engine's dtype. vLLM has no sleep mode on CPU: sleep and wake-up are still called (no-ops there)
  and reported skipped.
- log-probs moved: greedy again with the same seed; the sampled tokens' log-probs must move by at least
  MOVED_MIN somewhere.
- restored: a second cycle (sleep, push of the original weights), greedy again: the same tokens as the
  first call, log-probs within RESTORE_TOL (the push loads what it is given, and the prefix cache holds
  nothing stale).
- close / memory returned: after `close`, CUDA memory in use within CUDA_RETURN_TOL of its value before
  the engine (a leaked engine leaves the trainer less memory after every evaluation); on CPU the process's
  resident memory, reported, FAIL only above CPU_RETURN_TOL and the engine's weights' size (a closed engine
  still holding its model: the code vLLM imports for its first engine stays resident whatever happens).

Memory is the whole GPU's memory in use (`torch.cuda.mem_get_info`, every process): vLLM maps its memory
outside torch's allocator, so `torch.cuda.memory_allocated` would not see it.
"""

from __future__ import annotations

import gc
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

OK, FAIL, SKIPPED = "ok", "FAIL", "skipped"
GIB, MIB = 2**30, 2**20
PROMPTS = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many in May.",
           "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting.",
           "Betty is saving money for a new wallet which costs $100.",
           "What is 7 times 8? Answer:")
MAX_TOKENS = 16  # per prompt: enough positions for log-probs to move, short enough to stay quick
MAX_MODEL_LEN = 512  # the doctor's prompts are short; a model's own context (40,960 for Qwen3) sizes a huge engine
NOISE_SCALE, NOISE_SEED = 0.5, 1  # the pushed weights: a clearly different model (tiny: log-probs move ~0.25)
MOVED_MIN = 0.05  # max |change| of a log-prob after the push; bf16 rounding noise is well below it
RESTORE_TOL = {"float32": 1e-4}  # the same weights and seed give the same numbers; other dtypes: RESTORE_TOL_LOW
RESTORE_TOL_LOW = 2e-2
MEMORY_FRACTION = {"cuda": 0.3, "cpu": 0.2}  # vLLM's gpu_memory_utilization (on CPU: of the machine's memory)
CUDA_RETURN_TOL = GIB  # memory a closed engine may leave in use on a GPU (the CUDA context, cuBLAS workspaces)
CPU_RETURN_TOL = 512 * MIB  # resident memory a closed engine may leave on CPU, or its weights' size if larger
VLLM_MIN_CAPABILITY = (7, 0)  # vLLM's CUDA build does not run below it
ALLOC_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")  # torch >= 2.9 reads the second name too
HINTS = (  # (text in an error, what to do): the fixes docs/gpu_first_session.md explains
    ("out of memory", "another process holds the GPU (nvidia-smi), or the model is too large: free it first"),
    ("no available memory", "another process holds the GPU (nvidia-smi): free it first"),
    ("bfloat16", "this GPU cannot run bf16 in vLLM: use dtype float32 (compute capability < 8.0)"),
    ("expandable", "unset PYTORCH_CUDA_ALLOC_CONF (expandable_segments) before starting Python"),
    ("installed vllm build runs on", "install the vLLM build for this device (pip install -e '.[gpu]' on a GPU)"),
)


@dataclass
class Check:
    """One line of the doctor's report."""

    name: str
    status: str
    """`ok`, `FAIL` or `skipped`."""
    detail: str
    """What was measured, or why it failed / was skipped."""
    seconds: float
    """Time since the doctor started, when the check was recorded."""


class Report:
    """The checks so far; each is printed as it is recorded, so the report is the progress display."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        self.echo, self.checks, self.started = echo, [], time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def add(self, name: str, status: str, detail: str = "") -> None:
        check = Check(name, status, detail, round(self.elapsed(), 1))
        self.checks.append(check)
        shown = f"skipped ({detail})" if status == SKIPPED else f"{status:<8} {detail}"
        self.echo(f"[{check.seconds:6.1f}s] {name:<16} {shown}")

    def note(self, text: str) -> None:
        self.echo(f"[{self.elapsed():6.1f}s] {text}")

    def count(self, status: str) -> int:
        return sum(check.status == status for check in self.checks)


# ---------------------------------------------------------------------------------------------
# The machine


def device_info(device: str):
    """The device the engine will run on, as `hw3lib.core.preflight` reads it for every run (`DeviceInfo`: name,
    total memory, compute capability, count). `device="cpu"` is this machine's CPU even beside a GPU, and a card
    `$HW3_SIMULATE_GPU` names is never used: the doctor runs the real engine."""
    import psutil

    from hw3lib.core.preflight import DeviceInfo, detect_device

    info = detect_device()
    if device == "cuda" and info.kind == "cuda" and not info.simulated:
        return info
    return DeviceInfo("cpu", platform.processor() or platform.machine() or "cpu", psutil.virtual_memory().total,
                      None, 1)


def check_environment(report: Report, device: str) -> dict:
    """The versions, device, dtype and allocator checks; returns what they found (saved in the JSON)."""
    import torch
    import transformers

    from hw3lib.core.preflight import supported_dtype  # the rule every run's preflight applies

    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__}
    try:
        from hw3lib.generation.vllm_engine import import_vllm

        env["vllm"] = import_vllm().__version__  # imported now: the memory baseline excludes vLLM's own code
    except Exception as exc:  # a missing or broken install (e.g. "operator torchvision::nms does not exist")
        env["vllm"] = None
        report.add("versions", FAIL, f"vLLM does not import: {_explain(exc)}")
    if env["vllm"]:
        report.add("versions", OK, ", ".join(f"{name} {env[name]}" for name in ("python", "torch", "transformers",
                                                                                "vllm")))
    info = device_info(device)
    env["device"] = {**asdict(info), "cores": os.cpu_count()}
    _check_device(report, info, device)
    env["dtype"], env["dtype_reason"] = supported_dtype(info)
    report.add("dtype", OK, f"{env['dtype']} -- {env['dtype_reason']}")
    check_allocator(report, device)
    return env


def _check_device(report: Report, info, device: str) -> None:
    if device == "cuda" and info.kind != "cuda":
        report.add("device", FAIL, "--device cuda, but torch sees no GPU (check nvidia-smi and that torch is a "
                                   "CUDA build: torch.version.cuda)")
    elif info.kind != "cuda":
        report.add("device", OK, f"cpu: {os.cpu_count()} cores, {info.describe()}")
    elif info.capability < VLLM_MIN_CAPABILITY:
        report.add("device", FAIL, f"{info.describe()}: vLLM needs compute capability >= 7.0 "
                                   "(use engine='transformers')")
    else:
        report.add("device", OK, f"{info.count} x {info.describe()}")


def check_allocator(report: Report, device: str) -> None:
    """Torch's allocator with expandable segments: vLLM releases before 0.32's allocator helpers refuse to start
    sleep mode with it (FAIL on CUDA); the pinned 0.32 turns it off around its own pool (reported, ok)."""
    settings = {name: os.environ[name] for name in ALLOC_CONF_VARS if os.environ.get(name)}
    expandable = [name for name, value in settings.items()
                  if "expandable_segments:true" in value.replace(" ", "").lower()]
    if not expandable:
        shown = ", ".join(f"{name}={value}" for name, value in settings.items())
        report.add("allocator", OK, shown or "PYTORCH_CUDA_ALLOC_CONF unset")
    elif device != "cuda":
        report.add("allocator", OK, f"{expandable[0]} has expandable_segments:True: harmless on CPU; on a GPU "
                                    "vLLM releases older than 0.32 refuse to start sleep mode with it")
    elif vllm_toggles_expandable_segments():
        report.add("allocator", OK, f"{expandable[0]} has expandable_segments:True: this vLLM turns it off around "
                                    "its sleep-mode memory pool (older releases refused to start)")
    else:
        report.add("allocator", FAIL, f"{expandable[0]} has expandable_segments:True: this vLLM's sleep mode "
                                      "refuses to start with it; unset it before starting Python, or install "
                                      "vllm==0.32.0")


def vllm_toggles_expandable_segments() -> bool:
    """Whether the installed vLLM switches expandable segments off around its sleep-mode pool: 0.32's
    `vllm.device_allocator.alloc_conf` (used by `CuMemAllocator.use_memory_pool`); older releases asserted."""
    import importlib.util

    try:
        return importlib.util.find_spec("vllm.device_allocator.alloc_conf") is not None
    except ImportError:  # no vLLM at all: the versions line has failed already
        return False


def memory_in_use(device: str) -> int:
    """Bytes in use: the whole GPU's on CUDA (see the module docstring), this process's resident set on CPU."""
    import psutil
    import torch

    from hw3lib.generation import free_cached_memory

    gc.collect()
    if device == "cuda":
        free_cached_memory()  # torch's cache is not the engine's: hand it back before measuring
        free, total = torch.cuda.mem_get_info()
        return total - free
    return psutil.Process().memory_info().rss


# ---------------------------------------------------------------------------------------------
# The weights


def original_weights(model: str) -> dict:
    """The model's float32 weights by their checkpoint names (what a policy's `state_dict()` holds)."""
    from hw3lib.models.load import load_model_and_tokenizer

    policy, _ = load_model_and_tokenizer(model, device="cpu", dtype="float32")
    return {name: tensor.detach() for name, tensor in policy.state_dict().items()}


def cast_weights(weights: dict, dtype: str):
    """(name, tensor) pairs at the engine's dtype, one copy at a time (as the training loop pushes them)."""
    import torch

    target = getattr(torch, dtype)
    for name, tensor in weights.items():
        yield name, tensor.to(target)


def weight_bytes(weights: dict, dtype: str) -> int:
    """The weights' size at the engine's dtype (tied tensors, e.g. lm_head and the embedding, counted once)."""
    import torch

    unique = {tensor.data_ptr(): tensor.numel() for tensor in weights.values()}
    return sum(unique.values()) * torch.empty((), dtype=getattr(torch, dtype)).element_size()


def noisy_weights(weights: dict, dtype: str, scale: float = NOISE_SCALE, seed: int = NOISE_SEED):
    """(name, tensor) pairs: each tensor plus seeded Gaussian noise at `scale` x its std, at the engine's dtype.
    Constant tensors (norm weights at init) have std 0 and pass unchanged."""
    import torch

    generator, target = torch.Generator().manual_seed(seed), getattr(torch, dtype)
    for name, tensor in weights.items():
        if tensor.is_floating_point() and tensor.numel() > 1:
            tensor = tensor + scale * tensor.std() * torch.randn(tensor.shape, generator=generator)
        yield name, tensor.to(target)


def logprob_change(before: list[dict], after: list[dict]) -> tuple[float, int]:
    """(the largest |change| of a sampled token's log-prob, over the positions both continuations have;
    how many continuations' tokens differ)."""
    largest, changed = 0.0, 0
    for old, new in zip(before, after):
        changed += old["token_ids"] != new["token_ids"]
        for a, b in zip(old["logprobs"], new["logprobs"]):
            largest = max(largest, abs(a - b))
    return largest, changed


def _explain(exc: BaseException) -> str:
    """The error's first line (vLLM's can run to pages), with the fix when a known one applies."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"
    hint = next((fix for key, fix in HINTS if key in str(exc).lower()), None)
    return f"{text} -> {hint}" if hint else text


# ---------------------------------------------------------------------------------------------
# The cycle


def start_vllm(model_path: str, *, device: str, dtype: str, eager: bool):
    """The real engine, sized for the check (see the module docstring)."""
    from hw3lib.generation import make_engine

    return make_engine("vllm", model_path, device=device, dtype=dtype, gpu_memory_utilization=MEMORY_FRACTION[device],
                       max_model_len=MAX_MODEL_LEN, enforce_eager=eager, progress=False)


class Cycle:
    """One engine through the training loop's cycle; each step records its checks (module docstring)."""

    def __init__(self, report: Report, start_engine: Callable, model_path: str, weights: dict, *,
                 device: str, dtype: str, eager: bool) -> None:
        self.report, self.start_engine, self.model_path, self.weights = report, start_engine, model_path, weights
        self.device, self.dtype, self.eager = device, dtype, eager
        self.engine = None
        self.outputs: dict[str, list[dict]] = {}  # "first", "pushed", "restored": token ids and log-probs
        self.memory: dict[str, int] = {}  # bytes in use at each stage (memory_in_use)

    def run(self) -> None:
        """Every step in order (each records the checks it names); when one raises, its first check fails and
        every later one is skipped. The engine is closed whatever happened."""
        steps = [(("engine start",), self.start), (("generate",), self.generate_first), (("sleep",), self.sleep),
                 (("wake up", "push weights"), self.wake_and_push), (("log-probs moved",), self.check_moved),
                 (("restored",), self.check_restored)]
        try:
            for index, (names, step) in enumerate(steps):
                try:
                    step()
                except Exception as exc:
                    self.report.add(names[0], FAIL, _explain(exc))
                    for later in [*names[1:], *(name for more, _ in steps[index + 1:] for name in more)]:
                        self.report.add(later, SKIPPED, f"{names[0]} failed")
                    break
        finally:
            self.close()

    def start(self) -> None:
        self.memory["before_engine"] = memory_in_use(self.device)
        self.report.note(f"starting vLLM: {self.model_path} at {self.dtype} on {self.device} (tens of seconds) ...")
        started = time.perf_counter()
        self.engine = self.start_engine(self.model_path, device=self.device, dtype=self.dtype, eager=self.eager)
        self.memory["engine_started"] = memory_in_use(self.device)
        took = self.memory["engine_started"] - self.memory["before_engine"]
        self.report.add("engine start", OK, f"{time.perf_counter() - started:.1f} s, {took / MIB:.0f} MiB "
                                            f"({'GPU' if self.device == 'cuda' else 'resident'} memory)")

    def generate(self) -> list[dict]:
        from hw3lib.generation import SamplingConfig

        greedy = SamplingConfig(temperature=0.0, max_tokens=MAX_TOKENS, stop=(), seed=0)
        return [{"token_ids": group[0].token_ids, "logprobs": group[0].logprobs}
                for group in self.engine.generate(list(PROMPTS), greedy)]

    def generate_first(self) -> None:
        self.outputs["first"] = first = self.generate()
        tokens = [value for out in first for value in out["logprobs"]]
        self.report.add("generate", OK, f"{len(first)} prompts, {len(tokens)} tokens, "
                                        f"mean log-prob {sum(tokens) / max(len(tokens), 1):.3f}")

    def _no_sleep_mode(self, call: str) -> str | None:
        """Why `call` did nothing (no sleep mode on this platform), else None."""
        if getattr(self.engine, "sleep_mode", False):
            return None
        return f"vLLM has no sleep mode on {self.device}; {call} was called and did nothing"

    def sleep(self) -> None:
        from hw3lib.generation import sleep_for_training

        sleep_for_training(self.engine, colocated=True)  # level 2, called even on CPU: the loops call it there too
        if reason := self._no_sleep_mode("sleep(level=2)"):
            self.report.add("sleep", SKIPPED, reason)
            return
        self.memory["asleep"] = memory_in_use(self.device)
        took = self.memory["engine_started"] - self.memory["before_engine"]
        freed = self.memory["engine_started"] - self.memory["asleep"]
        detail = f"level 2: freed {freed / MIB:.0f} of the {took / MIB:.0f} MiB the engine took (needs half)"
        self.report.add("sleep", OK if freed >= took / 2 else FAIL, detail)

    def wake_and_push(self) -> None:
        """The colocated push (`hw3lib.generation.push_weights`): wake the weights, reload them in place, wake
        the KV cache, reset the prefix cache -- with new weights, the model plus seeded noise."""
        from hw3lib.generation import push_weights

        started = time.perf_counter()
        pushed = push_weights(self.engine, noisy_weights(self.weights, self.dtype), colocated=True)
        seconds = time.perf_counter() - started
        if reason := self._no_sleep_mode("wake_up(tags=...)"):
            self.report.add("wake up", SKIPPED, reason)
        else:
            self.memory["awake"] = memory_in_use(self.device)
            self.report.add("wake up", OK, f"weights, then KV cache: took back "
                                           f"{(self.memory['awake'] - self.memory['asleep']) / MIB:.0f} MiB")
        self.report.add("push weights", OK, f"{pushed} tensors (+ noise {NOISE_SCALE} x std) in {seconds:.2f} s")

    def check_moved(self) -> None:
        self.outputs["pushed"] = self.generate()
        moved, changed = logprob_change(self.outputs["first"], self.outputs["pushed"])
        detail = (f"max |change| {moved:.4f} (needs >= {MOVED_MIN}); {changed} of {len(PROMPTS)} continuations "
                  "changed tokens")
        if moved < MOVED_MIN:
            detail += ": the engine still serves the old weights, so training would sample a stale policy"
        self.report.add("log-probs moved", OK if moved >= MOVED_MIN else FAIL, detail)

    def check_restored(self) -> None:
        """A second cycle, as the next GRPO step runs it: sleep, push the original weights, generate."""
        from hw3lib.generation import push_weights, sleep_for_training

        sleep_for_training(self.engine, colocated=True)
        push_weights(self.engine, cast_weights(self.weights, self.dtype), colocated=True)
        self.outputs["restored"] = self.generate()
        error, changed = logprob_change(self.outputs["first"], self.outputs["restored"])
        tolerance = RESTORE_TOL.get(self.dtype, RESTORE_TOL_LOW)
        good = error <= tolerance and changed == 0
        self.report.add("restored", OK if good else FAIL, f"a second sleep and push, of the original weights: max "
                                                          f"|change| {error:.2g} (tolerance {tolerance:g}), "
                                                          f"{changed} continuations differ")

    def close(self) -> None:
        """Close the engine and check the memory it took came back (see the module docstring)."""
        if self.engine is None:
            for name in ("close", "memory returned"):
                self.report.add(name, SKIPPED, "the engine did not start")
            return
        try:
            self.engine.close()
        except Exception as exc:
            self.report.add("close", FAIL, _explain(exc))
            self.report.add("memory returned", SKIPPED, "close failed")
            return
        self.report.add("close", OK, "engine shut down")
        self.memory["closed"] = memory_in_use(self.device)
        self.report.add("memory returned", *self._memory_verdict())

    def _memory_verdict(self) -> tuple[str, str]:
        took = self.memory["engine_started"] - self.memory["before_engine"]
        left = self.memory["closed"] - self.memory["before_engine"]
        detail = f"{left / MIB:.0f} MiB of the {took / MIB:.0f} MiB the engine took still in use"
        if self.device == "cuda":
            return (OK if left <= CUDA_RETURN_TOL else FAIL), f"{detail} (tolerance {CUDA_RETURN_TOL / MIB:.0f} MiB)"
        # Resident memory keeps the code vLLM imports while building its first engine (~270 MiB with the tiny
        # model, and malloc_trim gives none of it back): only more than that and the engine's weights together
        # -- a closed engine still holding its model -- fails.
        weights = weight_bytes(self.weights, self.dtype)
        limit = max(CPU_RETURN_TOL, weights)
        return (OK if left <= limit else FAIL), (f"{detail} (resident memory, lenient: at most {limit / MIB:.0f} "
                                                 f"MiB, the larger of {CPU_RETURN_TOL / MIB:.0f} MiB and the weights)")


# ---------------------------------------------------------------------------------------------
# The whole check


def run_doctor(model: str = "tiny", *, device: str | None = None, json_path: str | os.PathLike | None = None,
               eager: bool = True, start_engine: Callable | None = None,
               echo: Callable[[str], None] = print) -> dict:
    """Run every check (module docstring), print one line each and a summary, and return the results
    (`ok`, `exit_code`, `checks`, `environment`, `logprobs`, `memory`, `seconds`), also written to
    `json_path` when given. `device`: default cuda when torch sees a GPU. `start_engine(model_path, device=,
    dtype=, eager=)` builds the engine (default `start_vllm`; tests pass a recording one)."""
    import torch

    from hw3lib.models.load import resolve_model

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    report = Report(echo)
    report.note(f"hw3 doctor: the rollout cycle on {device} with model {model!r}")
    env = check_environment(report, device)
    model_path = resolve_model(model)  # `tiny` is built here on first use (~10 s)
    cycle = Cycle(report, start_engine or start_vllm, model_path, original_weights(model), device=device,
                  dtype=env["dtype"], eager=eager)
    cycle.run()
    result = {"ok": report.count(FAIL) == 0, "exit_code": int(report.count(FAIL) > 0),
              "seconds": round(report.elapsed(), 1), "model": model, "model_path": model_path, "environment": env,
              "checks": [asdict(check) for check in report.checks], "logprobs": cycle.outputs,
              "memory_bytes": cycle.memory}
    verdict = "ready for a GPU run" if result["ok"] else "see docs/gpu_first_session.md for each FAIL"
    report.note(f"summary: {report.count(OK)} ok, {report.count(SKIPPED)} skipped, {report.count(FAIL)} FAIL "
                f"in {result['seconds']:.0f} s: {verdict}")
    if json_path is not None:
        from hw3lib.core.io import atomic_write_json

        atomic_write_json(json_path, result)
        report.note(f"results written to {json_path}")
    return result


def register(parent, name: str) -> None:
    """Add `hw3 doctor` to the `hw3` app (the command is defined here: it is the module's only entry point)."""
    import typer

    @parent.command(name)
    def doctor_command(
        model: str = typer.Option("tiny", help="`tiny` (built offline), a local model folder or a hub id."),
        device: Optional[str] = typer.Option(None, help="cuda or cpu (default: cuda when torch sees a GPU)."),
        json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the results to this JSON file."),
        compile_: bool = typer.Option(False, "--compile", help="Compile and capture CUDA graphs as training does "
                                      "(a slower start)."),
    ) -> None:
        """Check the vLLM rollout cycle on this machine in about a minute: generate, sleep, wake up, push new
        weights, generate again, close. Run it first on a new GPU; the exit code is 1 when a check failed."""
        # vLLM logs every engine setting at INFO: keep the doctor's lines readable unless the user asks
        # (VLLM_LOGGING_LEVEL=INFO); it only applies before vLLM is first imported, i.e. in a fresh process.
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        result = run_doctor(model, device=device, json_path=json_path, eager=not compile_)
        raise typer.Exit(result["exit_code"])


if __name__ == "__main__":
    import typer

    _app = typer.Typer(add_completion=False)
    register(_app, "doctor")
    _app()
