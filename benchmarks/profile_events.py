"""What the profilers share: the ops a TensorFlow profile's executor threads ran, and how long
any of them was running."""

from __future__ import annotations

import glob
import os

from tensorflow.tsl.profiler.protobuf import xplane_pb2


def op_events(logdir: str):
  """(name, type, start s, duration s) of every op the executor threads ran."""
  path = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))[-1]
  space = xplane_pb2.XSpace()
  with open(path, "rb") as f:
    space.ParseFromString(f.read())
  for plane in space.planes:
    if plane.name != "/host:CPU":
      continue
    for line in plane.lines:
      if not line.name.startswith("tf_Compute"):
        continue
      for event in line.events:
        full = plane.event_metadata[event.metadata_id].name
        if ":" not in full or full.startswith(("Thread", "Executor")):
          continue
        name, op_type = full.rsplit(":", 1)
        yield (name, op_type, line.timestamp_ns * 1e-9 + event.offset_ps * 1e-12,
               event.duration_ps * 1e-12)


def busy_time(intervals: list[tuple[float, float]]) -> float:
  """Length of the union of [start, end) intervals."""
  total, end = 0.0, float("-inf")
  for start, stop in sorted(intervals):
    if stop > end:
      total += stop - max(start, end)
      end = stop
  return total
