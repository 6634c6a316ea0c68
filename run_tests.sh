#!/usr/bin/env bash
# Sets up .venv (once) and runs the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
VENV="${ELECTRA_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements-dev.txt
export TF_CPP_MIN_LOG_LEVEL=2 TF_USE_LEGACY_KERAS=1
exec "$VENV/bin/python" -m pytest -q "$@"
