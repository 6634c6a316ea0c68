"""Kills this process at a planned moment; put on a run's PYTHONPATH by benchmarks/chaos.py only.

Python imports ``sitecustomize`` at start-up, before the script runs. When the environment holds
``ELECTRA_CHAOS_PLAN`` (JSON), this module wraps the functions named in HOOKS as soon as their
modules are imported, appends one JSON line per event to the plan's ``events`` file, and fires
the plan's kill:

  {"events": "<path>", "kill": null | {"at": "start" | <hook>, "call": k,
   "when": "before" | "during" | "after", "delay": seconds, "signal": "SIGINT",
   "repeat": 1 | 2, "gap": seconds}}

``at: start`` fires ``delay`` seconds after the interpreter started. ``at: <hook>`` fires at the
k-th call of that hook: right before it runs, ``delay`` seconds into it (from a timer thread,
so it lands inside a write that releases the GIL), or right after it returns. Before the
signal, one marker line is written to the output (file descriptor 1, after flushing Python's
streams), so the harness splits what the run printed before and after the kill exactly there.

Events: ``call`` (hook, n, t = seconds since start, dt), ``restore`` (dir, step: where a
Trainer's restore put it), ``saved`` (dir, step of a checkpoint written), ``kill`` (signal,
t). Nothing here changes what a run computes.
"""

from __future__ import annotations

import functools
import importlib.abc
import json
import os
import signal
import sys
import threading
import time

MARKER = "@@chaos-kill@@"
ENV = "ELECTRA_CHAOS_PLAN"

# hook name -> (module, attribute path) of the function wrapped
HOOKS = {
  "ckpt_save": ("tensorflow.python.checkpoint.checkpoint_management", "CheckpointManager.save"),
  "input_state_save": ("electra_tf.training.input_state", "InputState.save"),
  "restore": ("electra_tf.training.loop", "Trainer.restore_or_initialize"),
  "atomic_write": ("electra_tf.atomic_io", "write_bytes"),
  "features_write": ("electra_tf.finetuning.features", "write_tfrecord"),
  "trial_dir": ("electra_tf.finetuning.trials", "TrialBook.prepare_dir"),
  "evaluate": ("electra_tf.finetuning.runner", "ModelRunner.evaluate"),
  "results_write": ("electra_tf.finetuning.outputs", "write_results"),
  "test_outputs": ("electra_tf.finetuning.runner", "ModelRunner.write_test_outputs"),
  "tf1_save": ("electra_tf.checkpoints", "save_tf1_checkpoint"),
  "rmtree": ("shutil", "rmtree"),
}

_MODULES = frozenset(name for name, _ in HOOKS.values())
_T0 = time.monotonic()
_PLAN = json.loads(os.environ.get(ENV) or "null")
_KILL = (_PLAN or {}).get("kill")
_counts: dict[str, int] = {}
_lock = threading.Lock()
_fd = None


def _event(**fields) -> None:
  """Appends one JSON line to the events file (one write: lines of threads never mix)."""
  global _fd
  if _fd is None:
    _fd = os.open(_PLAN["events"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
  os.write(_fd, (json.dumps(fields) + "\n").encode())


class _Serialized:
  """sys.stdout / sys.stderr behind one lock, which the kill holds from its marker to its
  signal: no line of another thread slips in between (an os.write gives up the GIL)."""

  def __init__(self, stream):
    self._stream = stream

  def write(self, text):
    with _OUTPUT:
      return self._stream.write(text)

  def writelines(self, lines):
    with _OUTPUT:
      return self._stream.writelines(lines)

  def flush(self):
    with _OUTPUT:
      return self._stream.flush()

  def __getattr__(self, name):
    return getattr(self._stream, name)


_OUTPUT = threading.RLock()


def _fire() -> None:
  """Writes the marker line, then sends the planned signal (twice if planned) to this process."""
  signum = signal.Signals[_KILL["signal"]]
  _event(ev="kill", signal=signum.name, t=time.monotonic() - _T0)
  with _OUTPUT:
    for stream in (sys.stdout, sys.stderr):
      try:
        stream.flush()
      except (OSError, ValueError):
        pass
    os.write(1, f"{MARKER}\n".encode())
    _signal(signum)
  for _ in range(int(_KILL.get("repeat", 1)) - 1):
    time.sleep(float(_KILL.get("gap", 0.0)))
    _signal(signum)


def _signal(signum: int) -> None:
  """Sends ``signum`` to the main thread, where a terminal's Ctrl-C lands: sent to the process
  from a timer thread, the kernel may hand it to that thread, and the main thread (waiting for
  the output lock) would first finish a write it had not started when the signal came."""
  signal.pthread_kill(threading.main_thread().ident, signum)


def _later(delay: float) -> None:
  threading.Thread(target=lambda: (time.sleep(delay), _fire()), name="chaos-kill",
                   daemon=True).start()


def _wrap(hook: str, fn):
  def wrapped(*args, **kwargs):
    with _lock:
      n = _counts[hook] = _counts.get(hook, 0) + 1
    planned = _KILL is not None and _KILL["at"] == hook and _KILL["call"] == n
    if planned and _KILL["when"] == "before":
      _fire()
    elif planned and _KILL["when"] == "during":
      _later(float(_KILL["delay"]))
    start = time.monotonic()
    result = fn(*args, **kwargs)
    _event(ev="call", hook=hook, n=n, t=start - _T0, dt=time.monotonic() - start)
    if hook == "restore":
      _event(ev="restore", dir=args[0].settings.model_dir, step=int(result))
    elif hook == "ckpt_save":
      _event(ev="saved", dir=args[0].directory, step=kwargs.get("checkpoint_number"))
    if planned and _KILL["when"] == "after":
      _fire()
    return result

  return functools.update_wrapper(wrapped, fn)  # keeps attributes, e.g. rmtree's


def _patch(module) -> None:
  for hook, (name, path) in HOOKS.items():
    if name != module.__name__:
      continue
    owner, attr = module, path
    if "." in path:
      cls, attr = path.split(".")
      owner = getattr(module, cls)
    setattr(owner, attr, _wrap(hook, getattr(owner, attr)))


class _PatchOnImport(importlib.abc.MetaPathFinder):
  """Finds a hooked module with the other finders and patches it right after it executes."""

  def find_spec(self, fullname, path, target=None):
    if fullname not in _MODULES:
      return None
    for finder in sys.meta_path:
      if finder is self or not hasattr(finder, "find_spec"):
        continue
      spec = finder.find_spec(fullname, path, target)
      if spec is not None and spec.loader is not None:
        run = spec.loader.exec_module

        def exec_module(module, run=run):
          run(module)
          _patch(module)

        spec.loader.exec_module = exec_module
        return spec
    return None


if _PLAN is not None:
  for _name in _MODULES:
    if _name in sys.modules:
      _patch(sys.modules[_name])
  sys.meta_path.insert(0, _PatchOnImport())
  if _KILL is not None:
    sys.stdout, sys.stderr = _Serialized(sys.stdout), _Serialized(sys.stderr)
  if _KILL is not None and _KILL["at"] == "start":
    _later(float(_KILL["delay"]))
