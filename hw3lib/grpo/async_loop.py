"""Asynchronous, disaggregated GRPO on Ray: a Generator actor and a Learner actor that overlap.

    from hw3lib.grpo.async_loop import AsyncConfig, train_async
    result = train_async(cfg, AsyncConfig(mode="one_behind"))   # or mode="replay"

The synchronous loop (hw3lib.grpo.loop) alternates generate -> score -> train -> sync. Here two Ray
actors work at the same time:

- `Generator` owns a rollout engine (its own copy of the policy) and the reward function: it
  samples and scores rollout batches (`hw3lib.grpo.loop.sample_rollout_batch`), each tagged with the
  policy version whose weights sampled it;
- `Learner` owns the float32 policy, the optimizer and the run folder (`hw3lib.grpo.loop.GRPOLearner`:
  the same loss, logging, validation and checkpoints as the synchronous loop).

The driver (this process) moves rollout batches generator -> learner and versioned weights
learner -> generator through Ray's object store, in one of two schedules:

- **one_behind** (`max_staleness=1`): generation of batch k+1 overlaps training on batch k, so
  every batch is trained at most one policy version after the one that sampled it (verl's
  one-step-off-policy recipe). `max_staleness=0` runs the same code path strictly in turn and
  gives the synchronous loop's weights (tested).
- **replay**: the generator keeps a bounded buffer of scored groups full (hw3lib.grpo.replay); each
  learner step draws `n_prompts_per_rollout_batch` groups from it, never one older than
  `max_staleness` versions, each at most `max_uses` times.

A batch trained after the policy moved on is off-policy: the learner's importance ratio uses the
behaviour policy's log-probs (the engine's, reported with each rollout) through the clipped GRPO
loss, so async runs need a ratio loss (`grpo_clip` or `grpo_no_clip`) whenever `max_staleness > 0`.

Per GRPO step the metrics rows carry `async/staleness` (learner version minus the oldest sampling
version in the batch) and `async/expired_groups` (replay); `async_timings.jsonl` in the run folder
has the time breakdown per step (`step_s`, `generation_s`, `train_s`, `weight_sync_s`,
`generator_idle_s`, `learner_idle_s`: each actor's busy intervals, measured in the actor, cut to
the step's wall-clock window; written when the run stops, once every interval is known).

Failures: an exception in either actor (or the generator's process dying) stops the run with an
`AsyncRunError` that shows the actor's error, after the learner has checkpointed the last
completed GRPO step (`resume=True` continues with fresh actors); Ray is shut down when this
function started it, so no Ray process is left behind. The run is not recovered automatically:
a silent restart would hide a crashing engine.

Here and in CI: `ray.init(num_cpus=2)` locally (no dashboard; `local_ray.start_local_ray` retries a
start that a busy machine timed out), one CPU per actor. On GPUs each actor asks Ray for its GPU
explicitly (`actor_options`: one each on two GPUs, half each when `rollout_device` and `policy_device`
are the same GPU) and keeps the configured device names; for large models a multi-GPU user
replaces the object-store weight transfer with an NCCL broadcast from the learner to the generator (a
`torch.distributed` group spanning both). The learner validates with an engine of its own,
built when it starts: a vLLM one colocated with the learner's policy sleeps between validations and is
woken with the weights (`Learner.validate`, vLLM's documented sequence: hw3lib.generation).

On one GPU (hw3lib.grpo.async_start): the learner's rows per forward are planned beside the generator's awake
engine (`memory.async_plan`, through hw3lib.grpo.memory_plan), the GPUs Ray registered are checked against the
actors' requests before either is created, the generator's engine is built before the learner loads (no two
processes change the card's memory while vLLM profiles it), and every wait on an actor has a time limit.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hw3lib.core.io import append_jsonl, atomic_write_json, runs_dir, shown_path
from hw3lib.core.lifecycle import RunResult, check_fits, open_run, read_result, reuse_message
from hw3lib.core.runs import latest_checkpoint
from hw3lib.grpo.config import GRPOConfig
from hw3lib.grpo.async_start import ActorCallTimeout, call_timeout, check_ray_gpus, get, start_actors
from hw3lib.grpo.local_ray import start_local_ray
from hw3lib.grpo.memory_plan import with_memory_plan
from hw3lib.grpo.replay import ReplayBuffer, merge_groups, split_groups
from hw3lib.maths.grpo import RATIO_LOSSES

MODES = ("one_behind", "replay")
ASYNC_FILE = "async.json"
TIMINGS_FILE = "async_timings.jsonl"
REPLAY_FILE = "replay.json"
# Environment the actors need (where data, models and runs live); Ray workers get it explicitly.
_ENV_KEYS = ("HW3_DATA_DIR", "HW3_CACHE_DIR", "HW3_OUTPUT_DIR", "HW3_RUNS_DIR", "HW3_MATH_DATA", "PYTHONHASHSEED",
             "TOKENIZERS_PARALLELISM", "HF_HUB_OFFLINE")


class AsyncRunError(RuntimeError):
    """An actor failed; the message says which, why, and where the last checkpoint is."""


@dataclass(frozen=True)
class AsyncConfig:
    """How the asynchronous run overlaps generation and training (see the module docstring)."""

    mode: str = "one_behind"
    max_staleness: int = 1  # learner version minus sampling version, at most
    max_uses: int = 1  # replay: times one group may be trained on
    buffer_batches: int = 2  # replay: buffer capacity, in rollout batches
    generator_threads: int = 1  # torch threads per actor (one CPU each on a 2-core machine)
    learner_threads: int = 1

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"AsyncConfig(mode={self.mode!r}): choose one of {', '.join(MODES)}")
        if self.max_staleness < 0 or self.max_uses < 1 or self.buffer_batches < 1:
            raise ValueError("AsyncConfig: need max_staleness >= 0, max_uses >= 1 and buffer_batches >= 1")
        if self.mode == "one_behind" and self.max_uses != 1:
            raise ValueError("AsyncConfig(mode='one_behind') trains each batch once: max_uses must be 1 "
                             "(use mode='replay' to reuse rollouts)")

    def check(self, cfg: GRPOConfig) -> None:
        """Refuse settings whose off-policy updates the loss would not correct."""
        if self.max_staleness > 0 and cfg.loss_type not in RATIO_LOSSES:
            raise ValueError(f"asynchronous GRPO with max_staleness={self.max_staleness} trains on rollouts of "
                             f"older policies; loss_type={cfg.loss_type!r} has no importance ratio to correct "
                             f"for that: use one of {', '.join(RATIO_LOSSES)} (or max_staleness=0)")


# ---- the actors (plain classes, made Ray actors in train_async) -------------------------------------------

def _actor_setup(env: dict, threads: int) -> None:
    import torch

    os.environ.update(env)
    torch.set_num_threads(threads)


class Generator:
    """Owns a rollout engine and the reward function; samples and scores rollout batches."""

    def __init__(self, cfg: GRPOConfig, env: dict, threads: int, fail_at_generation: int | None = None) -> None:
        _actor_setup(env, threads)
        from hw3lib.tasks.data import load_task
        from hw3lib.generation import training_engine
        from hw3lib.models.load import load_model_and_tokenizer
        from hw3lib.tasks.prompt_table import reward_fn_for
        from hw3lib.models.load import initial_policy_source

        self.cfg = cfg
        initial_model = initial_policy_source(cfg)
        model = tokenizer = None  # vLLM loads its own copy: a float32 one here would only take memory (2.4 GB at 0.6B)
        if cfg.engine != "vllm":
            model, tokenizer = load_model_and_tokenizer(str(initial_model), device=cfg.rollout_device,
                                                        dtype="float32")
        train_records, eval_records = load_task(cfg)
        self.engine = training_engine(cfg, model, tokenizer, initial_model, records=[*train_records, *eval_records])
        self.train_records = train_records
        self.reward_fn = reward_fn_for(cfg.prompt)
        self.version = -1  # no weights pushed yet
        self.fail_at_generation = fail_at_generation  # fault injection for the tests

    def load_weights(self, weights_and_time: tuple, version: int) -> tuple[float, float]:
        """Load the learner's `(weights, interval)` (straight from the object store) as `version`."""
        started = time.time()
        self.engine.load_weights(weights_and_time[0])
        self.version = version
        return started, time.time()

    def generate(self, index: int):
        """Rollout batch number `index` (its questions and sampling seed) with the current weights."""
        from hw3lib.grpo.loop import sample_rollout_batch

        if index == self.fail_at_generation:
            raise RuntimeError(f"injected generator failure at generation {index}")
        started = time.time()
        batch = sample_rollout_batch(self.engine, self.cfg, self.train_records, self.reward_fn, index, self.version)
        return batch, (started, time.time())

    def pid(self) -> int:
        return os.getpid()


class Learner:
    """Owns the policy, the optimizer and the run folder through `hw3lib.grpo.loop.GRPOLearner`."""

    def __init__(self, cfg: GRPOConfig, run_dir: str, checkpoint: str | None, env: dict, threads: int,
                 callback=None) -> None:
        _actor_setup(env, threads)
        from hw3lib.generation import engine_colocated
        from hw3lib.grpo.loop import start_run

        self.cfg = cfg
        self.train_records, self.learner = start_run(Path(run_dir), cfg, Path(checkpoint) if checkpoint else None,
                                                     callback)
        self.engine = None  # built on first validation: wraps the policy (no copy in float32)
        self.colocated = engine_colocated(cfg)  # a vLLM validation engine on the policy's device

    def validate(self) -> None:
        """Validate the current weights with the learner's own engine (built on first use). A colocated one
        sleeps except while it validates: woken with the weights before (`push_weights`: vLLM's documented
        sequence), asleep again after (`sleep_for_training`), so training has the memory."""
        from hw3lib.generation import push_weights, sleep_for_training

        self.build_engine()
        push_weights(self.engine, self.learner.weights_for_engine(), colocated=self.colocated)  # no copy when wrapped
        self.learner.run_validation(self.engine)
        sleep_for_training(self.engine, colocated=self.colocated)

    def build_engine(self) -> None:
        """The learner's validation engine, once (asleep when colocated: `validate`'s push wakes it)."""
        from hw3lib.generation import sleep_for_training, training_engine

        if self.engine is None:
            self.engine = training_engine(self.cfg, self.learner.policy, self.learner.tokenizer,
                                          self.learner.initial_model,
                                          records=[*self.train_records, *self.learner.eval_records])
            sleep_for_training(self.engine, colocated=self.colocated)

    def version(self) -> int:
        return self.learner.version

    def start(self) -> int:
        """Build the validation engine (before the driver's first generation: on a GPU no two engines profile at
        once, hw3lib.grpo.async_start), start the clock and run a missing validation; returns the version."""
        self.build_engine()
        self.learner.start_clock()
        self.learner.catch_up(self.validate)
        return self.learner.version

    def weights(self) -> tuple[dict, tuple[float, float]]:
        """The current weights as CPU tensors (what travels through the object store)."""
        started = time.time()
        weights = {name: tensor.detach().to("cpu", copy=True) for name, tensor in self.learner.weights_for_engine()}
        return weights, (started, time.time())

    def train(self, batch, extra: dict, window_start: float) -> tuple[list[tuple[float, float]], float, int]:
        """One GRPO step in one call: the optimizer steps of `batch`, then log them as the next GRPO step
        (with the driver's `extra` columns), validate and checkpoint when due. The step's wall-clock
        window runs from `window_start` (the driver's clock: same machine) to the end of training.
        Returns the busy intervals (training; logging, validation and checkpoint), the window's end
        and the new version."""
        started = time.time()
        rows = self.learner.train_on(batch)
        trained = time.time()
        self.learner.finish_step(batch, rows, trained - window_start, extra)
        self.learner.after_step(self.validate)  # validate when due, checkpoint when due
        return [(started, trained), (trained, time.time())], trained, self.learner.version

    def save_interrupted(self) -> str:
        return str(self.learner.save_interrupted())

    def close(self) -> None:
        self.learner.close()
        if self.engine is not None and self.cfg.engine == "vllm":
            self.engine.close()

    def pid(self) -> int:
        return os.getpid()


def actor_options(cfg: GRPOConfig) -> tuple[dict, dict]:
    """Ray options of the Learner and the Generator actor: one CPU each and, for an actor whose device
    (`policy_device`, `rollout_device`) is a GPU, `num_gpus` asked for explicitly -- Ray releases differ on
    whether an actor that asks for none sees CUDA_VISIBLE_DEVICES. Both on the same GPU share it (0.5
    each); on two GPUs each takes one. Ray is told not to narrow CUDA_VISIBLE_DEVICES to the GPU it picked
    (which would renumber it `cuda:0` inside the actor), so the configured device names mean the same
    GPUs in the actors as in this process; the request still reserves the GPUs."""
    from hw3lib.generation import normalized_device

    learner, generator = normalized_device(cfg.policy_device), normalized_device(cfg.rollout_device)
    shared = learner.type == generator.type == "cuda" and learner == generator
    options = []
    for device in (learner, generator):
        actor = {"num_cpus": 1, "max_restarts": 0}
        if device.type == "cuda":
            actor["num_gpus"] = 0.5 if shared else 1
            actor["runtime_env"] = {"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}}
        options.append(actor)
    return options[0], options[1]


# ---- the driver ------------------------------------------------------------------------------------------

def train_async(cfg: GRPOConfig, async_cfg: AsyncConfig = AsyncConfig(), resume: bool = False,
                overwrite: bool = False, callback=None, on_step=None,
                fail_at_generation: int | None = None) -> RunResult:
    """Run GRPO with a Generator and a Learner actor into `runs/<cfg.name>/` (same folder rules,
    metrics and checkpoints as `hw3lib.grpo.loop.train`; the async settings are kept in `async.json`).

    `callback` is the learner's per-optimizer-step callback (as in `train`, without an engine);
    `on_step(info)` is called by the driver after each GRPO step with `{"step", "generator",
    "learner"}` (the actor handles: for fault-injection tests); `fail_at_generation` makes the
    generator raise at that generation (tests).
    """
    import ray

    async_cfg.check(cfg)
    # The learner's rows per forward fit beside the generator's awake engine (memory.async_plan), as checked below.
    cfg = with_memory_plan(cfg, "async", overwrite)
    run_dir = runs_dir() / cfg.name
    print(f"async GRPO run '{cfg.name}' ({async_cfg.mode}, max_staleness {async_cfg.max_staleness}) -> {shown_path(run_dir)}",
          flush=True)
    checkpoint, finished_state = open_run(run_dir, cfg, resume, overwrite)
    _check_async_settings(run_dir, async_cfg, fresh=checkpoint is None)
    if finished_state is not None:
        reuse_message(cfg, run_dir)
        return read_result(run_dir, cfg, finished_state)
    check_fits("async GRPO", cfg)  # on one GPU: the generator's engine awake beside the training learner
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / ASYNC_FILE, asdict(async_cfg))

    started_ray = not ray.is_initialized()
    if started_ray:
        start_local_ray(num_cpus=2, log_to_driver=True)
    env = {key: os.environ[key] for key in _ENV_KEYS if key in os.environ}
    env.setdefault("HW3_RUNS_DIR", str(runs_dir()))
    learner = generator = driver = None
    learner_options, generator_options = actor_options(cfg)
    try:
        check_ray_gpus([learner_options, generator_options], ray.cluster_resources().get("GPU", 0))
        # One engine build at a time on a GPU: the generator's first, then the learner (hw3lib.grpo.async_start).
        learner, generator = start_actors(
            cfg, lambda: ray.remote(**generator_options)(Generator).remote(cfg, env, async_cfg.generator_threads,
                                                                             fail_at_generation),
            lambda: ray.remote(**learner_options)(Learner).remote(
                cfg, str(run_dir), str(checkpoint) if checkpoint else None, env, async_cfg.learner_threads, callback))
        driver = _Driver(cfg, async_cfg, learner, generator, on_step)
        driver.run()
    except KeyboardInterrupt:
        _checkpoint_after_failure(learner)
        raise
    except (ray.exceptions.RayError, ActorCallTimeout) as error:
        saved = _checkpoint_after_failure(learner)
        where = f"checkpoint of the last completed GRPO step: {saved}" if saved else "the learner could not save"
        raise AsyncRunError(f"async GRPO run '{cfg.name}' stopped: {_actor_error_text(error)}\n{where}; "
                            "continue with resume=True once the cause is fixed") from None
    finally:
        if driver is not None:
            driver.write_timings(run_dir)
            if driver.replay_buffer is not None:
                atomic_write_json(run_dir / REPLAY_FILE, driver.replay_summary())
        for actor in (learner, generator):
            if actor is not None:
                if actor is learner:
                    try:
                        ray.get(learner.close.remote(), timeout=30)
                    except ray.exceptions.RayError:
                        pass  # it died already; the failure is what the caller sees
                ray.kill(actor)
        if started_ray:
            ray.shutdown()
    state = json.loads((latest_checkpoint(run_dir) / "state.json").read_text())
    state.pop("partial_step", None)
    return read_result(run_dir, cfg, state)


class _Driver:
    """Moves batches and weights between the actors in the configured schedule and records timings."""

    def __init__(self, cfg: GRPOConfig, async_cfg: AsyncConfig, learner, generator, on_step) -> None:
        self.cfg, self.async_cfg, self.on_step = cfg, async_cfg, on_step
        self.learner, self.generator = learner, generator
        # Busy intervals (start, end) on the wall clock, as the actors measured them.
        self.generator_busy: list[tuple[float, float]] = []
        self.learner_busy: list[tuple[float, float]] = []
        self.sync_busy: list[tuple[float, float]] = []
        self.pending_syncs: list = []  # weight transfers: (learner's (weights, interval), generator's interval)
        self.windows: list[tuple[int, float, float]] = []  # (grpo_step, start, end) of each finished step
        self.pushed_version = -1
        self.learner_version = 0
        self.step_started = time.time()
        self.replay_buffer: ReplayBuffer | None = None
        self.unused_groups = 0

    def run(self) -> None:
        import ray

        self.learner_version = get(self.learner.start.remote(), "the learner's start (its step-0 validation)")
        self.step_started = time.time()
        if self.async_cfg.mode == "one_behind":
            self.one_behind()
        else:
            self.replay()

    def push_weights(self) -> None:
        """Queue the learner's current weights into the generator, behind any generation already queued
        there (the weights go learner -> object store -> generator, never through this process)."""
        weights_and_time = self.learner.weights.remote()
        loaded = self.generator.load_weights.remote(weights_and_time, self.learner_version)
        self.pending_syncs.append((weights_and_time, loaded))
        self.pushed_version = self.learner_version

    def one_behind(self) -> None:
        import ray

        lag, last = self.async_cfg.max_staleness, self.cfg.n_grpo_steps
        generations: deque = deque()
        next_generation = self.learner_version + 1
        for step in range(self.learner_version + 1, last + 1):
            # Batch s may be sampled by weights as old as version s - 1 - lag: queue every batch that
            # may start now (with lag 1, batch s + 1 is generated while the learner trains on batch s).
            while next_generation <= last and next_generation - 1 - lag <= self.learner_version:
                if self.pushed_version < self.learner_version:
                    self.push_weights()
                generations.append(self.generator.generate.remote(next_generation))
                next_generation += 1
            batch, busy = get(generations.popleft(), "a generation")
            self.generator_busy.append(busy)
            self.train(batch, expired=0)

    def replay(self) -> None:
        import ray

        cfg, acfg = self.cfg, self.async_cfg
        n, m, lag = cfg.n_prompts_per_rollout_batch, acfg.max_uses, acfg.max_staleness
        buffer = self.replay_buffer = ReplayBuffer(capacity=acfg.buffer_batches * n, max_staleness=lag, max_uses=m)
        rng = np.random.default_rng([cfg.seed, self.learner_version, 7])
        in_flight = None  # (generation index, future): one at a time, so each starts with the newest weights
        generation = self.learner_version  # generation indices pick the questions and sampling seeds

        def submit() -> tuple[int, object]:
            nonlocal generation
            if self.pushed_version < self.learner_version:
                self.push_weights()
            generation += 1
            return generation, self.generator.generate.remote(generation)

        def land(index: int, future) -> None:
            batch, busy = get(future, "a generation")
            self.generator_busy.append(busy)
            buffer.add(split_groups(batch, cfg.group_size, first_uid=index * n))

        def may_generate_ahead(step: int) -> bool:
            # A batch started now (weights of this version) lands while the learner trains, i.e. one
            # version stale, and must be used up within `lag` versions: keep the uses waiting in the
            # buffer plus its own within what `lag` learner steps consume (and within the capacity),
            # and generate nothing the remaining steps cannot use.
            pending_uses = sum(m - g.uses for g in buffer.groups)
            return (lag >= 1 and pending_uses + n * m <= n * lag and len(buffer) + n <= buffer.capacity
                    and pending_uses < (cfg.n_grpo_steps - step) * n)

        def while_training(landed, step: int):
            """`landed=None`: the generation in flight (or None). Else it has landed: buffer it and, when
            allowed, start the next one with the weights already pushed (a push now would queue behind
            the training call on the learner)."""
            nonlocal in_flight
            if landed is None:
                return in_flight[1] if in_flight is not None else None
            land(*in_flight)
            in_flight = None
            if self.pushed_version == self.learner_version and may_generate_ahead(step):
                in_flight = submit()
            return None

        for step in range(self.learner_version + 1, cfg.n_grpo_steps + 1):
            while buffer.available(self.learner_version) < n:  # not enough: wait for (or start) a generation
                land(*(in_flight or submit()))
                in_flight = None
            expired_before = buffer.expired
            groups = buffer.take(n, self.learner_version, rng)
            if in_flight is not None and _ready(in_flight[1]):  # landed meanwhile: into the buffer now
                land(*in_flight)
                in_flight = None
            if in_flight is None and may_generate_ahead(step):
                in_flight = submit()  # generates while the learner trains on `groups`
            self.train(merge_groups(groups, step, cfg.group_size), expired=buffer.expired - expired_before,
                       uses=[g.uses for g in groups],
                       while_training=lambda landed, step=step: while_training(landed, step))
        if in_flight is not None:  # generated for a step that will not come: its time still counts
            self.generator_busy.append(get(in_flight[1], "the last generation")[1])
            self.unused_groups = n  # never entered the buffer

    def replay_summary(self) -> dict:
        """What happened to every group the generator made (written to `replay.json`)."""
        buffer = self.replay_buffer
        return {"added": buffer.added, "retired": buffer.retired, "expired": buffer.expired,
                "left_in_buffer": len(buffer), "generated_after_the_last_step": self.unused_groups,
                "max_uses": buffer.max_uses,
                "max_staleness": buffer.max_staleness,
                "uses": [list(u) for u in buffer.use_log]}  # (group uid, its version, learner version) per use

    def train(self, batch, expired: int, uses: list[int] | None = None, while_training=None) -> None:
        """One GRPO step on the learner, logged with its staleness; its time window ends when training
        does (logging, validation and checkpoint count in the next step's window). `while_training()`
        (replay) is called each time a generation lands meanwhile, to keep the generator busy."""
        import ray

        staleness = self.learner_version - batch.policy_version
        if staleness > self.async_cfg.max_staleness:  # the schedules guarantee it; never train past the bound
            raise AssertionError(f"GRPO step {batch.grpo_step}: rollouts {staleness} versions old "
                                 f"(bound {self.async_cfg.max_staleness})")
        extra = {"async/staleness": staleness, "async/expired_groups": expired,
                 "async/max_uses_in_batch": max(uses) if uses else 1}
        step = self.learner.train.remote(batch, extra, self.step_started)
        while while_training is not None:
            generating = while_training(None)  # the in-flight generation, if any
            if generating is None:
                break
            landed, _ = ray.wait([step, generating], num_returns=1, timeout=call_timeout())
            if not landed:
                raise ActorCallTimeout(f"async GRPO: neither the learner's GRPO step {batch.grpo_step} nor the "
                                       f"generation beside it finished within {call_timeout():.0f} s")
            if landed[0] == step:
                break
            while_training(generating)  # it landed first: take it in, maybe start the next
        intervals, trained, self.learner_version = get(step, f"the learner's GRPO step {batch.grpo_step}")
        self.learner_busy.extend(intervals)
        self.windows.append((batch.grpo_step, self.step_started, trained))
        self.step_started = trained
        if self.on_step is not None:
            self.on_step({"step": self.learner_version, "generator": self.generator, "learner": self.learner})

    def write_timings(self, run_dir: Path) -> None:
        """Append each finished step's time breakdown to `async_timings.jsonl` (once the run stops, when
        every actor's busy intervals are known): wall-clock seconds of the step's window, and the
        seconds of it each actor spent generating, training or transferring weights, or idle."""
        import ray

        for weights_and_time, loaded in self.pending_syncs:
            try:
                self.sync_busy.extend([ray.get(weights_and_time, timeout=60)[1], ray.get(loaded, timeout=60)])
            except ray.exceptions.RayError:
                continue  # a transfer the failure cut short
        for grpo_step, start, end in self.windows:
            generation = _overlap(self.generator_busy, start, end)
            train = _overlap(self.learner_busy, start, end)
            sync = _overlap(self.sync_busy, start, end)
            span = end - start
            append_jsonl(run_dir / TIMINGS_FILE, {
                "grpo_step": grpo_step, "mode": self.async_cfg.mode, "step_s": span, "generation_s": generation,
                "train_s": train, "weight_sync_s": sync, "generator_idle_s": max(0.0, span - generation - sync),
                "learner_idle_s": max(0.0, span - train - sync)})


def _ready(ref) -> bool:
    import ray

    done, _ = ray.wait([ref], timeout=0)
    return bool(done)


def _overlap(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b in intervals)


def _checkpoint_after_failure(learner) -> str | None:
    import ray

    if learner is None:
        return None
    try:
        return ray.get(learner.save_interrupted.remote(), timeout=120)
    except ray.exceptions.RayError:
        return None


def _actor_error_text(error) -> str:
    cause = getattr(error, "cause", None)
    if cause is not None and not isinstance(cause, BaseException):
        cause = None
    text = f"{type(cause).__name__}: {cause}" if cause is not None else str(error).strip().splitlines()[-1]
    return text


def _check_async_settings(run_dir: Path, async_cfg: AsyncConfig, fresh: bool) -> None:
    """A run resumes only with the async settings it was started with."""
    path = run_dir / ASYNC_FILE
    if fresh or not path.is_file():
        return
    saved = json.loads(path.read_text())
    if saved != asdict(async_cfg):
        raise ValueError(f"cannot resume {run_dir}: its async settings {saved} differ from {asdict(async_cfg)}; "
                         "use the saved settings or a new run name")
