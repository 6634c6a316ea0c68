"""Which faults a trial of benchmarks/chaos.py meets, and where: a function of the seed, the
trial number and the uninterrupted run's call statistics only, so that ``--only K`` replays
trial K exactly (see benchmarks/chaos.py)."""

from __future__ import annotations

import math
import random

import chaos_runs as runs

FAULTS = {"SIGKILL": 20, "SIGINT": 12, "SIGTERM": 12, "SIGINT x2": 8, "power cut": 16,
          "read error": 10, "write error": 8, "ENOSPC": 8, "second run": 10,
          # the faults of shared storage and many hosts (each also the first fault of the
          # trials it fits, in turn: LEADS)
          "bind mount": 4, "pid namespace": 4, "paused holder": 4, "no hard links": 4,
          "persistent read error": 4, "unsynced cut": 8, "set-aside kill": 0, "worker 1": 0}
# the first faults of the plain trials, in turn: the faults of shared storage, and those the
# random draw behind the leads reached fewer than 3 times in 40 trials
LEADS = ("bind mount", "pid namespace", "paused holder", "no hard links",
         "persistent read error", "unsynced cut", "SIGTERM", "ENOSPC", "write error", "SIGINT x2")
SIGNALS = {"SIGKILL": "SIGKILL", "SIGINT": "SIGINT", "SIGTERM": "SIGTERM", "SIGINT x2": "SIGINT",
           "power cut": "SIGKILL", "unsynced cut": "SIGKILL", "set-aside kill": "SIGKILL",
           "paused holder": "SIGSTOP"}
SECOND_RUNS = ("second run", "bind mount", "pid namespace", "no hard links")  # one beside
READS = ("read error", "persistent read error")  # need a checkpoint on disk to read
ERROR_AT = {"write error": ("ckpt_save", "atomic_write", "tf_state_write"),
            "ENOSPC": ("ckpt_save", "atomic_write", "input_state_save", "staged_dir", "tf1_save",
                       "tf_state_write")}
# a paused holder stops right before the package checks its lease and writes (the window
# between that check and the write is stated in docs/stopping.md)
PAUSE_AT = {"restore": "after", "keeper_save": "before", "atomic_write": "before",
            "input_state_save": "before", "trial_dir": "before", "results_write": "before"}
FIRST_MOMENT = 0.1  # s: before it Python itself starts (a Ctrl-C then is its own traceback)
STEP_HOOKS = {"ckpt_save", "keeper_save", "input_state_save", "rmtree", "tf_state_write",
              "staged_dir", "atomic_write"}  # called again for each step saved


def kind_of(k: int) -> str:
  return runs.KINDS[(k - 1) % 2]


def variant_of(seed: int, k: int) -> str:
  """Trial k's settings (chaos_runs.VARIANTS): the trials of a kind take them in turn, from a
  place drawn from the seed, so 40 trials run each setting of a kind 2-4 times."""
  names = list(runs.VARIANTS[kind_of(k)])
  start = random.Random(f"chaos settings {seed}").randrange(len(names))
  return names[(start + (k - 1) // 2) % len(names)]


def _plain(seed: int, k: int) -> bool:
  """Whether trial k runs one process with the same settings throughout."""
  v = runs.VARIANTS[kind_of(k)][variant_of(seed, k)]
  return v.get("workers", 1) == 1 and not v.get("sets aside")


def first_fault(seed: int, k: int) -> str:
  """The fault a trial meets first: a fault on worker 1 (two workers), a kill in the set-aside
  (a setting changed after the first run: "sets aside"), else the kinds of LEADS in turn
  over these trials, from a place drawn from the seed (each kind in every tenth)."""
  v = runs.VARIANTS[kind_of(k)][variant_of(seed, k)]
  if v.get("workers", 1) > 1:
    return "worker 1"
  if v.get("sets aside"):
    return "set-aside kill"
  start = random.Random(f"chaos new faults {seed}").randrange(len(LEADS))
  return LEADS[(start + sum(_plain(seed, j) for j in range(1, k))) % len(LEADS)]


def _allowed(fault: str, r: int, workers: int, calls: dict) -> bool:
  if fault in READS and r == 0 or fault in ("set-aside kill", "worker 1"):
    return False
  if workers > 1 and (fault in SECOND_RUNS or fault in ("paused holder", "persistent read error")):
    return False  # a second cluster would need its own ports: nothing to do with the folder
  if fault == "paused holder" and not set(PAUSE_AT) & set(calls):
    return False
  return not (fault in ERROR_AT and not set(ERROR_AT[fault]) & set(calls))


def draw_kills(seed: int, k: int, stats: dict, workers: int = 1) -> list[dict]:
  """Trial k's fault plans, a function of (seed, k) and the reference run's call statistics.

  Fault r aims at the part a run still has to do after r faults (about 0.6^r of it); the first
  is ``first_fault``'s. A read error is never the first fault drawn: a fresh folder holds no
  checkpoint to read. Two workers get no second run (its own cluster would need its own
  ports)."""
  rng = random.Random(f"chaos {seed} {k}")
  kills = []
  calls = stats["calls"]
  for r in range(rng.randint(2, 4)):
    left = 0.6 ** r
    fault = rng.choices(list(FAULTS), list(FAULTS.values()))[0]
    while not _allowed(fault, r, workers, calls):
      fault = rng.choices(list(FAULTS), list(FAULTS.values()))[0]
    if r == 0:
      fault = first_fault(seed, k)
    kills.append(_place(rng, fault, left, stats))
  return kills


def _place(rng: random.Random, fault: str, left: float, stats: dict) -> dict:
  """Where and when ``fault`` fires (``left``: the part of the run still to do)."""
  calls = stats["calls"]
  signal = SIGNALS.get(fault)
  if fault == "worker 1":
    signal = rng.choice(["SIGKILL", "SIGTERM"])
  kill = {"fault": fault, "signal": signal, "repeat": 2 if fault == "SIGINT x2" else 1,
          "gap": round(rng.uniform(0.0, 1.0), 3)}
  at_start, u, hook_u, when = rng.random() < 0.35, rng.random(), rng.random(), rng.choices(
      ("before", "during", "after"), (20, 60, 20))[0]
  if fault == "worker 1":
    kill["worker"] = 1
  if fault in READS:
    kill.update(at="ckpt_read", call=1, when="before", delay=0.0, repeat=rng.randint(1, 2))
    if fault == "persistent read error":
      kill.update(repeat=1, error=rng.choice(["EIO", "EACCES"]))
  elif fault in SECOND_RUNS:
    kill.update(at="restore", call=1, when="after", delay=0.0)
  elif fault == "set-aside kill":  # the settings changed: the second run sets the old aside
    step = rng.choice(["journal", "move", "move", "move", "end"])
    kill.update(at="move_aside" if step == "move" else "set_aside", call=1 + int(u * 4)
                if step == "move" else 1, when="before" if step == "journal" else "after",
                delay=0.0)
  elif fault == "paused holder":
    hook = sorted(set(PAUSE_AT) & set(calls))[int(hook_u * len(set(PAUSE_AT) & set(calls)))]
    n = max(1, math.ceil(len(calls[hook]) * left)) if hook in STEP_HOOKS else len(calls[hook])
    kill.update(at=hook, call=1 + int(u * n), when=PAUSE_AT[hook], delay=0.0)
  elif signal and (at_start or not calls):
    span = stats["restore_t"] + (stats["seconds"] - stats["restore_t"]) * left
    # worker 1 once the cluster formed: a worker lost before every worker joined is waited
    # for by TensorFlow's cluster registration, not by --lost_worker_secs (docs/stopping.md)
    low = stats["restore_t"] if fault == "worker 1" else FIRST_MOMENT
    kill.update(at="start", call=0, when="during",
                delay=round(low + u * max(span - low, 0.0), 3))
  else:
    hooks = sorted(calls) if signal else sorted(set(ERROR_AT[fault]) & set(calls))
    hook = hooks[int(hook_u * len(hooks))]
    n = max(1, math.ceil(len(calls[hook]) * left)) if hook in STEP_HOOKS else len(calls[hook])
    call = 1 + int(u * n)
    delay = round(rng.random() * calls[hook][call - 1], 4) if when == "during" else 0.0
    kill.update(at=hook, call=call, when=when if signal else "before", delay=delay)
  return kill


def describe(kill: dict) -> str:
  fault = kill["fault"]
  if kill["at"] == "start":
    return f"{fault}{' ' + kill['signal'] if fault == 'worker 1' else ''} at {kill['delay']:.1f} s"
  if fault == "read error":
    return f"read error at ckpt_read #1{'-2' if kill['repeat'] == 2 else ''}"
  if fault == "persistent read error":
    return f"persistent read error ({kill['error']}) from ckpt_read #1"
  if not kill.get("signal"):
    return f"{fault} {'after' if fault in SECOND_RUNS else 'at'} {kill['at']} #{kill['call']}"
  if fault == "worker 1":
    fault = f"worker 1 {kill['signal']}"
  offset = f" +{kill['delay'] * 1000:.0f} ms" if kill["when"] == "during" else ""
  return f"{fault} {kill['when']} {kill['at']} #{kill['call']}{offset}"


def next_fault(pending: list[dict], readable: bool, runs_done: int = 0,
               changed: bool = False) -> dict | None:
  """Takes the next run's fault from ``pending``. A read error needs a checkpoint to read
  (``readable``: one is on disk and the run does not start afresh): until then another fault
  goes first, or, when it is the last, one run goes without a fault to save some. A kill in
  the set-aside waits for the run that has earlier settings to set aside (``changed``: the
  first run of the series used other settings; it runs without a fault)."""
  if pending and pending[0]["fault"] == "set-aside kill" and changed and runs_done == 0:
    return None
  if pending and pending[0]["fault"] in READS and not readable:
    if len(pending) == 1:
      return None
    pending.insert(1, pending.pop(0))
  return pending.pop(0) if pending else None
