"""The command list has one home, ``electra_tf.commands.COMMANDS``: pyproject.toml's
``[project.scripts]`` names exactly its entry functions, each runs its module as ``__main__``,
and the README lists each command with its ``python`` form. (tests/system/test_install.py runs the
installed commands.)"""

import re
import runpy

from helpers.paths import REPO_ROOT

from electra_tf import commands


def _pyproject_scripts() -> dict[str, str]:
  """``[project.scripts]``'s ``name = "value"`` lines (tomllib is Python 3.11+)."""
  text = (REPO_ROOT / "pyproject.toml").read_text()
  section = text.split("[project.scripts]\n", 1)[1].split("\n[", 1)[0]
  return dict(re.findall(r'^([\w-]+) = "([^"]+)"$', section, flags=re.M))


def test_pyproject_scripts_are_the_commands():
  scripts = _pyproject_scripts()
  assert scripts == {script: commands.entry_point(script) for script in commands.COMMANDS}


def test_each_entry_function_runs_its_module_as_main(monkeypatch):
  ran = []
  monkeypatch.setattr(runpy, "run_module", lambda module, **kw: ran.append((module, kw)))
  for script, module in commands.COMMANDS.items():
    name = commands.entry_point(script).partition(":")[2]
    getattr(commands, name)()
    assert ran.pop() == (module, {"run_name": "__main__", "alter_sys": True})


def test_readme_lists_each_command_with_its_python_form():
  readme = " ".join((REPO_ROOT / "README.md").read_text().split())
  listed = set(re.findall(r"`(electra-[a-z-]+)` \(= `([^`]+)`\)", readme))
  assert listed == {(script, commands.python_form(script)) for script in commands.COMMANDS}
