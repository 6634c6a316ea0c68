"""The probe during pre-training (electra_tf/probing/during_pretraining.py): a probed run logs
the tags, draws the third panel and trains as an unprobed one; a resume keeps the history; bad
settings fail before step 1; a mid-run failure is one warning; the first win is said once."""

import json
import os
import pathlib
import re
import struct
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
from helpers import pretrain_data, probe_data, procs
from helpers.paths import GOLDEN, REPO_ROOT

from electra_tf import learning_curves, training
from electra_tf.config import PretrainingConfig
from electra_tf.finetuning.registry import TASK_NAMES
from electra_tf.probing import during_pretraining as dp
from electra_tf.probing import probe

REPO = REPO_ROOT
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1"}
# the data's vocabulary: the vocab_file fixture's (tests/golden/vocab.txt)
VOCAB_SIZE = len((GOLDEN / "vocab.txt").read_text(encoding="utf-8").splitlines())
SMALL = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2},
         "vocab_size": VOCAB_SIZE,
         "embedding_size": 16, "max_seq_length": 32, "train_batch_size": 8,
         "num_train_steps": 6, "iterations_per_loop": 1, "save_checkpoints_steps": 2,
         "num_warmup_steps": 1, "seed": 3}
PROBE_TAGS = {f"probe/planted/{n}" for n in ("cls", "mean", "random_init", "random_init_spread")}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory, data_dir, vocab_file) -> pathlib.Path:
  """Pre-training data (real text) and a planted-word task in finetuning_data/planted."""
  root = pretrain_data.build_data_dir(tmp_path_factory.mktemp("probe_run"), vocab_file,
                                      pretrain_data.emma_and_wiki(data_dir, 20000))
  probe_data.write_planted_task(root / "finetuning_data" / "planted", data_dir, train=60, dev=30)
  return root


def _settings(root, **kw):
  return dp.ProbeSettings(**{"task": "planted", "data_dir": str(root), "rows": 60,
                             "every": 2, "max_seq_length": 16, **kw})


def _png_width(path: pathlib.Path) -> int:
  return struct.unpack(">I", path.read_bytes()[16:20])[0]


def _final_weights(model_dir: pathlib.Path) -> dict[str, np.ndarray]:
  reader = tf.train.load_checkpoint(training.latest_checkpoint(str(model_dir)))
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if k.startswith("model/")}


def _script(data_root, name, *flags):
  return subprocess.Popen(
      [sys.executable, str(REPO / "run_pretraining.py"), f"--data_dir={data_root}",
       f"--model_name={name}", f"--hparams={json.dumps(SMALL)}", *flags],
      env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)


@pytest.mark.slow
def test_a_probed_run_killed_and_rerun_logs_draws_and_trains_as_unprobed(data_root, tmp_path):
  """The script with --probe_task, SIGKILLed after its first checkpoint and rerun: the probe
  history of both processes in TensorBoard and the summary, the third panel, and the weights
  of the same run without a probe."""
  flags = ["--probe_task=planted", "--probe_every=2", "--probe_rows=60",
           "--probe_max_seq_length=16"]
  model_dir = data_root / "models" / "probed"
  first = _script(data_root, "probed", *flags)
  procs.sigkill_after_first_checkpoint(first, model_dir, timeout=300, poll=0.01)
  state = json.loads((model_dir / "probe" / "planted.json").read_text())
  assert [h["step"] for h in state["history"]][0] == 2  # probed before ckpt-2 was saved
  rerun = _script(data_root, "probed", *flags)
  out = procs.finish(rerun, timeout=300)
  assert rerun.returncode == 0, out
  lines = out.splitlines()
  assert "(cached in" in next(line for line in lines if "random init (5 seeds)" in line)
  # in its interval's log line
  probe_lines = [line for line in lines if " - probe planted (dev accuracy): [CLS] " in line]
  assert probe_lines and probe_lines[-1].startswith("6/6 = 100.0%")
  assert " ± " in probe_lines[-1] and re.search(
      r"; mean-pooled 0\.\d{3} minus random init seed \d+ \(0\.\d{3}, the least favourable "
      r"seed\): \d+ dev rows better, \d+ worse of 30, ", probe_lines[-1]), probe_lines[-1]
  assert not any(line.startswith("2/6 = ") for line in probe_lines)  # resumed after step 2

  curves = learning_curves.read_scalars(str(model_dir))
  for tag in PROBE_TAGS:
    assert [s for s, _ in curves[tag]] == [2, 4, 6], tag
  state = json.loads((model_dir / "probe" / "planted.json").read_text())
  assert [h["step"] for h in state["history"]] == [2, 4, 6]
  reference = dp.reference_from(state["reference"])
  assert [len(seed) for seed in reference.losses] == [30] * 5  # per dev row, each seed
  assert curves["probe/planted/random_init"][-1][1] == pytest.approx(reference.value)
  assert curves["probe/planted/random_init_spread"][-1][1] == pytest.approx(reference.spread)
  assert curves["probe/planted/mean"][-1][1] == pytest.approx(state["history"][-1]["mean"])
  summary = out[out.index("Summary: model probed"):]
  assert "  probe planted (dev accuracy) at step 6: [CLS]" in summary
  assert re.search(r"    above random init in [0-3] of 3 probe\(s\), steps 2-6[:;( ].* at step 6 "
                   r"mean-pooled 0\.\d{3} minus random init seed \d+ \(0\.\d{3}, the least "
                   r"favourable seed\): \d+ dev rows better, \d+ worse of 30, "
                   r"[+-]0\.\d{3} \[[+-]0\.\d{3}, [+-]0\.\d{3}\]: ",
                   summary), summary

  with_panel, without = tmp_path / "probe.png", tmp_path / "plain.png"
  learning_curves.plot(curves, {}, str(with_panel))
  learning_curves.plot({k: v for k, v in curves.items() if not k.startswith("probe/")}, {},
                       str(without))
  assert _png_width(with_panel) > 1.3 * _png_width(without)  # the third panel

  # the same run without a probe, uninterrupted, in its own process as the probed one (this
  # process's earlier tests may leave TensorFlow settings that move the last bits): the same
  # weights
  plain = _script(data_root, "plain")
  out = procs.finish(plain, timeout=300)
  assert plain.returncode == 0, out
  probed_weights = _final_weights(model_dir)
  plain_weights = _final_weights(data_root / "models" / "plain")
  assert probed_weights.keys() == plain_weights.keys()
  for name, value in probed_weights.items():
    np.testing.assert_array_equal(value, plain_weights[name], err_msg=name)


def test_bad_probe_settings_are_one_line_before_any_model(data_root, data_dir, tmp_path):
  config = PretrainingConfig("bad", str(data_root), **SMALL)
  few = tmp_path / "few"
  probe_data.write_planted_task(few / "finetuning_data" / "planted", data_dir, train=8, dev=30)
  amharic = tmp_path / "amharic" / "finetuning_data" / "amharic"  # no Ethiopic in the vocab
  amharic.mkdir(parents=True)
  (amharic / "task.json").write_text('{"type": "classification", "text_a": "s", "label": "l"}')
  for split in ("train", "dev"):
    (amharic / f"{split}.csv").write_text("s,l\n" + "".join(
        f"ሰላም ዓለም,{i % 2}\n" for i in range(40)), encoding="utf-8")
  cases = [
      (_settings(data_root, task="nosuch"), "--probe_task nosuch: Unknown task 'nosuch'"),
      (_settings(few), "--probe_task planted: 8 train and 30 dev rows"),
      (_settings(tmp_path / "amharic", task="amharic"),
       "--probe_task amharic: 100% of its WordPieces are [UNK] with the run's vocabulary"),
      (_settings(data_root, rows=5), "--probe_rows must be >= 20; got 5"),
      (_settings(data_root, max_seq_length=1000), "--probe_max_seq_length must be in [3, 512]"),
  ]
  for settings, message in cases:
    with pytest.raises(ValueError) as error:
      dp.prepare(config, settings, log_fn=lambda line: None)
    assert str(error.value).startswith(message), str(error.value)
    assert "\n" not in str(error.value)
  assert not os.path.exists(config.model_dir)  # nothing written, no model built

  class Flags:  # --probe_every given, --probe_task not
    probe_task = None

    def __getitem__(self, name):
      return types.SimpleNamespace(present=name == "probe_every")

  with pytest.raises(ValueError, match=r"^--probe_every given without --probe_task$"):
    dp.from_flags(Flags(), config, None, str(data_root))


@pytest.mark.slow
def test_a_missing_probe_task_stops_the_script_before_step_1(data_root):
  args = [sys.executable, str(REPO / "run_pretraining.py"), f"--data_dir={data_root}",
          "--model_name=cli", f"--hparams={json.dumps(SMALL)}", "--probe_task=nosuch"]
  proc = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=300, cwd=REPO)
  assert proc.returncode == 1
  out = (proc.stdout + proc.stderr).strip().splitlines()
  assert out == [f"run_pretraining.py: error: --probe_task nosuch: Unknown task 'nosuch'; "
                 f"known tasks: {', '.join(TASK_NAMES)}, or a folder with a "
                 f"task.json (none in {data_root}/finetuning_data/nosuch)"], out
  assert not (data_root / "models" / "cli").exists()


class _Trainer:
  interval_hooks = ()


ROWS = 100
# the reference seeds are wrong on the first 50, 48 and 46 dev rows: accuracy 0.50, 0.52, 0.54
RANDOM_INIT = dp.Reference((1, 2, 3), (0.40, 0.42, 0.44), (0.50, 0.52, 0.54),
                         tuple(tuple(float(i < w) for i in range(ROWS)) for w in (50, 48, 46)))
# a probe wrong on rows 40-83: accuracy 0.56, above 0.52 + 1 SD (the old rule's "beat"), yet
# against the best seed 40 rows better and 38 worse: no evidence
NOISE = tuple(float(40 <= i < 84) for i in range(ROWS))
CLEAR = tuple(float(i < 5) for i in range(ROWS))  # 41 rows better than the best seed, none worse


def _scripted(monkeypatch, values):
  """probe.evaluate returns the next of ``values`` ([CLS], mean, mean's row losses)."""
  it = iter(values)

  def evaluate(features, rows):
    cls, mean, losses = next(it)
    return {"cls": cls, "mean": mean}, np.array(losses)

  monkeypatch.setattr(probe, "evaluate", evaluate)


def _hook(tmp_path, lines, start=0, state=None):
  rows = probe.ProbeRows("t", *(probe.Split(*[np.zeros((1, 2), np.int32)] * 3,
                                            np.zeros(1)) for _ in range(2)), 2, "accuracy",
                         lambda y, p: 0.0)
  hook = dp.RunProbe(dp.ProbeSettings("t", "", every=10), rows, RANDOM_INIT,
                     str(tmp_path / "probe" / "t.json"), 40, "k", lines.append, state)
  hook.attach(_Trainer(), encoder=object(), start_step=start)
  return hook


def test_the_verdict_is_paired_on_mean_pooling_and_survives_a_resume(tmp_path, monkeypatch):
  """"Above random init" only from the paired test of the mean-pooled probe: not from a higher
  [CLS] score, nor from a mean score above the seeds' mean + 1 SD (the old rule)."""
  monkeypatch.setattr(probe, "PooledFeatures", lambda encoder: None)
  lines = []
  hook = _hook(tmp_path, lines)
  assert str(hook.reference) == "0.520 ± 0.020" and hook.num_probes == 4
  _scripted(monkeypatch, [(0.90, 0.56, NOISE), (0.45, 0.95, CLEAR), (0.45, 0.95, CLEAR)])
  for step in (5, 10, 15, 20, 30):  # probes at 10, 20, 30 only
    hook(step, {})
  assert [h["above"] for h in hook.history] == [False, True, True]
  assert (hook.history[0]["better"], hook.history[0]["worse"]) == (40, 38)
  wins = [line for line in lines if line.startswith("Probe t:")]
  assert len(wins) == 1 and wins[0].startswith(
      "Probe t: the mean-pooled features are above random init at step 20: mean-pooled 0.950 "
      "minus random init seed 3 (0.540, the least favourable seed): 41 dev rows better, 0 worse "
      "of 100, +0.410 [+0.")
  assert "each bound at level 0.05/4" in wins[0]
  assert hook.summary_lines()[1].startswith(
      "    above random init in 2 of 3 probe(s), steps 10-30; at step 30 mean-pooled 0.950 minus "
      "random init seed 3 (0.540, the least favourable seed): 41 dev rows better, 0 worse of "
      "100, +0.410 [")

  # a resume at step 20 keeps the probes up to 20 and drops the probe of step 30
  state = json.loads((tmp_path / "probe" / "t.json").read_text())
  lines.clear()
  resumed = _hook(tmp_path, lines, start=20, state=state)
  assert [h["step"] for h in resumed.history] == [10, 20]
  _scripted(monkeypatch, [(0.45, 0.56, NOISE)])
  resumed(30, {})
  assert not [line for line in lines if line.startswith("Probe t:")]
  assert resumed.summary_lines()[1].startswith(
      "    above random init in 1 of 3 probe(s), steps 10-30 (first at step 20); at step 30 "
      "mean-pooled 0.560 minus random init seed 3 (0.540, the least favourable seed): 40 dev "
      "rows better, 38 worse of 100, +0.020 [")
  # no evidence, and the size a gain needed: 78 discordant rows at 0.05/4 need 50 better
  # (P(X >= 50) = 0.0084 < 0.0125; 49 gives 0.0155), a gain of (50 - 28) / 100
  assert resumed.summary_lines()[1].endswith(
      "not above random init, which is no evidence of no gain: these rows show one only from "
      "+0.220 (paired exact test on 100 dev rows against each random-init seed, each bound at "
      "level 0.05/4) (docs/pretraining.md#a-downstream-probe-during-pre-training)")
  # resumed at 10 instead: the probe of step 20 is forgotten, and said again when it comes
  lines.clear()
  early = _hook(tmp_path, lines, start=10, state=json.loads(json.dumps(state)))
  _scripted(monkeypatch, [(0.90, 0.56, NOISE), (0.60, 0.95, CLEAR)])
  early(20, {})
  assert early.summary_lines()[1].startswith(
      "    above random init in 0 of 2 probe(s), steps 10-20: no gain over random init shown")
  early(30, {})
  assert len([line for line in lines if "above random init at step 30" in line]) == 1


def test_a_mid_run_failure_is_one_warning_and_the_probe_goes_on(tmp_path, monkeypatch):
  monkeypatch.setattr(probe, "PooledFeatures", lambda encoder: None)
  lines = []
  hook = _hook(tmp_path, lines)
  (tmp_path / "probe").mkdir()
  (tmp_path / "probe" / "t.json").mkdir()  # the state file cannot be written
  calls = iter([(0.4, 0.5), np.linalg.LinAlgError("Singular matrix"), (0.4, 0.5)])

  def evaluate(features, rows):
    value = next(calls)
    if isinstance(value, Exception):
      raise value
    return dict(zip(("cls", "mean"), value, strict=True)), np.array(NOISE)

  monkeypatch.setattr(probe, "evaluate", evaluate)
  for step in (10, 20, 30):
    hook(step, {})
  warnings = [line for line in lines if line.startswith("Warning:")]
  assert len(warnings) == 1 and "failed at step 10" in warnings[0]
  assert [h["step"] for h in hook.history] == [10, 30]  # in memory, logged, the run went on
  assert "failed 3 time(s)" in hook.summary_lines()[-1]


def test_only_the_chief_probes(data_root):
  config = PretrainingConfig("worker", str(data_root), **SMALL)
  worker = dp.prepare(config, _settings(data_root), is_chief=False, log_fn=lambda line: None)
  trainer = _Trainer()
  worker.attach(trainer, encoder=object(), start_step=0)
  assert trainer.interval_hooks == () and worker.summary_lines() == []
  assert not os.path.exists(config.model_dir)


@pytest.mark.slow
def test_the_reference_is_cached_by_what_made_it(data_root):
  config = PretrainingConfig("cached", str(data_root), **SMALL)
  lines = []
  first = dp.prepare(config, _settings(data_root), log_fn=lines.append)
  again = dp.prepare(config, _settings(data_root), log_fn=lines.append)
  assert again.reference == first.reference
  assert "(cached in" in lines[-1] and "(cached in" not in lines[0]
  fewer = dp.prepare(config, _settings(data_root, rows=40), log_fn=lines.append)
  assert "(cached in" not in lines[-1] and "its history restarts" in lines[-1]
  assert fewer.reference != first.reference
