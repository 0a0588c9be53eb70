# Two commands for a fresh machine: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench setup system-deps histories clean

# llama-cpp-python builds from source (about 8 minutes on 2 cores, then pip caches the wheel).
# Its default build targets the build machine's exact CPU and crashed on prompts longer than
# one token here; these flags build portable AVX2 kernels instead. Capstan uses only the text
# model: multimodal support (libmtmd, LLAVA_BUILD) is left out; llama.cpp's tests, tools,
# examples and server binaries are off (already so when built inside llama-cpp-python 0.3.x).
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
	-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF

$(BIN)/capstan: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "installing capstan and its dependencies"
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@$(BIN)/python -c "import llama_cpp" 2>/dev/null || echo "building the local model runtime (llama-cpp-python): about 8 minutes on 2 cores, once; pip caches it"
	$(BIN)/python -m pip install --quiet -e '.[dev,local]'
	touch $@

setup: $(BIN)/capstan

# Debian packages some tests use (chromium); installs what is missing when run as root.
system-deps:
	bash .ci/system-deps

demo: setup
	$(BIN)/capstan demo

lint: setup
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .
	$(BIN)/python -m mypy
	$(BIN)/lint-imports

test: system-deps lint
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python bench/run.py

histories: setup
	$(BIN)/python -m tests.record_histories

clean:
	rm -rf $(VENV) .capstan .pytest_cache .mypy_cache .ruff_cache
