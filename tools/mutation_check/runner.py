"""Applies one mutant to a scratch copy of the repository's tracked files and runs its tests."""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.mutation_check.mutants import Mutant

ROOT = Path(__file__).resolve().parents[2]
# pytest exit codes: 0 all passed, 1 some failed, 2 interrupted / collection error, 5 none ran.
CAUGHT, SURVIVED = 1, 0


def tracked_files(root: Path = ROOT) -> list[str]:
  """The repository's tracked files (``git ls-files``), relative to ``root``."""
  out = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True)
  return [name for name in out.stdout.decode().split("\0") if name]


def find_target(mutant: Mutant, root: Path = ROOT) -> Path | None:
  """The first of the mutant's candidate files (globs in order) whose text contains ``old``."""
  for pattern in mutant.files:
    for name in sorted(glob.glob(pattern, root_dir=root, recursive=True)):
      path = root / name
      if path.is_file() and mutant.old in path.read_text(encoding="utf-8"):
        return path
  return None


def copy_tree(dest: Path, root: Path = ROOT) -> None:
  """Copies the tracked files of ``root`` (those present) into ``dest``; a tracked symlink
  (``configs`` -> ``electra_tf/configs``) stays a symlink."""
  for name in tracked_files(root):
    source = root / name
    if source.is_symlink():
      (dest / name).parent.mkdir(parents=True, exist_ok=True)
      os.symlink(os.readlink(source), dest / name)
    elif source.is_file():
      (dest / name).parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(source, dest / name)


def apply(mutant: Mutant, tree: Path) -> str | None:
  """Replaces the mutant's snippet in ``tree``; None, or a one-line reason it cannot."""
  target = find_target(mutant, tree)
  if target is None:
    return "its code was not found"
  text = target.read_text(encoding="utf-8")
  count = text.count(mutant.old)
  if count != 1:
    return f"its code occurs {count} times in {target.relative_to(tree)}"
  target.write_text(text.replace(mutant.old, mutant.new), encoding="utf-8")
  return None


def run_pytest(tree: Path, args: tuple[str, ...] | list[str]) -> tuple[int, str]:
  """Runs pytest on ``args`` in ``tree``, public lane only; (exit code, summary line)."""
  env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "PYTHONPATH": str(tree),
         "ELECTRA_SHARED": "/nonexistent", "TF_CPP_MIN_LOG_LEVEL": "2"}
  command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-x", "-q", *args]
  proc = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
  return proc.returncode, summary(proc.stdout + proc.stderr)


def summary(output: str) -> str:
  """pytest's counts and first failed test ("1 failed, 3 passed (test_x.py::test_y)"), or the
  first error line of ``output``."""
  failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)
  for line in reversed(output.splitlines()):
    found = re.findall(r"\d+ (?:failed|passed|errors?|skipped|deselected)", line)
    if found and " in " in line:
      first = f" ({Path(failed[0]).name})" if failed else ""
      return ", ".join(found) + first
  errors = [line for line in output.splitlines() if line.startswith(("E ", "ERROR"))]
  return (errors or output.strip().splitlines()[-1:] or ["no output"])[0].strip()


def run_mutant(mutant: Mutant, keep: bool = False, root: Path = ROOT) -> tuple[str, str]:
  """(verdict, detail): ``caught``, ``SURVIVED``, ``error`` (collection / import) or ``missing``
  (its code was not found), for ``mutant`` applied to a scratch copy of ``root``."""
  tree = Path(tempfile.mkdtemp(prefix=f"mutation_check_{mutant.name}_"))  # under $TMPDIR
  try:
    copy_tree(tree, root)
    problem = apply(mutant, tree)
    if problem:
      return "missing", problem
    code, detail = run_pytest(tree, mutant.tests)
    files = " ".join(a for a in mutant.tests if a.endswith(".py"))
    if keep:
      detail += f" (kept in {tree})"
    if code == CAUGHT:
      return "caught", f"{files}: {detail}"
    if code == SURVIVED:
      return "SURVIVED", f"{files}: {detail}"
    return "error", f"{files}: pytest exit {code}: {detail}"
  finally:
    if not keep:
      shutil.rmtree(tree, ignore_errors=True)


def union_args(mutants: list[Mutant]) -> list[str]:
  """One pytest selection covering every mutant's tests: the files and the ``-k`` expressions
  joined by ``or`` (a file without ``-k`` adds its own name, which selects all its tests)."""
  files: list[str] = []
  exprs: list[str] = []
  for mutant in mutants:
    args = list(mutant.tests)
    expr = args[args.index("-k") + 1] if "-k" in args else None
    names = [a for a in args if a.endswith(".py")]
    for name in names:
      if name not in files:
        files.append(name)
    for part in ([f"({expr})"] if expr else [Path(n).stem for n in names]):
      if part not in exprs:
        exprs.append(part)
  return [*files, "-k", " or ".join(exprs)]
