"""tests/helpers/procs.wait_for_line keeps its deadline, also for a child that prints nothing or
half a line and then hangs, and returns the output up to a matching line."""

import subprocess
import sys
import time

import pytest
from helpers import procs


def _child(code: str) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, "-u", "-c", code], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize("code", [
    "import time; time.sleep(60)",  # silent
    "import sys, time; sys.stdout.write('step 1 of'); sys.stdout.flush(); time.sleep(60)",
], ids=["silent", "half_a_line"])
def test_a_hanging_child_fails_the_test_at_the_deadline(code):
  proc = _child(code)
  start = time.monotonic()
  with pytest.raises(pytest.fail.Exception, match="no line matching 'step 2'"):
    procs.wait_for_line(proc, "step 2", timeout=2)
  assert time.monotonic() - start < 10  # a blocking read would wait for the child's 60 s
  assert proc.poll() is not None  # and the child is killed


def test_the_matching_line_and_the_output_before_it_are_returned():
  proc = _child("import time\nfor i in range(3): print(f'step {i} é')\ntime.sleep(1)\n"
                "print('done')")
  m, seen = procs.wait_for_line(proc, r"^step (\d) é$", timeout=60)
  assert m.group(1) == "0" and seen.startswith("step 0 é\n")
  assert seen + procs.finish(proc, timeout=60) == "step 0 é\nstep 1 é\nstep 2 é\ndone\n"


def test_a_child_ending_without_the_line_fails_at_once():
  proc = _child("print('only this')")
  start = time.monotonic()
  with pytest.raises(pytest.fail.Exception, match="only this"):
    procs.wait_for_line(proc, "never", timeout=60)
  assert time.monotonic() - start < 30
