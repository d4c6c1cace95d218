"""The first script to run on a new GPU: the vLLM rollout cycle in about a minute (same as `hw3 doctor`).

Run from the repository root:

    python bench/vllm_gpu_smoke.py                          # the course's model if cached, else the tiny one
    python bench/vllm_gpu_smoke.py --json bench/results/vllm_gpu_smoke.json
    python bench/vllm_gpu_smoke.py --model Qwen/Qwen3-0.6B  # the full profile's model (from the hub)

It starts vLLM (compiled on a GPU, as training engines run; model runner V1 unless VLLM_USE_V2_MODEL_RUNNER says
otherwise), generates, samples at T=1 with seeds and `min_tokens` and compares the returned log-probs with the
trainer's own for the same tokens, sleeps, wakes up, pushes new weights, generates again (the log-probs must
move), pushes the original weights back (they must come back), closes the engine (the memory must come back),
checks what a sleeping engine keeps and that a second engine starts in the same process, and reports the
versions, the device's compute capability and the dtype it allows. The checks live in hw3lib.generation.doctor (this script only calls them, so it cannot drift
from the command); what each line means and what to do when one fails: docs/gpu_first_session.md.
Exit code 1 when a check failed.
"""

from __future__ import annotations

if __name__ == "__main__":
    import typer

    from hw3lib.generation.doctor import register

    app = typer.Typer(add_completion=False, help=__doc__)
    register(app, "vllm-gpu-smoke")
    app()
