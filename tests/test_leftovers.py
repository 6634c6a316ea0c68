"""Leftovers and silence: killed writes leave nothing a rerun keeps, written files get the
umask's mode, a stale checkpoint temp folder goes at start, a BERT folder and a bad dev label
are named before any work. Real files, real SIGKILLed subprocesses.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import stat
import subprocess
import sys

import pytest
from helpers import toy_train
from helpers.paths import REPO_ROOT

from electra_tf import atomic_io, checkpoints, training
from electra_tf.config import FinetuningConfig, PretrainingConfig
from electra_tf.finetuning.trials import run_finetuning
from electra_tf.interop import hf_tokenizer
from electra_tf.interop import staged_output as staging
from electra_tf.reading.model_dir import write_model_files

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1", "PYTHONPATH": str(REPO_ROOT)}


@pytest.fixture(params=[0o022, 0o027, 0o002], ids=["umask022", "umask027", "umask002"])
def umask(request):
  """Runs the test under each umask (022 alone would let a hard-coded 0644 pass)."""
  old = os.umask(request.param)
  yield request.param
  os.umask(old)


def _mode(path: pathlib.Path) -> int:
  return stat.S_IMODE(path.stat().st_mode)


def test_written_files_get_the_umask_mode(tmp_path, vocab_file, umask):
  config = PretrainingConfig("m", str(tmp_path), model_size="small", vocab_file=vocab_file)
  write_model_files(str(tmp_path / "model"), config, vocab_file)
  hf_tokenizer.write_tokenizer_files(str(tmp_path / "hf"), vocab_file, do_lower_case=True)
  with atomic_io.temp_path(str(tmp_path / "weights.bin")) as tmp:
    pathlib.Path(tmp).write_bytes(b"\0" * 8)
  written = [p for p in tmp_path.rglob("*") if p.is_file()]
  assert len(written) == 6 and {_mode(p) for p in written} == {0o666 & ~umask}, \
      {str(p): oct(_mode(p)) for p in written}
  assert not [p for p in tmp_path.rglob(".*")]  # no temporary file left


def test_a_killed_export_leftover_goes_with_the_next_successful_one(tmp_path):
  out = tmp_path / "export"
  killed = subprocess.run(
      [sys.executable, "-c", "import os, signal\n"
       "from electra_tf.interop import staged_output as staging\n"
       f"with staging.staged_dir({str(out)!r}) as stage:\n"
       "  open(os.path.join(stage, 'big.bin'), 'wb').write(b'x' * 1000)\n"
       "  os.kill(os.getpid(), signal.SIGKILL)"],
      env=ENV, capture_output=True, text=True, timeout=120)
  assert killed.returncode == -signal.SIGKILL, killed.stderr
  leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".export.tmp-")]
  assert len(leftovers) == 1 and not out.exists()
  with staging.staged_dir(str(out)) as stage:
    pathlib.Path(stage, "model.txt").write_text("new\n")
  assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]
  assert (out / "model.txt").read_text() == "new\n"


def test_a_stale_checkpoint_temp_folder_goes_at_start_whatever_its_step(tmp_path):
  toy_train.run(training.get_strategy("one_device", num_gpus=0), str(tmp_path), 10,
                log_fn=lambda line: None)
  (tmp_path / "ckpt-60_temp").mkdir()  # a save killed in an earlier, longer run
  (tmp_path / "ckpt-60_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x")
  lines: list[str] = []
  toy_train.run(training.get_strategy("one_device", num_gpus=0), str(tmp_path), 10,
                log_fn=lines.append)
  assert f"Removed {tmp_path}/ckpt-60_temp, left by a save that was interrupted" in lines
  assert not (tmp_path / "ckpt-60_temp").exists()


def test_a_bert_folder_is_named_as_such(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 64}))
  with pytest.raises(ValueError, match=rf"^{tmp_path} is a Hugging Face BERT folder \(.*"
                     r"model_type 'bert'\); an ELECTRA model \(model_type 'electra'\) is "
                     r"expected$"):
    checkpoints.resolve_checkpoint(str(tmp_path))


def test_an_unknown_dev_label_fails_before_training(tmp_path, vocab_file, capsys):
  task = tmp_path / "finetuning_data" / "reviews"
  task.mkdir(parents=True)
  (task / "task.json").write_text(json.dumps({"type": "classification", "text_a": "text",
                                              "label": "label", "labels": ["neg", "pos"]}))
  (task / "train.csv").write_text("text,label\na fine film,pos\na dull film,neg\n")
  (task / "dev.csv").write_text("text,label\nan odd film,neutral\n")
  config = FinetuningConfig("m", str(tmp_path), task_names=["reviews"], init_checkpoint=None,
                            vocab_file=vocab_file, max_seq_length=32, train_batch_size=2,
                            model_hparam_overrides={"hidden_size": 64,
                                                    "num_hidden_layers": 2})
  with pytest.raises(ValueError, match=r"dev\.csv.*unknown label 'neutral'"):
    run_finetuning(config)
  assert "Start training" not in capsys.readouterr().out


_WRITE = ("import sys\nfrom electra_tf import atomic_io\n"
          "atomic_io.write_text(sys.argv[1], 'new')\n")


def test_a_writer_elsewhere_keeps_its_temp_file_until_it_is_older_than_the_lease(tmp_path):
  """Workers on shared storage write the same names: another host's temp file (another host
  key, modified within the lease) is not another process's to delete; an old one is."""
  target = tmp_path / "hparams.json"
  live = tmp_path / ".hparams.json.tmp-4242-0b0c0d0e-0a1b2c3d"  # pid 4242 means nothing here
  live.write_text("{")
  old = tmp_path / ".hparams.json.tmp-4243-0b0c0d0e-0a1b2c3e"
  old.write_text("{")
  os.utime(old, (os.path.getmtime(old) - 61,) * 2)  # untouched longer than the 60 s lease
  env = {**ENV, "ELECTRA_LOCK_LEASE_SECONDS": "60"}
  subprocess.run([sys.executable, "-c", _WRITE, str(target)], env=env, check=True, timeout=120)
  assert target.read_text() == "new"
  assert live.exists() and not old.exists()


def test_a_process_without_the_folders_lock_deletes_nothing_there(tmp_path):
  """Only the lock's holder (the chief) cleans a locked folder: a leftover of a dead writer of
  this host stays while another run holds the lock, and goes with the holder's next write."""
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True).stdout.strip()
  leftover = tmp_path / f".hparams.json.tmp-{dead}-{atomic_io._HOST}-0a1b2c3d"
  holder = subprocess.Popen([sys.executable, "-c", "import sys\n"
                             "from electra_tf import atomic_io, folder_lock\n"
                             "folder_lock.acquire(sys.argv[1]); print('got', flush=True)\n"
                             "sys.stdin.readline()\n"
                             "atomic_io.write_text(sys.argv[1] + '/hparams.json', 'chief')\n",
                             str(tmp_path)],
                            env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "got"
    leftover.write_text("{")  # after the holder's start-up cleaning (test_folder_lock.py)
    subprocess.run([sys.executable, "-c", _WRITE, str(tmp_path / "hparams.json")], env=ENV,
                   check=True, timeout=120)  # a worker's write
    assert leftover.exists()
    holder.communicate("go\n", timeout=120)  # the chief's write
  finally:
    if holder.poll() is None:
      holder.kill()
      holder.communicate()
  assert not leftover.exists() and (tmp_path / "hparams.json").read_text() == "chief"


def test_a_live_workers_scratch_folder_is_not_removed_at_start(tmp_path):
  live = tmp_path / "worker_tmp_1-0a1b2c3d"  # a worker of a run elsewhere, saving
  live.mkdir(parents=True)
  (live / "ckpt-5.index").write_bytes(b"x")
  ended = tmp_path / "worker_tmp_2-0a1b2c3e"  # a worker that was killed in a save long ago
  ended.mkdir()
  os.utime(ended, (os.path.getmtime(ended) - 61,) * 2)
  toy_train.run(training.get_strategy("one_device", num_gpus=0), str(tmp_path), 10,
                log_fn=lambda line: None)
  assert (live / "ckpt-5.index").exists() and not ended.exists()
