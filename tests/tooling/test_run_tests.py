"""run_tests.sh, the README's test command: the fast lane (-m "not slow") by default, everything
with --all, a -m of the user's own instead of the default; .ci/run calls it with --all. Runs the
script for real with a stand-in venv whose python records the arguments pytest would get."""

import os
import shlex
import subprocess

import pytest
from helpers.paths import REPO_ROOT

RECORDER = """#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then exit 0; fi
printf '%s\\n' "$@" > "$ARGS_OUT"
"""


@pytest.fixture
def pytest_args(tmp_path):
  """Runs run_tests.sh with its arguments; returns the arguments it passed to ``python``."""
  venv = tmp_path / "venv"
  (venv / "bin").mkdir(parents=True)
  python = venv / "bin" / "python"
  python.write_text(RECORDER)
  python.chmod(0o755)
  out = tmp_path / "args.txt"

  def run(*args, workers="0"):
    env = {**os.environ, "ELECTRA_VENV": str(venv), "ARGS_OUT": str(out),
           "ELECTRA_TEST_WORKERS": workers}
    proc = subprocess.run(["bash", str(REPO_ROOT / "run_tests.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out.read_text().splitlines()

  return run


def test_default_is_the_fast_lane(pytest_args):
  args = pytest_args()
  assert args[:2] == ["-m", "pytest"] and "-m" in args[2:]
  assert args[args.index("-m", 2) + 1] == "not slow"


def test_all_runs_every_test_and_passes_the_rest_on(pytest_args):
  args = pytest_args("--all", "tests/modeling", "-k", "golden", workers="2")
  assert "not slow" not in args and "--all" not in args
  assert args[-3:] == ["tests/modeling", "-k", "golden"]
  assert args[args.index("-n") + 1] == "2"


def test_a_marker_of_ones_own_replaces_the_default(pytest_args):
  args = pytest_args("-m", "golden")
  # pytest keeps the last -m: the user's comes after the default
  marks = [args[i + 1] for i, a in enumerate(args[2:], start=2) if a == "-m"]
  assert marks[-1] == "golden"


def test_ci_runs_every_test():
  commands = [shlex.split(line) for line in (REPO_ROOT / ".ci" / "run").read_text().splitlines()
              if line.strip().startswith("bash run_tests.sh")]
  assert commands == [["bash", "run_tests.sh", "--all"]]
