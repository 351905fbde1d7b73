# The companion's commands. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PAPERS ?=
PROFILE ?=
JOBS ?= 2
SCHEDULER ?=
NOTEBOOK ?=
GRID ?=
SEEDS ?=
VALUE ?=
YES ?=
TIMEOUT ?=
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# A download cut off part-way is resumed many times, and an install that still fails is retried afresh
export PIP_RESUME_RETRIES := 20
EXTRAS := papers,notebooks,test
PIP_INSTALL = for attempt in 1 2 3; do $(PY) -m pip install -q $(1) && break; \
	[ $$attempt = 3 ] && exit 1; echo "==> pip install failed (attempt $$attempt of 3); trying again in 20 s"; sleep 20; done
export TOKENIZERS_PARALLELISM := false

.PHONY: help setup run sweep test test-unit test-kernels test-notebooks test-ui lab bench bench-gpu clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'
	@echo "  variables: PAPERS=\"seer_attention rtcfr\" PROFILE=auto|cpu|gpu JOBS=2 SCHEDULER=tcp://HOST:8786 TIMEOUT=seconds"
	@echo "  sweep:     NOTEBOOK=18 GRID=\"ITERATIONS=[500,1000] HEATMAP_ITERATIONS=[200,1000]\" (or GRID=sweeps/<name>.yaml) SEEDS=0,1,2 VALUE=<recorded name> YES=1"

$(STAMP): pyproject.toml
	@echo "==> setting up $(VENV) (CPU torch 2.13.0, the project editable with its extras)"
	$(PYTHON) -m venv $(VENV)
	$(call PIP_INSTALL,--upgrade pip)
	$(call PIP_INSTALL,"torch==2.13.0")
	$(call PIP_INSTALL,-e ".[$(EXTRAS)]")
	@# Two test peers without their dependencies (pyproject.toml cannot say --no-deps): vit-pytorch (paper 10),
	@# whose PyPI torchvision beside the CPU torch breaks transformers' imports, and lm-polygraph (paper 19),
	@# whose estimator the test imports without the package's openai, datasets, spacy, ...
	$(call PIP_INSTALL,--no-deps "vit-pytorch==1.26.14" "lm-polygraph==0.7.0")
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3" >/dev/null
	touch $(STAMP)

setup: $(STAMP) ## create the virtualenv and install the project (done by every target that needs it)

run: $(STAMP) ## execute every notebook (or PAPERS=...) into runs/<timestamp>/ with a report, on Dask (SCHEDULER=... for a cluster)
	$(PY) -m companion.runner --jobs $(JOBS) $(if $(PAPERS),--papers "$(PAPERS)") $(if $(PROFILE),--profile $(PROFILE)) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(if $(TIMEOUT),--timeout $(TIMEOUT))

sweep: $(STAMP) ## one notebook over a grid of its parameters: NOTEBOOK=18 GRID="A=[1,2] B=[x,y]" or GRID=sweeps/<name>.yaml, SEEDS=0,1
	@test -n "$(NOTEBOOK)" -a -n "$(GRID)" || { echo 'usage: make sweep NOTEBOOK=00 GRID="N_MAX=[10000,100000] REPEATS=[100,200]" [SEEDS=0,1,2] [VALUE=slope] [YES=1]'; exit 2; }
	$(PY) -m companion.sweep $(NOTEBOOK) --grid '$(GRID)' --jobs $(JOBS) $(if $(SEEDS),--seeds "$(SEEDS)") $(if $(VALUE),--value $(VALUE)) $(if $(PROFILE),--profile $(PROFILE)) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(if $(TIMEOUT),--timeout $(TIMEOUT)) $(if $(YES),--yes)

test: $(STAMP) ## every test: unit, kernels (Triton interpreter), notebooks (papermill + golden cells), browser
	$(MAKE) --no-print-directory test-unit test-kernels test-notebooks test-ui

test-unit: $(STAMP) ## unit tests of the library, and the runner and sweeps on a 2-worker Dask LocalCluster
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $(PY) -m pytest tests/unit tests/runner -q -n 2

test-kernels: $(STAMP) ## kernel tests on the CPU under TRITON_INTERPRET=1
	TRITON_INTERPRET=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $(PY) -m pytest tests/kernels -q -n 2

test-notebooks: $(STAMP) ## execute every notebook once (CPU profile, 120 s limit), contract + golden checks, plain nbval on the tour
	rm -rf build/test-notebooks
	$(PY) -m companion.runner --jobs 2 --timeout 120 --profile cpu --out build/test-notebooks
	COMPANION_EXECUTED=build/test-notebooks $(PY) -m pytest tests/notebooks -q -n 2
	@# The third way to use the project: plain nbval, as a user would run it (one notebook, to prove the path works).
	OMP_NUM_THREADS=1 $(PY) -m pytest -p no:randomly -q --nbval-lax --nbval-sanitize-with tests/notebooks/sanitize.cfg notebooks/00_tour.ipynb

test-ui: $(STAMP) ## widgets in JupyterLab driven by headless Chromium
	@# On a loaded 2-core machine a browser run can exceed its limits: failed notebooks get one serial second run.
	bash tests/ui/setup.sh && { $(PY) -m pytest tests/ui -q -n 2 || { echo "==> browser stage: running the failed notebooks once more"; $(PY) -m pytest tests/ui -q --lf; }; } || { rc=$$?; [ $$rc -eq 77 ] && echo "==> browser stage skipped (see above)" || exit $$rc; }

lab: $(STAMP) ## JupyterLab on 127.0.0.1 in notebooks/ (no news or update checks); token from JUPYTER_TOKEN (generated if unset), printed once
	@export JUPYTER_TOKEN="$${JUPYTER_TOKEN:-$$($(PY) -c 'import secrets; print(secrets.token_hex(24))')}"; \
	port=$${JUPYTER_PORT:-8888}; \
	echo ""; \
	echo "  JupyterLab: http://127.0.0.1:$$port/lab?token=$$JUPYTER_TOKEN"; \
	echo "  (open that URL; the token is also in JUPYTER_TOKEN. JUPYTER_PORT=... picks another port.)"; \
	echo ""; \
	exec $(VENV)/bin/jupyter lab --ip=127.0.0.1 --port=$$port --no-browser $$([ "$$(id -u)" = 0 ] && echo --allow-root) \
	  --ServerApp.root_dir=notebooks --ServerApp.port_retries=0 \
	  --LabApp.news_url=None --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate

bench: $(STAMP) ## CPU benchmarks (results in benchmarks/results/; the list: companion/bench.py)
	PYTHON=$(PY) benchmarks/run_studies.sh $$($(PY) -m companion.bench --list cpu)

bench-gpu: $(STAMP) ## every GPU study, on a CUDA machine, each under its own wall-clock limit (see benchmarks/README.md)
	PYTHON=$(PY) benchmarks/run_studies.sh $$($(PY) -m companion.bench --list gpu)

clean: ## remove build outputs (keeps runs/ and the virtualenv)
	rm -rf build .pytest_cache
