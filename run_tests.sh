#!/usr/bin/env bash
# Sets up .venv (once) and runs the fast lane: every test not marked slow (run_tests.sh --all:
# every test, as CI does), on ELECTRA_TEST_WORKERS pytest-xdist workers (default 2; 0 or 1: one
# process, in order); pytest lists its 20 slowest tests at the end. Other arguments go to pytest
# (a -m of yours replaces the default "not slow").
set -euo pipefail
cd "$(dirname "$0")"
workers="${ELECTRA_TEST_WORKERS:-2}"
if ! [[ "$workers" =~ ^[0-9]+$ ]]; then
  echo "run_tests.sh: ELECTRA_TEST_WORKERS must be a whole number of workers, got '$workers'" >&2
  exit 2
fi
lane=(-m "not slow")
args=()
for arg in "$@"; do
  if [ "$arg" = "--all" ]; then lane=(); else args+=("$arg"); fi
done
source scripts/venv.sh
parallel=()
if [ "$workers" -gt 1 ]; then
  # worksteal: an idle worker takes queued tests from the busy one, so the slow tests do not
  # all end up last on one worker.
  parallel=(-n "$workers" --dist worksteal)
fi
exec "$VENV/bin/python" -m pytest -q --durations=20 "${parallel[@]}" "${lane[@]}" "${args[@]}"
