# Two set-up commands (see README): `make demo` runs the main job, `make test` the tests.
# Both create .venv and install torch==2.13.0 first, so CPU machines take the local CPU
# wheel instead of downloading a CUDA build. `make test` also installs the extras that are
# pip packages (TEST_EXTRAS), so only the SLURM and vLLM tests skip (.ci/run adds those).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# TRL, reasoning-gym, Syne Tune + Optuna, the four trackers, datasets, gguf (pyproject.toml)
TEST_EXTRAS := test,trl,tasks,bench,wandb,trackio,mlflow,tensorboard,hub,real

.PHONY: install install-test demo test lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]'
	# the checkout's root on the venv's path: bench/ (not in the wheel, which ships race
	# alone) runs as python bench/<name>.py and imports its siblings as bench.x
	$(PY) -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], 'race-checkout.pth').write_text('$(CURDIR)\\n')"
	touch $@

# torch pinned again in the same line: no extra may swap in a CUDA build
$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) install -q -e '.[$(TEST_EXTRAS)]' torch==2.13.0
	touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

# The main job: the embedded default sweep (16 pilots of the tiny family on this CPU,
# warm start included), ending with the leaderboard, compute card, plots and selection
# under results/.
demo: install
	$(VENV)/bin/race sweep

test: install-test
	$(VENV)/bin/ruff check race tests bench examples tools
	$(PY) -m pytest -q --durations=25

lint: install
	$(VENV)/bin/ruff check race tests bench examples tools

clean:
	rm -rf $(VENV) .pytest_cache
