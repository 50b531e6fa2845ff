# Sandbox Lab: `make lab` opens the lessons, `make test` runs the whole suite.
# Everything either needs is set up here, so both work on a fresh Debian machine as root.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PORT   ?= 8888
PYTEST_ARGS ?=

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

.PHONY: lab lab-instructor test typecheck unit docker images venv lessons-html bench cleanup clean

$(STAMP): pyproject.toml
	@env -u VIRTUAL_ENV PATH='$(BASE_PATH)' $(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	  echo "python3 -m venv failed; installing python3-venv"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv && env -u VIRTUAL_ENV PATH='$(BASE_PATH)' $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[lab,test]'
	@touch $(STAMP)

$(LAB_SETTINGS): binder/lab-settings.json $(STAMP)
	@mkdir -p $(dir $@)
	cp binder/lab-settings.json $@

venv: $(STAMP) $(LAB_SETTINGS)

docker:
	@scripts/ensure-docker

images: venv docker
	@$(PY) -m grader setup

## The lessons in JupyterLab as a learner gets them (no solutions, no filled answers), with the Docker backend.
# learner/ holds what nbgrader releases (scripts/learner-lessons), rebuilt when a lesson changes;
# a learner's earlier copy is kept beside it, never overwritten.
LEARNER := learner
$(LEARNER)/.built: $(wildcard lessons/*/*.ipynb) nbgrader_config.py scripts/learner-lessons $(STAMP)
	@PYTHON=$(PY) scripts/learner-lessons $(LEARNER)
	@touch $@

lab: images $(LEARNER)/.built
	@echo "Open the URL below (start with 00-start-here). Ctrl-C stops the lab."
	@$(VENV)/bin/jupyter lab --no-browser --ip=127.0.0.1 --port=$(PORT) --allow-root \
	  --ServerApp.root_dir=$(CURDIR)/$(LEARNER) --LabApp.default_url=/lab/tree/00-start-here/start-here.ipynb

## For instructors: the course's sources (solutions, hidden tests) and the formgrader (menu Nbgrader).
# The server's root is the repository, the nbgrader course: the formgrader
# only works when the course lies inside the server's root.
lab-instructor: images
	@echo "Instructor lab: the sources, with solutions. Open the URL below. Ctrl-C stops the lab."
	@$(VENV)/bin/jupyter lab --no-browser --ip=127.0.0.1 --port=$(PORT) --allow-root \
	  --ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/lessons/00-start-here/start-here.ipynb

## The whole suite: unit, Docker integration, notebooks, nbgrader and browser tests.
test: images typecheck
	@PYTHON=$(PY) scripts/ensure-browser
	@scripts/ensure-srt
	$(PY) -m pytest $(PYTEST_ARGS)

## mypy --strict on grader/ (configured in pyproject.toml); the import-layer contract is tests/unit/test_layers.py.
typecheck: venv
	$(PY) -m mypy

## Only the fast tests that need neither Docker nor notebooks.
unit: venv typecheck
	$(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

## The lessons' notebooks from their sources. To edit a lesson, edit lessons/0N-*/<name>.md (MyST
## Markdown; or the .ipynb in `make lab-instructor`, which saves both), then run `make lessons`: jupytext --sync
## writes the other file of each pair from the newer one. Task notebooks are regenerated from grader/tasks/*.json.
## tests/unit/test_lesson_pairs.py fails while a pair or a task notebook is out of date.
.PHONY: lessons
lessons: venv
	$(VENV)/bin/jupytext --sync lessons/0*/*.md
	$(PY) scripts/make_task_notebooks.py

lessons-html: venv
	$(PY) scripts/lessons_html.py

bench: images
	$(PY) bench/probe_speed.py
	$(PY) bench/batch.py
	$(PY) bench/autograde.py

cleanup: venv
	$(PY) -m grader cleanup

clean:
	rm -rf $(VENV) build release submitted autograded feedback gradebook.db .pytest_cache $(LEARNER)
