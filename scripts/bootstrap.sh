#!/usr/bin/env bash
# Creates (or refreshes) the project's virtualenv in .venv and installs the pinned
# requirements into it. Re-installs only when a requirements file changed since last time.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
# Python 3.11 or newer: python3.11 when there is one (requirements/ is tested there), else
# python3; PYTHON=/path/to/python overrides both.
recent_enough='import sys; sys.exit(sys.version_info < (3, 11))'
PYTHON=${PYTHON:-}
if [ -n "$PYTHON" ]; then
  "$PYTHON" -c "$recent_enough" 2>/dev/null \
    || { echo "bootstrap: PYTHON=$PYTHON is not Python 3.11 or newer" >&2; exit 1; }
else
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "$recent_enough" 2>/dev/null; then
      PYTHON=$candidate; break
    fi
  done
  [ -n "$PYTHON" ] || { echo "bootstrap: Python 3.11 or newer is needed (python3.11 or python3 on PATH, or PYTHON=/path/to/python)" >&2; exit 1; }
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating $VENV with $PYTHON"
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.requirements.sha256"
want=$(cat requirements/*.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "bootstrap: installing pinned requirements into $VENV"
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r requirements/dev.txt
  echo "$want" > "$stamp"
fi
