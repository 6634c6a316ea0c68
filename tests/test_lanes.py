"""The two test lanes: the golden lane reads only this repository; the extended one is optional."""

import ast
import os
import pathlib
import subprocess
import sys

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


def test_without_the_shared_folder_only_the_golden_lane_is_collected(tmp_path):
  env = {**os.environ, "ELECTRA_SHARED": str(tmp_path / "no_shared")}
  out = subprocess.run(
      [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
       "tests/modeling/test_encoder.py", "tests/test_optimization.py"],
      cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stdout + out.stderr
  ids = [line for line in out.stdout.splitlines() if "::" in line]
  assert ids and all("[extended" not in i and "-extended" not in i for i in ids), ids
  assert any("golden" in i for i in ids)
  assert "extended parity lane did not run" in out.stdout.splitlines()[-1], out.stdout[-500:]
