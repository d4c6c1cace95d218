"""The doctor's machine checks: versions, device, dtype, allocator, which model to check, and memory readings.

- versions: python, torch, transformers, vLLM (imported: a broken install fails here, not mid-run).
- device: a CUDA GPU's name, memory, compute capability and count, as `hw3lib.core.preflight.detect_device`
  reads them for every run (FAIL below 7.0, where vLLM does not run), else the CPU's cores and memory.
- dtype: `hw3lib.core.preflight.supported_dtype`, every run's rule: bfloat16 at compute capability >= 8.0,
  else float32 (vLLM refuses bf16 below 8.0: T4, V100).
- allocator: `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` made vLLM's sleep mode refuse to start
  before the pinned 0.32, which switches it off around its own memory pool (vllm/device_allocator/cumem.py):
  FAIL on CUDA with an older vLLM, else reported.
- model: what the cycle runs on. `--model` when given; otherwise, on a GPU, the course's full-profile model
  (`hw3lib.core.course`: Qwen3-0.6B, Qwen2.5-Math-1.5B or OLMo-2-0425-1B) when it is in the local Hugging Face
  cache -- the engine the runs will build, at its size, compiled -- else the tiny model (skipped, with the command
  that downloads it); on CPU the tiny model.

Memory is the whole GPU's memory in use (`torch.cuda.mem_get_info`, every process): vLLM maps its memory
outside torch's allocator, so `torch.cuda.memory_allocated` would not see it.
"""

from __future__ import annotations

import gc
import os
import platform
from dataclasses import asdict

from hw3lib.generation.doctor.report import FAIL, OK, SKIPPED, Report, explain

VLLM_MIN_CAPABILITY = (7, 0)  # vLLM's CUDA build does not run below it
ALLOC_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")  # torch >= 2.9 reads the second name too


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
        report.add("versions", FAIL, f"vLLM does not import: {explain(exc)}")
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


def course_model() -> tuple[str, str]:
    """(the course's full-profile model, the course's name): what a GPU run of this course builds its engines for
    ($HW3_COURSE, $HW3_MODEL / $HW3_MATH_MODEL as every run reads them)."""
    from hw3lib.core.course import get_course
    from hw3lib.core.profile import get_profile

    course = get_course()
    return course.model_for(get_profile("full")), course.name


def cached_snapshot(hub_id: str) -> str | None:
    """The local folder of `hub_id`'s files in the Hugging Face cache when its config and weights are there (the
    doctor never downloads a model unasked), else None."""
    from pathlib import Path

    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(hub_id, local_files_only=True))
    except Exception:  # not cached (LocalEntryNotFoundError), or no huggingface_hub: the tiny model then
        return None
    has_weights = any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))
    return str(folder) if (folder / "config.json").is_file() and has_weights else None


def choose_model(report: Report, model: str | None, device: str) -> str:
    """The model the cycle runs on (module docstring), recorded as the `model` line; returns a name or folder for
    `hw3lib.models.load.resolve_model`."""
    if model is not None:
        report.add("model", OK, f"{model} (--model)")
        return model
    if device != "cuda":
        report.add("model", OK, "tiny (on cpu the doctor checks the tiny model; the course's model runs on a GPU)")
        return "tiny"
    try:
        hub_id, course = course_model()
    except Exception as exc:  # e.g. an unknown $HW3_COURSE: the tiny model still checks the machine
        report.add("model", SKIPPED, f"the course's model is unknown ({explain(exc)}): checking the tiny model")
        return "tiny"
    folder = None if hub_id.startswith("stand-in:") else cached_snapshot(hub_id)
    if folder is None:
        report.add("model", SKIPPED, f"the {course} course's model {hub_id} is not in the local Hugging Face "
                                     f"cache: checking the tiny model (hw3 doctor --model {hub_id} downloads it)")
        return "tiny"
    report.add("model", OK, f"{hub_id}: the {course} course's model, cached locally ({folder})")
    return folder
