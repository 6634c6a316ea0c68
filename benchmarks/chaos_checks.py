"""What benchmarks/chaos.py checks on disk once a killed run series completes, against one
uninterrupted run of the same command; good checkpoints set aside; and the damage a power cut
leaves on any file written in its last moments.

Each check returns a list of one-line problems (empty: passed). Checkpoints are read with
``tf.train.load_checkpoint``, independently of the library's own resume code.
"""

from __future__ import annotations

import os
import pathlib
import pickle
import random
import re

import numpy as np

_INDEX = re.compile(r"^ckpt-(\d+)\.index$")
_DATA = re.compile(r"^ckpt-(\d+)\.data-\d+-of-(\d+)$")
# leftovers of interrupted writes: atomic_io's hidden siblings, TF's checkpoint temp folders
# and state-file temp names, input-state temp folders, write probes, non-chief scratch folders,
# a staged folder whose swap was not finished, a fine-tuning set-aside's journal left behind
_LEFTOVER = re.compile(r"^\..*\.tmp-|_temp(_[0-9a-f]+)?$|_temp/|\.tmp[0-9a-f]{32}$|"
                       r"^ckpt-\d+\.tmp-[0-9a-f]+$|^\.tmp-|^\.write_probe_|^worker_tmp_\d+(-[0-9a-f]+)?$|"
                       r"^\..+\.staged$|^set_aside\.json$")
_SKIPPED = ("save_counter", "_CHECKPOINTABLE_OBJECT_GRAPH")  # differ with the number of saves


def _first_line(error: BaseException) -> str:
  text = str(error).strip().splitlines()
  return f"{type(error).__name__}: {text[0][:100]}" if text else type(error).__name__


def complete_steps(model_dir: pathlib.Path) -> list[int]:
  """Steps of the complete ``ckpt-N`` (index and every data shard) in model_dir, newest first."""
  if not model_dir.is_dir():
    return []
  names = set(os.listdir(model_dir))
  steps = []
  for name in names:
    m = _INDEX.match(name)
    if m:
      shards = [_DATA.match(n) for n in names if n.startswith(f"ckpt-{m.group(1)}.data-")]
      if shards and all(shards) and len(shards) == int(shards[0].group(2)):
        steps.append(int(m.group(1)))
  return sorted(steps, reverse=True)


def tensors(prefix: str, every: bool = False) -> dict[str, np.ndarray]:
  """The saved tensors of a checkpoint; unless ``every``, not the save counter and object graph
  (which differ with the number of saves)."""
  import tensorflow as tf

  reader = tf.train.load_checkpoint(prefix)
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if every or not any(s in k for s in _SKIPPED)}


def unusable(prefix: str) -> str | None:
  """Why a checkpoint cannot be resumed from (unreadable, NaN or Inf), or None."""
  try:
    values = tensors(prefix, every=True)
  except Exception as e:  # noqa: BLE001 -- any read error makes it unusable
    return f"unreadable ({_first_line(e)})"
  for k, v in values.items():
    v = np.asarray(v)  # the object graph is bytes
    if v.dtype.kind == "f" and not np.all(np.isfinite(v)):
      return f"{k} holds NaN or Inf"
  return None


def usable_step(model_dir: pathlib.Path) -> int:
  """Step of the newest checkpoint a resume can use (complete, readable, finite), else 0."""
  for step in complete_steps(model_dir):
    if unusable(str(model_dir / f"ckpt-{step}")) is None:
      return step
  return 0


def lost_work(events: list[dict], dirs: list[pathlib.Path], before: list[int], after: list[int],
              n: int) -> list[str]:
  """Saved work run n threw away: a model restored from an older step than its newest usable
  checkpoint, or a usable checkpoint gone after the run."""
  lost = {}
  for e in events:
    if e["ev"] == "restore" and pathlib.Path(e["dir"]) in dirs:
      i = dirs.index(pathlib.Path(e["dir"]))
      if e["step"] < before[i]:
        lost[i] = (f"run {n} restarted {dirs[i].name} at step {e['step']}, "
                   f"its ckpt-{before[i]} was usable")
  for i, (b, a) in enumerate(zip(before, after, strict=True)):
    if a < b and i not in lost:
      lost[i] = f"run {n} left {dirs[i].name} without its usable ckpt-{b} (newest usable: {a})"
  return [lost[i] for i in sorted(lost)]


def latest_problems(model_dir: pathlib.Path, final: int) -> list[str]:
  """The state file and the newest complete checkpoint name ckpt-<final>, which is usable."""
  problems = []
  state = model_dir / "checkpoint"
  named = re.search(r'^model_checkpoint_path: "(.*)"', state.read_text(), re.M) \
      if state.exists() else None
  if not named or os.path.basename(named.group(1)) != f"ckpt-{final}":
    problems.append(f"{state} names {named.group(1) if named else 'nothing'}, not ckpt-{final}")
  steps = complete_steps(model_dir)
  if not steps or steps[0] != final:
    problems.append(f"the newest complete checkpoint in {model_dir.name} is "
                    f"{f'ckpt-{steps[0]}' if steps else 'none'}, not ckpt-{final}")
  for step in steps[:1]:
    why = unusable(str(model_dir / f"ckpt-{step}"))
    if why:
      problems.append(f"the latest checkpoint {model_dir.name}/ckpt-{step} is {why}")
  return problems


def same_tensors(want_prefix: str, got_prefix: str, what: str) -> list[str]:
  """Bit-identical tensors (every name, dtype, shape and value), or the first difference."""
  try:
    got = tensors(got_prefix)
  except Exception as e:  # noqa: BLE001
    return [f"{what} unreadable ({_first_line(e)})"]
  want = tensors(want_prefix)
  if sorted(got) != sorted(want):
    return [f"{what}: tensors {sorted(set(got) ^ set(want))[:3]} not in both"]
  for k in sorted(want):
    a, b = want[k], got[k]
    if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
      diff = np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))) \
          if a.shape == b.shape and a.dtype.kind in "fi" else "shape"
      return [f"{what}: {k} differs (max |diff| {diff})"]
  return []


def weight_problems(ref_dirs: list[pathlib.Path], got_dirs: list[pathlib.Path],
                    finals: list[int]) -> list[str]:
  """Final checkpoint (model, optimizer slots, step) and, for fine-tuning, the official-name tf1/
  copy of every model dir, bit-identical to the uninterrupted run's."""
  problems = []
  for ref, got, final in zip(ref_dirs, got_dirs, finals, strict=True):
    name = f"{got.parent.name}/{got.name}" if got.parent.name != "models" else got.name
    if not (got / f"ckpt-{final}.index").exists():
      problems.append(f"{name}/ckpt-{final} missing")
      continue
    problems += same_tensors(str(ref / f"ckpt-{final}"), str(got / f"ckpt-{final}"),
                             f"{name}/ckpt-{final}")
    if (ref / "tf1").is_dir():
      problems += same_tensors(str(ref / "tf1" / "model.ckpt"), str(got / "tf1" / "model.ckpt"),
                               f"{name}/tf1/model.ckpt")
  return problems


def result_problems(ref_home: pathlib.Path, got_home: pathlib.Path, task: str,
                    num_trials: int, tasks: str | None = None) -> list[str]:
  """Every trial's dev result present exactly once and equal to the uninterrupted run's (the
  results .json, .txt, .pkl of ``tasks``, the run's tasks joined, default ``task``) and the
  same test predictions of the user task ``task``."""
  import json

  problems = []
  tasks = tasks or task
  path = got_home / "results" / f"{tasks}_results.json"
  try:
    got = json.loads(path.read_text())
  except (OSError, ValueError) as e:
    return [f"{path.name} unreadable ({type(e).__name__})"]
  want = json.loads((ref_home / "results" / path.name).read_text())
  trials = got.get("trials", [])
  if len(trials) != num_trials or got.get("num_trials") != num_trials:
    problems.append(f"{path.name} holds {len(trials)} trial results (num_trials "
                    f"{got.get('num_trials')}), not {num_trials}")
  elif got != want:
    problems.append(f"{path.name} differs from the uninterrupted run's")
  predictions = sorted(p.name for p in (ref_home / "test_predictions").glob(
      f"{task}_test_*_predictions.tsv"))  # one per trial that wrote test outputs
  for name in (f"{tasks}_results.txt", f"{tasks}_results.pkl", *predictions):
    folder = "test_predictions" if name.endswith(".tsv") else "results"
    a, b = ref_home / folder / name, got_home / folder / name
    if not b.exists():
      problems.append(f"{folder}/{name} missing")
    elif name.endswith(".pkl"):
      try:
        if pickle.loads(b.read_bytes()) != pickle.loads(a.read_bytes()):
          problems.append(f"{name} differs from the uninterrupted run's")
      except Exception as e:  # noqa: BLE001
        problems.append(f"{name} unreadable ({type(e).__name__})")
    elif a.read_bytes() != b.read_bytes():
      problems.append(f"{folder}/{name} differs from the uninterrupted run's")
  return problems


def leftovers(root: pathlib.Path) -> list[str]:
  """Temporary files and folders left under root, and partial checkpoints (data without an
  index), as paths relative to root."""
  found = []
  for folder, dirs, files in os.walk(root):
    for name in dirs + files:
      rel = os.path.relpath(os.path.join(folder, name), root)
      m = _DATA.match(name)
      if _LEFTOVER.search(name) or (m and f"ckpt-{m.group(1)}.index" not in files):
        found.append(rel)
    dirs[:] = [d for d in dirs if not _LEFTOVER.search(d)]
  return sorted(found)




_REJECTED = re.compile(r"\.rejected(-\d+)?$")
RECENT = 2.0  # s: what a power cut may lose was written this long before it, or since the run began


def files(root: pathlib.Path) -> set[str]:
  """Every file under root, relative to it."""
  return {os.path.relpath(os.path.join(folder, name), root)
          for folder, _, names in os.walk(root) for name in names}


def set_aside(root: pathlib.Path) -> set[str]:
  """Checkpoints set aside under root (``<prefix>.rejected[-n]/`` folders), relative to root."""
  return {os.path.relpath(os.path.join(folder, d), root)
          for folder, dirs, _ in os.walk(root) for d in dirs if _REJECTED.search(d)}


def good_set_aside(root: pathlib.Path, before: set[str]) -> list[str]:
  """The checkpoints set aside under root since ``before`` (set_aside's earlier answer) that
  read back whole and finite: a good checkpoint must never be moved."""
  problems = []
  for rel in sorted(set_aside(root) - before):
    folder = root / rel
    prefix = folder / _REJECTED.sub("", folder.name)
    if (pathlib.Path(f"{prefix}.index")).exists() and unusable(str(prefix)) is None:
      problems.append(f"the good checkpoint {prefix.name} was moved to {rel}")
  return problems


def _unrenamed(path: pathlib.Path, root: pathlib.Path, pid: int) -> pathlib.Path:
  """Moves ``path`` back to the name it had before the rename a power cut lost; returns it:
  TensorFlow's ``ckpt-N_temp/`` for a checkpoint file, ``checkpoint.tmp<hex>`` for its state
  file, the staged folder's hidden name for a file of ``input_state/ckpt-N/`` (the folder is
  renamed whole), the scratch folder of the ``tf1/`` copy, else atomic_io's hidden
  ``.<name>.tmp-<pid>-<id>``."""
  tag = f"tmp-{pid}-{os.urandom(4).hex()}"
  m = re.match(r"^(ckpt-\d+)\.(index|data-.*)$", path.name)
  if path.parent.parent.name == "input_state":
    temp = path.parent.parent / f".{path.parent.name}.{tag}"
    path.parent.rename(temp)
    return temp
  if path.parent.name == "tf1" and path.name.startswith("model.ckpt."):
    temp = path.parent / f".model.ckpt.{tag}" / path.name
  elif m:
    temp = path.parent / f"{m.group(1)}_temp" / f"part-00000-of-00001.{m.group(2)}"
  elif path.name == "checkpoint" and path.parent.name != "tf1":
    temp = path.parent / f"checkpoint.tmp{os.urandom(16).hex()}"
  else:
    temp = path.parent / f".{path.name}.{tag}"
  temp.parent.mkdir(exist_ok=True)
  path.rename(temp)
  return temp


_IN_PLACE = re.compile(r"^events\.out\.tfevents\.")  # TensorBoard writes its files in place


def _renamed_into_place(rel: str, existed: set[str]) -> bool:
  """Whether the run created ``rel`` by a rename (so a power cut can leave its temporary name):
  not a file that was there before the run, written in place, or still inside a temporary
  folder (a staged folder not yet renamed)."""
  parts = pathlib.PurePath(rel).parts
  return (rel not in existed and not _IN_PLACE.search(parts[-1])
          and not any(_LEFTOVER.search(p) for p in parts[:-1]))


def damage(root: pathlib.Path, since: float, cut_at: float | None, existed: set[str],
           pid: int, rng: random.Random) -> str:
  """A power cut at ``cut_at`` (epoch seconds) on a run that began at ``since``: one file
  written in its last RECENT seconds (else since the run began) is left empty, short (unflushed
  pages lost) or, when the run created it, under the temporary name it had before its rename
  (the rename never reached the disk); returns what was done, relative to root."""
  written = []
  for rel in sorted(files(root)):
    path = root / rel
    try:
      mtime = path.stat().st_mtime
    except FileNotFoundError:
      continue
    if mtime >= since and not _REJECTED.search(path.parent.name):
      written.append((mtime, rel))
  if not written:
    return "nothing written to cut"
  recent = [rel for mtime, rel in written if cut_at is not None and mtime >= cut_at - RECENT]
  rel = rng.choice(recent or [rel for _, rel in written])
  victim = root / rel
  how = rng.choice(["empty", "short", "un-renamed"] if _renamed_into_place(rel, existed)
                   else ["empty", "short"])
  size = victim.stat().st_size
  if how == "un-renamed":
    temp = _unrenamed(victim, root, pid)
    return f"{rel} un-renamed ({temp.relative_to(root)})"
  keep = 0 if how == "empty" else int(size * rng.uniform(0.1, 0.9))
  with open(victim, "r+b") as f:
    f.truncate(keep)
  return f"{rel} {'emptied' if how == 'empty' else 'cut'} to {keep} of {size} bytes"
