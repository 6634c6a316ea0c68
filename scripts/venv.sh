# Sourced by run_demo.sh and run_tests.sh: creates .venv once, installs the pinned packages, and
# installs electra_tf itself editable (`import electra_tf` from any folder; the console scripts
# electra-pretrain, electra-finetune, electra-convert, electra-curves of pyproject.toml). The
# editable install is redone when this checkout's folder or pyproject.toml changes.
VENV="${ELECTRA_VENV:-.venv}"
PY="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements-dev.txt
_stamp="$VENV/.electra_tf-editable"
_want="$PWD $(cksum < pyproject.toml)"
if [ "$(cat "$_stamp" 2>/dev/null)" != "$_want" ]; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    --no-build-isolation -e .
  echo "$_want" > "$_stamp"
fi
export TF_USE_LEGACY_KERAS=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
