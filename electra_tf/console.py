"""Console output shared by the library and the entry points.

A run prints progress lines, one summary block and, on failure, one error line. TensorFlow's
C++ log lines (``I``/``W``/``E`` with a timestamp: cuInit on a CPU machine, oneDNN,
cpu_feature_guard), absl-formatted log lines and Python warnings are hidden unless
``--verbose`` (or absl's ``-v N``, N > 0) is given; the program's own absl records become plain
progress lines. With ``--verbose`` an error line is preceded by its traceback.

Entry points start with ``early_interrupt.install()`` (a Ctrl-C while loading is one line),
then call ``quiet_logs(argv)`` and ``use_tf_keras()`` before importing TensorFlow (it reads the
C++ log level and the Keras choice from the environment at import), then ``run(main, prog)``
(absl programs: adds ``--verbose``, one-line flag errors) or wrap their work in
``one_line_errors(prog, verbose)`` themselves.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import re
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence

from electra_tf import early_interrupt, folder_lock

# A line written by TensorFlow's C++ logging or by absl (C++ or Python):
# "2026-01-01 12:00:00.123456: I tensorflow/...", "I0000 00:00:17... file.cc:12] ...",
# "WARNING: All log messages before absl::InitializeLog() ...".
# "W0000 00:00:1795688891.045274   20085 file.cc:364] ..." (absl before InitializeLog),
# LiteRT's "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." and the TFLite
# quantizer's "fully_quantize: 0, inference_type: 6, ..." (printed to stdout).
LOG_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] "
    r"|[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ "
    r"|WARNING: All log messages before absl::InitializeLog"
    r"|INFO: |fully_quantize: \d)")

VERBOSE_SWITCHES = ("--verbose", "--verbose=true", "--verbose=True", "--verbose=1")
# Library code whose absl log records are progress of this program (shown as plain lines).
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OWN_DIRS = tuple(os.path.join(_ROOT, d) + os.sep for d in ("electra_tf", "data_prep"))
RULE = "=" * 80
WIDTH = 100  # a settings block's lines (``wrapped``) stay within this many characters
_verbose = False  # set by quiet_logs(): whether library logs are shown


def log(message: str = "") -> None:
  """Prints one progress line at once (no buffering, so logs interleave correctly), text and
  newline in one write: a Ctrl-C never leaves a line unended for the next one to join. A
  first Ctrl-C that library code swallowed is raised again here, before the line (main
  thread; see ``early_interrupt.raise_if_swallowed``)."""
  if threading.current_thread() is threading.main_thread():
    early_interrupt.raise_if_swallowed()
  print(message + "\n", end="", flush=True)


def summary(title: str, lines: Sequence[str]) -> None:
  """Prints the one summary block a run ends with: a rule, ``title``, ``lines``, a rule."""
  log("\n".join([RULE, title, *lines, RULE]))


def is_verbose() -> bool:
  """Whether ``quiet_logs(argv)`` found ``--verbose`` (library logs shown, fuller output)."""
  return _verbose


def setting_value(value: object) -> str:
  """A setting as a settings block shows it: a string as it is, anything else as JSON."""
  return value if isinstance(value, str) else json.dumps(value)


def wrapped(label: str, items: Sequence[str], width: int = WIDTH) -> list[str]:
  """``  label: a, b, c`` over as many lines as ``width`` needs, an item never split (the
  lines of the settings block a run starts with)."""
  lines = [f"  {label}:"]
  for i, item in enumerate(items):
    piece = f" {item}{',' if i < len(items) - 1 else ''}"
    if len(lines[-1]) + len(piece) > width and lines[-1].strip().endswith(","):
      lines.append("   ")
    lines[-1] += piece
  return lines


TRAIN_EXTRA = 'pip install ".[train]"'  # TensorFlow & co. (requirements.txt), from a checkout
DATA_EXTRA = 'pip install ".[data]"'  # Apache Beam (requirements-data.txt), from a checkout


class MissingExtra(ImportError):
  """What was asked needs a package of an extra this install left out (``.[device]`` has no
  TensorFlow); its message names the extra's install command and stands as the error line."""


def has_module(name: str) -> bool:
  """Whether the top-level package ``name`` can be imported; nothing loads."""
  try:
    return importlib.util.find_spec(name) is not None
  except (ImportError, ValueError):  # a broken, half-removed or blocked install counts as missing
    return False


def has_tensorflow() -> bool:
  """Whether TensorFlow is installed (a ``.[device]`` install leaves it out); nothing loads."""
  return has_module("tensorflow")


def needs_tensorflow(what: str) -> MissingExtra:
  """The error for ``what`` (``this command``, ``--model x, a SavedModel,``) without
  TensorFlow: one line naming the extra to install."""
  return MissingExtra(f"{what} needs TensorFlow, which this install lacks (the device extra "
                      f"runs only .tflite models): {TRAIN_EXTRA}")


def require_tensorflow(prog: str) -> None:
  """Ends the program with ``<prog>: error: this command needs TensorFlow ...: pip install
  ".[train]"`` (status 1, as any error) when TensorFlow is not installed, before anything
  imports it: a device install's training and conversion commands, ``--help`` included."""
  if not has_tensorflow():
    sys.exit(f"{prog}: error: {needs_tensorflow('this command')}")


def require_beam(prog: str) -> None:
  """Ends the program in one line naming the ``data`` extra when Apache Beam is not installed
  (it is not in the ``train`` set), before anything imports it."""
  if not has_module("apache_beam"):
    sys.exit(f"{prog}: error: this command needs Apache Beam, which this install lacks: "
             f"{DATA_EXTRA}")


def venv_command(script: str, module: str) -> str:
  """How to run ``script``, a command installed beside this Python (the venv's ``bin/``), as
  printed from the working folder: its path (relative when below the working folder), else
  ``<this python> -m <module>``. A bare ``tensorboard`` is not on PATH outside the venv."""
  path = os.path.join(os.path.dirname(sys.executable), script)
  if not os.path.exists(path):
    return f"{_as_typed(sys.executable)} -m {module}"
  return _as_typed(path)


def _as_typed(path: str) -> str:
  relative = os.path.relpath(path)
  if relative.startswith(os.pardir):
    return path
  return relative if os.sep in relative else os.path.join(os.curdir, relative)


def _positive(value: str) -> bool:
  try:
    return int(value) > 0
  except ValueError:
    return True  # "-v" as a plain switch (argparse), followed by something else


def verbose_requested(argv: Sequence[str] | None = None) -> bool:
  """True when the command line asks for library logs and tracebacks.

  ``--verbose`` (``=true``/``=1``), or absl's own ``-v N`` / ``--verbosity N`` with N > 0
  (``-v`` alone, an argparse switch, counts too).
  """
  argv = list(sys.argv if argv is None else argv)[1:]
  for i, arg in enumerate(argv):
    if arg in VERBOSE_SWITCHES:
      return True
    name, eq, value = arg.partition("=")
    if name in ("-v", "--verbosity"):
      if eq:
        if _positive(value):
          return True
      elif i + 1 < len(argv):
        if _positive(argv[i + 1]):
          return True
      elif name == "-v":
        return True
  return False


class _PlainFormatter(logging.Formatter):
  """An absl record of this program as a plain progress line (``warning:`` when it warns)."""

  def format(self, record: logging.LogRecord) -> str:
    message = record.getMessage()
    if record.levelno >= logging.ERROR:
      return f"error: {message}"
    return f"warning: {message}" if record.levelno >= logging.WARNING else message


def _own_or_error(record: logging.LogRecord) -> bool:
  """Records of this program's code pass; other libraries' only from ERROR up."""
  path = os.path.abspath(record.pathname)
  own = path.startswith(_OWN_DIRS) or os.path.dirname(path) == _ROOT
  return own or record.levelno >= logging.ERROR


def quiet_logs(argv: Sequence[str] | None = None) -> bool:
  """Hides library logs unless ``--verbose``; returns whether verbose. Call before TF import.

  Quiet: TensorFlow's C++ logs off (``TF_CPP_MIN_LOG_LEVEL=3`` unless the environment sets
  it), Python warnings and TensorFlow's Python logger below ERROR off, and absl records of this
  program's own code printed as plain lines (other libraries' absl records only from ERROR).
  Verbose: everything, in the libraries' own formats.
  """
  global _verbose
  verbose = _verbose = verbose_requested(argv)
  if verbose:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
  else:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore")
  logging.getLogger("tensorflow").setLevel(logging.INFO if verbose else logging.ERROR)
  with contextlib.suppress(ImportError):
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.INFO)
    if not verbose:
      handler = absl_logging.get_absl_handler().python_handler
      handler.setFormatter(_PlainFormatter())
      handler.addFilter(_own_or_error)
  return verbose


def use_tf_keras() -> None:
  """Makes TensorFlow's ``tf.keras`` the tf_keras package (Keras 2), which every model here is
  written for, unless the environment already chooses (``TF_USE_LEGACY_KERAS``). Call before
  TensorFlow loads: it reads the choice at import."""
  os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


class _FdFilter:
  """Filters what is written to file descriptor ``fd`` through a pipe and a reader thread."""

  def __init__(self, fd: int):
    self.fd, self.held = fd, []
    read_end, write_end = os.pipe()
    self.real = os.dup(fd)
    os.dup2(write_end, fd)
    os.close(write_end)
    self.reader = threading.Thread(target=self._pump, args=(read_end,), daemon=True)
    self.reader.start()

  def _pump(self, read_end: int) -> None:
    with os.fdopen(read_end, "rb") as pipe:
      for raw in pipe:
        line = raw.decode("utf-8", "replace")
        if line.startswith("F") and LOG_LINE.match(line):
          os.write(self.real, raw)  # fatal: at once, before a crash
        elif not LOG_LINE.match(line):
          self.held.append(raw)

  def close(self, release: bool) -> None:
    os.dup2(self.real, self.fd)  # closes the pipe's last write end: the reader sees its end
    self.reader.join(timeout=10)
    if release and self.held:
      os.write(self.real, b"".join(self.held))
    os.close(self.real)


@contextlib.contextmanager
def native_logs_hidden() -> Iterator[None]:
  """Hides the log lines C++ code writes straight to file descriptors 1 and 2 while the block
  runs (absl's ``W0000 ... tf_tfl_flatbuffer_helpers.cc:364] Ignored output_format``, LiteRT's
  ``INFO: Created TensorFlow Lite XNNPACK delegate``), which no log level silences; nothing is
  hidden after ``quiet_logs(argv)`` with ``--verbose``.

  Fatal lines (``F...``) pass at once, so a crash is explained. Other lines (a converter's
  diagnostics) are held: printed when the block ends normally, dropped when it raises (the
  exception carries them and becomes one error line; ``--verbose`` shows everything).
  """
  if _verbose:
    yield
    return
  sys.stdout.flush()
  sys.stderr.flush()
  filters = [_FdFilter(1), _FdFilter(2)]
  failed = True
  try:
    yield
    failed = False
  finally:
    sys.stdout.flush()
    sys.stderr.flush()
    for fd_filter in filters:
      fd_filter.close(release=not failed)


def run(main: Callable[[list[str]], object], prog: str,
        argv: Sequence[str] | None = None) -> None:
  """``absl.app.run(main)`` with a ``--verbose`` flag and one-line errors.

  A bad flag, a ``UsageError`` or any exception in ``main`` ends the program with
  ``<prog>: error: <one line>`` (the traceback first with ``--verbose``). Call ``quiet_logs``
  before importing TensorFlow, and this after defining the program's flags.
  """
  from absl import app, flags

  if "verbose" not in flags.FLAGS:
    flags.DEFINE_bool("verbose", False, "Library logs (TensorFlow, absl) and tracebacks.")

  def parse(args: list[str]) -> list[str]:
    try:
      return flags.FLAGS(args)
    except flags.Error as e:
      sys.exit(f"{prog}: error: {e}")

  def checked_main(args: list[str]) -> object:
    with one_line_errors(prog, flags.FLAGS.verbose or verbose_requested(sys.argv)):
      return main(args)

  app.run(checked_main, argv=list(sys.argv if argv is None else argv), flags_parser=parse)


def error_line(error: BaseException, name_type: bool = True) -> str:
  """The first non-blank line of an exception's message (its type's name if it has none).

  ``name_type``: the type is named in front when the message may not say what went wrong on
  its own (any type but ValueError, FileNotFoundError, FileExistsError, PermissionError,
  MissingExtra), as
  a program's error line does; without it the line is quoted as it stands, inside another one.
  """
  message = getattr(error, "message", None) or str(error)
  first = next((line.strip() for line in message.splitlines() if line.strip()), "")
  if not first:
    return type(error).__name__
  if not name_type or isinstance(
      error, ValueError | FileNotFoundError | FileExistsError | PermissionError | MissingExtra):
    return first
  return f"{type(error).__name__}: {first}"


@contextlib.contextmanager
def one_line_errors(prog: str, verbose: bool = False) -> Iterator[None]:
  """Turns any exception into ``<prog>: error: <one line>`` and exit status 1.

  With ``verbose`` the traceback is printed first (not for absl's ``UsageError``, a mistake on
  the command line). An exception carrying an ``exit_code`` (training stopped by a signal,
  after saving) prints its line and exits with that status; Ctrl-C elsewhere exits 130 with
  one line. An exception whose ``exit_at_once`` is true (a multi-worker training stop, after
  every worker saved) ends the process right after its line, skipping interpreter teardown.
  ``SystemExit`` passes through unchanged.
  """
  early_interrupt.hand_over()
  try:
    yield
  except SystemExit:
    raise
  except Exception as e:  # noqa: BLE001 -- the edge of the program: one line, not a traceback
    if _disguised_interrupt(e):
      _interrupted(prog)
    at_once = getattr(e, "exit_at_once", False)
    if isinstance(getattr(e, "exit_code", None), int):
      sys.stderr.write(f"{prog}: {e}\n")
      if at_once:
        _exit_at_once(e.exit_code)
      sys.exit(e.exit_code)
    if type(e).__name__ == "UsageError":
      sys.exit(f"{prog}: error: {e}")
    if verbose:
      traceback.print_exc()
    if at_once:
      sys.stderr.write(f"{prog}: error: {error_line(e)}\n")
      _exit_at_once(1)
    sys.exit(f"{prog}: error: {error_line(e)}")
  except KeyboardInterrupt:
    _interrupted(prog)


def _interrupted(prog: str) -> None:
  sys.stderr.write(f"{prog}: interrupted\n")
  sys.exit(130)


def _disguised_interrupt(error: Exception) -> bool:
  """A Ctrl-C whose handler ran while pybind11 was turning a C++ error (a tf.io.gfile
  NotFoundError) into Python: pybind11 reports it as a RuntimeError naming both."""
  return (isinstance(error, RuntimeError)
          and "REPLACED BY KeyboardInterrupt" in str(error) and "pybind11" in str(error))


def _exit_at_once(status: int) -> None:
  """Ends the process with ``status`` once its output is flushed, skipping interpreter
  teardown (see one_line_errors)."""
  folder_lock.release_all()  # atexit handlers do not run: the model folder's lock is freed
  sys.stdout.flush()
  sys.stderr.flush()
  logging.shutdown()
  os._exit(status)
