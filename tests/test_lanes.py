"""The two test lanes: the golden lane reads only this repository; the extended one is optional."""

import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest
from helpers.lanes import SharedReadGuard
from helpers.paths import REPO_ROOT, TESTS

# The only files that may name the shared folder: where the lanes are defined.
LANE_FILES = {"conftest.py", "helpers/paths.py", "helpers/lanes.py", "test_lanes.py"}
SHARED_NAMES = {"SHARED", "REFERENCE", "DATA", "shared_data_dir"}


def test_the_guard_records_reads_under_the_shared_folder_only_while_active(tmp_path):
  shared = tmp_path / "shared"
  (shared / "reference").mkdir(parents=True)
  inside, outside = shared / "reference" / "x.txt", tmp_path / "y.txt"
  inside.write_text("x")
  outside.write_text("y")
  guard = SharedReadGuard(shared)
  sys.addaudithook(guard)
  guard.active = True
  inside.read_text()
  outside.read_text()
  os.listdir(shared)
  assert guard.take() == [str(inside), str(shared)]
  guard.active = False
  inside.read_text()
  assert guard.take() == []


def _uses_outside_extended(path: pathlib.Path) -> list[str]:
  """Names of the shared folder used in ``path`` outside functions marked ``extended``."""
  tree = ast.parse(path.read_text())
  extended = set()
  for node in ast.walk(tree):
    # tests marked extended; fixtures built on shared_data_dir (the guard checks their users)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        "extended" in ast.unparse(d) or "fixture" in ast.unparse(d)
        for d in node.decorator_list):
      extended.update(id(n) for n in ast.walk(node))
  found = []
  for node in ast.walk(tree):
    if id(node) in extended:
      continue
    if isinstance(node, ast.Name) and node.id in SHARED_NAMES:
      found.append(f"{path.relative_to(TESTS)}:{node.lineno} {node.id}")
    elif isinstance(node, ast.arg) and node.arg in SHARED_NAMES:
      found.append(f"{path.relative_to(TESTS)}:{node.lineno} {node.arg}")
    elif isinstance(node, ast.Constant) and node.value == "ELECTRA_SHARED":
      found.append(f"{path.relative_to(TESTS)}:{node.lineno} ELECTRA_SHARED")
  return found


def test_no_test_names_the_shared_folder_outside_the_extended_lane():
  found = []
  for path in sorted(TESTS.rglob("*.py")):
    if str(path.relative_to(TESTS)) not in LANE_FILES:
      found += _uses_outside_extended(path)
  assert not found, f"the shared folder named outside the extended lane: {found}"


def _collect(shared: pathlib.Path, *args: str) -> tuple[list[str], int, int, str]:
  """``pytest --collect-only -q`` with the shared folder at ``shared``: the ids listed, the
  counts of pytest's ``N/M tests collected (K deselected)`` line (N, M) and the last line."""
  env = {**os.environ, "ELECTRA_SHARED": str(shared)}
  out = subprocess.run(
      [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
      cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stdout + out.stderr
  lines = out.stdout.splitlines()
  ids = [line for line in lines if "::" in line]
  counts = [re.match(r"(\d+)(?:/(\d+))? tests? collected", line) for line in lines]
  found = [m for m in counts if m]
  assert found, out.stdout[-500:]
  run, collected = int(found[-1].group(1)), int(found[-1].group(2) or found[-1].group(1))
  return ids, run, collected, lines[-1]


def test_without_the_shared_folder_only_the_golden_lane_is_collected(tmp_path):
  """...and the extended tests count as deselected: collected = listed + deselected."""
  ids, run, collected, last = _collect(
      tmp_path / "no_shared", "tests/modeling/test_encoder.py",
      "tests/finetuning/test_finetuning_data.py")
  assert ids and all("[extended" not in i and "-extended" not in i for i in ids), ids
  assert any("golden" in i for i in ids)
  extended_tests = (TESTS / "finetuning" / "test_finetuning_data.py").read_text().count(
      "@pytest.mark.extended")
  assert run == len(ids) and collected - run >= extended_tests > 0, (run, collected, len(ids))
  assert "extended parity lane did not run" in last, last


@pytest.mark.slow  # two collections in subprocesses
def test_golden_and_extended_markers_split_the_run_and_counts_agree(tmp_path):
  """With a shared folder, -m golden and -m extended select disjoint halves of what runs; each
  extended case has its golden twin; what neither selects is exactly the deselected extended
  case of a golden-lane-only folder (electra_untied_2l), so the counts add up."""
  shared = tmp_path / "shared"
  (shared / "reference").mkdir(parents=True)
  files = ("tests/modeling/test_encoder.py", "tests/pretraining/test_objectives.py")
  golden, run_g, collected, _ = _collect(shared, *files, "-m", "golden")
  extended, run_e, collected_e, _ = _collect(shared, *files, "-m", "extended")
  assert (run_g, run_e, collected_e) == (len(golden), len(extended), collected)
  assert extended and all("extended" in i for i in extended), extended
  assert not [i for i in golden if "extended" in i]
  assert {i.replace("extended", "golden") for i in extended} <= set(golden)
  golden_only = [i for i in golden if "electra_untied_2l-golden" in i]
  assert golden_only and collected - run_g - run_e == len(golden_only), (
      collected, run_g, run_e, len(golden_only))
