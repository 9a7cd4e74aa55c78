# Two entry points: `make run` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export NO_MKDOCS_2_WARNING := 1
# torch is installed first and on its own: 2.13.0 has a small CPU-only build, and once it is
# present the `torch>=2.13,<2.15` range in pyproject.toml keeps it instead of a CUDA build.
TORCH := torch==2.13.0

.PHONY: run test install install-dev docs bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

run: install
	$(PY) -m actorq +experiment=dqn_cartpole

test: install-dev
	$(PY) -m pytest
	$(PY) -m mkdocs build --strict --site-dir .site

docs: install-dev
	$(PY) -m mkdocs serve

clean:
	rm -rf $(VENV) .site outputs multirun .pytest_cache
