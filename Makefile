# Two commands for a fresh machine: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench setup histories clean

$(BIN)/capstan: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

setup: $(BIN)/capstan

demo: setup
	$(BIN)/capstan demo

lint: setup
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .
	$(BIN)/python -m mypy

test: lint
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python bench/run.py

histories: setup
	$(BIN)/python -m tests.record_histories

clean:
	rm -rf $(VENV) .capstan .pytest_cache .mypy_cache .ruff_cache
