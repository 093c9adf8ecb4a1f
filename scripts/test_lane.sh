#!/usr/bin/env bash
# A lane: the package on other versions of its dependencies than requirements/ pins, e.g.
#   scripts/test_lane.sh python3.11 requirements/floors.txt   (make test-floors: the floors)
#   scripts/test_lane.sh python3.13 requirements/newest.txt   (make test-newest: Django 6)
# Installs the requirements file alone into a virtualenv of the lane's own, var/venv-<name>
# (made again from scratch whenever the file or the Python changes), then runs on the embedded
# defaults (SQLite + embedded Redis, whatever DATABASE_URL / CELERY_BROKER_URL say) the unit
# suite (every test marked neither integration nor slow), one end-to-end test — a workflow
# through a real manager and two real agents, in each failure mode — and, where the requirements
# pin playwright (the newest), Switchyard's own admin pages in a real browser (Django's admin
# styles them differently from one version to the next).
# Left out: the slow tests (the purge of 100,000 executions: scale, not versions) and what needs a
# tool the lanes do not install and tests none of the dependencies' versions (docker compose, the
# other browser tests, the API's fuzzing, the documentation's build). PYTEST_ARGS are added to
# both runs.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 <python> <requirements file>" >&2; exit 2; }
python=$1 requirements=$2
name=$(basename "$requirements" .txt)
venv="var/venv-$name"
var_dir="$PWD/var/ci-$name"
started=$SECONDS

# The interpreter: on PATH, else one of pyenv's versions (its shim may know python3.13 without
# selecting it).
if ! "$python" -c "" >/dev/null 2>&1; then
  found=""
  for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/"$python"; do
    if [ -x "$candidate" ] && "$candidate" -c "" >/dev/null 2>&1; then found=$candidate; fi
  done
  [ -n "$found" ] || { echo "test_lane: $python is not installed" >&2; exit 1; }
  python=$found
fi

stamp="$venv/.requirements.sha256"
want=$( (cat "$requirements"; "$python" -VV) | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "test_lane: installing $requirements into $venv ($("$python" -V))"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$requirements"
  echo "$want" > "$stamp"
fi

mkdir -p "$var_dir"
trap '"$venv/bin/python" -c "import sys; from workflows_app import embedded_redis; embedded_redis.stop(sys.argv[1])" "$var_dir" || true' EXIT
run() {
  env -u DATABASE_URL -u CELERY_BROKER_URL -u CELERY_RESULT_BACKEND -u SWITCHYARD_REQUIRE \
    SWITCHYARD_VAR_DIR="$var_dir" "$venv/bin/python" -m pytest -p no:cacheprovider ${PYTEST_ARGS:-} "$@"
}
run -m "not integration and not slow" --deselect tests/project/test_docker.py --ignore tests/project/test_docs.py \
  --ignore-glob 'tests/integration/test_browser*.py' --ignore tests/integration/test_api_fuzz.py
# The admin pages in a browser where the lane pins playwright (the newest: the floors' greenlet
# is older than playwright's; the set-ups run them on the floors' Django).
browser=()
if grep -qi '^playwright==' "$requirements"; then browser=(tests/integration/test_browser_admin_pages.py); fi
run tests/integration/test_engine.py::test_cromwell_worked_example "${browser[@]}"
echo "test_lane: $name passed in $((SECONDS - started)) s"
