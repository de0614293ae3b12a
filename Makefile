# Two set-up commands: `make demo` (the main job on the embedded seed recipe) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# SGLang's own bench_serving, as shipped in the sglang 0.5.23 wheel, installed without its runtime
# dependencies (torch, CUDA) into a directory of its own; monitor/emulate/bench_serving.py runs it.
SGLANG_WHEEL_DIR := $(VENV)/sglang-0.5.23

.PHONY: venv demo test lint generate check-generated bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps --upgrade --target $(SGLANG_WHEEL_DIR) sglang==0.5.23
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/slo-monitor demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -q -ra

lint: $(STAMP)
	$(BIN)/ruff check .

generate: $(STAMP)
	$(BIN)/slo-monitor generate

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache
