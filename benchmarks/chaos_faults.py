"""What a faulted run's output and folder say about its fault (benchmarks/chaos.py): how a
killed run ended, an error fault taken, a second run refused (by the same path, a bind mount,
another PID namespace, without hard links), a paused holder stopped after its lease was taken,
a fault on worker 1 of two, and the old settings' work kept by a set-aside."""

from __future__ import annotations

import hashlib
import os
import pathlib
import re

from chaos_runs import (
  HEADING_RULE,
  MARKER,
  PAUSE,
  REJECTED_LINE,
  SAVED_LINE,
  SHORT,
  STEP_LINE,
  STOP_LINE,
  Run,
)


def after_kill(output: str, marker: str = MARKER) -> list[str]:
  """The non-empty lines printed after the kill marker (a line the marker split counts once)."""
  i = output.find(marker)
  if i < 0:
    return []
  rest = output[i + len(marker):]
  return [line for line in rest.splitlines() if line.strip()]


EXPECTED_STATUS = {"SIGKILL": {-9}, "SIGTERM": {143, -15}, "SIGINT": {130, -2}}


def kill_problems(fault: str, signal_name: str, r: Run, printed: set[str] = frozenset()
                  ) -> list[str]:
  """What is wrong with how a killed run ended: its exit status, the time it took to stop, the
  lines the kill caused: at most one line of at most SHORT characters, besides what a first
  SIGINT / SIGTERM lets finish (the progress line of the step in progress, the ``Saved`` lines
  of a save in progress and of the stop's save, the line of a checkpoint the restore in
  progress moved aside) and a phase heading or a line the signal caught being printed (one
  write, which Python finishes before it runs the handler): a line of the uninterrupted run's
  output, ``printed``."""
  if r.problem:
    return [f"{fault}: {r.problem}"]
  lines = after_kill(r.output)
  if len(lines) >= 3 and HEADING_RULE.match(lines[0]) and HEADING_RULE.match(lines[2]):
    lines = lines[3:]  # a phase heading being printed (one write) when the signal came
  elif lines and lines[0] in printed and not (STEP_LINE.match(lines[0])
                                              or SAVED_LINE.match(lines[0])):
    lines = lines[1:]  # a line of the run's own being printed when the signal came
  steps = sum(1 for line in lines if STEP_LINE.match(line))
  saves = sum(1 for line in lines if SAVED_LINE.match(line))
  other = [line for line in lines
           if not (STEP_LINE.match(line) or SAVED_LINE.match(line) or REJECTED_LINE.match(line))]
  went_on = steps > 1 or saves > 2
  problems = []
  if r.returncode == 0 and (other or went_on):
    problems.append(f"{fault}: the run went on and ended with status 0 ({len(lines)} lines "
                    f"after the signal, the last: {lines[-1][:100]!r})")
  elif r.returncode not in EXPECTED_STATUS[signal_name] | {0}:
    problems.append(f"{fault}: exit status {r.returncode} "
                    f"({other[-1][:160] if other else 'no output'!r})")
  elif went_on:
    problems.append(f"{fault}: the run went on for {steps} progress lines and {saves} saves "
                    "after the signal")
  if len(other) > 1 and r.returncode != 0:
    problems.append(f"{fault}: {len(other)} lines after the signal: "
                    + " | ".join(line[:100] for line in other[:3]))
  long = [line for line in other if len(line) > SHORT]
  if long:
    problems.append(f"{fault}: a {len(long[0])}-character line after the signal")
  return problems


def fault_problems(fault: str, r: Run) -> list[str]:
  """What is wrong with how a run took an error fault (a read or write error, ENOSPC): it
  either goes on and completes (retried), or stops with one line of at most SHORT characters
  and exit status 1, after no more progress than the step in progress."""
  if r.problem:
    return [f"{fault}: {r.problem}"]
  if fault == "persistent read error":
    return persistent_problems(r)
  if r.returncode == 0:
    return []
  lines = after_kill(r.output)
  other = [line for line in lines if not (STEP_LINE.match(line) or SAVED_LINE.match(line))]
  problems = []
  if r.returncode != 1:
    problems.append(f"{fault}: exit status {r.returncode} "
                    f"({other[-1][:160] if other else 'no output'!r})")
  if len(other) != 1:
    problems.append(f"{fault}: {len(other)} lines after the error, not one: "
                    + " | ".join(line[:100] for line in other[:3]))
  elif len(other[0]) > SHORT:
    problems.append(f"{fault}: a {len(other[0])}-character line after the error")
  return problems


def peer_problems(first: Run) -> list[str]:
  """What is wrong with how worker 1 of a two-worker run ended: left running after worker 0
  ended (``problem``), a non-zero status when worker 0 completed, more than one error or stop
  line (``STOP_LINE``: the script's own one-line ending, or any line naming an error), or one
  longer than SHORT characters."""
  peer = first.peer
  if peer is None:
    return []
  if peer.problem:
    return [peer.problem]
  problems = []
  if first.returncode == 0 and peer.returncode != 0:
    problems.append(f"exit status {peer.returncode} while worker 0 completed")
  said = [line for line in peer.output.splitlines() if STOP_LINE.search(line)]
  if len(said) > 1:
    problems.append(f"{len(said)} error or stop lines: "
                    + " | ".join(line[:100] for line in said[-3:]))
  if any(len(line) > SHORT for line in said):
    problems.append(f"a line of {max(map(len, said))} characters")
  return problems


def second_problems(first: Run) -> list[str]:
  """What is wrong with the second run of a command started on the folder the first writes:
  it must be refused in one line naming the holder (the first run's process id), with exit
  status 1 and no checkpoint saved (a run that cannot see the holder's process, from another
  PID namespace, may first say that it watches the lease)."""
  second = first.second
  if second is None:
    return ["the second run did not start"]
  lines = [line for line in second.output.splitlines() if line.strip()
           and not WAITING.search(line)]  # from another PID namespace: it watched the lease
  saved = sorted({e["step"] for e in second.events if e["ev"] == "saved"})
  if second.returncode == 0 or saved:
    return [f"not refused: it ran beside the first (exit status {second.returncode}, saved "
            f"{len(saved)} checkpoints{f', the last ckpt-{saved[-1]}' if saved else ''})"]
  problems = []
  if len(lines) != 1 or len(lines[0]) > SHORT:
    problems.append(f"refused in {len(lines)} lines, not one short line: "
                    + " | ".join(line[:100] for line in lines[-3:]))
  if not any(str(first.pid) in line for line in lines):
    problems.append(f"its refusal does not name the holder (pid {first.pid}): "
                    f"{(lines or ['no output'])[-1][:160]!r}")
  if second.returncode != 1:
    problems.append(f"exit status {second.returncode}")
  return problems




WAITING = re.compile(r": waiting up to \d+ s for the lease of ")
LOST = re.compile(r"lost its lock on .* stopping without writing")
TOOK_OVER = re.compile(r"^Took over the lock ", re.M)


def persistent_problems(r: Run) -> list[str]:
  """A checkpoint file that fails every read (EIO, EACCES): the run must stop with status 1 in
  one short line naming the checkpoint and saying what to do, never complete around it."""
  bad = next((e["path"] for e in r.events if e["ev"] == "bad_read"), None)
  lines = [line for line in after_kill(r.output)
           if not (STEP_LINE.match(line) or SAVED_LINE.match(line))]
  if r.returncode == 0:
    return [f"persistent read error: the run completed around the unreadable {bad}"]
  problems = []
  if r.returncode != 1:
    problems.append(f"persistent read error: exit status {r.returncode}")
  if len(lines) != 1 or len(lines[0]) > SHORT:
    problems.append(f"persistent read error: {len(lines)} lines after the error, not one "
                    "short line: " + " | ".join(line[:100] for line in lines[:3]))
  elif bad and os.path.basename(bad) not in lines[0]:
    problems.append(f"persistent read error: its line does not name {os.path.basename(bad)}: "
                    f"{lines[0][:160]!r}")
  return problems


def pause_problems(r: Run) -> list[str]:
  """A holder paused past its lease (SIGSTOP), a second run of the same command meanwhile: the
  second takes the lock over after the lease (one line) and completes; the first, continued
  (SIGCONT) after that, stops with status 1 and its one line, and writes nothing more."""
  second = r.second
  if second is None:
    return ["paused holder: no second run took its place"]
  problems = []
  if second.problem or second.returncode != 0:
    last = (second.output.strip().splitlines() or ["no output"])[-1]
    problems.append(f"paused holder: the run that took over ended with "
                    f"{second.problem or f'exit status {second.returncode}'} ({last[:120]!r})")
  elif not TOOK_OVER.search(second.output):
    problems.append("paused holder: the second run did not say it took the lock over")
  lines = after_kill(r.output, PAUSE)
  if r.problem:
    problems.append(f"paused holder: {r.problem}")
  elif r.returncode != 1 or len(lines) != 1 or not LOST.search(lines[0]):
    problems.append(f"paused holder: continued, it ended with exit status {r.returncode} and "
                    f"{len(lines)} lines, not its one line: "
                    + " | ".join(line[:100] for line in lines[-3:]))
  if r.wrote:
    problems.append(f"paused holder: continued, it wrote {len(r.wrote)} files after its lease "
                    f"was taken, e.g. {r.wrote[0]}")
  return problems


def chief_problems(r: Run) -> list[str]:
  """A fault on worker 1 of two: worker 0 (the chief) ends by itself (``problem``: the harness
  had to end it), with status 0 or at most one stop line of at most SHORT characters."""
  if r.problem:
    return [f"worker 0 after the fault on worker 1: {r.problem}"]
  said = [line for line in r.output.splitlines() if STOP_LINE.search(line)]
  if r.returncode != 0 and len(said) > 1:
    return [f"worker 0 after the fault on worker 1: {len(said)} error or stop lines: "
            + " | ".join(line[:100] for line in said[-3:])]
  if any(len(line) > SHORT for line in said):
    return [f"worker 0 after the fault on worker 1: a line of {max(map(len, said))} characters"]
  return []


def digests(root: pathlib.Path) -> dict[str, str]:
  """Every file under root (relative) with the SHA-1 of its bytes."""
  found = {}
  for folder, _, names in os.walk(root):
    for name in names:
      path = os.path.join(folder, name)
      with open(path, "rb") as f:
        found[os.path.relpath(path, root)] = hashlib.sha1(f.read()).hexdigest()
  return found


def old_settings_kept(root: pathlib.Path, before: dict[str, str], paths: list[str]
                      ) -> list[str]:
  """After a set-aside of ``paths`` (the journal's, absolute): every file of ``before`` (the
  folder's digests when the earlier settings' run ended) under one of them is kept, byte for
  byte, under its set-aside name ``<path>.rejected-<n>``."""
  problems = []
  for path in paths:
    rel = os.path.relpath(path, root)
    old = {k: v for k, v in before.items() if k == rel or k.startswith(rel + os.sep)}
    if not old:
      continue
    parent = pathlib.Path(path).parent
    kept = [c for c in parent.glob(pathlib.Path(path).name + ".rejected-*")]
    found = False
    for c in kept:
      got = digests(c) if c.is_dir() else {"": hashlib.sha1(c.read_bytes()).hexdigest()}
      want = {k[len(rel) + 1:] if k != rel else "": v for k, v in old.items()}
      if all(got.get(k) == v for k, v in want.items()):
        found = True
        break
    if not found:
      problems.append(f"the earlier settings' {rel} is not kept aside ({len(kept)} "
                      f"{pathlib.Path(path).name}.rejected-* hold it otherwise)")
  return problems
