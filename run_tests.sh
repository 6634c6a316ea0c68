#!/usr/bin/env bash
# Sets up .venv (once) and runs the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/venv.sh
exec "$VENV/bin/python" -m pytest -q "$@"
