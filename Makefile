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

demo: install
	$(VENV)/bin/race flops model=qwen2.5-0.5b reward=rule steps=100
	$(VENV)/bin/race flops model=qwen2.5-1.5b reward=qwen2.5-math-prm-7b task=gsm8k \
		grid.group_size=8 grid.max_new_tokens=512 steps=100
	$(VENV)/bin/race flops model=qwen2.5-7b task=gsm8k grid.max_new_tokens=512 budget=1e18
	$(VENV)/bin/race flops model=tiny-m reward=prm-tiny budget=1e13

test: install
	$(VENV)/bin/ruff check race tests bench
	$(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check race tests bench

clean:
	rm -rf $(VENV) .pytest_cache
