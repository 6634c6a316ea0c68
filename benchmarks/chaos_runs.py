"""The runs benchmarks/chaos.py faults: one process (or a two-worker cluster) run with a fault
plan, the run started beside it (a second run by the same path, a bind mount or another PID
namespace; the run that takes a paused holder's lock), its output, events and timings (the
data and commands: chaos_data.py; what the output says about the fault: chaos_faults.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import threading
import time

from chaos_data import (  # noqa: F401
  KINDS,
  LOST_WORKER_SECS,
  MODEL,
  TASK,
  VARIANTS,
  build_data,
  command,
  copy_data,
  hparams_of,
  model_dirs,
  tasks_of,
  workers_of,
)

REPO = pathlib.Path(__file__).resolve().parents[1]
INJECT = pathlib.Path(__file__).resolve().parent / "chaos_inject"


def _injector():
  """The injector module, loaded under its own name (not as this process's sitecustomize); it
  does nothing in a process without a plan."""
  spec = importlib.util.spec_from_file_location("chaos_inject", INJECT / "sitecustomize.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


_INJECTOR = _injector()
ENV, HOOKS, MARKER, SECOND = _INJECTOR.ENV, _INJECTOR.HOOKS, _INJECTOR.MARKER, _INJECTOR.SECOND
SECOND_DONE, PAUSE = _INJECTOR.SECOND_DONE, _INJECTOR.PAUSE
MISSING_HOOK = _INJECTOR.MISSING_HOOK
LEASE_ENV = "ELECTRA_LOCK_LEASE_SECONDS"
PAUSE_LEASE = 10  # s: the lease of a paused holder's runs (a beat every 1.7 s)

STOP_SECONDS = 60  # from a SIGINT / SIGTERM to the end of the process, at least
RUN_SECONDS = 900  # a whole run, on a loaded machine
SHORT = 300  # characters: the one line a kill may print
STEP_LINE = re.compile(r"^\d+/\d+ = ")
SAVED_LINE = re.compile(r"^Saved \S+$")
HEADING_RULE = re.compile(r"^=+$")
REJECTED_LINE = re.compile(r"^Warning: checkpoint \S+ .*; moved it to \S+")  # set aside
STOP_LINE = re.compile(r"^run_\w+\.py:|error|warning", re.I)  # how a worker ends, or complains
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^Exception ignored", re.M)


@dataclasses.dataclass
class Run:
  """One process: its exit status, output (marker line included), events, timings."""

  returncode: int
  output: str
  events: list[dict]
  seconds: float
  killed: bool  # the marker was printed: the planned kill fired
  stop_seconds: float | None = None  # from the marker to the end of the process
  problem: str | None = None  # the harness had to end it: a hang
  pid: int = 0
  marked_at: float | None = None  # epoch seconds when the marker was read
  second: Run | None = None  # the same command started while this one ran (a "second run",
  # or the run that took the lock of this paused one)
  peer: Run | None = None  # worker 1 of a two-worker run (no fault of its own, or the fault)
  wrote: list[str] = dataclasses.field(default_factory=list)  # paused: files it changed
  # after it was continued


LIVE: set[subprocess.Popen] = set()  # the runs in progress, ended by end_all


def default_signals() -> None:
  """Lets the runs get SIGINT and SIGTERM as a terminal would deliver them: an ignored signal
  stays ignored in a child (a shell starts background jobs with SIGINT ignored), a handled one
  is reset to its default. Main thread only."""
  signal.signal(signal.SIGINT, signal.default_int_handler)
  if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


STOPPING = threading.Event()


def end_all() -> None:
  """SIGKILLs the runs in progress and refuses new ones (the harness itself is stopping)."""
  STOPPING.set()
  for proc in list(LIVE):
    proc.kill()


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def tf_configs(workers: int) -> list[str]:
  """TF_CONFIG of each worker of a cluster on free loopback ports, worker 0 first."""
  cluster = [f"127.0.0.1:{free_port()}" for _ in range(workers)]
  return [json.dumps({"cluster": {"worker": cluster}, "task": {"type": "worker", "index": i}})
          for i in range(workers)]


PEER_SECONDS = LOST_WORKER_SECS + 60  # worker 1's end after worker 0's, at most


def run(cmd: list[str], kill: dict | None, events: pathlib.Path,
        stop_seconds: float = STOP_SECONDS, workers: int = 1, env: dict | None = None) -> Run:
  """Runs ``cmd`` with the injector and ``kill`` planned; SIGKILLs it ``stop_seconds`` after a
  marker or RUN_SECONDS after its start, saying so in ``problem``. When the run asks for a
  second run (its SECOND marker), the same command is started beside it, without a fault.
  With ``workers`` 2, worker 1 runs beside it (``peer``), without a fault; it must end by
  itself within PEER_SECONDS of worker 0 once worker 0 reached its restore (else it is
  SIGKILLed, as a cluster manager would, and its ``problem`` says so). A kill with ``worker``
  1 is worker 1's instead (``killed``: its marker). ``env``: more environment variables."""
  if STOPPING.is_set():
    raise RuntimeError("the harness is stopping")
  configs = tf_configs(workers) if workers > 1 else [None]
  target = (kill or {}).get("worker", 0)
  peers = [_start(cmd, kill if target == i else None, events.with_suffix(f".worker{i}.events"),
                  config) for i, config in enumerate(configs[1:], 1)]
  try:
    first = _run(cmd, None if target else kill, events, stop_seconds, configs[0], env)
  finally:
    outcome = [_finish(p, time.monotonic() + PEER_SECONDS) for p in peers]
  if outcome:
    formed = any(e["ev"] == "call" and e["hook"] == "restore" for e in first.events)
    if not formed and outcome[0].problem:  # worker 0 died before the cluster formed: worker
      outcome[0].problem = None  # 1 waiting for it is what a cluster does
    first.peer = outcome[0]
    if target:
      first.killed = MARKER in first.peer.output
  return first


@dataclasses.dataclass
class _Started:
  proc: subprocess.Popen
  chunks: list[bytes]
  reader: threading.Thread
  events: pathlib.Path
  start: float


def _env(kill: dict | None, events: pathlib.Path, tf_config: str | None,
         more: dict | None = None) -> dict:
  events.unlink(missing_ok=True)
  pathlib.Path(str(events) + SECOND_DONE).unlink(missing_ok=True)
  env = {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "3",  # as a user runs
         ENV: json.dumps({"events": str(events), "kill": kill}),  # them (a test sets 2)
         "PYTHONPATH": os.pathsep.join(filter(None, [str(INJECT), os.environ.get("PYTHONPATH")]))}
  if tf_config:
    env["TF_CONFIG"] = tf_config
  if kill and kill["fault"] == "paused holder":
    env[LEASE_ENV] = str(PAUSE_LEASE)
  return {**env, **(more or {})}


def _start(cmd: list[str], kill: dict | None, events: pathlib.Path,
           tf_config: str | None) -> _Started:
  """A worker without a fault, its output collected by a thread."""
  proc = subprocess.Popen(cmd, cwd=REPO, env=_env(kill, events, tf_config),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  LIVE.add(proc)
  chunks: list[bytes] = []
  reader = threading.Thread(target=lambda: chunks.extend(iter(
      lambda: proc.stdout.read1(65536), b"")), daemon=True)
  reader.start()
  return _Started(proc, chunks, reader, events, time.monotonic())


def _finish(started: _Started, deadline: float) -> Run:
  """The worker's Run once it ends, SIGKILLed (with a problem) at ``deadline``."""
  proc, problem = started.proc, None
  while proc.poll() is None and time.monotonic() < deadline:
    time.sleep(0.05)
  if proc.poll() is None:
    problem = f"worker 1 still running {PEER_SECONDS} s after worker 0 ended"
    proc.kill()
  proc.wait()
  LIVE.discard(proc)
  started.reader.join(timeout=30)
  output = b"".join(started.chunks).decode("utf-8", errors="replace")
  recorded = []
  if started.events.exists():
    recorded = [json.loads(line) for line in started.events.read_text().splitlines()
                if line.strip()]
  return Run(proc.returncode, output, recorded, time.monotonic() - started.start, False,
             problem=problem, pid=proc.pid)


def second_of(kill: dict | None, cmd: list[str], events: pathlib.Path
              ) -> tuple[list[str], dict | None]:
  """The command (and kill plan) of the run started beside a run with ``kill``: the same
  command; through a bind mount of its folder in a user and mount namespace of its own; in a
  PID namespace of its own; or with hard links refused, as the first's."""
  fault = (kill or {}).get("fault")
  if fault == "bind mount":
    mount = events.with_suffix(".mount")
    mount.mkdir(exist_ok=True)
    i = cmd.index("--data-dir") + 1
    return (["unshare", "-Urm", "sh", "-c", 'mount --bind "$1" "$2" && shift 2 && exec "$@"',
             "sh", cmd[i], str(mount), *cmd[:i], str(mount), *cmd[i + 1:]], None)
  if fault == "pid namespace":
    return ["unshare", "-pf", "--mount-proc", "--kill-child", *cmd], None
  if fault == "no hard links":
    return cmd, {"fault": fault, "at": "none", "call": 0, "when": "before", "signal": None}
  return cmd, None


def _run(cmd: list[str], kill: dict | None, events: pathlib.Path, stop_seconds: float,
         tf_config: str | None, more_env: dict | None = None) -> Run:
  """Worker 0 (the only one of a one-process run), with ``kill`` planned (see ``run``). A
  paused run (its PAUSE marker: it stopped itself) is continued once the run started when its
  lease lapsed ended (``second``); ``wrote``: the files it changed after that."""
  env = _env(kill, events, tf_config, more_env)
  signalled = bool(kill and kill.get("signal"))  # an error fault may let the run go on
  start = time.monotonic()
  proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
  LIVE.add(proc)
  chunks: list[bytes] = []
  marked: list[float] = []
  wall: list[float] = []
  second: list[Run] = []
  seconds: list[threading.Thread] = []
  resumed: list[tuple[float, dict]] = []  # (when, the folder's files) once continued

  def start_second() -> None:
    try:
      second_cmd, second_kill = second_of(kill, cmd, events)
      second.append(run(second_cmd, second_kill, events.with_suffix(".second.events"),
                        stop_seconds))
    finally:  # the first run waits for this file at its hook
      pathlib.Path(str(events) + SECOND_DONE).touch()

  def take_over() -> None:  # the lease lapses while this run is stopped; another takes it
    time.sleep(PAUSE_LEASE + 1.5)
    try:
      second.append(run(cmd, None, events.with_suffix(".takeover.events"), stop_seconds,
                        env={LEASE_ENV: str(PAUSE_LEASE)}))
    finally:
      resumed.append((time.monotonic(), _files_of(cmd)))
      os.kill(proc.pid, signal.SIGCONT)

  def read() -> None:
    for chunk in iter(lambda: proc.stdout.read1(65536), b""):
      chunks.append(chunk)
      recent = b"".join(chunks[-2:])
      if not marked and MARKER.encode() in recent:
        marked.append(time.monotonic())
        wall.append(time.time())
      for marker, job in ((SECOND, start_second), (PAUSE, take_over)):
        if not seconds and marker.encode() in recent:
          seconds.append(threading.Thread(target=job, daemon=True))
          seconds[0].start()

  reader = threading.Thread(target=read, daemon=True)
  reader.start()
  problem = None
  while proc.poll() is None:
    now = time.monotonic()
    if marked and signalled and now - marked[0] > stop_seconds:
      problem = f"still running {stop_seconds:.0f} s after the kill"
    elif resumed and now - resumed[0][0] > stop_seconds:
      problem = f"still running {stop_seconds:.0f} s after it was continued"
    elif now - start > RUN_SECONDS + (PAUSE_LEASE * 2 + RUN_SECONDS) * bool(seconds):
      problem = f"still running after {RUN_SECONDS} s"
    if problem:
      proc.send_signal(signal.SIGKILL)
      break
    time.sleep(0.05)
  proc.wait()
  LIVE.discard(proc)
  reader.join(timeout=30)
  end = time.monotonic()
  for t in seconds:
    t.join(RUN_SECONDS + 60)
  output = b"".join(chunks).decode("utf-8", errors="replace")
  recorded = []
  if events.exists():
    recorded = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
  if proc.returncode == MISSING_HOOK and problem is None:
    problem = next((line for line in output.splitlines() if line.startswith("chaos: hook ")),
                   "a hooked function no longer exists")
  wrote = []
  if resumed:
    now = _files_of(cmd)
    wrote = sorted(k for k in now if now[k] != resumed[0][1].get(k))
  return Run(proc.returncode, output, recorded, end - start, MARKER in output or (
      PAUSE in output), end - marked[0] if marked else None, problem, proc.pid,
             wall[0] if wall else None, second[0] if second else None, wrote=wrote)


def _files_of(cmd: list[str]) -> dict[str, tuple[int, int]]:
  """The files of the command's data folder with their (mtime, size)."""
  root = pathlib.Path(cmd[cmd.index("--data-dir") + 1])
  state = {}
  for folder, _, names in os.walk(root):
    for name in names:
      with contextlib.suppress(FileNotFoundError):
        st = os.stat(os.path.join(folder, name))
        state[os.path.relpath(os.path.join(folder, name), root)] = (st.st_mtime_ns, st.st_size)
  return state


def check_hooks(hooks: dict[str, tuple[str, str]] | None = None) -> list[str]:
  """The hooks whose function no longer exists (imported here, as a run imports them), one
  line each: the harness stops rather than reach less than it says."""
  import importlib

  missing = []
  for hook, (name, path) in (HOOKS if hooks is None else hooks).items():
    try:
      owner = importlib.import_module(name)
    except ImportError as e:
      missing.append(f"hook {hook}: module {name} does not import ({e})")
      continue
    for part in path.split("."):
      owner = getattr(owner, part, None)
    if not callable(owner):
      missing.append(f"hook {hook}: {name}.{path} no longer exists")
  return missing


def traceback_of(output: str) -> str | None:
  """The first line of a traceback (or an 'Exception ignored' report) in ``output``, with the
  exception line that ends it, else None."""
  m = TRACEBACK.search(output)
  if not m:
    return None
  tail = output[m.start():].splitlines()
  last = next((line for line in tail[1:] if line and not line.startswith(" ")), tail[0])
  return last.strip()[:160]


def reference_stats(events: list[dict], seconds: float) -> dict:
  """What kill moments are drawn from: the run's length, when its restore happened, and per hook
  the duration of each call (hooks never called are left out)."""
  calls: dict[str, list[float]] = {}
  restore_t = 0.0
  for e in events:
    if e["ev"] == "call":
      calls.setdefault(e["hook"], []).append(e["dt"])
      if e["hook"] == "restore" and not restore_t:
        restore_t = e["t"]
  return {"seconds": seconds, "restore_t": restore_t,
          "calls": {h: calls[h] for h in HOOKS if h in calls}}
