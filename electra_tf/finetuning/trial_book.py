"""Where each fine-tuning trial's work is kept, and which of it a rerun may reuse (``TrialBook``):
a trial's folder and its ``trial_settings.json``, its record in ``<model_dir>_trials/``, work made
with other settings moved aside, and a record or settings file a power cut left empty
recovered. ``trials.run_finetuning`` drives the trials through it; the rules are in the
``trials`` module docstring.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import tensorflow as tf

from electra_tf import atomic_io, checkpoints, folder_lock
from electra_tf.config import FinetuningConfig
from electra_tf.console import error_line, log
from electra_tf.finetuning import outputs, set_aside
from electra_tf.finetuning.features import key_changes
from electra_tf.finetuning.preprocessing import Preprocessor
from electra_tf.names import GLOBAL_STEP
from electra_tf.reading import model_source
from electra_tf.reading.model_dir import write_model_files
from electra_tf.training import checkpoint_files, checkpointing

SETTINGS_FILE = "trial_settings.json"  # in a trial's folder: the settings it is trained with
SETTINGS_FORMAT = 1
TF1_NAME = "model.ckpt"  # the official-name copy of a trained trial: <trial dir>/tf1/model.ckpt
# hparams that do not change what a trial computes: where things are, how many trials, what is
# kept or written, how often it logs and saves (a seeded resume is exact from any checkpoint)
NOT_SETTINGS = frozenset({
    "model_name", "data_dir", "vocab_file", "init_checkpoint", "model_dir", "results_txt",
    "results_pkl", "preprocessed_data_dir", "raw_data_dir", "qa_eval_file", "qa_preds_file",
    "qa_na_file", "test_predictions", "log_examples", "num_trials", "do_train", "do_eval",
    "keep_all_models", "write_test_outputs", "n_writes_test", "use_tfrecords_if_existing",
    "save_checkpoints_steps", "iterations_per_loop", "seed"})


def trial_seed(seed: int | None, trial: int) -> int | None:
  """Trial ``trial`` (1-based) uses ``seed + trial - 1``; None stays None."""
  return None if seed is None else seed + trial - 1


_exists, _read_json = set_aside.exists, set_aside.read_json  # retried reads


UNREADABLE = "unreadable"  # a settings file that exists but does not parse


class TrialBook:
  """Where each trial's work is kept, and which of it a run may reuse (see the module doc).

  Args:
    config: the run's ``FinetuningConfig``.
    preprocessor: gives the key of the run's data.
  """

  def __init__(self, config: FinetuningConfig, preprocessor: Preprocessor):
    self.config = config
    hparams = {k: v for k, v in config.to_dict().items() if k not in NOT_SETTINGS}
    self._run = json.loads(json.dumps({
        "format": SETTINGS_FORMAT, "hparams": hparams, "data": preprocessor.data_key(),
        "init_checkpoint": model_source.fingerprint(config.init_checkpoint)}, sort_keys=True))

  def settings(self, trial: int) -> dict[str, Any]:
    return {**self._run, "seed": trial_seed(self.config.seed, trial)}

  def trial_dir(self, trial: int) -> str:
    return f"{self.config.model_dir}_{trial}"

  def record_path(self, trial: int) -> str:
    return os.path.join(f"{self.config.model_dir}_trials", f"trial_{trial}.json")

  def _on_disk(self) -> list[int]:
    """Trials with a folder or a record (those of this run's ``num_trials``)."""
    found = set()
    for folder, pattern in ((os.path.dirname(self.config.model_dir) or ".",
                             re.escape(os.path.basename(self.config.model_dir)) + r"_(\d+)"),
                            (f"{self.config.model_dir}_trials", r"trial_(\d+)\.json")):
      names = checkpoints.list_folder(folder) or []
      found.update(int(m.group(1)) for m in map(re.compile(pattern).fullmatch, names) if m)
    n = self.config.num_trials
    return sorted(t for t in found if t >= 1 and (n < 0 or t <= n))

  def _stored(self, trial: int) -> list[tuple[str, Any]]:
    """(path, the settings it was made with; None: unknown) of the trial's record and folder,
    where they exist (a folder without settings only when it holds a checkpoint)."""
    stored = []
    record = self.record_path(trial)
    exists, value = _read_json(record)
    if exists:
      stored.append((record, value.get("settings") if isinstance(value, dict) else None))
    folder = self.trial_dir(trial)
    exists, settings = _read_json(os.path.join(folder, SETTINGS_FILE))
    if exists and settings is None:
      settings = UNREADABLE
    if settings is not None or checkpointing.complete_checkpoints(folder):
      stored.append((folder, settings))
    return stored

  def _recover_damaged(self, trial: int) -> None:
    """A record, or a folder's settings file, that a power cut left empty or short: the record
    is moved aside alone (its trial is evaluated again; the results files stay); the settings
    file is rewritten when the trial's record proves them (a folder is only ever prepared by a
    run whose settings are its record's: another run moves the record aside first), else the
    folder is moved aside by ``reject_other_settings``, with one line."""
    path = self.record_path(trial)
    exists, record = _read_json(path)
    if exists and not isinstance(record, dict):
      moved = atomic_io.move_aside(path)
      log(f"{path} is empty or does not parse (cut short, e.g. by a power cut); moved it to "
          f"{os.path.basename(moved)}; trial {trial} is evaluated again")
      record = None
    settings_path = os.path.join(self.trial_dir(trial), SETTINGS_FILE)
    exists, settings = _read_json(settings_path)
    if (exists and settings is None and isinstance(record, dict)
        and record.get("settings") == self.settings(trial)):
      atomic_io.write_json(settings_path, self.settings(trial), indent=1, sort_keys=True)
      log(f"{settings_path} is empty or does not parse (cut short, e.g. by a power cut); "
          f"trial {trial}'s record {path} holds this run's settings: rewrote it from there")

  def reject_other_settings(self) -> None:
    """Moves aside every trial folder and record made with other settings than this run's (and
    the test outputs such a record lists, and the results files), with one line naming what
    changed; first finishes a set-aside a kill interrupted (set_aside.py)."""
    trials_dir = f"{self.config.model_dir}_trials"
    note = set_aside.finish_interrupted(trials_dir)
    if note:
      log(note)
    rejected, why, records = [], [], False
    for trial in self._on_disk():
      settings = self.settings(trial)
      self._recover_damaged(trial)
      for path, stored in self._stored(trial):
        if stored != settings:
          why = why or ([c.removeprefix("hparams.") for c in key_changes(stored, settings)]
                        if isinstance(stored, dict) else
                        [f"{SETTINGS_FILE} empty or does not parse, and no record proves "
                         "the settings" if stored == UNREADABLE else "no settings recorded"])
          rejected.append(path)
          if path == self.record_path(trial):  # its test outputs and the results go too
            rejected += self._test_outputs(trial)
            records = True
    if records:
      c = self.config
      rejected += [c.results_txt, c.results_pkl, os.path.splitext(c.results_txt)[0] + ".json"]
    if rejected:
      moved = set_aside.move_aside(trials_dir, rejected)
      log(f"Settings changed since the earlier run ({', '.join(why[:3])}); moved aside "
          f"{', '.join(moved)}; those trials start afresh")

  def _test_outputs(self, trial: int) -> list[str]:
    """The test-output files the trial's record lists (paths)."""
    _, record = _read_json(self.record_path(trial))
    written = record.get("test_outputs") if isinstance(record, dict) else None
    return [os.path.join(self._test_dir(trial), p) for p in written or ()]

  def finished(self, trial: int) -> dict[str, Any] | None:
    """The trial's record when it holds everything this run would compute, else None. A trial
    whose model this run keeps (``keep_all_models``, or the last trial) is finished only when
    its folder holds it at the recorded final step, in ``tf1/`` too, and both read back; else
    one line says why, and the trial trains again from its newest usable checkpoint (a
    newest checkpoint that does not read back is moved aside first)."""
    c, (_, record) = self.config, _read_json(self.record_path(trial))
    if not isinstance(record, dict) or record.get("settings") != self.settings(trial):
      return None
    if c.do_eval and record.get("dev_results") is None:
      return None
    if c.do_eval and c.write_test_outputs and trial <= c.n_writes_test:
      test_dir = self._test_dir(trial)
      written = record.get("test_outputs")
      if written is None or not all(os.path.isfile(os.path.join(test_dir, p)) for p in written):
        return None
    if self.model_kept(trial):
      atomic_io.finish_swap(os.path.join(self.trial_dir(trial), "tf1"))  # a kill mid-save
      problem = self._model_problem(trial, record.get("final_step"))
      if problem:  # e.g. a power cut after the record: the model is trained again, not lost
        log(f"Trial {trial}/{c.num_trials} finished earlier, but {problem}; training the "
            "trial again from its newest usable checkpoint, if any")
        return None
      # the replaced copy a kill left while the last save of tf1/ deleted it
      atomic_io.remove_leftovers(os.path.join(self.trial_dir(trial), "tf1"))
    return record

  def model_kept(self, trial: int) -> bool:
    """Whether this run keeps the trial's folder (official: ``keep_all_models`` or the last)."""
    return self.config.keep_all_models or trial == self.config.num_trials

  def _model_problem(self, trial: int, final_step: int | None) -> str | None:
    """Why the trial's folder does not hold its finished model (None: it does). A newest
    checkpoint that does not read back is moved aside; transient read errors propagate."""
    folder = self.trial_dir(trial)
    latest = checkpoint_files.latest_checkpoint(folder)
    if latest is None:
      return (f"its folder {folder} holds no complete checkpoint (an earlier run did not "
              "keep its model, or set it aside)")
    problem = checkpoint_files.unusable(latest)
    if problem:
      try:
        moved = f"moved it to {checkpoint_files.reject(latest)}"
      except (tf.errors.OpError, OSError) as e:
        moved = f"could not move it aside ({error_line(e, name_type=False)})"
      return f"its {problem}; {moved}"
    step = checkpoint_files.step_of(latest)
    if final_step is not None and step != final_step:
      return f"its newest checkpoint {latest} is at step {step}, not its final step {final_step}"
    tf1 = os.path.join(folder, "tf1", TF1_NAME)
    if not _exists(tf1 + ".index"):
      return f"its {tf1} is missing"
    problem = checkpoint_files.unusable(tf1)
    if problem:
      return f"its {problem}"
    try:
      def read_step() -> int | None:
        reader = tf.train.load_checkpoint(tf1)
        return int(reader.get_tensor(GLOBAL_STEP)) if reader.has_tensor(GLOBAL_STEP) else None
      tf1_step = checkpoints.read_retried(tf1, read_step)
    except checkpoints.CorruptCheckpointError as e:
      return f"its {e}"
    if tf1_step != step:
      return f"its {tf1} is at step {tf1_step}, not at step {step} as {latest}"
    return None

  def _test_dir(self, trial: int) -> str:
    return os.path.dirname(self.config.test_predictions("task", "test", trial))

  def record(self, trial: int, final_step: int, dev_results: dict | None,
             test_outputs: list[str] | None) -> dict[str, Any]:
    """Records a finished trial (atomically) with the step its model (checkpoint and
    ``tf1/``) is at and whether this run keeps that model; returns the record as a rerun reads
    it (so the results files hold the same values whether a trial ran now or earlier)."""
    test_dir = self._test_dir(trial)
    record = {"trial": trial, "settings": self.settings(trial), "final_step": final_step,
              "dev_results": dev_results, "kept": self.model_kept(trial),
              "test_outputs": None if test_outputs is None else
              [os.path.relpath(p, test_dir) for p in test_outputs]}
    outputs.write_json(record, self.record_path(trial))
    return json.loads(json.dumps(record))

  def prepare_dir(self, trial: int) -> str:
    """The trial's folder, to resume (its settings are this run's: the others were moved
    aside) or to start afresh, with its settings, shape and vocabulary written."""
    folder = self.trial_dir(trial)
    folder_lock.check_held(folder)  # paused past its lease: not a line, not a removal more
    atomic_io.remove_leftovers(folder)
    if checkpointing.complete_checkpoints(folder):
      log(f"Resuming trial {trial} from {folder}")
    elif _exists(folder) and not _exists(os.path.join(folder, SETTINGS_FILE)):
      atomic_io.remove_tree(folder)  # no checkpoint, no settings: nothing to keep
    atomic_io.make_dirs(folder)  # its parent fsynced: the folder survives a power cut
    path = os.path.join(folder, SETTINGS_FILE)
    if _read_json(path) != (True, self.settings(trial)):  # rewritten only when it changes
      atomic_io.write_json(path, self.settings(trial), indent=1, sort_keys=True)
    for path in (folder, os.path.join(folder, "tf1")):  # shape and vocabulary beside it
      write_model_files(path, self.config, self.config.vocab_file)
    return folder

  def remove_dir_unless_kept(self, trial: int) -> None:
    """Deletes a finished trial's folder unless ``keep_all_models`` or it is the last trial
    (official); a kill leaves it whole or gone."""
    if not self.model_kept(trial):
      atomic_io.remove_tree(self.trial_dir(trial))
