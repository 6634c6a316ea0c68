"""Randomized fault harness: kills pre-training and fine-tuning runs, fails their reads and
writes, starts them twice and cuts their power at moments drawn from a seed, reruns each until
it completes, and checks that nothing was lost.

    python benchmarks/chaos.py [--trials 40] [--seed 0] [--only K[,K...]] [--jobs 2]

Trial K (odd: pre-training, even: fine-tuning) takes its kind's settings in turn (pre-training:
plain, gradient accumulation, float16 mixed precision, a second run with --restart, or two
workers over loopback, the faults hitting the chief; fine-tuning: plain, keep_all_models false,
a GLUE task (sst) besides the user task, or flags changed after the first run: keep_all_models
false->true, num_trials 3->2, n_writes_test 2->1), from a place drawn from the seed, and draws
from (seed, K) 2-4 faults, each a kind: SIGKILL, SIGINT, SIGTERM, two SIGINTs, a power cut
(SIGKILL, then one file the run wrote in its last moments is left empty, short, or under its
temporary name), a transient read error (the 1st, or 1st and 2nd, checkpoint read raise
tf.errors.UnavailableError; planned for a run that finds a checkpoint on disk), a write error
(UnavailableError, or OSError EIO for a local atomic write), ENOSPC inside a write, or a
second run of the same command started beside it; at a moment: a time since the process
started (signals only; from 0.1 s on: before that Python itself starts), or before, during
or after the k-th call of a hooked function (chaos_inject/sitecustomize.py HOOKS: checkpoint
save, read and state file, the set-aside of a checkpoint, input state, atomic writes, staged
folders, removals and moves aside, the fine-tuning results, test predictions, feature cache,
official-name copy, trial start and finished-trial check, the dev evaluation, an rmtree). The
series starts in a fresh folder; each run is the command of one uninterrupted reference run
with the trial's final settings, with the next fault planned (a run that completes first
passes the next fault to a rerun); once the faults are spent the command is rerun until it
completes.

A small ``sitecustomize`` (benchmarks/chaos_inject/, on the runs' PYTHONPATH only) fires the
faults from inside the process, so they land inside writes that last milliseconds; call
durations measured in the reference run place the "during" moments. It prints a marker line
right before the fault, so the output after it is known exactly. A hooked function that no
longer exists stops the harness before any run (and any run that meets it) with one line.

Checks, against the reference run: final weights bit-identical (the pre-training checkpoint;
every kept fine-tuning trial's checkpoint and its tf1/ copy, optimizer slots included); every
trial's dev result present exactly once (results .json/.txt/.pkl, test predictions equal); the
latest checkpoint (state file and newest on disk) is the final one and is readable and finite,
and after each rerun no unusable checkpoint newer than its restore point is left in place and
every checkpoint the reference saves after that point is saved again; no temporary files or
partial checkpoints left; no traceback in any output; no saved work lost (a rerun restores
each model from its newest usable checkpoint and never deletes one; --restart keeps it aside);
no good checkpoint ever moved aside (``*.rejected*`` that reads back whole and finite); every
kill followed by at most one line of at most 300 characters (not counting the progress and
``Saved`` lines of the step a first SIGINT / SIGTERM lets finish) and the signal's exit
status; an error fault either retried (the run completes) or ending the run with one line and
status 1; a second run refused in one line naming the first's process id, saving nothing;
worker 1 of two ends by itself within a minute and a half of the chief (once their cluster
formed), with status 0 when the chief completed, else in at most one line, never a traceback.
Timed moments are stretched by how much slower than the reference the latest runs started.

One line per trial; a failing one ends with the arguments replaying it alone. Then the trials
failing each check, the faults reached of those drawn per kind, and last:
``chaos: <P>/<N> runs complete, nothing lost | <L> lost, <T> tracebacks (<K> faults reached of
<M> drawn)`` (P: trials passing every check; L: trials that lost saved work; T: runs whose
output held a traceback). Exit status 1 if any check failed in any trial.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import math
import os
import pathlib
import random
import resource
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # electra_tf
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import chaos_checks as checks  # noqa: E402
import chaos_runs as runs  # noqa: E402

FAULTS = {"SIGKILL": 20, "SIGINT": 12, "SIGTERM": 12, "SIGINT x2": 8, "power cut": 16,
          "read error": 10, "write error": 8, "ENOSPC": 8, "second run": 10}
SIGNALS = {"SIGKILL": "SIGKILL", "SIGINT": "SIGINT", "SIGTERM": "SIGTERM", "SIGINT x2": "SIGINT",
           "power cut": "SIGKILL"}
ERROR_AT = {"write error": ("ckpt_save", "atomic_write", "tf_state_write"),
            "ENOSPC": ("ckpt_save", "atomic_write", "input_state_save", "staged_dir", "tf1_save",
                       "tf_state_write")}
FIRST_MOMENT = 0.1  # s: before it Python itself starts (a Ctrl-C then is its own traceback)
STEP_HOOKS = {"ckpt_save", "input_state_save", "rmtree", "tf_state_write", "staged_dir",
              "atomic_write"}  # called again for each step saved
FOLDER = "<folder>"  # a trial's folder in the reference run's lines
CHECKS = ("weights", "latest", "results", "lost", "aside", "leftovers", "tracebacks", "kill",
          "fault", "second run", "worker 1", "exit")


def kind_of(k: int) -> str:
  return runs.KINDS[(k - 1) % 2]


def variant_of(seed: int, k: int) -> str:
  """Trial k's settings (chaos_runs.VARIANTS): the trials of a kind take them in turn, from a
  place drawn from the seed, so 40 trials run each setting of a kind 2-4 times."""
  names = list(runs.VARIANTS[kind_of(k)])
  start = random.Random(f"chaos settings {seed}").randrange(len(names))
  return names[(start + (k - 1) // 2) % len(names)]


def draw_kills(seed: int, k: int, stats: dict, workers: int = 1) -> list[dict]:
  """Trial k's fault plans, a function of (seed, k) and the reference run's call statistics.

  Fault r aims at the part a run still has to do after r faults (about 0.6^r of it). A read
  error is never the first fault: a fresh folder holds no checkpoint to read. Two workers get
  no second run (its own cluster would need its own ports: nothing to do with the folder)."""
  rng = random.Random(f"chaos {seed} {k}")
  kills = []
  calls = stats["calls"]
  for r in range(rng.randint(2, 4)):
    left = 0.6 ** r
    fault = rng.choices(list(FAULTS), list(FAULTS.values()))[0]
    while fault == "read error" and r == 0 or (workers > 1 and fault == "second run") or (
        fault in ERROR_AT and not set(ERROR_AT[fault]) & set(calls)):
      fault = rng.choices(list(FAULTS), list(FAULTS.values()))[0]
    kill = {"fault": fault, "signal": SIGNALS.get(fault), "repeat": 2 if fault == "SIGINT x2"
            else 1, "gap": round(rng.uniform(0.0, 1.0), 3)}
    at_start, u, hook_u, when = rng.random() < 0.35, rng.random(), rng.random(), rng.choices(
        ("before", "during", "after"), (20, 60, 20))[0]
    if fault == "read error":
      kill.update(at="ckpt_read", call=1, when="before", delay=0.0, repeat=rng.randint(1, 2))
    elif fault == "second run":
      kill.update(at="restore", call=1, when="after", delay=0.0)
    elif fault in SIGNALS and (at_start or not calls):
      span = stats["restore_t"] + (stats["seconds"] - stats["restore_t"]) * left
      kill.update(at="start", call=0, when="during",
                  delay=round(FIRST_MOMENT + u * max(span - FIRST_MOMENT, 0.0), 3))
    else:
      hooks = sorted(calls) if fault in SIGNALS else sorted(set(ERROR_AT[fault]) & set(calls))
      hook = hooks[int(hook_u * len(hooks))]
      n = max(1, math.ceil(len(calls[hook]) * left)) if hook in STEP_HOOKS else len(calls[hook])
      call = 1 + int(u * n)
      delay = round(rng.random() * calls[hook][call - 1], 4) if when == "during" else 0.0
      kill.update(at=hook, call=call, when=when if fault in SIGNALS else "before", delay=delay)
    kills.append(kill)
  return kills


def describe(kill: dict) -> str:
  if kill["at"] == "start":
    return f"{kill['fault']} at {kill['delay']:.1f} s"
  if kill["fault"] == "read error":
    return f"read error at ckpt_read #1{'-2' if kill['repeat'] == 2 else ''}"
  if not kill.get("signal"):
    return f"{kill['fault']} {'after' if kill['fault'] == 'second run' else 'at'} " \
        f"{kill['at']} #{kill['call']}"
  offset = f" +{kill['delay'] * 1000:.0f} ms" if kill["when"] == "during" else ""
  return f"{kill['fault']} {kill['when']} {kill['at']} #{kill['call']}{offset}"


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


def _next_fault(pending: list[dict], readable: bool) -> dict | None:
  """Takes the next run's fault from ``pending``. A read error needs a checkpoint to read
  (``readable``: one is on disk and the run does not start afresh): until then another fault
  goes first, or, when it is the last, one run goes without a fault to save some."""
  if pending and pending[0]["fault"] == "read error" and not readable:
    if len(pending) == 1:
      return None
    pending.insert(1, pending.pop(0))
  return pending.pop(0) if pending else None


def run_trial(k: int, seed: int, kills: list[dict], data: pathlib.Path, ref: dict,
              work: pathlib.Path, pace: Pace) -> Outcome:
  """Faults and reruns one command until it completes, then checks it against the reference."""
  out = Outcome(k, kind_of(k), ref["variant"])
  start = time.monotonic()
  folder = runs.copy_data(data, out.kind, work / f"trial-{k}")
  dirs = runs.model_dirs(out.kind, folder, out.variant)
  pending = list(kills)
  while True:  # until the faults are spent and a run completes
    out.runs += 1
    cmd = runs.command(out.kind, folder, out.variant, out.runs)
    before, since = [checks.usable_step(d) for d in dirs], time.time()
    kill = pace.timed(out.kind, _next_fault(pending, any(before) and "--restart" not in cmd))
    existed, aside = checks.files(folder), checks.set_aside(folder)
    # a stop may take as long as a whole uninterrupted run (a SIGTERM while the first step is
    # traced is read once the step runs), never longer
    r = runs.run(cmd, kill, work / f"trial-{k}.run-{out.runs}.events",
                 max(runs.STOP_SECONDS, ref["seconds"]), runs.workers_of(out.kind, out.variant))
    (work / f"trial-{k}.run-{out.runs}.log").write_text(r.output, encoding="utf-8")
    for name, other in (("second", r.second), ("worker1", r.peer)):
      if other is not None:
        (work / f"trial-{k}.run-{out.runs}.{name}.log").write_text(other.output, "utf-8")
    pace.add(out.kind, r.events)
    check_run(out, r, folder, dirs, before, ref["saves"], "--restart" in cmd)
    out.problems["aside"] += [f"run {out.runs}: {p}" for p in checks.good_set_aside(folder, aside)]
    if kill is not None:
      out.faults.append((kill["fault"], r.killed))
    if kill is not None and r.killed:
      note = describe(kill)
      if kill.get("signal"):
        printed = {line.replace(FOLDER, str(folder)) for line in ref["lines"]}
        out.problems["kill"] += [f"run {out.runs}: {p}" for p in
                                 runs.kill_problems(kill["fault"], kill["signal"], r, printed)]
      else:
        out.problems["fault"] += [f"run {out.runs}: {p}" for p in
                                  runs.fault_problems(kill["fault"], r)]
        note += f" (exit status {r.returncode})"
      if kill["fault"] == "power cut" and r.returncode == -9:
        cut = random.Random(f"cut {seed} {k} {out.runs}")
        note += f" ({checks.damage(folder, since, r.marked_at, existed, r.pid, cut)})"
      out.kills.append(note)
      continue
    if kill is not None and kill["fault"] == "second run" and r.second is not None:
      out.faults[-1] = ("second run", True)
      out.problems["second run"] += [f"run {out.runs}: {p}" for p in runs.second_problems(r)]
      if r.problem or r.returncode != 0:
        out.problems["second run"].append(
            f"run {out.runs}, the first, ended with {r.problem or f'exit status {r.returncode}'}")
      out.kills.append(describe(kill))
      continue
    if kill is not None:
      out.kills.append(describe(kill) + " (not reached)")
    if r.problem or r.returncode != 0:
      last = r.output.strip().splitlines()[-1:] or ["no output"]
      out.problems["exit"].append(f"run {out.runs}: {r.problem or f'exit status {r.returncode}'}"
                                  f" ({last[0][:160]!r})")
      break
    changed = out.runs == 1 and "first" in runs.VARIANTS[out.kind][out.variant]
    if not pending and not changed:  # else a rerun of the completed command (the next fault;
      check_final(out, ref, folder, dirs)  # the final flags)
      break
  out.seconds = time.monotonic() - start
  return out


def check_run(out: Outcome, r: runs.Run, folder: pathlib.Path, dirs: list[pathlib.Path],
              before: list[int], ref_saves: list[list[int]], restart: bool = False) -> None:
  """The checks of one run (before a power cut damages what it wrote): no traceback, no saved
  work lost (a --restart run keeps it in <folder>.before-restart-<n>); after a restore, no
  unusable checkpoint newer than the one it chose left in place and every checkpoint the
  reference run saved after that step saved again (up to the last one this run saved)."""
  for who, run in (("", r), (" (second run)", r.second), (" (worker 1)", r.peer)):
    where = run and runs.traceback_of(run.output)
    if where:
      out.problems["tracebacks"].append(f"run {out.runs}{who}: {where}")
  out.problems["worker 1"] += [f"run {out.runs}: {p}" for p in runs.peer_problems(r)]
  after = [checks.usable_step(d) for d in dirs]
  if restart and "--restart: moved" in r.output:
    kept = [max((checks.usable_step(a) for a in d.parent.glob(f"{d.name}.before-restart-*")),
                default=0) for d in dirs]
    out.problems["lost"] += [f"run {out.runs} (--restart) kept no usable ckpt-{b} of {d.name} "
                             "aside" for d, b, a in zip(dirs, before, kept, strict=True) if a < b]
  else:
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


def reference_name(kind: str, variant: str) -> str:
  """The work folder's name for the reference run of (kind, variant)."""
  return f"reference-{kind}-{variant.replace(' ', '_').replace('>', '')}"


def reference(kind: str, variant: str, data: pathlib.Path, work: pathlib.Path) -> dict:
  """One uninterrupted run of (kind, variant) with the trial's final settings and the injector
  recording: its folder, final steps and call statistics."""
  name = reference_name(kind, variant)
  folder = runs.copy_data(data, kind, work / name)
  r = runs.run(runs.command(kind, folder, variant), None, work / f"{name}.events",
               workers=runs.workers_of(kind, variant))
  if r.peer is not None and (r.peer.returncode != 0 or runs.traceback_of(r.peer.output)):
    r.returncode, r.output = r.peer.returncode or 1, r.output + "\n(worker 1)\n" + r.peer.output
  if r.returncode != 0 or runs.traceback_of(r.output):
    sys.exit(f"chaos: the uninterrupted {kind} run ({variant}) failed (exit status "
             f"{r.returncode}):\n" + r.output[-3000:])
  dirs = runs.model_dirs(kind, folder, variant)
  saves = [sorted(e["step"] for e in r.events if e["ev"] == "saved" and pathlib.Path(e["dir"]) == d)
           for d in dirs]
  return {"folder": folder, "variant": variant, "saves": saves,
          "finals": [checks.complete_steps(d)[0] for d in dirs],
          "stats": runs.reference_stats(r.events, r.seconds), "seconds": r.seconds,
          "lines": sorted({line.replace(str(folder), FOLDER) for line in r.output.splitlines()
                           if line.strip()})}


def line(out: Outcome, n: int, seed: int) -> str:
  head = f"trial {out.k:>{len(str(n))}}/{n} {out.kind:<8} ({out.variant})"
  what = (f"{len(out.kills)} faults, {out.runs} runs, {out.seconds:.0f} s: "
          + "; ".join(out.kills))
  if not out.failed:
    return f"{head} ok: {what}"
  found = "; ".join(f"{c}: {p}" for c in CHECKS for p in out.problems[c][:2])
  return f"{head} FAIL {found} [{what}] replay: --seed {seed} --only {out.k}"


def main() -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--trials", type=int, default=40)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--only", default="", help="comma-separated trial numbers to run alone")
  p.add_argument("--jobs", type=int, default=2, help="trials run at the same time")
  p.add_argument("--shared", default=None,
                 help="folder holding reference/pretrain_data/corpus/ and data/glue/SST-2/ "
                 "(default: the repository's tests/golden/ and tests/data/)")
  p.add_argument("--work_dir", default=None, help="default: a temporary folder")
  p.add_argument("--keep", action="store_true", help="keep the work folder (kept on failure)")
  args = p.parse_args()
  if args.trials < 1 or args.jobs < 1:
    p.error(f"--trials and --jobs must be at least 1 (got {args.trials}, {args.jobs})")
  missing = runs.check_hooks()
  if missing:  # the runs would reach less than the harness says: stop before any run
    sys.exit(f"chaos: {'; '.join(missing)}; update HOOKS in "
             "benchmarks/chaos_inject/sitecustomize.py")
  chosen = sorted({int(x) for x in args.only.split(",") if x}) or list(
      range(1, args.trials + 1))
  n = max(args.trials, *chosen)
  work = pathlib.Path(args.work_dir or tempfile.mkdtemp(prefix="chaos-"))
  work.mkdir(parents=True, exist_ok=True)
  runs.default_signals()
  try:
    return run_all(args, chosen, n, work)
  finally:
    runs.end_all()


def run_all(args: argparse.Namespace, chosen: list[int], n: int, work: pathlib.Path) -> int:
  """Builds the data, runs the reference runs, then the trials; prints and returns the verdict."""
  started = time.monotonic()
  runs.build_data(work / "data", pathlib.Path(args.shared) if args.shared else None)
  settings = sorted({(kind_of(k), variant_of(args.seed, k)) for k in chosen})
  pool = concurrent.futures.ThreadPoolExecutor(max(1, args.jobs))
  try:
    refs = dict(zip(settings, pool.map(lambda kv: reference(*kv, work / "data", work), settings),
                    strict=True))
    print(f"chaos: seed {args.seed}, {len(chosen)} trial(s); uninterrupted runs: "
          + ", ".join(f"{kd} ({v}) {refs[kd, v]['seconds']:.0f} s" for kd, v in settings),
          flush=True)
    pace = Pace({kd: ref for (kd, _), ref in sorted(refs.items(), reverse=True)})
    futures = {}
    for k in chosen:
      ref = refs[kind_of(k), variant_of(args.seed, k)]
      kills = draw_kills(args.seed, k, ref["stats"],
                         runs.workers_of(kind_of(k), variant_of(args.seed, k)))
      futures[k] = pool.submit(guarded_trial, k, args.seed, kills, work / "data", ref, work, pace)
    outcomes = []
    for k in chosen:
      outcomes.append(futures[k].result())
      print(line(outcomes[-1], n, args.seed), flush=True)
  finally:
    pool.shutdown(wait=False, cancel_futures=True)
  return report(outcomes, work, args.keep, started)


def headline(outcomes: list[Outcome]) -> list[str]:
  """The faults reached of those drawn, per kind; then the verdict line."""
  drawn, reached = collections.Counter(), collections.Counter()
  for o in outcomes:
    for fault, hit in o.faults:
      drawn[fault] += 1
      reached[fault] += hit
  kinds = ", ".join(f"{f} {reached[f]}/{drawn[f]}" for f in FAULTS)
  passed = sum(1 for o in outcomes if not o.failed)
  lost = sum(1 for o in outcomes if o.problems["lost"] or o.problems["aside"])
  tracebacks = sum(len(o.problems["tracebacks"]) for o in outcomes)
  return [f"chaos: faults reached of those drawn: {kinds}",
          f"chaos: {passed}/{len(outcomes)} runs complete, "
          f"{'nothing lost' if not lost else f'{lost} lost'}, {tracebacks} tracebacks "
          f"({sum(reached.values())} faults reached of {sum(drawn.values())} drawn)"]


def report(outcomes: list[Outcome], work: pathlib.Path, keep: bool, started: float) -> int:
  failed = [o for o in outcomes if o.failed]
  counts = {c: sum(1 for o in outcomes if o.problems[c]) for c in CHECKS}
  cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
  print(f"chaos: {(time.monotonic() - started) / 60:.1f} min, the runs' CPU "
        f"{(cpu.ru_utime + cpu.ru_stime) / 60:.1f} min; trials failing each check: "
        + ", ".join(f"{c} {counts[c]}" for c in CHECKS))
  if failed or keep:
    print(f"chaos: the runs' folders are kept in {work}")
  else:
    shutil.rmtree(work, ignore_errors=True)
  print("\n".join(headline(outcomes)))
  return 1 if failed else 0


if __name__ == "__main__":
  try:
    sys.exit(main())
  except KeyboardInterrupt:
    sys.exit("chaos: interrupted; the runs in progress were ended")
