"""The built wheel does the whole data job: ``pip wheel`` of the project, installed into a fresh
venv (TensorFlow & co. seen through a .pth file, nothing downloaded, no PYTHONPATH), builds
pre-training TFRecords with the installed ``electra-build-pretraining-data`` command, the same
bytes as the repository's builder, and ``--hparams electra_small`` finds the shipped preset."""

import os
import shutil
import subprocess
import sys
import sysconfig

import pytest
from helpers.paths import REPO_ROOT

from data_prep import build_pretraining_dataset as bpd

SOURCES = ("pyproject.toml", "requirements.txt", "requirements-device.txt",
           "requirements-data.txt", "run_pretraining.py", "run_finetuning.py")


def _outside_env(home) -> dict[str, str]:
  drop = ("PYTHONPATH", "TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL")
  env = {k: v for k, v in os.environ.items() if k not in drop}
  env["HOME"] = str(home)
  return env


@pytest.mark.slow  # the wheel build and a venv
def test_installed_wheel_builds_data_and_finds_presets(data_dir, vocab_file, tmp_path):
  src = tmp_path / "src"
  src.mkdir()
  for name in SOURCES:
    shutil.copy(REPO_ROOT / name, src / name)
  shutil.copytree(REPO_ROOT / "electra_tf", src / "electra_tf",
                  ignore=shutil.ignore_patterns("__pycache__"))
  wheels = tmp_path / "wheels"
  proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                         "--no-build-isolation", "-w", wheels, src],
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  (wheel,) = wheels.glob("electra_tf-*.whl")

  venv = tmp_path / "venv"
  subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
  site = subprocess.run([venv / "bin/python", "-c", "import sysconfig; "
                         "print(sysconfig.get_paths()['purelib'])"],
                        check=True, text=True, capture_output=True).stdout.strip()
  with open(os.path.join(site, "zz_outer_packages.pth"), "w") as f:
    f.write(sysconfig.get_paths()["purelib"] + "\n")  # TensorFlow & co. of the test venv
  proc = subprocess.run([venv / "bin/python", "-m", "pip", "install", "-q", "--no-deps",
                         "--no-index", wheel], capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]

  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()

  def run(*args):
    return subprocess.run([str(a) for a in args], cwd=elsewhere, env=_outside_env(tmp_path),
                          text=True, capture_output=True, timeout=300)

  proc = run(venv / "bin/python", "-c", "import electra_tf.hparams_input as h; print(h.__file__); "
             "print(h.load_hparams('electra_small')['model_size'])")
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.splitlines() == [os.path.join(site, "electra_tf", "hparams_input.py"),
                                     "small"]

  corpus = tmp_path / "corpus"
  corpus.mkdir()
  for name in ("austen-emma.txt", "blake-poems.txt"):
    (corpus / name).write_bytes((data_dir / "gutenberg" / name).read_bytes()[:20000])
  args = ["--corpus_dir", corpus, "--vocab_file", vocab_file, "--max_seq_length", 64,
          "--num_out_files", 2, "--seed", 3]
  proc = run(venv / "bin/electra-build-pretraining-data", *args,
             "--output_dir", tmp_path / "installed")
  assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
  bpd.build(bpd.BuildArgs(corpus_dir=str(corpus), vocab_file=vocab_file,
                          output_dir=str(tmp_path / "repo"), max_seq_length=64,
                          num_out_files=2, seed=3))
  names = sorted(os.listdir(tmp_path / "installed"))
  assert names == ["pretrain_data.tfrecord-0-of-2", "pretrain_data.tfrecord-1-of-2"]
  for name in names:
    installed = (tmp_path / "installed" / name).read_bytes()
    assert len(installed) > 1000 and installed == (tmp_path / "repo" / name).read_bytes()
