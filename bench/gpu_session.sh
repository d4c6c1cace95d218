#!/usr/bin/env bash
# The GPU issue's measurements as one prepared run on a lent GPU machine (PyTorch and transformers, no vLLM,
# no weights, no network), inside one call's 10 minutes: a preflight, the CUDA rehearsal with the memory model
# checked (bench/rehearse_gpu.py), training throughput and MFU (bench/bench_train_gpu.py), rollout throughput
# with and without the static KV cache (bench/bench_generation.py). Each part gets at most what is left of
# DEADLINE_S (default 560 s) and its JSON lands in bench/results/ and, when set, $OUT.
#
# The machine has no copy of ../shared, so GSM8K travels in .gpu-carry/ (git-ignored), with the transformers
# release the project is tested with (constraints-cpu.txt; the machine's own may differ). On this machine:
#     mkdir -p .gpu-carry/data .gpu-carry/wheels && cp -r ../shared/data/gsm8k .gpu-carry/data/
#     python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#         -d .gpu-carry/wheels "$(grep '^transformers==' constraints-cpu.txt)"
# then call the device tool's run with carry [".gpu-carry"], timeout_s 600 and the command
#     bash bench/gpu_session.sh
# Parts can be named to run only those: bash bench/gpu_session.sh generation
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export HW3_DATA_DIR="${HW3_DATA_DIR:-$PWD/.gpu-carry/data}" HW3_CACHE_DIR="${HW3_CACHE_DIR:-/tmp/hw3-cache}"
PYTHON="${PYTHON:-python3}"
if compgen -G ".gpu-carry/wheels/*.whl" > /dev/null; then  # carried wheels shadow the machine's packages
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .gpu-carry/wheels/*.whl && export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
LOG="${OUT:-/tmp}/gpu_session.log"  # comes back with the results when the device tool's $OUT is set
DEADLINE_S="${DEADLINE_S:-560}"
START=$(date +%s)
parts=("$@")
# The training benchmark first: it is short (~1.5 min) and sure; the rehearsal (~6-7 min, ten generate calls of
# 1,024 tokens) next; the generation benchmark takes what is left -- if that is too little, run it again at once
# as a second call (`bash bench/gpu_session.sh generation`) while the machine is still warm.
[ ${#parts[@]} -gt 0 ] || parts=(preflight train rehearse generation)

left() { echo $(( DEADLINE_S - ($(date +%s) - START) )); }

keep() {  # copy a result where the device tool brings files back
  [ -n "${OUT:-}" ] && [ -f "$1" ] && cp "$1" "$OUT/"
  return 0
}

run_part() {  # run_part NAME BUDGET_S COMMAND...: at most BUDGET_S seconds, never past the deadline
  local name=$1 budget=$2; shift 2
  local limit; limit=$(left)
  (( budget < limit )) && limit=$budget
  if (( limit < 20 )); then echo "== $name: skipped, $(left) s left"; return 0; fi
  echo "== $name (at most $limit s; $(( $(date +%s) - START )) s in)"
  timeout --signal=INT --kill-after=10 "$limit" "$@"
  echo "== $name: exit $?"
}

for part in "${parts[@]}"; do
  case $part in
    preflight)
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
      "$PYTHON" - <<'PY'
import importlib, torch, transformers
print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__,
      "gpu", torch.cuda.get_device_name() if torch.cuda.is_available() else None)
missing = [m for m in ("hw3lib.grpo.loop", "hw3lib.sft.loop", "hw3lib.evaluation.evaluate", "hw3lib.models.real_shape",
                       "psutil", "tqdm", "safetensors") if importlib.util.find_spec(m.split(".")[0]) is None]
for module in ("hw3lib.grpo.loop", "hw3lib.sft.loop", "hw3lib.evaluation.evaluate", "hw3lib.models.real_shape"):
    importlib.import_module(module)
print("imports ok" if not missing else f"missing: {missing}")
PY
      ls "$HW3_DATA_DIR/gsm8k" || echo "no GSM8K under $HW3_DATA_DIR: carry .gpu-carry (see the top of this script)";;
    rehearse)
      run_part rehearse 420 "$PYTHON" bench/rehearse_gpu.py 2>&1 | tee -a "$LOG"
      keep bench/results/rehearse_gpu.json;;
    train)
      run_part train 150 "$PYTHON" bench/bench_train_gpu.py 2>&1 | tee -a "$LOG"
      keep bench/results/bench_train_gpu.json;;
    generation)
      run_part generation 240 "$PYTHON" bench/bench_generation.py --model-shape qwen3-0.6b --device cuda \
        --batch 256 --max-tokens 1024 --static-cache --compile 2>&1 | tee -a "$LOG"
      keep bench/results/bench_generation_cuda.json;;
    *) echo "unknown part $part: choose from preflight rehearse train generation"; exit 2;;
  esac
done
echo "== done in $(( $(date +%s) - START )) s"
