"""The Beam build's progress line: each job writes its counts to a scratch file in a folder the
driver watches (``report_progress``, in the worker), and the driver prints ``D documents, T tokens
done (J/N jobs)`` from them (``ProgressLine``), then the bad records the jobs named.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from electra_tf.data_prep.beam_inputs import BadRecords

_REPORT_EVERY_S = 2.0
_last_report: dict[int, float] = {}


def report_progress(progress_dir: str | None, job_id: int, bad: BadRecords,
                    tokens: int, done: bool, counts: dict | None = None) -> None:
  """Writes the job's counts for the progress line (every 2 s at most, and when done): a
  scratch file renamed whole, not fsynced (it only feeds the console)."""
  now = time.monotonic()
  if not (progress_dir and os.path.isdir(progress_dir)) or (
      not done and now - _last_report.get(job_id, -_REPORT_EVERY_S) < _REPORT_EVERY_S):
    return
  _last_report[job_id] = now
  path = os.path.join(progress_dir, f"job-{job_id}.json")
  with open(path + ".part", "w") as f:
    json.dump({"documents": bad.documents, "tokens": tokens, "done": done,
               "bad": bad.messages, "counts": counts or {}}, f)
  os.replace(path + ".part", path)


class ProgressLine:
  """Prints ``D documents, T tokens done (J/N jobs)`` every `every_s` seconds from the
  workers' reports, and once at the end."""

  def __init__(self, folder: str, num_jobs: int, out, every_s: float = 10.0):
    self._folder, self._num_jobs, self._out, self._every_s = folder, num_jobs, out, every_s
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._loop, daemon=True)

  def reports(self) -> list[dict]:
    out = []
    for name in sorted(n for n in os.listdir(self._folder) if n.endswith(".json")):
      with contextlib.suppress(OSError, ValueError), open(os.path.join(self._folder, name)) as f:
        out.append(json.load(f))
    return out

  def line(self) -> str:
    reports = self.reports()
    docs, tokens = (sum(r[k] for r in reports) for k in ("documents", "tokens"))
    done = sum(bool(r["done"]) for r in reports)
    return f"progress: {docs} documents, {tokens} tokens done ({done}/{self._num_jobs} jobs)"

  def _loop(self) -> None:
    while not self._stop.wait(self._every_s):
      print(self.line(), file=self._out, flush=True)

  def __enter__(self) -> ProgressLine:
    self._thread.start()
    return self

  def __exit__(self, *exc) -> None:
    self._stop.set()
    self._thread.join()
    for report in self.reports():
      for message in report["bad"]:
        print(f"warning: {message}", file=self._out)
    print(self.line(), file=self._out, flush=True)
