"""tools/probe_features.py: the ridge probe, and the CLI on the official 2-layer checkpoint."""

import os
import subprocess
import sys

import numpy as np

from tests.helpers.paths import REPO_ROOT

sys.path.insert(0, os.path.join(str(REPO_ROOT), "tools"))
import probe_features  # noqa: E402


def test_probe_reads_a_separable_label_and_not_noise():
  rng = np.random.default_rng(0)
  y = rng.integers(0, 3, 300)
  signal = np.eye(3)[y] @ rng.normal(size=(3, 16)) + 0.1 * rng.normal(size=(300, 16))
  assert probe_features.probe_accuracy(signal[:200], y[:200], signal[200:], y[200:], 1.0) == 1.0
  noise = rng.normal(size=(300, 16))
  assert probe_features.probe_accuracy(noise[:200], y[:200], noise[200:], y[200:], 1.0) < 0.6


def test_cli_probes_random_and_official_checkpoint(tmp_path, reference_dir, data_dir):
  rows = (data_dir / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()
  (tmp_path / "train.tsv").write_text("\n".join(rows[:61]) + "\n", encoding="utf-8")
  (tmp_path / "dev.tsv").write_text("\n".join(rows[:1] + rows[61:101]) + "\n", encoding="utf-8")
  env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_USE_LEGACY_KERAS="1")
  out = subprocess.run(
      [sys.executable, str(REPO_ROOT / "tools" / "probe_features.py"),
       f"--model_dirs={reference_dir / 'electra_small_2l'}",
       f"--vocab_file={reference_dir / 'vocab.txt'}", f"--train_tsv={tmp_path / 'train.tsv'}",
       f"--dev_tsv={tmp_path / 'dev.tsv'}", "--max_seq_length=32"],
      capture_output=True, text=True, env=env, timeout=300, check=True).stdout
  lines = out.strip().splitlines()
  assert lines[0].startswith("probe: 60 train / 40 dev rows, 2 classes")
  assert len(lines) == 3
  sources = ["random", str(reference_dir / "electra_small_2l")]
  for line, source in zip(lines[1:], sources, strict=True):
    assert line.startswith(f"{source}: ")
    words = line.split(": ", 1)[1].split()
    scores = dict(zip(words[::2], words[1::2], strict=True))
    assert sorted(scores) == sorted(f"{layer}_{pool}" for layer in ("emb", "layer0", "layer1")
                                    for pool in ("cls", "mean"))
    assert all(0.0 <= float(v) <= 1.0 for v in scores.values())


def test_rows_of_a_user_task_csv_and_a_glue_tsv(tmp_path):
  csv_file = tmp_path / "train.csv"
  csv_file.write_text('id,sentence,label\n0,"Wait, then read.",asyncio\n1,Parse it.,email\n',
                      encoding="utf-8")
  assert probe_features.read_rows(str(csv_file), "sentence", "label") == (
      ["Wait, then read.", "Parse it."], ["asyncio", "email"])
  tsv_file = tmp_path / "train.tsv"
  tsv_file.write_text('sentence\tlabel\na "quoted", film\t1\n', encoding="utf-8")
  assert probe_features.read_rows(str(tsv_file), "sentence", "label") == (
      ['a "quoted", film'], ["1"])


def test_bag_of_words_reads_a_label_carried_by_one_word():
  rng = np.random.default_rng(0)
  y = rng.integers(0, 2, 200)
  ids = rng.integers(5, 40, (200, 8))
  ids[:, 3] = np.where(y == 1, 41, 42)  # the label's own word
  ids[:, 0] = 2  # [CLS]: reserved ids are left out
  assert probe_features.bag_of_words_accuracy(ids[:100], y[:100], ids[100:], y[100:], 50) == 1.0
  noise = rng.integers(5, 40, (200, 8))
  assert probe_features.bag_of_words_accuracy(noise[:100], y[:100], noise[100:], y[100:],
                                              50) < 0.7
