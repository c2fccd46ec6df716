# Set-up is a side effect of the targets that need it; every target is idempotent.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup build check demo test test-fast train bench clean

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

# The inner loop: everything but training a model and nbgrader end to end.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# Train the reference Transformer (about a minute on 2 cores) and report exact match.
train: $(STAMP)
	$(BIN)/course train --out runs/reference

# Benchmarks behind the README's figures (medians over repeats; minutes).
bench: $(STAMP)
	$(BIN)/python -m autograder.bench
	$(BIN)/python -m autograder.capstone.bench_model

clean:
	rm -rf $(VENV) .pytest_cache
