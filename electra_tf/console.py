"""Console output shared by the library and the entry points.

A run prints progress lines, one summary and, on failure, one error line. TensorFlow's C++ log
lines (``I``/``W``/``E`` with a timestamp: cuInit on a CPU machine, oneDNN, cpu_feature_guard),
absl INFO lines and Python warnings are hidden unless ``--verbose`` is given; with
``--verbose`` an error line is followed by its traceback.

Entry points call ``quiet(argv)`` before importing TensorFlow (the C++ log level is read from
the environment at import), then wrap their work in ``one_line_errors(prog, verbose)``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence

# A line written by TensorFlow's C++ logging or by absl (C++ or Python):
# "2026-01-01 12:00:00.123456: I tensorflow/...", "I0000 00:00:17... file.cc:12] ...",
# "WARNING: All log messages before absl::InitializeLog() ...".
LOG_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] "
    r"|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ "
    r"|WARNING: All log messages before absl::InitializeLog)")

VERBOSE_SWITCHES = ("--verbose", "-v", "--verbose=true", "--verbose=True", "--verbose=1")


def log(message: str = "") -> None:
  """Prints one progress line at once (no buffering, so logs interleave correctly)."""
  print(message, flush=True)


def verbose_requested(argv: Sequence[str] | None = None) -> bool:
  """True when the command line asks for library logs and tracebacks (``--verbose``/``-v``)."""
  argv = sys.argv if argv is None else argv
  return any(a in VERBOSE_SWITCHES or a.startswith("-v=") for a in argv[1:])


def quiet(argv: Sequence[str] | None = None) -> bool:
  """Hides library logs unless ``--verbose``; returns whether verbose. Call before TF import.

  An explicit ``TF_CPP_MIN_LOG_LEVEL`` in the environment is respected when not verbose.
  """
  verbose = verbose_requested(argv)
  if verbose:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
  else:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore")
  os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
  level = logging.INFO if verbose else logging.ERROR
  logging.getLogger("tensorflow").setLevel(level)
  with contextlib.suppress(ImportError):
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.INFO if verbose else absl_logging.ERROR)
  return verbose


def error_line(error: BaseException) -> str:
  """The first line of an exception's message; the type is named when it says little."""
  message = getattr(error, "message", None) or str(error)
  first = next((line.strip() for line in message.splitlines() if line.strip()), "")
  if isinstance(error, ValueError | FileNotFoundError | FileExistsError | PermissionError):
    return first or type(error).__name__
  return f"{type(error).__name__}: {first}" if first else type(error).__name__


@contextlib.contextmanager
def one_line_errors(prog: str, verbose: bool = False) -> Iterator[None]:
  """Turns any exception into ``<prog>: error: <one line>`` and exit status 1.

  With ``verbose`` the traceback is printed first. ``SystemExit`` and ``KeyboardInterrupt``
  pass through unchanged.
  """
  try:
    yield
  except (SystemExit, KeyboardInterrupt):
    raise
  except Exception as e:  # noqa: BLE001 -- the edge of the program: one line, not a traceback
    if verbose:
      traceback.print_exc()
    sys.exit(f"{prog}: error: {error_line(e)}")
