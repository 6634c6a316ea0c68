"""Loopback ports for the multi-worker tests' clusters, safe with tests running at once.

Ports come from below the kernel's ephemeral range (32768-60999 by default), so no bind to port
0 and no outgoing connection is given one between picking it and the server's bind. A picked
port is claimed machine-wide for the life of the picking process (an abstract Unix socket named
after it, Linux), so two pytest-xdist workers, or two test runs at once, never hand out the same
port; each worker starts at its own place.
"""

from __future__ import annotations

import json
import os
import socket
import sys

_PORTS_LOW, _PORTS_HIGH = 20000, 32768
_claims: list[socket.socket] = []  # closed by the kernel when this process exits
_cursor: list[int] = []


def _claim(port: int) -> bool:
  """True if this process now holds `port`'s claim (no other process of the tests has it)."""
  if not sys.platform.startswith("linux"):
    return True
  claim = socket.socket(socket.AF_UNIX)
  try:
    claim.bind(f"\0electra-tf-test-port-{port}")
  except OSError:
    claim.close()
    return False
  _claims.append(claim)
  return True


def free_port() -> int:
  """A TCP port on 127.0.0.1 that nothing listens on now and that no other test process (nor
  this one before) was given."""
  span = _PORTS_HIGH - _PORTS_LOW
  if not _cursor:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
    _cursor.append(int(worker) * 1000 % span if worker.isdigit() else 0)
  for _ in range(span):
    port = _PORTS_LOW + _cursor[0]
    _cursor[0] = (_cursor[0] + 1) % span
    if not _claim(port):
      continue
    with socket.socket() as s:
      try:
        s.bind(("127.0.0.1", port))
      except OSError:  # in use by something outside the tests: the next one
        continue
    return port
  raise RuntimeError(f"no free loopback port left in {_PORTS_LOW}..{_PORTS_HIGH - 1}")


def two_worker_tf_configs() -> list[str]:
  """TF_CONFIG values (JSON) of a 2-worker cluster on free loopback ports, worker 0 first."""
  workers = [f"127.0.0.1:{free_port()}" for _ in range(2)]
  return [json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}})
          for i in range(2)]


