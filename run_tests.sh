#!/usr/bin/env bash
# Sets up .venv (once) and runs the whole test suite; pytest lists its 20 slowest tests at the
# end. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/venv.sh
exec "$VENV/bin/python" -m pytest -q --durations=20 "$@"
