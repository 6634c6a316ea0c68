"""The quiet console: no TensorFlow C++ / absl log lines unless --verbose, one-line errors, a
summary block. The pipeline's entry points (corpus, vocab and TFRecord builders, pre-training,
its eval run, fine-tuning, learning curves) are checked on a real demo run in test_demo.py;
here: convert, the OpenWebText builder, --verbose and errors, as real subprocesses."""

import io
import json
import logging
import os
import subprocess
import sys
import tarfile

import pytest
from helpers import procs
from helpers.paths import REPO_ROOT

from electra_tf import console

# The test session sets TF_CPP_MIN_LOG_LEVEL (conftest); a program must be quiet without it.
ENV = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
ENV["CUDA_VISIBLE_DEVICES"] = "-1"
ENV["PYTHONPATH"] = str(REPO_ROOT)


def _run(*args, timeout=300):
  proc = subprocess.run([sys.executable, *map(str, args)], cwd=REPO_ROOT, env=ENV,
                        capture_output=True, text=True, timeout=timeout,
                        preexec_fn=procs.sigint_as_a_terminal)
  return proc, (proc.stdout + proc.stderr).splitlines()


def _log_lines(lines):
  return [line for line in lines if console.LOG_LINE.match(line)]


@pytest.mark.parametrize("argv, verbose", [
    (["--verbose"], True), (["--verbose=true"], True), (["--verbose=false"], False),
    (["--noverbose"], False), (["-v", "1"], True), (["-v", "0"], False), (["-v=2"], True),
    (["--verbosity", "1"], True), (["--verbosity=0"], False), (["-v"], True),
    (["-v", "--model_dir", "x"], True), (["--model_dir", "v"], False), ([], False)])
def test_verbose_requested(argv, verbose):
  assert console.verbose_requested(["prog", *argv]) is verbose


def test_log_line_pattern_matches_library_lines_only():
  assert console.LOG_LINE.match("2026-11-23 14:08:32.497759: E external/local_xla/xla/stream_"
                                "executor/cuda/cuda_platform.cc:51] failed call to cuInit")
  assert console.LOG_LINE.match("I1123 14:08:54.584432 140120275827584 build_pretraining_"
                                "dataset.py:381] Job 0: 3/3 files")
  assert not console.LOG_LINE.match("Job 0: 3/3 files (100.0%), 478 examples written")
  assert not console.LOG_LINE.match("4/4 = 100.0%, SPS: 8.86, ELAP: 23, ETA: 0")


def test_own_absl_records_become_plain_lines_and_others_are_hidden():
  def record(path, level):
    return logging.LogRecord("absl", level, path, 1, "Job %d: done", (0,), None)

  own = str(REPO_ROOT / "data_prep" / "build_pretraining_dataset.py")
  lib = str(REPO_ROOT / ".venv" / "lib" / "site-packages" / "tf_keras" / "x.py")
  formatter = console._PlainFormatter()
  assert formatter.format(record(own, logging.INFO)) == "Job 0: done"
  assert formatter.format(record(own, logging.WARNING)) == "warning: Job 0: done"
  assert formatter.format(record(own, logging.ERROR)) == "error: Job 0: done"
  assert console._own_or_error(record(own, logging.INFO))
  assert console._own_or_error(record(str(REPO_ROOT / "run_pretraining.py"), logging.INFO))
  assert not console._own_or_error(record(lib, logging.WARNING))
  assert console._own_or_error(record(lib, logging.ERROR))


def test_each_start_up_step_does_only_what_its_name_says():
  # A fresh interpreter: the three steps change process-wide state (SIGINT, environment).
  code = (
      "import os, signal\n"
      "from electra_tf import console, early_interrupt\n"
      "os.environ.pop('TF_USE_LEGACY_KERAS', None)\n"
      "default = signal.getsignal(signal.SIGINT)\n"
      "def state():\n"
      "  return (signal.getsignal(signal.SIGINT) is default,\n"
      "          os.environ.get('TF_USE_LEGACY_KERAS'), os.environ.get('TF_CPP_MIN_LOG_LEVEL'))\n"
      "print(state())\n"
      "console.quiet_logs(['prog'])\n"
      "print(state())\n"
      "console.use_tf_keras()\n"
      "print(state())\n"
      "early_interrupt.install()\n"
      "print(state())\n"
      "os.environ['TF_USE_LEGACY_KERAS'] = '0'\n"
      "console.use_tf_keras()\n"
      "print(state())\n")
  proc, lines = _run("-c", code, timeout=60)
  assert proc.returncode == 0, proc.stderr
  assert lines == ["(True, None, None)", "(True, None, '3')", "(True, '1', '3')",
                   "(False, '1', '3')", "(False, '0', '3')"]


def test_summary_block_and_one_line_errors(capsys):
  console.summary("Summary: model m", ["  a = 1"])
  assert capsys.readouterr().out == f"{console.RULE}\nSummary: model m\n  a = 1\n{console.RULE}\n"
  with pytest.raises(SystemExit) as exit_info, console.one_line_errors("prog"):
    raise ValueError("bad row 3 in x.csv\nmore detail")
  assert exit_info.value.code == "prog: error: bad row 3 in x.csv"
  with pytest.raises(SystemExit) as exit_info, console.one_line_errors("prog", verbose=True):
    raise KeyError("k")
  assert exit_info.value.code == "prog: error: KeyError: 'k'"
  assert "Traceback" in capsys.readouterr().err


def _tiny_openwebtext(root):
  """openwebtext/urlsf_subset00-1_data.xz: an xz tar of two .txt documents."""
  subsets = root / "openwebtext"
  subsets.mkdir(parents=True)
  with tarfile.open(subsets / "urlsf_subset00-1_data.xz", "w:xz") as tar:
    for i, text in enumerate(["The cat sat on the mat. It was warm.\nThe dog slept.\n",
                              "A second document about the river and the hills.\n"]):
      data = text.encode()
      info = tarfile.TarInfo(f"doc_{i}.txt")
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))


@pytest.mark.slow
def test_convert_and_openwebtext_builder_are_quiet_and_verbose_brings_logs_back(
    reference_dir, vocab_file, tmp_path):
  folder = reference_dir / "electra_small_2l"
  proc, lines = _run("-m", "electra_tf.convert", "--checkpoint", folder / "model.ckpt",
                     "--hparams", folder / "hparams.json", "--output_dir", tmp_path / "out")
  assert proc.returncode == 0, "\n".join(lines[-20:])
  assert _log_lines(lines) == []
  summary = proc.stdout.splitlines()
  assert summary[-1] == console.RULE and any(line.startswith("  encoder/") for line in summary)

  _tiny_openwebtext(tmp_path / "owt")
  args = ["data_prep/build_openwebtext_pretraining_dataset.py", "--data_dir", tmp_path / "owt",
          "--vocab_file", vocab_file, "--num_out_files", "1", "--seed", "1",
          "--max_seq_length", "32"]
  proc, lines = _run(*args)
  assert proc.returncode == 0, "\n".join(lines[-20:])
  assert _log_lines(lines) == []
  assert proc.stderr.splitlines()[-1].startswith("wrote "), lines  # the builder's one summary

  proc, lines = _run(*args, "--verbose")
  assert proc.returncode == 0, "\n".join(lines[-20:])
  assert any(" build_pretraining_dataset.py:" in line for line in _log_lines(lines)), lines
  assert any("tensorflow/" in line or "xla/" in line for line in _log_lines(lines)), lines


@pytest.mark.slow
def test_errors_are_one_line_unless_verbose(tmp_path):
  hparams = json.dumps({"num_train_step": 5})
  proc, _ = _run("run_pretraining.py", "--data_dir", tmp_path, "--model_name", "m",
                 "--hparams", hparams)
  assert proc.returncode == 1 and proc.stdout == ""
  assert proc.stderr.splitlines() == [
      "run_pretraining.py: error: Unknown hparam 'num_train_step' for PretrainingConfig "
      "(did you mean 'num_train_steps'?)"]
  proc, _ = _run("run_finetuning.py", "--data_dir", tmp_path, "--model_name", "m", "--num_gpu", "1")
  assert proc.returncode == 1
  assert proc.stderr.splitlines() == [
      "run_finetuning.py: error: Unknown command line flag 'num_gpu'. Did you mean: num_gpus ?"]
  proc, _ = _run("data_prep/learn_vocab.py", "--corpus_dir", tmp_path / "missing",
                 "--vocab_file", tmp_path / "v.txt", "--verbose")
  assert proc.returncode == 1
  err = proc.stderr.splitlines()
  assert "Traceback (most recent call last):" in err
  assert err[-1] == f"learn_vocab.py: error: corpus directory not found: {tmp_path / 'missing'}"


def test_native_log_lines_are_hidden_around_a_block(capfd, monkeypatch):
  """What C++ writes straight to fds 1 and 2 (no log level silences it): log lines hidden,
  a fatal line passed at once, other lines held until the block ends, dropped if it raises."""
  monkeypatch.setattr(console, "_verbose", False)
  noise = [(2, b"WARNING: All log messages before absl::InitializeLog() is called are written "
               b"to STDERR\n"),
           (2, b"W0000 00:00:1795688891.045274   20085 tf_tfl_flatbuffer_helpers.cc:364] "
               b"Ignored output_format.\n"),
           (1, b"fully_quantize: 0, inference_type: 6, input_inference_type: FLOAT32, "
               b"output_inference_type: FLOAT32\n"),
           (2, b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n")]
  with console.native_logs_hidden():
    for fd, line in noise:
      os.write(fd, line)
    os.write(2, b"loc(fused): error: 'tf.AsString' op is neither a custom op nor a flex op\n")
    os.write(2, b"F0000 00:00:1795688891.1 20085 x.cc:1] Check failed: a == b\n")
    print("own line", flush=True)
  out, err = capfd.readouterr()
  assert out == "own line\n"
  assert err == ("F0000 00:00:1795688891.1 20085 x.cc:1] Check failed: a == b\n"
                 "loc(fused): error: 'tf.AsString' op is neither a custom op nor a flex op\n")
  assert all(console.LOG_LINE.match(line.decode()) for _, line in noise)
  with pytest.raises(ValueError), console.native_logs_hidden():
    os.write(2, b"error: failed while converting: 'main'\n")
    raise ValueError("conversion failed (op tf.AsString)")
  assert capfd.readouterr() == ("", "")
  monkeypatch.setattr(console, "_verbose", True)  # --verbose: everything, as written
  with console.native_logs_hidden():
    os.write(2, noise[1][1])
  assert capfd.readouterr().err == noise[1][1].decode()


@pytest.mark.slow
def test_venv_command_runs_as_printed(tmp_path, monkeypatch):
  """The summaries' TensorBoard command works as printed, from the folder it was printed in,
  without the venv on PATH: the venv's own script, else this Python's ``-m`` form."""
  env = {**ENV, "PATH": "/usr/bin:/bin"}
  for folder, script in ((tmp_path, "tensorboard"), (REPO_ROOT, "no-such-script")):
    monkeypatch.chdir(folder)
    command = console.venv_command(script, "tensorboard.main")
    if script == "tensorboard":
      assert command == os.path.join(os.path.dirname(sys.executable), "tensorboard")
    else:
      assert command.endswith(" -m tensorboard.main")
    proc = subprocess.run(["bash", "-c", f"{command} --version_tb"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip(), (command, proc.stderr[-2000:])


@pytest.mark.parametrize("error", [
    KeyboardInterrupt(),
    RuntimeError("pybind11::error_already_set: MISMATCH of original and normalized active "
                 "exception types: ORIGINAL NotFoundError REPLACED BY KeyboardInterrupt: "
                 "<EMPTY MESSAGE>")])
def test_a_ctrl_c_is_one_line_and_130_even_inside_a_native_error(capsys, error):
  """A second Ctrl-C that lands while pybind11 translates a C++ error comes back as a
  RuntimeError naming the KeyboardInterrupt: still the interrupt's line and status."""
  with pytest.raises(SystemExit) as exit_info, console.one_line_errors("prog"):
    raise error
  assert exit_info.value.code == 130 and capsys.readouterr().err == "prog: interrupted\n"

