# Two set-up commands (see README): `make demo` runs the main job, `make test` the tests.
# Both create .venv and install torch==2.13.0 first, so CPU machines take the local CPU
# wheel instead of downloading a CUDA build.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: install demo test lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

# The main job: the embedded default sweep (16 pilots of the tiny family on this CPU,
# warm start included), ending with the leaderboard, compute card, plots and selection
# under results/.
demo: install
	$(VENV)/bin/race sweep

test: install
	$(VENV)/bin/ruff check race tests bench examples
	$(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check race tests bench examples

clean:
	rm -rf $(VENV) .pytest_cache
