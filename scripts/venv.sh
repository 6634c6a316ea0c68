# Sourced by run_demo.sh and run_tests.sh: creates .venv once and installs the pinned packages.
VENV="${ELECTRA_VENV:-.venv}"
PY="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements-dev.txt
export TF_USE_LEGACY_KERAS=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
