"""Small modules with one job: every Python module of the package, ``benchmarks/`` and
``tools/`` stays under its line limit (400 lines; 350 under ``electra_tf/training/``), but for
the few listed below with the reason they are longer. Counts the files' lines; nothing is
imported."""

import pathlib

from helpers.paths import REPO_ROOT

ROOT = REPO_ROOT
FOLDERS = ("electra_tf", "benchmarks", "tools")
LIMIT = 400
# A folder's own limit, by the longest matching prefix.
FOLDER_LIMITS = {"electra_tf/training/": 350}
# Modules allowed over their limit, each with the reason.
EXCEPTIONS: dict[str, str] = {}


def limit_of(relative: str) -> int:
  """The line limit of a module given by its path relative to the repository root."""
  prefixes = [p for p in FOLDER_LIMITS if relative.startswith(p)]
  return FOLDER_LIMITS[max(prefixes, key=len)] if prefixes else LIMIT


def oversized(root: pathlib.Path) -> dict[str, tuple[int, int]]:
  """{module path: (lines, limit)} for every module of ``FOLDERS`` under ``root`` at or over its
  limit."""
  found = {}
  for folder in FOLDERS:
    for path in sorted((root / folder).rglob("*.py")):
      relative = path.relative_to(root).as_posix()
      lines = len(path.read_text().splitlines())
      if lines >= limit_of(relative):
        found[relative] = (lines, limit_of(relative))
  return found


def test_modules_stay_under_their_line_limit():
  over = {path: size for path, size in oversized(ROOT).items() if path not in EXCEPTIONS}
  assert not over, "; ".join(f"{path} has {lines} lines (limit {limit}): split it by job"
                             for path, (lines, limit) in over.items())


def test_every_exception_is_still_needed():
  """An exception is dropped once its module is back under the limit (or gone)."""
  stale = sorted(set(EXCEPTIONS) - set(oversized(ROOT)))
  assert not stale, f"no longer over the limit, remove from EXCEPTIONS: {stale}"


def test_a_long_module_is_found(tmp_path):
  for folder in FOLDERS:
    (tmp_path / folder).mkdir()
  (tmp_path / "electra_tf" / "training").mkdir()
  (tmp_path / "electra_tf" / "short.py").write_text("x = 1\n" * 399)
  (tmp_path / "electra_tf" / "long.py").write_text("x = 1\n" * 400)
  (tmp_path / "electra_tf" / "training" / "loop.py").write_text("x = 1\n" * 350)
  (tmp_path / "tools" / "tool.py").write_text("x = 1\n" * 401)
  assert oversized(tmp_path) == {"electra_tf/long.py": (400, 400),
                                 "electra_tf/training/loop.py": (350, 350),
                                 "tools/tool.py": (401, 400)}
