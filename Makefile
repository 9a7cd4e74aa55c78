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

# `make run`: the default experiment twice, fp32 and int8 actors (same seed, same budget),
# then the comparison report (table printed, report.md and plots in the sweep dir).
RUN_SWEEP := outputs/make-run/$(shell date +%Y-%m-%d_%H-%M-%S)
run: install
	$(PY) -m actorq -m +experiment=dqn_cartpole quant.bits=32,8 hydra.sweep.dir=$(RUN_SWEEP)
	$(PY) -m actorq.report $(RUN_SWEEP)

test: install-dev
	$(PY) -m pytest --durations=25
	$(PY) -m mkdocs build --strict --site-dir .site

docs: install-dev
	$(PY) -m mkdocs serve

clean:
	rm -rf $(VENV) .site outputs multirun .pytest_cache
