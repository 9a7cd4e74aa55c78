# Two entry points: `make run` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export NO_MKDOCS_2_WARNING := 1
# torch is installed first and on its own: 2.13.0 has a small CPU-only build, and once it is
# present the `torch>=2.13,<2.16` range in pyproject.toml keeps it instead of a CUDA build.
TORCH := torch==2.13.0

.PHONY: run test check install install-dev gl-libs docs bench clean mutants

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

install: $(VENV)/.installed gl-libs

install-dev: $(VENV)/.installed-dev gl-libs

# Offscreen OpenGL for videos of MuJoCo tasks (`python -m actorq.evaluate RUN_DIR video=true`):
# Mesa's EGL, installed with apt-get when neither it nor OSMesa is present and apt-get can run
# (as root); otherwise a note. Never fails the install.
GL_PACKAGES := libegl1 libgl1 libegl-mesa0
gl-libs:
	@if $$(command -v ldconfig || echo /sbin/ldconfig) -p 2>/dev/null | grep -q -e libEGL_mesa.so -e libOSMesa.so; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && apt-get install -y -qq --no-install-recommends $(GL_PACKAGES)) \
			|| echo "note: apt-get could not install $(GL_PACKAGES); videos of MuJoCo tasks need them"; \
	else echo "note: videos of MuJoCo tasks need EGL or OSMesa: sudo apt-get install $(GL_PACKAGES)"; fi

# `make run`: the default experiment twice, fp32 and int8 actors (same seed, same budget),
# then the comparison report (table printed, report.md and plots in the sweep dir).
RUN_SWEEP := outputs/make-run/$(shell date +%Y-%m-%d_%H-%M-%S)
run: install
	$(PY) -m actorq -m +experiment=ppo_cartpole_wide quant.bits=32,8 hydra.sweep.dir=$(RUN_SWEEP)
	$(PY) -m actorq.report $(RUN_SWEEP)

# Two test workers, one torch thread each: most of the suite waits on process start-ups and
# on learners that keep one core busy, so two share a 2-core machine. Each file stays on one
# worker, so a module's shared run (one training run read by several tests) happens once.
test: install-dev
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=25
	$(PY) -m mkdocs build --strict --site-dir .site

# `make check`: the quick tier (a few minutes): lint, tests/unit and the doctests of src/actorq.
# Two module doctests start processes and are left to `make test`: actorq.train's runs a
# training run, actorq.actors.pool's starts a worker process (-k matches names by substring,
# so the two modules' other doctests are named back in). Tests that train or start processes
# live in tests/component and tests/integration, which `make test` runs.
CHECK_SKIP := not (actorq.train or actorq.actors.pool) or describe_result or worker_index
check: install-dev
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m pytest tests/unit src/actorq -k "$(CHECK_SKIP)" --durations=10

docs: install-dev
	$(PY) -m mkdocs serve

# `make mutants`: mutation testing of the learning math (algos, n-step, prioritized replay,
# codecs, exploration) against its fast unit tests; [tool.mutmut] in pyproject.toml scopes
# it, docs/mutation.md explains the scores. MUTANTS='actorq.algos*' narrows the run;
# survivors: $(VENV)/bin/mutmut results, one diff: $(VENV)/bin/mutmut show NAME.
mutants: install-dev
	$(VENV)/bin/mutmut run --max-children $(or $(JOBS),2) $(MUTANTS)
	$(VENV)/bin/mutmut results

clean:
	rm -rf $(VENV) .site outputs multirun .pytest_cache
