"""Ctrl-C outside training: one line and exit status 130, never a traceback.

While a command starts (e.g. the seconds TensorFlow takes to import) nothing has been written
yet, so a Ctrl-C ends the process at once with its line (`install`, the first call of every
entry point, before `console.quiet_logs`). Once ``main`` runs, `console.one_line_errors` calls
`hand_over`: a first Ctrl-C raises KeyboardInterrupt, which unwinds (closing files) to its one
line, and a second one while it unwinds ends the process at once with that line instead of a
traceback "during handling of the above exception". Training installs its own handlers meanwhile
(`electra_tf/training/interrupt.py`) and puts these back after.
"""

from __future__ import annotations

import os
import signal
import sys
import threading


def _interrupted(signum: int, frame: object) -> None:
  sys.stderr.write(f"{os.path.basename(sys.argv[0])}: interrupted\n")
  sys.stderr.flush()
  os._exit(128 + signum)


_unanswered: list[int] = []  # a first Ctrl-C's signal, until its KeyboardInterrupt ends main


def _raise_once(signum: int, frame: object) -> None:
  signal.signal(signal.SIGINT, _interrupted)  # a second Ctrl-C: at once
  _unanswered.append(signum)
  raise KeyboardInterrupt


def raise_if_swallowed() -> None:
  """Raises again the KeyboardInterrupt of a first Ctrl-C that library code caught and dropped
  (TensorFlow's C++ op dispatch swallows an exception raised inside its isinstance checks, so
  a run used to go on and train), at the points that ask: every progress line
  (``console.log``), before training starts and between fine-tuning's trials."""
  if _unanswered:
    _unanswered.clear()
    raise KeyboardInterrupt


def install() -> None:
  """Takes over SIGINT while Python's default handler has it (main thread only)."""
  if (threading.current_thread() is threading.main_thread()
      and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
    signal.signal(signal.SIGINT, _interrupted)


def hand_over() -> None:
  """From `install`'s handler to one that raises KeyboardInterrupt once, then exits at once."""
  if signal.getsignal(signal.SIGINT) is _interrupted:
    signal.signal(signal.SIGINT, _raise_once)
