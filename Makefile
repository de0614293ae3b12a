# Two set-up commands: `make demo` (the main job on the embedded seed recipe) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint generate bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
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
