"""helpers.ports: the loopback ports of the multi-worker tests stay apart when tests run at once
(pytest-xdist workers, or two runs on one machine)."""

import os
import socket
import subprocess
import sys

from helpers import ports
from helpers.paths import REPO_ROOT

PICK = "from helpers import ports; print(*(ports.free_port() for _ in range(20)))"


def test_two_processes_picking_at_once_never_share_a_port():
  mine = {ports.free_port() for _ in range(20)}
  # The other process starts where this one did (same worker name): only the claims part them.
  env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "tests"),
         "PYTEST_XDIST_WORKER": os.environ.get("PYTEST_XDIST_WORKER", "gw0")}
  out = subprocess.run([sys.executable, "-c", PICK], env=env, capture_output=True, text=True,
                       timeout=60)
  assert out.returncode == 0, out.stderr[-2000:]
  theirs = {int(p) for p in out.stdout.split()}
  assert len(mine) == len(theirs) == 20 and not mine & theirs, (sorted(mine), sorted(theirs))
  assert all(20000 <= p < 32768 for p in mine | theirs)  # below the ephemeral range


def test_a_port_something_listens_on_is_passed_over(monkeypatch):
  with socket.socket() as busy:
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    taken = busy.getsockname()[1]
    monkeypatch.setattr(ports, "_PORTS_LOW", taken)  # the next pick would be `taken`
    monkeypatch.setattr(ports, "_PORTS_HIGH", taken + 1000)
    monkeypatch.setattr(ports, "_cursor", [0])
    assert ports.free_port() != taken
