# The two quick-start commands (README): `make start` and `make test`.
# Both create or refresh .venv and install the pinned requirements first.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: venv start test test-fast check clean

venv:
	@VENV=$(VENV) scripts/bootstrap.sh

## start: the whole local stack on embedded defaults (SQLite + embedded Redis); Ctrl-C stops it
start: venv
	$(PY) manage.py standalone

## test: the whole test suite against whatever DATABASE_URL / CELERY_BROKER_URL say (default: embedded);
## first installs Debian's chromium (the browser test) and docker-compose when they are missing
test: venv
	@sh scripts/ensure_test_tools.sh
	$(PY) -m pytest $(PYTEST_ARGS)

## test-fast: the developer's lane: everything but the slow chaos and scale tests (CI runs those too)
test-fast: venv
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

check: venv
	$(PY) manage.py check
	$(PY) manage.py makemigrations --check --dry-run

clean:
	rm -rf var/ .pytest_cache

## docs: the documentation (docs/) as HTML in build/docs; warnings and broken links are errors
.PHONY: docs
docs: venv
	$(PY) -m sphinx -W --keep-going -n -b html docs build/docs
