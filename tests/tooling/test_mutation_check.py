"""The mutation check (``python -m tools.mutation_check``): its table targets real code, a mutant
run ends in the right verdict, and a red baseline stops the run."""

import ast
import subprocess
import tempfile

import pytest

from tools.mutation_check import __main__ as command
from tools.mutation_check import runner
from tools.mutation_check.mutants import MUTANTS, Mutant


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_snippet_occurs_once_and_mutant_parses(mutant):
  """Each snippet is in exactly one place of its target, and the mutated module still parses
  (a mutant is a wrong computation, not a syntax error)."""
  target = runner.find_target(mutant)
  assert target is not None, f"{mutant.name}: its code was not found in {mutant.files}"
  text = target.read_text(encoding="utf-8")
  assert text.count(mutant.old) == 1
  assert mutant.new != mutant.old
  ast.parse(text.replace(mutant.old, mutant.new))
  files = [arg for arg in mutant.tests if arg.endswith(".py")]
  assert files and all((runner.ROOT / name).is_file() for name in files)


def test_table_is_large_and_names_are_unique():
  assert len(MUTANTS) >= 24
  assert len({m.name for m in MUTANTS}) == len(MUTANTS)


@pytest.fixture
def tiny_repo(tmp_path):
  """A git repository with a function ``add`` and its passing test."""
  repo = tmp_path / "repo"
  (repo / "tests").mkdir(parents=True)
  (repo / "calc.py").write_text("def add(a, b):\n  return a + b\n")
  (repo / "tests" / "test_calc.py").write_text(
      "from calc import add\n\ndef test_add():\n  assert add(2, 3) == 5\n")
  subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
  subprocess.run(["git", "add", "."], cwd=repo, check=True)
  return repo


def _mutant(name, old, new):
  return Mutant(name, "test", ("lib/*.py", "calc.py"), old, new, ("tests/test_calc.py",))


def test_verdicts_on_a_tiny_repository(tiny_repo, tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # scratch copies go there
  table = [_mutant("minus", "a + b", "a - b"), _mutant("commuted", "a + b", "b + a"),
           _mutant("moved", "a * b", "a / b")]
  assert runner.run_mutant(table[0], root=tiny_repo)[0] == "caught"
  assert command.main([], table, tiny_repo) == 1
  lines = capsys.readouterr().out.splitlines()
  assert lines[0].startswith("baseline green: 1 passed")
  assert lines[1].split()[:2] == ["caught", "minus"] and "1 failed" in lines[1]
  assert lines[2].split()[:2] == ["SURVIVED", "commuted"]
  assert lines[3] == "mutant moved: its code was not found"
  assert lines[4] == "mutants: 1/3 caught (public lane)"
  assert (tiny_repo / "calc.py").read_text() == "def add(a, b):\n  return a + b\n"
  assert not list(tmp_path.glob("mutation_check_*"))  # scratch copies removed


def test_red_baseline_stops_the_run(tiny_repo, tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # scratch copies go there
  (tiny_repo / "calc.py").write_text("def add(a, b):\n  return a * b\n")
  assert command.main(["--only", "minus"], [_mutant("minus", "a * b", "a - b")], tiny_repo) == 2
  out = capsys.readouterr().out.splitlines()
  assert len(out) == 1 and out[0].startswith("mutation_check: the unmutated baseline is not green")
  assert "1 failed" in out[0]


def test_scratch_copy_keeps_tracked_symlinks(tiny_repo, tmp_path):
  """A tracked symlink to a folder (the repository's ``configs``) is in the copy, as a link."""
  (tiny_repo / "lib" / "presets").mkdir(parents=True)
  (tiny_repo / "lib" / "presets" / "small.json").write_text("{}")
  (tiny_repo / "presets").symlink_to("lib/presets")
  subprocess.run(["git", "add", "."], cwd=tiny_repo, check=True)
  runner.copy_tree(tmp_path / "copy", tiny_repo)
  assert (tmp_path / "copy" / "presets").is_symlink()
  assert (tmp_path / "copy" / "presets" / "small.json").read_text() == "{}"


@pytest.mark.slow
def test_tokenizer_mutant_is_caught_in_the_repository(tmp_path, monkeypatch):
  """End to end on this repository: BasicTokenizer without lower-casing fails the official
  tokenizer goldens."""
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # scratch copies go there
  mutant = next(m for m in MUTANTS if m.name == "tok_no_lowercase")
  verdict, detail = runner.run_mutant(mutant)
  assert verdict == "caught", detail
