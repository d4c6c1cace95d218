"""The doctor's cycle: one engine through a colocated GRPO step's life, then a second engine in the same process.

- engine start: a `VLLMEngine` at the run's dtype with sleep mode where the platform has it, as a colocated
  training engine starts (`engine_share`: on a GPU the share a colocated training engine takes, 0.2 of the
  machine's memory on CPU); compiled with CUDA graphs on
  CUDA, as training engines run, eager on CPU (`--eager` / `--compile` choose). The line names vLLM's model
  runner (hw3lib pins V1: hw3lib.generation.vllm_engine).
- generate: greedy continuations of a few prompts with the sampled tokens' log-probs.
- T=1 log-probs: T=1 samples with seeds, n=4 and min_tokens=4 against the trainer's log-probs of the same
  tokens (hw3lib.generation.doctor.sampled).
- sleep: `sleep_for_training` (hw3lib.generation: level 2, weights and KV cache dropped), as every
  training loop calls it; on CUDA the memory in use must fall by at least half of what the engine took.
- sleeping engine: what the sleeping engine still holds (memory in use asleep minus before the engine) against
  `hw3lib.core.memory.SLEEPING_ENGINE_BYTES`, the estimate every training plan counts for it: more means the
  training phases are planned with memory that is not there.
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
- second engine: another engine in this process after the first closed (hw3lib.generation.doctor.second_engine).
"""

from __future__ import annotations

import time
from typing import Callable

from hw3lib.generation.doctor import environment
from hw3lib.generation.doctor.report import FAIL, GIB, MIB, OK, SKIPPED, Report, explain
from hw3lib.generation.doctor.sampled import check_sampled
from hw3lib.generation.doctor.second_engine import check_second_engine
from hw3lib.generation.doctor.weights import NOISE_SCALE, cast_weights, logprob_change, noisy_weights, weight_bytes

PROMPTS = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many in May.",
           "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting.",
           "Betty is saving money for a new wallet which costs $100.",
           "What is 7 times 8? Answer:")
MAX_TOKENS = 16  # per prompt: enough positions for log-probs to move, short enough to stay quick
MAX_MODEL_LEN = 512  # the doctor's prompts are short; a model's own context (40,960 for Qwen3) sizes a huge engine
MOVED_MIN = 0.05  # max |change| of a log-prob after the push; bf16 rounding noise is well below it
RESTORE_TOL = {"float32": 1e-4}  # the same weights and seed give the same numbers; other dtypes: RESTORE_TOL_LOW
RESTORE_TOL_LOW = 2e-2
CPU_MEMORY_FRACTION = 0.2  # vLLM's gpu_memory_utilization on CPU: of the machine's memory (vllm_engine)
CUDA_RETURN_TOL = GIB  # memory a closed engine may leave in use on a GPU (the CUDA context, cuBLAS workspaces)
CPU_RETURN_TOL = 512 * MIB  # resident memory a closed engine may leave on CPU, or its weights' size if larger


def engine_share(device: str) -> float:
    """vLLM's `gpu_memory_utilization` for the doctor's engines: on CUDA the share a colocated training engine of
    the full profile takes (`hw3lib.core.config.colocated_share`: the course's models fit it), so the check meets
    the memory a run will ask for; on CPU `CPU_MEMORY_FRACTION` of the machine's memory."""
    if device != "cuda":
        return CPU_MEMORY_FRACTION
    from hw3lib.core.config import colocated_share
    from hw3lib.core.profile import get_profile

    return colocated_share(get_profile("full"))


def start_vllm(model_path: str, *, device: str, dtype: str, eager: bool):
    """The real engine, sized for the check and started as a colocated training engine is (module docstring)."""
    from hw3lib.generation import make_engine

    return make_engine("vllm", model_path, device=device, dtype=dtype, gpu_memory_utilization=engine_share(device),
                       max_model_len=MAX_MODEL_LEN, enforce_eager=eager, enable_sleep_mode=None, progress=False)


def model_runner(engine) -> str:
    """`, model runner V1` (or V2) for a vLLM engine; empty for a stand-in that has no vLLM config."""
    try:
        v2 = engine.llm.llm_engine.vllm_config.use_v2_model_runner
    except AttributeError:
        return ""
    return f", model runner {'V2' if v2 else 'V1'}"


class Cycle:
    """One engine through the training loop's cycle; each step records its checks (module docstring)."""

    def __init__(self, report: Report, start_engine: Callable, model_path: str, weights: dict, *,
                 device: str, dtype: str, eager: bool, policy=None, tokenizer=None) -> None:
        """`policy` / `tokenizer`: the trainer's float32 model and its tokenizer, for the T=1 log-probs check
        (skipped without them)."""
        self.report, self.start_engine, self.model_path, self.weights = report, start_engine, model_path, weights
        self.device, self.dtype, self.eager = device, dtype, eager
        self.policy, self.tokenizer = policy, tokenizer
        self.engine = None
        self.outputs: dict[str, list[dict]] = {}  # "first", "sampled", "pushed", ...: token ids and log-probs
        self.memory: dict[str, int] = {}  # bytes in use at each stage (memory_in_use)
        self.figures: dict[str, dict] = {}  # what checks measured beyond their lines (the T=1 log-probs')

    def run(self) -> None:
        """Every step in order (each records the checks it names); when one raises, its first check fails and
        every later one is skipped. The engine is closed whatever happened; then the second engine."""
        steps = [(("engine start",), self.start), (("generate",), self.generate_first),
                 (("T=1 log-probs",), self.check_sampled), (("sleep", "sleeping engine"), self.sleep),
                 (("wake up", "push weights"), self.wake_and_push), (("log-probs moved",), self.check_moved),
                 (("restored",), self.check_restored)]
        try:
            for index, (names, step) in enumerate(steps):
                try:
                    step()
                except Exception as exc:
                    self.report.add(names[0], FAIL, explain(exc))
                    for later in [*names[1:], *(name for more, _ in steps[index + 1:] for name in more)]:
                        self.report.add(later, SKIPPED, f"{names[0]} failed")
                    break
        finally:
            self.close()
        check_second_engine(self, RESTORE_TOL.get(self.dtype, RESTORE_TOL_LOW))

    def start(self) -> None:
        self.memory["before_engine"] = environment.memory_in_use(self.device)
        self.report.note(f"starting vLLM: {self.model_path} at {self.dtype} on {self.device}, "
                         f"{'eager' if self.eager else 'compiled'} (tens of seconds) ...")
        started = time.perf_counter()
        self.engine = self.start_engine(self.model_path, device=self.device, dtype=self.dtype, eager=self.eager)
        self.memory["engine_started"] = environment.memory_in_use(self.device)
        took = self.memory["engine_started"] - self.memory["before_engine"]
        self.report.add("engine start", OK, f"{time.perf_counter() - started:.1f} s, {took / MIB:.0f} MiB "
                                            f"({'GPU' if self.device == 'cuda' else 'resident'} memory), "
                                            f"{'eager' if self.eager else 'compiled'}{model_runner(self.engine)}")

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

    def check_sampled(self) -> None:
        if self.policy is None or self.tokenizer is None:
            self.report.add("T=1 log-probs", SKIPPED, "no trainer policy was given to score the samples")
            return
        check_sampled(self, PROMPTS, max_tokens=MAX_TOKENS, max_model_len=MAX_MODEL_LEN)

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
            self.report.add("sleeping engine", SKIPPED, reason)
            return
        self.memory["asleep"] = environment.memory_in_use(self.device)
        took = self.memory["engine_started"] - self.memory["before_engine"]
        freed = self.memory["engine_started"] - self.memory["asleep"]
        detail = f"level 2: freed {freed / MIB:.0f} of the {took / MIB:.0f} MiB the engine took (needs half)"
        self.report.add("sleep", OK if freed >= took / 2 else FAIL, detail)
        self.report.add("sleeping engine", *self._sleeping_verdict())

    def _sleeping_verdict(self) -> tuple[str, str]:
        """What the sleeping engine holds against the memory plans' estimate (module docstring)."""
        from hw3lib.core.memory import SLEEPING_ENGINE_BYTES

        kept = self.memory["asleep"] - self.memory["before_engine"]
        detail = (f"holds {kept / MIB:.0f} MiB asleep; the memory plans count {SLEEPING_ENGINE_BYTES / MIB:.0f} MiB "
                  "(hw3lib.core.memory.SLEEPING_ENGINE_BYTES)")
        if kept <= SLEEPING_ENGINE_BYTES:
            return OK, detail
        return FAIL, (f"{detail}: every colocated training phase is planned "
                      f"{(kept - SLEEPING_ENGINE_BYTES) / MIB:.0f} MiB too small; report the JSON")

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
            self.memory["awake"] = environment.memory_in_use(self.device)
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
            self.report.add("close", FAIL, explain(exc))
            self.report.add("memory returned", SKIPPED, "close failed")
            return
        self.engine = None
        self.report.add("close", OK, "engine shut down")
        self.memory["closed"] = environment.memory_in_use(self.device)
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
