"""One trial of benchmarks/chaos.py: a series of runs of one command in a fresh folder, each with
its planned fault, rerun until it completes, with the checks of each run and of the end."""

from __future__ import annotations

import collections
import dataclasses
import pathlib
import random
import threading
import time

import chaos_checks as checks
import chaos_faults as faults
import chaos_power as power
import chaos_runs as runs
from chaos_plan import SECOND_RUNS, describe, kind_of, next_fault

FOLDER = "<folder>"  # a trial's folder in the reference run's lines
CHECKS = ("weights", "latest", "results", "lost", "aside", "leftovers", "tracebacks", "kill",
          "fault", "second run", "worker 1", "exit")


@dataclasses.dataclass
class Outcome:
  """What one trial found: per check its problems; the kills as they happened."""

  k: int
  kind: str
  variant: str = "plain"
  kills: list[str] = dataclasses.field(default_factory=list)
  faults: list[tuple[str, bool]] = dataclasses.field(default_factory=list)  # (kind, reached)
  runs: int = 0
  seconds: float = 0.0
  problems: dict[str, list[str]] = dataclasses.field(
      default_factory=lambda: collections.defaultdict(list))

  @property
  def failed(self) -> bool:
    return any(self.problems.values())


class Pace:
  """How fast runs go now compared with the reference run (the machine's load changes): the
  median, over the latest runs of a kind, of their start-up time (process start to the
  restore) over the reference run's. Timed kill moments are stretched by it."""

  def __init__(self, refs: dict):
    self._ref = {kind: ref["stats"]["restore_t"] for kind, ref in refs.items()}
    self._ratios = collections.defaultdict(lambda: collections.deque(maxlen=5))
    self._lock = threading.Lock()

  def add(self, kind: str, events: list[dict]) -> None:
    t = next((e["t"] for e in events if e["ev"] == "call" and e["hook"] == "restore"), None)
    if t is not None and self._ref[kind] > 0:
      with self._lock:
        self._ratios[kind].append(t / self._ref[kind])

  def timed(self, kind: str, kill: dict | None) -> dict | None:
    """``kill`` with its delay stretched to the current pace."""
    with self._lock:
      ratios = sorted(self._ratios[kind])
    factor = ratios[len(ratios) // 2] if ratios else 1.0
    return None if kill is None else {**kill, "delay": round(kill["delay"] * factor, 4)}



def changed(kind: str, variant: str) -> bool:
  """Whether the series' first run has other settings than the next ones (a set-aside)."""
  return "first" in runs.VARIANTS[kind][variant]


def run_trial(k: int, seed: int, kills: list[dict], data: pathlib.Path, ref: dict,
              work: pathlib.Path, pace: Pace) -> Outcome:
  """Faults and reruns one command until it completes, then checks it against the reference."""
  out = Outcome(k, kind_of(k), ref["variant"])
  start = time.monotonic()
  folder = runs.copy_data(data, out.kind, work / f"trial-{k}")
  dirs = runs.model_dirs(out.kind, folder, out.variant)
  pending, old, journal = list(kills), None, None
  new_settings = changed(out.kind, out.variant)
  while True:  # until the faults are spent and a run completes
    out.runs += 1
    cmd = runs.command(out.kind, folder, out.variant, out.runs)
    before, since = [checks.usable_step(d) for d in dirs], time.time()
    kill = pace.timed(out.kind, next_fault(pending, any(before) and "--restart" not in cmd,
                                           out.runs - 1, new_settings))
    existed, aside = checks.files(folder), checks.set_aside(folder)
    events = work / f"trial-{k}.run-{out.runs}.events"
    # a stop may take as long as a whole uninterrupted run (a SIGTERM while the first step is
    # traced is read once the step runs), never longer
    r = runs.run(cmd, kill, events, max(runs.STOP_SECONDS, ref["seconds"]),
                 runs.workers_of(out.kind, out.variant))
    (work / f"trial-{k}.run-{out.runs}.log").write_text(r.output, encoding="utf-8")
    for name, other in (("second", r.second), ("worker1", r.peer)):
      if other is not None:
        (work / f"trial-{k}.run-{out.runs}.{name}.log").write_text(other.output, "utf-8")
    pace.add(out.kind, r.events)
    check_run(out, r, folder, dirs, before, ref["saves"], "--restart" in cmd,
              peer_faulted=bool(kill and kill.get("worker")))
    out.problems["aside"] += [f"run {out.runs}: {p}" for p in checks.good_set_aside(folder, aside)]
    journal = journal or next((e["paths"] for e in r.events if e["ev"] == "set_aside"), None)
    if kill is not None:
      out.faults.append((kill["fault"], r.killed))
    if kill is not None and judge(out, kill, r, folder, events, ref,
                                  random.Random(f"cut {seed} {k} {out.runs}"), since, existed):
      continue
    if kill is not None:
      out.kills.append(describe(kill) + " (not reached)")
    if r.problem or r.returncode != 0:
      last = r.output.strip().splitlines()[-1:] or ["no output"]
      out.problems["exit"].append(f"run {out.runs}: {r.problem or f'exit status {r.returncode}'}"
                                  f" ({last[0][:160]!r})")
      break
    if out.runs == 1 and new_settings:
      old = faults.digests(folder)  # the earlier settings' work, for the set-aside's check
      continue  # a rerun of the completed command with the final flags
    if not pending:  # else a rerun of the completed command (the next fault)
      check_final(out, ref, folder, dirs)
      if old is not None and journal:
        out.problems["aside"] += faults.old_settings_kept(folder, old, journal)
      break
  out.seconds = time.monotonic() - start
  return out


def judge(out: Outcome, kill: dict, r: runs.Run, folder: pathlib.Path, events: pathlib.Path,
          ref: dict, cut: random.Random, since: float, existed: set[str]) -> bool:
  """Records what run ``r`` did with its fault; whether the fault was met (the series goes on
  with the next run), else the run is judged as one without a fault. The lines are judged with
  the trial's folder written ``<folder>``, as the reference run's, so that their length does
  not depend on where the harness runs."""
  fault, n = kill["fault"], out.runs
  r = _in_folder_terms(r, folder)
  if fault == "no hard links":
    refused = any(e["ev"] == "reached" for e in r.events + (r.second.events if r.second else []))
    out.faults[-1] = (fault, refused)
    if not refused:
      return False
  if fault == "paused holder" and r.killed:
    out.problems["fault"] += [f"run {n}: {p}" for p in faults.pause_problems(r)]
    out.kills.append(describe(kill))
    return True
  if fault in SECOND_RUNS and r.second is not None:
    out.faults[-1] = (fault, True)
    out.problems["second run"] += [f"run {n}: {p}" for p in faults.second_problems(r)]
    if r.problem or r.returncode != 0:
      out.problems["second run"].append(
          f"run {n}, the first, ended with {r.problem or f'exit status {r.returncode}'}")
    out.kills.append(describe(kill))
    return True
  if not r.killed:
    return False
  note = describe(kill)
  if kill.get("signal"):
    printed = set(ref["lines"])
    who = r.peer if kill.get("worker") else r
    out.problems["kill"] += [f"run {n}: {p}" for p in
                             faults.kill_problems(fault, kill["signal"], who, printed)]
    if kill.get("worker"):
      out.problems["worker 1"] += [f"run {n}: {p}" for p in faults.chief_problems(r)]
  else:
    out.problems["fault"] += [f"run {n}: {p}" for p in faults.fault_problems(fault, r)]
    note += f" (exit status {r.returncode})"
  if fault == "power cut" and r.returncode == -9:
    note += f" ({checks.damage(folder, since, r.marked_at, existed, r.pid, cut)})"
  if fault == "unsynced cut" and r.returncode == -9:
    note += f" ({power.drop_unsynced(events, folder)})"
  out.kills.append(note)
  return True


def _in_folder_terms(r: runs.Run, folder: pathlib.Path) -> runs.Run:
  """A copy of ``r`` (and of the runs beside it) whose output writes the folder ``<folder>``."""
  return dataclasses.replace(r, output=r.output.replace(str(folder), FOLDER), **{
      name: _in_folder_terms(other, folder) for name in ("second", "peer")
      if (other := getattr(r, name)) is not None})


def check_run(out: Outcome, r: runs.Run, folder: pathlib.Path, dirs: list[pathlib.Path],
              before: list[int], ref_saves: list[list[int]], restart: bool = False,
              peer_faulted: bool = False) -> None:
  """The checks of one run (before a power cut damages what it wrote): no traceback, no saved
  work lost (a --restart run keeps it in <folder>.before-restart-<n>, a set-aside of earlier
  settings in <dir>.rejected-<n>, whose files old_settings_kept checks byte for byte); after a
  restore, no unusable checkpoint newer than the one it chose left in place and every
  checkpoint the reference run saved after that step saved again (up to the last one this run
  saved)."""
  for who, run in (("", r), (" (second run)", r.second), (" (worker 1)", r.peer)):
    where = run and runs.traceback_of(run.output)
    if where:
      out.problems["tracebacks"].append(f"run {out.runs}{who}: {where}")
  if not peer_faulted:  # else worker 1 ends by its fault (judge)
    out.problems["worker 1"] += [f"run {out.runs}: {p}" for p in faults.peer_problems(r)]
  after = [checks.usable_step(d) for d in dirs]
  if restart and "--restart: moved" in r.output:
    kept = [max((checks.usable_step(a) for a in d.parent.glob(f"{d.name}.before-restart-*")),
                default=0) for d in dirs]
    out.problems["lost"] += [f"run {out.runs} (--restart) kept no usable ckpt-{b} of {d.name} "
                             "aside" for d, b, a in zip(dirs, before, kept, strict=True) if a < b]
  else:  # a model folder of earlier settings set aside whole (<dir>.rejected-<n>) is kept
    aside = [max((checks.usable_step(a) for a in d.parent.glob(f"{d.name}.rejected-*")),
                 default=0) for d in dirs]
    before = [0 if a and a >= b else b for b, a in zip(before, aside, strict=True)]
    out.problems["lost"] += checks.lost_work(r.events, dirs, before, after, out.runs)
  saved = collections.defaultdict(set)
  for e in r.events:
    if e["ev"] == "saved":
      saved[pathlib.Path(e["dir"])].add(e["step"])
  for e in r.events:
    if e["ev"] != "restore" or pathlib.Path(e["dir"]) not in dirs:
      continue
    d, step = pathlib.Path(e["dir"]), e["step"]
    bad = [s for s in checks.complete_steps(d)
           if s > step and checks.unusable(str(d / f"ckpt-{s}"))]
    if bad:
      out.problems["latest"].append(f"run {out.runs} resumed {d.name} at step {step} and left "
                                    f"the unusable ckpt-{bad[0]} in place")
    last = max(saved[d], default=step)
    missing = [s for s in ref_saves[dirs.index(d)] if step < s <= last and s not in saved[d]]
    if missing:
      out.problems["latest"].append(f"run {out.runs} resumed {d.name} at step {step} and did "
                                    f"not save ckpt-{missing[0]} (the uninterrupted run does)")


def guarded_trial(k: int, *args) -> Outcome:
  """run_trial, with an error of the harness itself reported as the trial's failure."""
  try:
    return run_trial(k, *args)
  except Exception as e:  # noqa: BLE001 -- one trial's line, the other trials go on
    out = Outcome(k, kind_of(k))
    out.problems["exit"].append(f"harness error: {type(e).__name__}: {e}")
    return out


def check_final(out: Outcome, ref: dict, folder: pathlib.Path, dirs: list[pathlib.Path]) -> None:
  """The disk checks of a completed series (see the module docstring)."""
  ref_dirs = runs.model_dirs(out.kind, ref["folder"], out.variant)
  finals = ref["finals"]
  out.problems["weights"] += checks.weight_problems(ref_dirs, dirs, finals)
  for d, final in zip(dirs, finals, strict=True):
    out.problems["latest"] += checks.latest_problems(d, final)
  if out.kind == "finetune":
    out.problems["results"] += checks.result_problems(
        ref["folder"] / "models" / runs.MODEL, folder / "models" / runs.MODEL, runs.TASK,
        runs.hparams_of(out.kind, out.variant)["num_trials"], runs.tasks_of(out.variant))
  out.problems["leftovers"] += [f"left {p}" for p in checks.leftovers(folder)]

