"""Starting asynchronous GRPO's actors safely on a GPU, and waiting on them with a limit (hw3lib.grpo.async_loop).

- **GPUs Ray registered.** Before any actor is created, the GPUs the actors ask for (`actor_options`) are checked
  against what Ray registered (`ray.cluster_resources()`): a Ray started without GPUs would otherwise leave the
  actors pending forever, and a notebook cell with them.
- **One engine build at a time.** vLLM sizes its KV cache from device-wide free-memory differences while it profiles
  (`vllm/utils/mem_utils.py`): another process allocating meanwhile is charged to the engine (a KV cache of zero
  or less), and one freeing meanwhile trips its "Error in memory profiling" assertion. So on a GPU the generator
  (which builds its engine in its constructor) is started and waited for before the learner loads its policy, and
  the learner builds its own validation engine in `start`, before the driver asks for the first generation. On a
  CPU no engine profiles device memory: both actors start at once, as before.
- **Every wait has a limit.** `get(ref, what)` is `ray.get` with a timeout (`$HW3_RAY_TIMEOUT_S`, default an hour:
  a full-profile GRPO step takes minutes) that raises `ActorCallTimeout` in one line naming the call.
"""

from __future__ import annotations

import os

DEFAULT_TIMEOUT_S = 3600.0  # one call: a generation or a GRPO step of the full profile takes minutes, not an hour
START_TIMEOUT_S = 1800.0  # an actor's constructor: a model load and a vLLM engine's build and profiling
TIMEOUT_ENV = "HW3_RAY_TIMEOUT_S"


class ActorCallTimeout(RuntimeError):
    """An actor did not answer within its limit."""


def call_timeout() -> float:
    """The limit of one actor call: `$HW3_RAY_TIMEOUT_S` seconds, else `DEFAULT_TIMEOUT_S`."""
    value = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        return float(value) if value else DEFAULT_TIMEOUT_S
    except ValueError:
        raise ValueError(f"${TIMEOUT_ENV}={value!r}: give the limit of one actor call in seconds") from None


def get(ref, what: str, timeout: float | None = None):
    """`ray.get(ref)` within `timeout` seconds (None: `call_timeout()`); `what` names the call in the error."""
    import ray

    limit = call_timeout() if timeout is None else timeout
    try:
        return ray.get(ref, timeout=limit)
    except ray.exceptions.GetTimeoutError:
        raise ActorCallTimeout(f"async GRPO: {what} did not finish within {limit:.0f} s (set ${TIMEOUT_ENV} to "
                               "wait longer; a GPU actor that never starts usually means Ray has no GPU for it)"
                               ) from None


def check_ray_gpus(options: list[dict], registered: float) -> None:
    """Refuse, in one line, actors asking for more GPUs than Ray registered (`registered`: its "GPU" resource)."""
    wanted = sum(option.get("num_gpus", 0) for option in options)
    if wanted > registered + 1e-9:
        raise RuntimeError(f"async GRPO: the actors ask Ray for {wanted:g} GPU(s) but Ray registered {registered:g}: "
                           "start Ray where it sees the GPUs (ray.init(num_gpus=N), or CUDA_VISIBLE_DEVICES set "
                           "before Ray starts)")


def engines_profile(cfg) -> bool:
    """Whether an actor builds a vLLM engine on a GPU (whose profiling must not overlap another build or load)."""
    return cfg.engine == "vllm" and any(str(device).startswith("cuda")
                                        for device in (cfg.policy_device, cfg.rollout_device))


def start_actors(cfg, make_generator, make_learner) -> tuple:
    """`(learner, generator)` handles. With GPU engines (`engines_profile`) the generator is built and waited for
    first, then the learner (its policy load, and its validation engine in `start`, come after the generator's
    engine has profiled); otherwise both start at once."""
    if not engines_profile(cfg):
        learner = make_learner()
        return learner, make_generator()
    generator = make_generator()
    get(generator.pid.remote(), "starting the generator (its engine build)", START_TIMEOUT_S)
    learner = make_learner()
    get(learner.pid.remote(), "starting the learner (its policy load)", START_TIMEOUT_S)
    return learner, generator
