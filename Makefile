# Sandbox Lab: `make lab` opens the lessons, `make test` runs the whole suite.
# Everything either needs is set up here, so both work on a fresh Debian machine as root.

# PYTHON makes .venv and nothing else (every recipe then runs .venv/bin/python). It is the first `python3`
# on the PATH make is started with: the Python the user has (a stock Debian 12's /usr/bin/python3 is 3.11.2),
# never one this file picks: the lock (constraints/test.txt, `make lock`) pins every package for every
# Python that requires-python in pyproject.toml admits, so whichever of them the user has, pip finds pins it
# can install (CI, .ci/run, tests those of the distribution's python3, as a stock Debian machine has it).
# Making .venv prints which Python it used, and refuses one older than MIN_PYTHON before installing anything.
# Another one: `make clean venv PYTHON=python3.12` (an existing .venv is kept as it was made).
PYTHON ?= python3
# The oldest Python the project supports: the lower bound of requires-python in pyproject.toml.
MIN_PYTHON := $(shell sed -n 's/^requires-python *= *">= *\([0-9][0-9.]*\).*/\1/p' pyproject.toml)
ifeq ($(MIN_PYTHON),)
$(error pyproject.toml: no lower bound in requires-python (">=3.X"), which `make venv` and `make lock` need)
endif
comma := ,
VENV   := .venv
PY     := $(VENV)/bin/python
PORT   ?= 8888
PYTEST_ARGS ?=
# make test spreads the test files over 1.5 pytest-xdist workers per core, rounded up (a file stays on one worker: its
# fixtures and order hold). The Docker tests wait on containers, subprocesses and servers as much as they compute, so a
# third worker on 2 cores fills the waits: a fresh clone's suite took 18 min 20 s with 3 workers against 20 min 51 s and
# 21 min 5 s with 2 (each test about a fifth slower, the waits overlapped; the tests' summed time is one worker's
# wall). TEST_PARALLEL= runs them in one process. The bystander and the host check are the controller's, after every
# worker ended (tests/conftest.py).
# make test-fast: its tests wait on their own subprocesses and servers as much as they compute, so the same 1.5
# workers per core keep the cores busy: 46 s against 51 s with one per core on 2 cores (docs/contributing.md).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( (n * 3 + 1) / 2 )))
TEST_PARALLEL ?= -n $(TEST_WORKERS) --dist loadfile
FAST_PARALLEL ?= -n $(TEST_WORKERS) --dist loadfile

# Two installs into the one virtualenv, each with its own stamp, so `make lab`
# after `make test` (or the other way round) installs exactly what is missing:
#   LAB_STAMP:  .[lab,docker], what the lessons need (JupyterLab, nbgrader, the Docker SDK);
#   TEST_STAMP: .[lab,docker,service,test], plus the run service (FastAPI, RQ) and the test toolchain (pytest, mypy, Playwright, ...).
# Both install the versions CI tested: CONSTRAINTS pins every package of the test
# environment (a constraint only pins, it installs nothing), so an upstream release
# cannot turn `filterwarnings = error` red on a day nothing changed here. `make lock`
# regenerates it, on purpose.
LAB_STAMP   := $(VENV)/.installed-lab
TEST_STAMP  := $(VENV)/.installed-test
CONSTRAINTS := constraints/test.txt

# Every recipe runs as if the virtualenv were activated: tools the project runs
# by name (nbgrader's `alembic`, `jupyter`, the lab's formgrader, whatever a test
# starts) are this project's, found in .venv/bin before anything else on the
# machine, and every subprocess inherits that. BASE_PATH is the PATH make was
# started with: the virtualenv is made by the machine's Python, never by itself.
BASE_PATH := $(PATH)
export VIRTUAL_ENV := $(CURDIR)/$(VENV)
export PATH := $(VIRTUAL_ENV)/bin:$(BASE_PATH)

# JupyterLab reads settings overrides from <prefix>/share/jupyter/lab/settings:
# no "get notified about official Jupyter news?" pop-up and no update check (no
# requests to jupyter.org) in any lab this virtualenv runs. Binder: binder/postBuild.
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.d/sandbox-lab.json

.PHONY: lab lab-instructor test typecheck unit docker redis images venv venv-lab lock lessons-html bench cleanup clean modules serve serve-stop docs test-fast

# Which Python makes .venv, said before it is made; one older than MIN_PYTHON is refused (pip would
# otherwise fail half-way with ResolutionImpossible on the first pin that needs a newer Python).
$(PY):
	@found="$$(PATH='$(BASE_PATH)'; command -v $(PYTHON))" || { echo "make: no $(PYTHON) on PATH. Install Python $(MIN_PYTHON) or newer (Debian: apt-get install python3 python3-venv), or name one: make PYTHON=/path/to/python3" >&2; exit 1; }; \
	env -u VIRTUAL_ENV PATH='$(BASE_PATH)' $(PYTHON) -c 'import sys; v = "%d.%d.%d" % sys.version_info[:3]; \
	  ok = sys.version_info >= ($(subst .,$(comma),$(MIN_PYTHON)),); \
	  print("Making $(VENV) with Python %s (%s), which PYTHON=$(PYTHON) finds on PATH at %s" % (v, sys.executable, sys.argv[1])) if ok else \
	  sys.exit("make: Python %s (%s, PYTHON=$(PYTHON) at %s) is older than $(MIN_PYTHON), the oldest this project supports (requires-python in pyproject.toml).\n" \
	    "Install a newer one (Debian 12: apt-get install python3 python3-venv gives 3.11) and put it first on PATH, or name it: make PYTHON=python3.11" % (v, sys.executable, sys.argv[1]))' "$$found"
	@env -u VIRTUAL_ENV PATH='$(BASE_PATH)' $(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	  echo "python3 -m venv failed; installing python3-venv"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv && env -u VIRTUAL_ENV PATH='$(BASE_PATH)' $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip

$(LAB_STAMP): pyproject.toml $(CONSTRAINTS) | $(PY)
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e '.[lab,docker]'
	@touch $@

$(TEST_STAMP): pyproject.toml $(CONSTRAINTS) | $(PY)
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e '.[lab,docker,service,test]'
	@touch $@ $(LAB_STAMP)

$(LAB_SETTINGS): binder/lab-settings.json | $(LAB_STAMP)
	@mkdir -p $(dir $@)
	cp binder/lab-settings.json $@

## What the lessons need, and nothing of the test toolchain.
venv-lab: $(LAB_STAMP) $(LAB_SETTINGS)

## Everything: the lessons and the test toolchain (what `make test` and development use).
## In a git checkout with no hooks of the user's own, git is pointed at hooks/ (the pre-commit size check).
venv: $(TEST_STAMP) $(LAB_SETTINGS)
	@scripts/install-hooks

## Regenerate constraints/test.txt on purpose, for every Python requires-python admits, whichever one runs make:
## uv resolves .[lab,docker,service,test] for the oldest ($(MIN_PYTHON), --python-version) and every newer one
## (--universal). A package whose newest release needs a newer Python gets a second pin, an older release behind
## a python_full_version marker; pip honours the markers. The versions already in the file are kept unless one
## must move; `make lock LOCK_ARGS=--upgrade` takes the newest releases, LOCK_ARGS='-P NAME' one package's.
## Review the diff, run `make test`, commit. tests/unit/project/test_lock.py checks every pin's Requires-Python.
# uv is pinned: its options and its output are how the lock is made. It reads no pip configuration, so it is
# handed pip's: its certificate bundle (cert, e.g. a TLS-inspecting proxy's CA in /etc/pip.conf) as
# SSL_CERT_FILE, its index-url as UV_DEFAULT_INDEX, and the system's certificate store besides.
LOCK_VENV := build/lock-venv
UV := uv==0.13.9
LOCK_ARGS ?=
lock:
	rm -rf $(LOCK_VENV)
	env -u VIRTUAL_ENV PATH='$(BASE_PATH)' $(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install -q '$(UV)'
	@mkdir -p $(dir $(CONSTRAINTS))
	@[ ! -f $(CONSTRAINTS) ] || cp $(CONSTRAINTS) $(LOCK_VENV)/lock.txt
	uv_env="$$($(LOCK_VENV)/bin/python -m pip config list | tac | \
	  sed -n "s/^[^.]*\.cert='\(.*\)'$$/SSL_CERT_FILE=\1/p; s/^[^.]*\.index-url='\(.*\)'$$/UV_DEFAULT_INDEX=\1/p")"; \
	env $$uv_env $(LOCK_VENV)/bin/uv pip compile pyproject.toml --extra lab --extra docker --extra service --extra test \
	  --universal --python-version $(MIN_PYTHON) --python $(LOCK_VENV)/bin/python --system-certs \
	  --no-header --no-annotate --quiet $(LOCK_ARGS) --output-file $(LOCK_VENV)/lock.txt
	@{ echo "# The test environment CI runs in: every package of .[lab,docker,service,test], pinned for every Python that"; \
	   echo "# requires-python in pyproject.toml admits ($$(sed -n 's/^requires-python *= *"\(.*\)".*/\1/p' pyproject.toml)): resolved for Python $(MIN_PYTHON) and every newer one by \`make lock\`"; \
	   echo "# (uv $$($(LOCK_VENV)/bin/uv --version | cut -d' ' -f2) pip compile --universal --python-version $(MIN_PYTHON)), $$(date -u +%Y-%m-%d). A release that needs a newer Python"; \
	   echo "# is pinned behind a python_full_version marker, with an older one for the older Pythons."; \
	   echo "# Used as pip constraints by \`make venv\` and \`make venv-lab\`; tests/unit/project/test_lock.py checks it."; \
	   cat $(LOCK_VENV)/lock.txt; } > $(CONSTRAINTS)
	rm -rf $(LOCK_VENV)
	@echo "wrote $(CONSTRAINTS) for Python $(MIN_PYTHON) and newer: review the diff, then make test"

docker:
	@scripts/ensure-docker

## redis-server, for the run service's queue and its tests (installed, never left running: each starts its own).
redis:
	@scripts/ensure-redis

images: venv-lab docker
	@$(PY) -m grader setup

## The lessons in JupyterLab as a learner gets them (no solutions, no filled answers), with the Docker backend.
# learner/ holds what nbgrader releases (scripts/learner-lessons), rebuilt when a lesson changes;
# a learner's earlier copy is kept beside it, never overwritten.
LEARNER := learner
$(LEARNER)/.built: $(wildcard lessons/*/*.ipynb) docs/srt-differences.md nbgrader_config.py scripts/learner-lessons $(LAB_STAMP)
	@PYTHON=$(PY) scripts/learner-lessons $(LEARNER)
	@touch $@

# LEARNER_CONFIG goes first on JUPYTER_CONFIG_PATH (as binder/start does): no nbgrader instructor
# menu, Create Assignment panel or formgrader in the learners' lab (binder/learner-lab/README.md).
LEARNER_CONFIG := $(CURDIR)/binder/learner-lab
lab: images $(LEARNER)/.built
	@echo "Open the URL below (start with 00-start-here). Ctrl-C stops the lab."
	@JUPYTER_CONFIG_PATH='$(LEARNER_CONFIG)'$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH} $(VENV)/bin/jupyter lab --no-browser --ip=127.0.0.1 --port=$(PORT) --allow-root \
	  --ServerApp.root_dir=$(CURDIR)/$(LEARNER) --LabApp.default_url=/lab/tree/00-start-here/start-here.ipynb

## For instructors: the course's sources (solutions, hidden tests) and the formgrader (menu Nbgrader).
# The server's root is the repository, the nbgrader course: the formgrader
# only works when the course lies inside the server's root.
lab-instructor: images
	@echo "Instructor lab: the sources, with solutions. Open the URL below. Ctrl-C stops the lab."
	@$(VENV)/bin/jupyter lab --no-browser --ip=127.0.0.1 --port=$(PORT) --allow-root \
	  --ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/lessons/00-start-here/start-here.ipynb

## The whole suite: unit, Docker integration, notebooks, nbgrader and browser tests.
# ensure-browser also installs axe-core into tools/axe (npm ci from its lock file) for the accessibility test.
# check-size first: what the branch's commits add to the history (no file over 512 KiB, no node_modules/).
test: images typecheck redis
	@scripts/check-size
	@# gVisor's runsc, for the tests of the sandbox runtime (tests/integration/test_runtimes_docker.py): registered
	@# where this can do it (root on Debian); elsewhere those tests skip, and fail under CI. ensure-docker says
	@# each change before making it (apt-get install runsc, runtimes.runsc in /etc/docker/daemon.json, a SIGHUP
	@# reload of dockerd); every change make test and make lab make: docs/machine-changes.md
	@if [ "$$(id -u)" = 0 ] && [ -f /etc/debian_version ]; then \
	  runtime_ok=$$(docker info --format '{{range $$n, $$_ := .Runtimes}}{{$$n}} {{end}}' 2>/dev/null | tr ' ' '\n' | grep -cx runsc || true); \
	  [ "$$runtime_ok" = 1 ] || echo "make test: gVisor's runsc is not registered with the Docker engine; scripts/ensure-docker --runtime runsc will install and register it (it says each change first; docs/machine-changes.md)"; \
	  scripts/ensure-docker --runtime runsc; fi
	@PYTHON=$(PY) scripts/ensure-browser
	@PYTHON=$(PY) scripts/ensure-srt
	$(PY) -m pytest $(TEST_PARALLEL) --durations=25 $(PYTEST_ARGS)

## mypy --strict on grader/ (configured in pyproject.toml); the import contracts ([tool.importlinter]) run in tests/unit/project/test_layers.py.
typecheck: venv
	$(PY) -m mypy

## Only the fast tests that need neither Docker nor notebooks.
unit: venv typecheck redis
	$(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

## The fast check, in one command: every test that needs no Docker engine, no notebook kernel and no browser, and
## is not marked slow (the markers are in pyproject.toml), over the whole of tests/; its measured time is in
## docs/contributing.md. `make test` runs everything, this included.
test-fast: venv redis
	$(PY) -m pytest -q $(FAST_PARALLEL) -m "not docker and not slow and not notebook and not browser" $(PYTEST_ARGS)

## The documentation site, from docs/ (mkdocs.yml) into build/site (git-ignored). --strict: a broken link or anchor,
## a page missing from the nav, or a link out of docs/ to a file the checkout lacks fails the build. The reference
## pages (the CLI's --help, the policy schema, the HTTP API) are generated from the code as it builds
## (scripts/docs_reference.py, scripts/mkdocs_hooks.py). tests/unit/project/test_docs.py runs the same build in `make test`.
docs: venv
	$(VENV)/bin/mkdocs build --strict

## The lessons' notebooks from their sources. To edit a lesson, edit lessons/0N-*/<name>.md (MyST
## Markdown; or the .ipynb in `make lab-instructor`, which saves both), then run `make lessons`: jupytext --sync
## writes the other file of each pair from the newer one. Task notebooks are regenerated from grader/tasks/*.json.
## tests/unit/project/test_lesson_pairs.py fails while a pair or a task notebook is out of date.
.PHONY: lessons
lessons: venv-lab
	$(VENV)/bin/jupytext --sync lessons/0*/*.md
	$(PY) scripts/make_task_notebooks.py

## docs/modules.md, the module map, from the import contracts ([tool.importlinter] in pyproject.toml).
## tests/unit/project/test_module_map.py fails while it is out of date.
modules: venv
	$(PY) scripts/module_map.py

lessons-html: venv-lab
	$(PY) scripts/lessons_html.py

bench: images
	$(PY) bench/probe_speed.py
	$(PY) bench/batch.py
	$(PY) bench/autograde.py

## The run service on this machine, in the background: Redis, the API on 127.0.0.1:$(SERVICE_PORT) and two
## workers (state, pid files and logs in $$SANDBOX_LAB_SERVICE_DIR); prints the URL and a fresh operator token.
SERVICE_PORT ?= 8000
serve: venv images redis
	@PYTHON=$(PY) scripts/serve $(SERVICE_PORT)

serve-stop:
	@scripts/serve-stop

cleanup: venv-lab
	$(PY) -m grader cleanup

clean:
	rm -rf $(VENV) build release submitted autograded feedback gradebook.db .pytest_cache $(LEARNER)
