# Set-up is a side effect of the targets that need it; every target is idempotent.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup build check demo test clean

setup: $(STAMP)

# Reinstall only when the package definition changes.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e ".[test,instructor]"
	# nbgrader runs notebooks on the kernel named python3: make it this venv's Python.
	$(BIN)/python -m ipykernel install --sys-prefix
	touch $(STAMP)

build: $(STAMP)
	$(BIN)/course build

check: $(STAMP)
	$(BIN)/course build --check

demo: $(STAMP)
	$(BIN)/course build
	$(BIN)/course demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache
