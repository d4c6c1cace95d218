"""The disk preflight of a grid, a sweep or a notebook's plan: what its runs' checkpoints will take (hw3lib.core.disk).

- `run_checkpoint_bytes(cfg)`: one run's checkpoint, its model's shape as the cost model sees it (a course model by
  hub id, a local folder by its config.json; the tiny smoke models and the rehearsal's stand-ins, a few megabytes,
  as the tiny model), LoRA's adapter only;
- `new_checkpoints(configs)`: that for each config whose run folder holds no checkpoint yet, once per set of
  settings (configs with the same settings share one run: hw3lib.experiments.runner);
- `check_disk_for(configs, what)`: raises hw3lib.core.disk.DiskSpaceError (one line) when the runs folder's disk
  cannot hold them; silent otherwise (smoke: megabytes).

It imports nothing of the grids or the runner, so `runner.run_grid` can call it (no import cycle); its settings
key is therefore its own, a little coarser than the runner's `config_key` (only the name dropped).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from hw3lib.core import disk


def run_checkpoint_bytes(cfg, crs=None) -> int:
    """Bytes of the checkpoint run `cfg` (a GRPO, SFT or EI config) keeps (`crs`: the course whose model stands
    for an unknown one; default $HW3_COURSE's)."""
    from hw3lib.core.preflight import STAND_IN_MARKER, STAND_IN_PREFIX, TINY_MODELS, resolve_shape

    model = str(cfg.model)
    small = model in TINY_MODELS or model.startswith(STAND_IN_PREFIX) or (Path(model) / STAND_IN_MARKER).is_file()
    # The preflight checks a stand-in's memory as the real model's; its checkpoints are its own few megabytes.
    shape = _tiny_shape() if small else (_course_shapes().get(model) or resolve_shape(model)[0]
                                         or _course_model_shape(crs))
    return disk.checkpoint_bytes(shape, cfg.lora_rank, tuple(cfg.lora_target_modules))


@lru_cache(maxsize=None)
def _tiny_shape():
    from hw3lib.core.memory import Shape
    from hw3lib.models.tiny import TinySettings, tiny_config

    settings = TinySettings()
    return Shape.from_config("tiny", tiny_config(settings, settings.vocab_size, 0))


@lru_cache(maxsize=None)
def _course_shapes() -> dict:
    from hw3lib.models.real_shape import course_shapes

    return course_shapes()


def _course_model_shape(crs):
    """The course's own model's shape: what the full profile assumes of a model it cannot read."""
    from hw3lib.core.course import Course, get_course
    from hw3lib.core.preflight import COURSE_MODELS

    crs = crs if isinstance(crs, Course) else get_course(crs)
    shapes = _course_shapes()
    return shapes.get(COURSE_MODELS[crs.name], shapes["Qwen/Qwen3-0.6B"])


def _settings(cfg) -> str:
    return json.dumps({k: v for k, v in json.loads(json.dumps(cfg.to_dict())).items() if k != "name"},
                      sort_keys=True)


def new_checkpoints(configs: Iterable, crs=None, seen: set[str] | None = None) -> tuple[int, ...]:
    """`run_checkpoint_bytes` of each of `configs` whose run folder holds no checkpoint yet, one per set of
    settings; `seen` (the settings counted already, updated here) carries them from one item of a plan to the
    next (a grid's base is another grid's config)."""
    from hw3lib.core.io import runs_dir

    root, seen, sizes = runs_dir(), set() if seen is None else seen, []
    for cfg in configs:
        key = _settings(cfg)
        if key in seen or (root / cfg.name / "checkpoints" / "latest").is_file():
            continue
        seen.add(key)
        sizes.append(run_checkpoint_bytes(cfg, crs))
    return tuple(sizes)


def check_disk_for(configs: Iterable, what: str) -> int:
    """The disk preflight of a grid or a sweep (`configs`: its runs; `what`: its name in the refusal, e.g.
    "grid `learning_rate`"): raises hw3lib.core.disk.DiskSpaceError in one line when the runs folder's disk cannot
    hold the checkpoints of those not yet on it; returns the bytes they need, printing nothing."""
    plan = disk.disk_plan(list(new_checkpoints(configs)))
    disk.check_disk(plan, what)  # the refusal names the pruning command (its figure needs the grids: a cycle here)
    return plan.needed
