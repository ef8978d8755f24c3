# bertpre: `make demo` runs the whole flow on the built-in sample corpus; `make test` runs the tests.
# Both set up the virtual environment first when it is missing or out of date.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_VERSION := 2.13.0

.PHONY: setup demo test test-slow lint bench docs docs-reference docs-serve clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# pinned first: an unpinned torch would pull several GB of CUDA packages
	$(BIN)/python -m pip install --quiet torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

demo: setup
	$(BIN)/bertpre demo

test: setup
	$(BIN)/python -m pytest -q -m "not slow"

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

lint: setup
	$(BIN)/ruff check bertpre configs data_prep tests bench docs

# The documentation site (MkDocs + Material, the `docs` extra) into build/site. --strict turns a
# broken link or anchor, or a page missing from mkdocs.yml's nav, into a failure; the reference
# pages must be what the code generates.
docs: $(VENV)/.installed-docs
	$(BIN)/python docs/gen_reference.py --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

$(VENV)/.installed-docs: $(VENV)/.installed pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $@

docs-reference: setup
	$(BIN)/python docs/gen_reference.py

docs-serve: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

bench: setup
	$(BIN)/python -m bench.run_cpu

clean:
	rm -rf $(VENV) build *.egg-info
