# Two entry points: `make demo` and `make test`. Both create (or reuse) a virtual
# environment and install what they need on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.langshare-installed

.PHONY: install test test-fast demo benchmark clean

# setup.py/requirements.txt say what the package needs (ranges); constraints.txt pins the exact
# versions installed here
$(STAMP): setup.py requirements.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip wheel
	# torch first, pinned: the CPU wheel is on local disk; an unpinned torch pulls a CUDA build
	$(PY) -m pip install --quiet -c constraints.txt torch
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,deploy,langid,transformers]'
	touch $(STAMP)

install: $(STAMP)

# one worker per core, at most 4 (pytest-xdist; each worker holds torch and fairseq and its
# tests spawn trainings); a file's tests stay on one worker, so the models a module-scoped
# fixture trains are trained once
XDIST := -n auto --maxprocesses 4 --dist loadfile
test: install
	$(PY) -m pytest -q --durations=10 $(XDIST) tests

test-fast: install
	$(PY) -m pytest -q $(XDIST) -m "not slow" tests

demo: install
	PATH=$(abspath $(VENV))/bin:$$PATH bash scripts/demo.sh

benchmark: install
	PATH=$(abspath $(VENV))/bin:$$PATH $(PY) -m benchmarks.run_baseline

clean:
	rm -rf $(VENV) .pytest_cache
