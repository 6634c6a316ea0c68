"""tests/ mirrors electra_tf/ (tests/README.md, "Layout"): every library module has a test module
named after it or a row in the README's module table naming the test that covers it; test files
sit only in folders that mirror the package (or system/, tooling/); their names are unique; each
has a row under "What each file covers". Reads the files, imports nothing."""

from __future__ import annotations

import pathlib
import re

from helpers.paths import REPO_ROOT, TESTS

PACKAGE = REPO_ROOT / "electra_tf"
README = TESTS / "README.md"
NOT_TESTS = {"golden", "data", "helpers"}  # data and shared code, not test folders
EXTRA_FOLDERS = {"system", "tooling"}  # end-to-end runs; code outside the package
_ROW = re.compile(r"^\| `([^`]+)`[^|]* \| (.*) \|$", re.M)  # | `name` (note) | text |


def library_modules(package: pathlib.Path) -> list[pathlib.Path]:
  """Every module of ``package`` but ``__init__.py``, relative to it."""
  return sorted(p.relative_to(package) for p in package.rglob("*.py") if p.name != "__init__.py")


def find_test_files(tests: pathlib.Path) -> list[pathlib.Path]:
  """Every ``test_*.py`` under ``tests`` outside its data and helper folders, relative to it."""
  return sorted(p.relative_to(tests) for p in tests.rglob("test_*.py")
                if p.relative_to(tests).parts[0] not in NOT_TESTS)


def _section(text: str, title: str) -> str:
  """The README text from ``title`` to the next heading of the same or a higher level."""
  start = text.index(title) + len(title)
  level = len(title.split(" ")[0])
  end = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, start)
  return text[start:end.start() if end else len(text)]


def module_rows(readme: str) -> dict[str, str]:
  """The README's module table: ``electra_tf/...py`` -> its test module or reason."""
  return dict(_ROW.findall(_section(readme, "### Library modules and their tests")))


def missing_tests(package: pathlib.Path, tests: pathlib.Path, readme: str) -> list[str]:
  """One line per module with neither a test module named after it nor a row, per row naming
  no module, and per test file a row names that does not exist."""
  rows = module_rows(readme)
  problems = []
  for module in library_modules(package):
    key = f"{package.name}/{module}"
    named = pathlib.Path("tests") / module.parent / f"test_{module.stem}.py"
    if (tests.parent / named).exists():
      if key in rows and f"`{named}`" not in rows[key]:
        problems.append(f"{key}: its row does not name {named}")
    elif not rows.get(key, "").strip():
      problems.append(f"{key}: no {named} and no row in tests/README.md saying which test "
                      "covers it")
  modules = {f"{package.name}/{m}" for m in library_modules(package)}
  for key, cell in rows.items():
    if key not in modules:
      problems.append(f"tests/README.md names {key}, which is not a library module")
    for path in re.findall(r"`(tests/[^`]+\.py)`", cell):
      if not (tests.parent / path).exists():
        problems.append(f"tests/README.md: the row of {key} names {path}, which does not exist")
  return problems


def misplaced_tests(package: pathlib.Path, tests: pathlib.Path) -> list[str]:
  """Test files in a folder that mirrors no package folder (and is not system/ or tooling/)."""
  problems = []
  for path in find_test_files(tests):
    folder = path.parent
    if folder.parts and folder.parts[0] not in EXTRA_FOLDERS and not (package / folder).is_dir():
      problems.append(f"tests/{path}: tests/{folder} mirrors no folder of {package.name}/")
  return problems


def test_every_library_module_has_its_test_module_or_a_row():
  assert missing_tests(PACKAGE, TESTS, README.read_text()) == []


def test_test_files_sit_in_folders_that_mirror_the_package():
  assert misplaced_tests(PACKAGE, TESTS) == []


def test_test_file_names_are_unique():
  """pytest imports test files by their name (the folders are not packages)."""
  seen: dict[str, list[str]] = {}
  for path in find_test_files(TESTS):
    seen.setdefault(path.name, []).append(str(path))
  assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_every_test_file_has_a_row_saying_what_it_covers():
  section = _section(README.read_text(), "## What each file covers")
  listed = {m.group(1) for m in _ROW.finditer(section)}
  assert sorted(str(p) for p in find_test_files(TESTS) if str(p) not in listed) == []


def test_a_module_without_test_or_row_is_named(tmp_path):
  """The check itself, on a copy of the layout: a new module with neither is reported, with a
  row it passes, and a row naming a missing test file is reported."""
  package, tests = tmp_path / "electra_tf", tmp_path / "tests"
  (package / "modeling").mkdir(parents=True)
  (tests / "modeling").mkdir(parents=True)
  for name in ("__init__.py", "modeling/__init__.py", "modeling/encoder.py", "modeling/dummy.py"):
    (package / name).write_text("")
  (tests / "modeling" / "test_encoder.py").write_text("")
  table = "### Library modules and their tests\n\n| Module | Test |\n|---|---|\n"
  assert missing_tests(package, tests, table) == [
      "electra_tf/modeling/dummy.py: no tests/modeling/test_dummy.py and no row in "
      "tests/README.md saying which test covers it"]
  row = "| `electra_tf/modeling/dummy.py` | `tests/modeling/test_encoder.py`: with the encoder |\n"
  assert missing_tests(package, tests, table + row) == []
  gone = row.replace("test_encoder.py", "test_gone.py")
  assert missing_tests(package, tests, table + gone) == [
      "tests/README.md: the row of electra_tf/modeling/dummy.py names "
      "tests/modeling/test_gone.py, which does not exist"]
  (tests / "modelling").mkdir()
  (tests / "modelling" / "test_x.py").write_text("")
  assert misplaced_tests(package, tests) == [
      "tests/modelling/test_x.py: tests/modelling mirrors no folder of electra_tf/"]
