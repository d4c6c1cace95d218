"""What the vLLM adapter asks of vLLM before an engine exists: sleep mode only for colocated training engines, and
the V1 model runner pinned.

Sleep mode enables vLLM's process-global `CuMemAllocator`, which asserts "one instance per process" when a second
engine loads while the first's memory is tracked: notebook 02 builds two evaluation engines in one kernel. With
the platform reported as CUDA and `vllm.LLM` replaced by a recording stand-in (no engine starts), evaluation
engines (`make_engine`, as notebooks 01/02 and `hw3 eval` build them) must pass `enable_sleep_mode=False`, a
colocated training engine (`training_engine`) True, and a training engine on a GPU of its own False. On CUDA vLLM
0.32 picks Model Runner V2 when Triton is installed; the CPU build CI runs uses V1: `import_vllm` pins
`VLLM_USE_V2_MODEL_RUNNER=0`, so vLLM's own choice (`VllmConfig.use_v2_model_runner`) is V1 even with Triton,
and a user's setting wins.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

import hw3lib.generation as generation
import hw3lib.generation.vllm_engine as vllm_engine


class RecordingLLM:
    """Stands in for `vllm.LLM`: records the keyword arguments of each engine built."""

    built: list[dict] = []

    def __init__(self, **kwargs) -> None:
        RecordingLLM.built.append(kwargs)
        self.llm_engine = SimpleNamespace(model_config=SimpleNamespace(max_model_len=kwargs["max_model_len"] or 512))

    def get_tokenizer(self):
        return None


class CudaPlatform:
    """vLLM's platform object as the CUDA build's answers the adapter's questions; anything else vLLM asks while
    importing its modules is the installed platform's answer."""

    device_type = "cuda"

    def __init__(self, installed) -> None:
        self.installed = installed

    def is_sleep_mode_available(self) -> bool:
        return True

    def __getattr__(self, name: str):
        return getattr(self.installed, name)


@pytest.fixture
def cuda_vllm(monkeypatch):
    """The installed vLLM as its CUDA build would answer (sleep mode available), `vllm.LLM` recording."""
    vllm = vllm_engine.import_vllm()
    import vllm.platforms

    monkeypatch.setattr(vllm.platforms, "_current_platform", CudaPlatform(vllm.platforms.current_platform))
    monkeypatch.setattr(vllm, "LLM", RecordingLLM, raising=False)  # vllm exports LLM lazily
    monkeypatch.setattr(generation, "check_evaluation_fits", lambda *args: None)  # a card this machine lacks
    RecordingLLM.built = []
    return RecordingLLM.built


def test_evaluation_engines_start_without_sleep_mode(cuda_vllm, tiny_model_dir):
    """Notebook 02's two engines in one kernel: neither enables sleep mode (without the fix both did, on CUDA)."""
    for _ in range(2):
        generation.make_engine("vllm", str(tiny_model_dir), device="cuda", dtype="bfloat16", progress=False)
    assert [kwargs["enable_sleep_mode"] for kwargs in cuda_vllm] == [False, False]
    engine = generation.make_engine("vllm", str(tiny_model_dir), device="cuda", enable_sleep_mode=None)
    assert cuda_vllm[-1]["enable_sleep_mode"] is True and engine.sleep_mode  # asked for: the platform's default


@pytest.mark.parametrize("policy_device, sleep_mode", [("cuda:0", True), ("cuda:1", False)])
def test_only_a_colocated_training_engine_enables_sleep_mode(cuda_vllm, tiny_model_dir, policy_device, sleep_mode):
    from hw3lib.grpo.config import GRPOConfig
    from hw3lib.models.load import load_model_and_tokenizer

    cfg = GRPOConfig.for_profile("smoke", engine="vllm", policy_device=policy_device, rollout_device="cuda:0")
    policy, tokenizer = load_model_and_tokenizer(str(tiny_model_dir))
    engine = generation.training_engine(cfg, policy, tokenizer, str(tiny_model_dir),
                                        records=[{"question": "Tom has 3 apples."}])
    assert cuda_vllm[-1]["enable_sleep_mode"] is sleep_mode and engine.sleep_mode is sleep_mode


def test_import_vllm_pins_the_v1_model_runner(monkeypatch):
    from vllm import envs
    from vllm.config import VllmConfig
    from vllm.config import vllm as config_module

    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    vllm_engine.import_vllm()
    assert os.environ["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    # vLLM's own choice with Triton present, as on a CUDA machine: V1 under the pin (the variable read afresh,
    # whatever vLLM's environment cache holds in this process).
    monkeypatch.setattr(config_module, "HAS_TRITON", True)
    monkeypatch.setattr(envs, "VLLM_USE_V2_MODEL_RUNNER", envs.environment_variables["VLLM_USE_V2_MODEL_RUNNER"](),
                        raising=False)
    config = SimpleNamespace(attention_config=SimpleNamespace(hisparse_config=None),
                             _get_v2_model_runner_unsupported_features=lambda: [])
    assert VllmConfig.use_v2_model_runner.fget(config) is False
    monkeypatch.setattr(envs, "VLLM_USE_V2_MODEL_RUNNER", None, raising=False)  # unpinned: vLLM would pick V2
    assert VllmConfig.use_v2_model_runner.fget(config) is True
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")  # a user's choice is kept
    vllm_engine.import_vllm()
    assert os.environ["VLLM_USE_V2_MODEL_RUNNER"] == "1"
