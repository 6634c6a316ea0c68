"""Ctrl-C while a command starts (e.g. while TensorFlow loads): one line and exit status 130,
not a traceback from inside an import. Nothing has been written yet, so the process ends at
once. Entry points call `install` before their imports (`console.quiet` does too);
`console.one_line_errors` calls `uninstall` once ``main`` runs, so later Ctrl-Cs go the usual
way (training's stop handlers, or one line from a KeyboardInterrupt)."""

from __future__ import annotations

import os
import signal
import sys
import threading


def _interrupted(signum: int, frame: object) -> None:
  sys.stderr.write(f"{os.path.basename(sys.argv[0])}: interrupted\n")
  sys.stderr.flush()
  os._exit(128 + signum)


def install() -> None:
  """Takes over SIGINT while Python's default handler has it (main thread only)."""
  if (threading.current_thread() is threading.main_thread()
      and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
    signal.signal(signal.SIGINT, _interrupted)


def uninstall() -> None:
  """Puts Python's default SIGINT handler back if `install` took it."""
  if signal.getsignal(signal.SIGINT) is _interrupted:
    signal.signal(signal.SIGINT, signal.default_int_handler)
