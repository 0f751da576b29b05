# The README's two commands: `make demo` (the main job on the embedded engine) and `make test`.
# Each one creates or refreshes .venv by itself (scripts/ensure_venv.sh); `make test` also installs Chromium for
# the viewer's browser test where it is missing and apt-get can (scripts/ensure_browser.sh). PYTHONFAULTHANDLER:
# a crash of the test process prints every thread's Python stack.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
PYTEST_WORKERS ?= 2

.PHONY: venv browser demo test bench

venv:
	@bash scripts/ensure_venv.sh

browser:
	@bash scripts/ensure_browser.sh

demo: venv
	$(PY) -m recipe.forge.main_forge +experiment=main_job $(ARGS)

test: venv browser
	PYTHONFAULTHANDLER=1 $(PY) -m pytest tests -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench: venv
	$(PY) scripts/bench_advantage.py
