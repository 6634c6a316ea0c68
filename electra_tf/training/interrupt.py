"""SIGINT / SIGTERM during training: finish the current step, save, stop with one line.

A training step runs inside a long `tf.function` call, during which Python signal handlers
cannot run (CPython runs them in the main thread between byte codes). So the C-level handler's
wake-up byte (`signal.set_wakeup_fd`) is read by a watcher thread, which sets the `requested`
variable at once; the training loop reads that variable before each step and stops after the
step in progress. A second signal ends the process at once (exit status 128 + signal, no
traceback, nothing saved after the last checkpoint).

Under MultiWorkerMirroredStrategy the loop takes the maximum of `requested` over the workers
before each step (an all-reduce of one integer), so a signal on any worker stops every worker
after the same step, and all of them take part in the same collective save.

The route of one Ctrl-C: `StopRequest.watching` (entered by `loop.Trainer.train`) installed
the handlers -> the watcher thread (`StopRequest._watch`) reads the wake-up byte and calls
`StopRequest.request`, which sets `requested` -> before its next step the compiled loop
(`step_loop.make_loop`) reads it through `step_loop.agreed_stop` and returns `stopped` ->
`loop.Trainer._train_loops` saves the step reached (`stops.StepSaver.save` ->
`checkpointing.CheckpointKeeper.save`) and raises `stops.StepSaver.stopped`'s `Interrupted`
-> `console.one_line_errors` prints its line and exits with 128 + the signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator

import tensorflow as tf

from electra_tf import early_interrupt

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
  """Training stopped on a signal after saving; `exit_code` is 128 + the signal number."""

  def __init__(self, message: str, signum: int):
    super().__init__(message)
    self.exit_code = 128 + signum


class StopRequest:
  """Holds the first stop signal's number (0: none) in a host variable the loop can read."""

  def __init__(self):
    with tf.init_scope(), tf.device("/cpu:0"):
      self.requested = tf.Variable(0, dtype=tf.int32, trainable=False, name="stop_requested")

  @property
  def signum(self) -> int:
    return int(self.requested.numpy())

  def request(self, signum: int) -> None:
    """Called on a signal: the first one asks the loop to stop; a second one exits now."""
    if self.signum:
      sys.stderr.write(f"{signal.Signals(signum).name} again: exiting at once without "
                       "saving\n")
      sys.stderr.flush()
      os._exit(128 + signum)
    self.requested.assign(int(signum))

  @contextlib.contextmanager
  def watching(self) -> Iterator[StopRequest]:
    """Installs the handlers for the duration of training (main thread only; else a no-op).

    No signal is lost at either end: the wake-up fd is set before the handlers and reset
    after them, so a signal in between reaches the watcher or the previous handler (the
    other order let one reach neither). A signal that came while ours were installed but
    that the block did not act on (it ended without an exception, e.g. after its last
    check) is raised again once the previous handlers are back, so they see it.
    """
    if threading.current_thread() is not threading.main_thread():
      yield self
      return
    early_interrupt.raise_if_swallowed()  # a Ctrl-C before training that nothing acted on
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    stop = threading.Event()
    thread = threading.Thread(target=self._watch, args=(reader, stop), daemon=True,
                              name="stop-request-watcher")
    thread.start()
    seen: list[int] = []  # signals our Python-level handler ran for (in the main thread)
    old_fd, acted = None, True
    try:
      old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
      for s in SIGNALS:  # the watcher acts at once; this only notes it, in the main thread
        signal.signal(s, lambda signum, frame: seen.append(signum))
      yield self
      acted = False  # no exception: the block did not stop on a signal
    finally:
      for s, handler in previous.items():
        signal.signal(s, handler)
      if old_fd is not None:
        signal.set_wakeup_fd(old_fd)
      stop.set()
      writer.close()
      thread.join(timeout=5)
      reader.close()
    if seen and not acted:
      signal.raise_signal(seen[0])

  def _watch(self, reader: socket.socket, stop: threading.Event) -> None:
    """Reads wake-up bytes; sees a signal while the main thread is inside TensorFlow."""
    while not stop.is_set():
      try:
        data = reader.recv(16)
      except OSError:
        return
      if not data:
        return
      for signum in data:
        if signum in SIGNALS:
          self.request(signum)
