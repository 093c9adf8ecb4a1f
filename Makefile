# The two quick-start commands (README): `make start` and `make test`.
# Both create or refresh .venv and install the pinned requirements first.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# Tests run side by side in WORKERS processes (pytest-xdist; 0: all in one). The suite mostly waits
# on the processes and services it starts, so two per core keep a 2-core machine busy; each
# worker has a database, a broker namespace and a var directory of its own (tests/parallel.py).
WORKERS ?= 4
# One test at a time to each worker, in the order collected (the slow ones first), but the tests
# that share a fixture built once per module together (tests/parallel.py): pytest-xdist's `load`
# hands each worker a long run of neighbours at the start, which put every slow test on one.
XDIST = -n $(WORKERS) --dist loadgroup

.PHONY: venv start test test-fast check clean

venv:
	@VENV=$(VENV) scripts/bootstrap.sh

## start: the whole local stack on embedded defaults (SQLite + embedded Redis); Ctrl-C stops it.
## PORT and FLOWER_PORT move the web server and Flower off 8000 and 5555 (make start PORT=8001
## FLOWER_PORT=5556); ARGS passes any other option of manage.py standalone (ARGS="--no-demo --verbose")
PORT ?=
FLOWER_PORT ?=
ARGS ?=
start: venv
	$(PY) manage.py standalone$(if $(PORT), --port=$(PORT))$(if $(FLOWER_PORT), --flower-port=$(FLOWER_PORT)) $(ARGS)

## test: the whole test suite against whatever DATABASE_URL / CELERY_BROKER_URL say (default: embedded);
## first installs Debian's chromium (the browser test) and docker-compose when they are missing
test: venv
	@sh scripts/ensure_test_tools.sh
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

## test-fast: the developer's lane, a few minutes: every test that starts no engine process and is
## not slow (CI runs the rest too)
test-fast: venv
	$(PY) -m pytest $(XDIST) -m "not slow and not integration" $(PYTEST_ARGS)

.PHONY: test-floors test-newest
## test-floors: the unit suite and an end-to-end test on the lowest versions pyproject.toml allows
## (requirements/floors.txt), in a virtualenv of their own (var/venv-floors) on Python 3.11
test-floors:
	PYTEST_ARGS="$(PYTEST_ARGS)" bash scripts/test_lane.sh python3.11 requirements/floors.txt

## test-newest: the same on the newest releases in range, Django 6 (requirements/newest.txt), on Python 3.13
test-newest:
	PYTEST_ARGS="$(PYTEST_ARGS)" bash scripts/test_lane.sh python3.13 requirements/newest.txt

## wheel: the package as a wheel in dist/ (dist/django_switchyard-<version>-py3-none-any.whl), to
## pip install in another project before a release to the package index
.PHONY: wheel
wheel: venv
	rm -rf build/lib build/bdist.*
	$(PY) -m build --wheel --outdir dist .
	@# setuptools leaves the package's metadata here: pytest, run from here, would load its plugin twice
	rm -rf build/lib build/bdist.* django_switchyard.egg-info

check: venv
	$(PY) manage.py check
	$(PY) manage.py makemigrations --check --dry-run

clean:
	rm -rf var/ .pytest_cache

## docs: the documentation (docs/) as HTML in build/docs; warnings and broken links are errors
.PHONY: docs
docs: venv
	$(PY) -m sphinx -W --keep-going -n -b html docs build/docs
