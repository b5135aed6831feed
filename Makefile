# Two commands do everything: `make study` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# the exact versions tested (a pip constraints file); `make lock` refreshes it
LOCK := constraints.txt
PROFILE ?= default
RUN ?= runs/$(PROFILE)
# optional overrides, named like the parameters (python -m tiebias profiles lists them all):
#   make study PROFILE=default STEPS=200 SEEDS=0,1 OVERWRITE=1   (any parameter: SET="lr=1e-3 warmup_steps=10")
OVERRIDES := $(if $(STEPS),--set steps=$(STEPS)) $(if $(SEEDS),--set seeds=$(SEEDS)) \
             $(if $(PRESET),--set preset=$(PRESET)) $(if $(CORPUS),--set corpus=$(CORPUS)) \
             $(if $(VOCAB_SIZE),--set vocab_size=$(VOCAB_SIZE)) \
             $(if $(filter 1 true yes,$(OVERWRITE)),--set overwrite=true) $(foreach s,$(SET),--set $(s))
TEST_RUN := $(shell mktemp -u /tmp/tiebias-nbval-XXXXXX)
# make test: the unit tests run in TEST_WORKERS processes (pytest-xdist); the smoke study they share (tests/conftest.py)
# is written to TEST_RUN, and nbval then runs the notebooks on that folder (the models are trained: 01 reuses them)
TEST_WORKERS ?= 2
# make lab: the notebooks' profile is the class one (3 min 27 s for 01..04 in the walkthrough's run) unless PROFILE=... or
# $TIEBIAS_PROFILE names another; JupyterLab opens at the repository root (README.md, runs/, notebooks/)
LAB_PROFILE = $(if $(filter file,$(origin PROFILE)),$(or $(TIEBIAS_PROFILE),class),$(PROFILE))
LAB_RUN = $(or $(TIEBIAS_RUN_DIR),runs/$(LAB_PROFILE))
LAB_ROOT = $(if $(filter 0,$(shell id -u)),--allow-root)
LAB_ARGS ?=

.PHONY: setup study exercise test test-portable lab check-class lint bench clean-runs lock

$(STAMP): pyproject.toml $(LOCK)
	@$(PYTHON) scripts/check_python.py
	@$(PYTHON) scripts/check_python.py --venv $(VENV) || rm -rf $(VENV)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c $(LOCK) --upgrade pip
	$(BIN)/python -m pip install -q -c $(LOCK) torch==2.13.0
	$(BIN)/python -m pip install -q -c $(LOCK) -e '.[test]'
	touch $(STAMP)

# resolve the newest releases pyproject.toml allows in a throwaway venv and write them to $(LOCK); then `make test`
lock:
	$(PYTHON) scripts/lock.py --output $(LOCK)

# the venv, plus the nbstripout git filter (.gitattributes): executed notebooks are committed without outputs
# (cell ids kept) and without the kernel details JupyterLab rewrites on save (tiebias.nbfilter), so running and
# saving them never changes what git stores
setup: $(STAMP)
	@if git rev-parse --git-dir >/dev/null 2>&1; then \
	  $(BIN)/nbstripout --install --attributes .gitattributes && \
	  git config filter.nbstripout.clean '"$(abspath $(BIN))/python" -m tiebias.nbfilter' && \
	  git config diff.ipynb.textconv '"$(abspath $(BIN))/python" -m tiebias.nbfilter' && \
	  echo "nbstripout git filter installed: notebooks are committed without outputs"; \
	else echo "not a git checkout: nbstripout git filter not installed"; fi

study: $(STAMP)
	$(BIN)/python -m tiebias study --profile $(PROFILE) --run-dir $(RUN) $(OVERRIDES)

# one of the notebooks' exercises, as pasted from a notebook: make exercise ID=02-b (no ID: the list); it trains into
# runs/ex-<ID>/ with the exercises' profile (class) unless PROFILE=... is given; works without an active environment.
# ID and PROFILE reach python as the shell's variables ("$$ID"), never as text of the command line, so no quote,
# backtick or $(...) in them is run by the shell; python refuses an id that is not [0-9a-z-]
exercise: $(STAMP)
	$(BIN)/python -m tiebias exercise "$$ID" --run-dir "runs/ex-$$ID" \
	  $(if $(filter command line,$(origin PROFILE)),--profile "$$PROFILE")

test: $(STAMP)
	$(BIN)/ruff check lib tests bench scripts
	TIEBIAS_PROFILE=smoke TIEBIAS_RUN_DIR=$(TEST_RUN)-default TIEBIAS_SMOKE_STUDY=$(TEST_RUN) \
	  $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=25 tests
	TIEBIAS_PROFILE=smoke TIEBIAS_RUN_DIR=$(TEST_RUN) $(BIN)/python -m pytest -q --nbval-lax --nbval-current-env -p no:cacheprovider notebooks
	rm -rf $(TEST_RUN) $(TEST_RUN)-default $(TEST_RUN).*

# the pinned smoke study again with torch's generic CPU kernels, as another CPU would compute it: its tolerance
# must absorb what a different machine changes (tests/test_study.py derives it from each claim's seed spread)
test-portable: $(STAMP)
	ATEN_CPU_CAPABILITY=default TIEBIAS_PROFILE=smoke $(BIN)/python -m pytest -q -p no:cacheprovider \
	  tests/test_study.py -k test_smoke_study_end_to_end

lab: setup
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (tiebias)"
	@echo "The notebooks use the '$(LAB_PROFILE)' profile (TIEBIAS_PROFILE=$(LAB_PROFILE)) and the run folder $(LAB_RUN)/."
	@echo "Another profile: make lab PROFILE=default (or smoke, depth, long, gpu), or set profile = \"...\" in a notebook's first cell."
	@echo "Open notebooks/01_train.ipynb .. 04_ablate.ipynb in order and Run All in each."
	TIEBIAS_PROFILE=$(LAB_PROFILE) $(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" --ContentsManager.post_save_hook=tiebias.nbfilter.post_save $(LAB_ROOT) $(LAB_ARGS)

# before a class: packages, Chromium (optional), and a plumbing run of all four notebooks (scripts/check_class.py)
check-class: setup
	$(BIN)/python scripts/check_class.py

lint: $(STAMP)
	$(BIN)/ruff check lib tests bench scripts

bench: $(STAMP)
	$(BIN)/python bench/train_throughput.py

# walkthrough/: the executed notebooks of a run as Markdown with PNG figures (needs Chromium); RUN defaults to runs/class
.PHONY: walkthrough
walkthrough: $(STAMP)
	$(BIN)/python -m tiebias walkthrough $(if $(filter command line environment,$(origin RUN)),$(RUN),runs/class)

clean-runs:
	rm -rf runs/smoke
