"""Randomized fault harness: kills pre-training and fine-tuning runs, fails their reads and
writes, starts them twice and cuts their power at moments drawn from a seed, reruns each until
it completes, and checks that nothing was lost.

    python benchmarks/chaos.py [--trials 60] [--seed 0] [--only K[,K...]] [--jobs 2]

Trial K (odd: pre-training, even: fine-tuning) takes its kind's settings in turn (pre-training:
plain, gradient accumulation, float16 mixed precision, a second run with --restart, or two
workers over loopback; fine-tuning: plain, keep_all_models false, a GLUE task (sst) besides the
user task, or flags changed after the first run: keep_all_models false->true, num_trials 3->2
and n_writes_test 2->1 each with the learning rate changed too, so the reruns set the first
run's work aside), from a place drawn from the seed, and draws from (seed, K) 2-4 faults
(chaos_plan.py), each a kind: SIGKILL, SIGINT, SIGTERM, two SIGINTs, a power cut (SIGKILL,
then one file the run wrote in its last moments is left empty, short, or under its temporary
name), an unsynced cut (SIGKILL, then every write the run made through Python and had not
made durable by fsyncs of the file and its folder is undone: chaos_power.py), a transient read
error (the 1st, or 1st and 2nd, checkpoint read raise tf.errors.UnavailableError; planned for
a run that finds a checkpoint on disk), a persistent read error (every read of the first
checkpoint read fails, EIO or EACCES: the run must stop in one line naming it; the next run,
fault lifted, completes), a write error (UnavailableError, or OSError EIO for a local atomic
write), ENOSPC inside a write, a second run of the same command started beside it (by the same
path; through a bind mount of its folder in a user and mount namespace, ``unshare -Urm``; in
a PID namespace of its own, ``unshare -pf --mount-proc``; or with hard links refused, in both
runs), a paused holder (SIGSTOP past the lease, a short one: a second run takes the lock after
the lease and completes, then SIGCONT: the first stops in one line and writes nothing), a
SIGKILL at a step of the fine-tuning set-aside (before its journal, after a move, after the
end), or a SIGKILL / SIGTERM of worker 1 of two. The first fault of each trial is one of the
newer kinds, SIGTERM, ENOSPC, a write error or two SIGINTs (chaos_plan.first_fault), in turn,
so the default 60 trials reach each kind at least 3 times; at
a moment: a time since the process started (signals only; from 0.1 s on: before that Python
itself starts), or before, during
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
status (the trial's folder counted as <folder> in a line's length); an error fault either
retried (the run completes) or ending the run with one line and
status 1 (a persistent read error: always, its line naming the checkpoint); a second run
refused in one line naming the first's process id (after a line saying it watches the lease,
from another PID namespace), saving nothing; a paused holder continued after the run that
took its lock over completed: one line, status 1, no file changed; the earlier settings'
files kept byte for byte under the set-aside's ``<path>.rejected-<n>`` names; worker 1 of two
(or worker 0 after a fault on worker 1) ends by itself within a minute and a half of the
chief (once their cluster formed), with status 0 when the chief completed, else in at most
one line, never a traceback.
Timed moments are stretched by how much slower than the reference the latest runs started.

One line per trial; a failing one ends with the arguments replaying it alone. Then the trials
failing each check, the faults reached of those drawn per kind (and the kinds reached fewer
than 3 times), and last:
``chaos: <P>/<N> runs complete, nothing lost | <L> lost, <T> tracebacks (<K> faults reached of
<M> drawn)`` (P: trials passing every check; L: trials that lost saved work; T: runs whose
output held a traceback). Exit status 1 if any check failed in any trial.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import os
import pathlib
import resource
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # electra_tf
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import chaos_checks as checks  # noqa: E402
import chaos_runs as runs  # noqa: E402
from chaos_plan import FAULTS, draw_kills, kind_of, variant_of  # noqa: E402
from chaos_trial import CHECKS, FOLDER, Outcome, Pace, guarded_trial  # noqa: E402

DEFAULT_TRIALS = 60  # each leading kind leads 4 or more plain trials (chaos_plan.LEADS)


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
  p.add_argument("--trials", type=int, default=DEFAULT_TRIALS)
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
      variant = variant_of(args.seed, k)
      kills = draw_kills(args.seed, k, ref["stats"], runs.workers_of(kind_of(k), variant))
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
  few = [f for f in FAULTS if reached[f] < 3]
  kinds += f"; reached fewer than 3 times: {', '.join(few)}" if few else \
      "; every kind reached at least 3 times"
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
