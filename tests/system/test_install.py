"""scripts/venv.sh installs electra_tf editable: a script outside the repository imports it, and
the console scripts of pyproject.toml run from any folder as their ``python`` forms do.

The venv is a throwaway one in a temp dir that sees this venv's packages through a .pth file,
so nothing is downloaded and the venv running the tests is left alone."""

import os
import subprocess
import sys
import sysconfig

import pytest
from helpers.paths import REPO_ROOT

from electra_tf import commands, console


def _outside_env() -> dict[str, str]:
  """A user's shell: no PYTHONPATH and none of the variables the test session sets."""
  drop = ("PYTHONPATH", "TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL")
  return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.mark.slow
def test_venv_script_installs_the_package_and_its_commands(tmp_path):
  venv = tmp_path / "venv"
  subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
  site = subprocess.run([venv / "bin/python", "-c", "import sysconfig; "
                         "print(sysconfig.get_paths()['purelib'])"],
                        check=True, text=True, capture_output=True).stdout.strip()
  with open(os.path.join(site, "zz_outer_packages.pth"), "w") as f:
    f.write(sysconfig.get_paths()["purelib"] + "\n")  # TensorFlow & co. of the test venv
  setup = subprocess.run(["bash", "-c", "source scripts/venv.sh"], cwd=REPO_ROOT, text=True,
                         env={**_outside_env(), "ELECTRA_VENV": str(venv)},
                         capture_output=True)
  assert setup.returncode == 0, setup.stderr[-3000:]

  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()

  def run(*args):
    return subprocess.run([str(a) for a in args], cwd=elsewhere, env=_outside_env(),
                          text=True, capture_output=True, timeout=300)

  proc = run(venv / "bin/python", "-c", "import electra_tf, run_finetuning; "
             "print(electra_tf.__file__)")
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.splitlines()[-1] == str(REPO_ROOT / "electra_tf" / "__init__.py")

  for name in commands.COMMANDS:
    assert (venv / "bin" / name).exists(), name
  proc = run(venv / "bin/electra-finetune", "--help")
  assert "--hparams" in proc.stdout and "--data_dir" in proc.stdout, proc.stderr[-3000:]
  lines = (proc.stdout + proc.stderr).splitlines()
  assert [line for line in lines if console.LOG_LINE.match(line)] == []
  script = run(venv / "bin/python", REPO_ROOT / "run_finetuning.py", "--help")
  assert (proc.returncode, proc.stdout, proc.stderr) == (
      script.returncode, script.stdout, script.stderr)

  # the same one-line error as `python -m electra_tf.convert`, from the command's name
  proc = run(venv / "bin/electra-convert", "--checkpoint", tmp_path / "missing",
             "--output_dir", tmp_path / "out")
  assert proc.returncode == 1 and proc.stdout == ""
  assert proc.stderr.splitlines() == [
      f"convert: error: checkpoint not found: {tmp_path / 'missing'} "
      f"(no {tmp_path / 'missing'}.index)"]
