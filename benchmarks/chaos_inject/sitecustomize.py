"""Fires a planned fault inside this process; on a run's PYTHONPATH from benchmarks/chaos.py only.

Python imports ``sitecustomize`` at start-up, before the script runs. When the environment holds
``ELECTRA_CHAOS_PLAN`` (JSON), this module wraps the functions named in HOOKS as soon as their
modules are imported, appends one JSON line per event to the plan's ``events`` file, and fires
the plan's fault:

  {"events": "<path>", "kill": null | {"fault": <kind>, "at": "start" | <hook>, "call": k,
   "when": "before" | "during" | "after", "delay": seconds, "signal": "SIGINT" | null,
   "repeat": 1 | 2, "gap": seconds}}

``at: start`` fires ``delay`` seconds after the interpreter started. ``at: <hook>`` fires at the
k-th call of that hook: right before it runs, ``delay`` seconds into it (from a timer thread,
so it lands inside a write that releases the GIL), or right after it returns. A signal fault
sends ``signal`` (``repeat`` times); the other faults: ``read error`` (the k-th call and the
next ``repeat - 1`` calls raise tf.errors.UnavailableError, as a bucket's 503 does), ``write
error`` (the k-th call raises UnavailableError or, for a local atomic write, OSError EIO),
``ENOSPC`` (OSError ENOSPC: an atomic write writes part of its file first), ``second run``
(after the k-th call the harness starts the same command a second time, and this run waits
until that one ended, so the second always meets the first alive; so do ``bind mount``, ``pid
namespace`` and ``no hard links``, whose second run the harness starts in namespaces of its
own or with links refused), ``persistent read error`` (from the k-th call on, every call
reading the file the k-th read raises what TensorFlow raises for EIO or EACCES), ``paused
holder`` (signal SIGSTOP: the whole process stops itself; the harness continues it),
``no hard links`` (os.link raises EPERM all along), ``unsynced cut`` (a SIGKILL; chaos_writes
journals every write from the start). Before the fault, one marker line (MARKER, SECOND for a
second run, PAUSE for a pause) is written to the output (file descriptor 1, after flushing
Python's streams), so the harness splits what the run printed there exactly.

A hooked function that no longer exists (renamed, removed) ends the process at once with one
line and exit status MISSING_HOOK: the harness's reach never drops silently.

Events: ``call`` (hook, n, t = seconds since start, dt), ``restore`` (dir, step: where a
Trainer's restore put it), ``saved`` (dir, step of a checkpoint written), ``kill`` (signal or
fault, t), ``missing`` (hook, what), ``reached`` (fault), ``bad_read`` (path), ``set_aside``
(paths: the journal's), and an unsynced cut's ``w`` / ``rename`` / ``fsync`` (chaos_writes).
Nothing here changes what a run computes, but the fault.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib.abc
import json
import os
import signal
import sys
import threading
import time

MARKER = "@@chaos-kill@@"
SECOND = "@@chaos-second-run@@"
PAUSE = "@@chaos-pause@@"  # this run stops itself (SIGSTOP); the harness continues it
ENV = "ELECTRA_CHAOS_PLAN"
SECOND_DONE = ".second-done"  # the harness creates <events><this> once a second run ended
SECOND_WAIT = 180  # s
MISSING_HOOK = 86  # exit status of a run whose hooked function no longer exists

# hook name -> (module, attribute path) of the function wrapped
HOOKS = {
  "ckpt_save": ("tensorflow.python.checkpoint.checkpoint_management", "CheckpointManager.save"),
  "keeper_save": ("electra_tf.training.checkpointing", "CheckpointKeeper.save"),
  "ckpt_read": ("tensorflow.python.training.py_checkpoint_reader", "NewCheckpointReader"),
  "tf_state_write": ("tensorflow.python.checkpoint.checkpoint_management",
                     "update_checkpoint_state_internal"),
  "state_write": ("electra_tf.training.checkpoint_files", "write_state_file"),
  "reject": ("electra_tf.training.checkpoint_files", "reject"),
  "input_state_save": ("electra_tf.training.input_state", "InputState.save"),
  "restore": ("electra_tf.training.loop", "Trainer.restore_or_initialize"),
  "atomic_write": ("electra_tf.atomic_io", "write_bytes"),
  "staged_dir": ("electra_tf.atomic_io", "staged_dir"),
  "remove_tree": ("electra_tf.atomic_io", "remove_tree"),
  "move_aside": ("electra_tf.atomic_io", "move_aside"),
  "features_write": ("electra_tf.finetuning.features", "write_tfrecord"),
  "trial_dir": ("electra_tf.finetuning.trials", "TrialBook.prepare_dir"),
  "finished": ("electra_tf.finetuning.trials", "TrialBook.finished"),
  "evaluate": ("electra_tf.finetuning.runner", "ModelRunner.evaluate"),
  "results_write": ("electra_tf.finetuning.outputs", "write_results"),
  "test_outputs": ("electra_tf.finetuning.runner", "ModelRunner.write_test_outputs"),
  "tf1_save": ("electra_tf.checkpoints", "save_tf1_checkpoint"),
  "rmtree": ("shutil", "rmtree"),
  "set_aside": ("electra_tf.finetuning.set_aside", "move_aside"),
}
CONTEXT_HOOKS = frozenset({"staged_dir"})  # context managers: a call lasts the whole block
ERROR_FAULTS = ("read error", "write error", "ENOSPC", "persistent read error")
SECOND_RUNS = ("second run", "bind mount", "pid namespace", "no hard links")

_MODULES = frozenset(name for name, _ in HOOKS.values())
_T0 = time.monotonic()
_PLAN = json.loads(os.environ.get(ENV) or "null")
_KILL = (_PLAN or {}).get("kill")
_counts: dict[str, int] = {}
_lock = threading.Lock()
_fd = None
_os_open = os.open  # the events file's (an "unsynced cut" records os.open)
_bad_read: list[str] = []  # a persistent read error: the checkpoint every read of fails


def _event(**fields) -> None:
  """Appends one JSON line to the events file (one write: lines of threads never mix)."""
  global _fd
  if _fd is None:
    _fd = _os_open(_PLAN["events"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
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


def _mark(marker: str) -> None:
  """Flushes Python's streams and writes ``marker`` as one line to file descriptor 1."""
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):
      pass
  os.write(1, f"{marker}\n".encode())


def _fire() -> None:
  """Writes the marker line, then sends the planned signal (twice if planned) to this process."""
  signum = signal.Signals[_KILL["signal"]]
  _event(ev="kill", signal=signum.name, t=time.monotonic() - _T0)
  if signum == signal.SIGSTOP:  # a paused holder: the whole process stops until SIGCONT
    with _OUTPUT:
      _mark(PAUSE)
      os.kill(os.getpid(), signum)
    return
  with _OUTPUT:
    _mark(MARKER)
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


def _error(hook: str, path: object) -> BaseException:
  """The error a fault raises at ``hook``: what a bucket or a full disk gives there."""
  fault = _KILL["fault"]
  if fault == "persistent read error":  # what TensorFlow raises for a bad sector or EACCES
    import tensorflow as tf

    if _KILL.get("error") == "EACCES":
      return tf.errors.PermissionDeniedError(None, None, f"{path}; Permission denied")
    return tf.errors.UnknownError(None, None, f"{path}; Input/output error")
  if fault == "ENOSPC":
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
  if hook == "atomic_write" and "://" not in str(path):
    return OSError(errno.EIO, os.strerror(errno.EIO), str(path))
  import tensorflow as tf

  return tf.errors.UnavailableError(None, None, f"{path}; 503 Service Unavailable (chaos)")


def _errs(hook: str, n: int, args=()) -> bool:
  """Whether call n of ``hook`` is one the planned error fault fails (a persistent read error:
  from call k on, every call reading the file call k read)."""
  if _KILL is None or _KILL.get("fault") not in ERROR_FAULTS or _KILL["at"] != hook:
    return False
  if _KILL["fault"] == "persistent read error":
    path = str(args[0]) if args else "?"
    if n == int(_KILL["call"]):
      _bad_read.append(path)
      _event(ev="bad_read", path=path)
    return bool(_bad_read) and path == _bad_read[0]
  first = int(_KILL["call"])
  last = first + (int(_KILL.get("repeat", 1)) - 1 if _KILL["fault"] == "read error" else 0)
  return first <= n <= last


def _raise_fault(hook: str, n: int, fn, args, kwargs):
  """Runs call n of ``hook`` failing as planned."""
  path = next((a for a in (*args, *kwargs.values()) if isinstance(a, (str, os.PathLike))), "?")
  if n == int(_KILL["call"]):
    _event(ev="kill", signal=_KILL["fault"], t=time.monotonic() - _T0)
    _event(ev="reached", fault=_KILL["fault"])
    with _OUTPUT:
      _mark(MARKER)
  if _KILL["fault"] == "ENOSPC" and hook == "atomic_write":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from chaos_writes import full_disk

    with full_disk():
      return fn(*args, **kwargs)
  if hook == "ckpt_save":
    path = getattr(args[0], "directory", path)
  raise _error(hook, path)


def _record(hook: str, n: int, start: float, args, result) -> None:
  _event(ev="call", hook=hook, n=n, t=start - _T0, dt=time.monotonic() - start)
  if hook == "restore":
    _event(ev="restore", dir=args[0].settings.model_dir, step=int(result))
  elif hook == "ckpt_save":
    _event(ev="saved", dir=args[0].directory, step=_saved_step(args, result))


def _saved_step(args, result) -> int | None:
  try:
    return int(str(result).rsplit("-", 1)[-1])
  except ValueError:
    return None


def _planned(hook: str) -> tuple[int, bool]:
  with _lock:
    n = _counts[hook] = _counts.get(hook, 0) + 1
  signalled = _KILL is not None and _KILL.get("signal") and _KILL["at"] == hook
  return n, bool(signalled and _KILL["call"] == n)


def _second(hook: str, n: int) -> None:
  """After call n of ``hook``: asks the harness for a second run of this command (by the same
  path, a bind mount, another PID namespace, or without hard links)."""
  if (_KILL is not None and _KILL.get("fault") in SECOND_RUNS and _KILL["at"] == hook
      and _KILL["call"] == n):
    _event(ev="kill", signal="second run", t=time.monotonic() - _T0)
    with _OUTPUT:
      _mark(SECOND)
    # holds this run here until the second one ended (at most SECOND_WAIT s): a run with
    # nothing left to do would otherwise end, and free its folder, before the second starts
    deadline = time.monotonic() + SECOND_WAIT
    while not os.path.exists(_PLAN["events"] + SECOND_DONE) and time.monotonic() < deadline:
      time.sleep(0.05)


def _wrap(hook: str, fn):
  def wrapped(*args, **kwargs):
    n, planned = _planned(hook)
    if _errs(hook, n, args):
      return _raise_fault(hook, n, fn, args, kwargs)
    if hook == "set_aside":  # the paths the journal will name (a kill may come before it)
      _event(ev="set_aside", paths=[str(p) for p in args[1]])
    if planned and _KILL["when"] == "before":
      _fire()
    elif planned and _KILL["when"] == "during":
      _later(float(_KILL["delay"]))
    start = time.monotonic()
    result = fn(*args, **kwargs)
    _record(hook, n, start, args, result)
    if planned and _KILL["when"] == "after":
      _fire()
    _second(hook, n)
    return result

  return functools.update_wrapper(wrapped, fn)  # keeps attributes, e.g. rmtree's


def _wrap_context(hook: str, fn):
  """_wrap for a context manager: a call lasts from entering its block to leaving it."""
  @contextlib.contextmanager
  def wrapped(*args, **kwargs):
    n, planned = _planned(hook)
    if _errs(hook, n):
      _raise_fault(hook, n, fn, args, kwargs)
    if planned and _KILL["when"] == "before":
      _fire()
    elif planned and _KILL["when"] == "during":
      _later(float(_KILL["delay"]))
    start = time.monotonic()
    with fn(*args, **kwargs) as value:
      yield value
    _record(hook, n, start, args, None)
    if planned and _KILL["when"] == "after":
      _fire()
    _second(hook, n)

  return functools.update_wrapper(wrapped, fn)


def _missing(hook: str, module_name: str, path: str) -> None:
  """Ends the process: a hooked function is gone, so the harness would no longer reach it."""
  what = f"{module_name}.{path}"
  _event(ev="missing", hook=hook, what=what)
  os.write(2, (f"chaos: hook {hook}: {what} no longer exists; update HOOKS in "
               "benchmarks/chaos_inject/sitecustomize.py\n").encode())
  os._exit(MISSING_HOOK)


def _patch(module) -> None:
  for hook, (name, path) in HOOKS.items():
    if name != module.__name__:
      continue
    owner, attr = module, path
    if "." in path:
      cls, attr = path.split(".")
      owner = getattr(module, cls, None)
    fn = getattr(owner, attr, None) if owner is not None else None
    if not callable(fn):
      _missing(hook, name, path)
    setattr(owner, attr, (_wrap_context if hook in CONTEXT_HOOKS else _wrap)(hook, fn))


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
  if _KILL is not None and _KILL["at"] == "start" and _KILL.get("signal"):
    _later(float(_KILL["delay"]))
  if _KILL is not None and _KILL["fault"] == "no hard links":
    def _no_link(src, dst, *args, **kwargs):
      _event(ev="reached", fault="no hard links", path=str(dst))
      raise OSError(errno.EPERM, os.strerror(errno.EPERM), str(dst))

    os.link = _no_link
  if _KILL is not None and _KILL["fault"] == "unsynced cut":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import chaos_writes

    chaos_writes.start(_event, _PLAN["events"] + ".shadow")
