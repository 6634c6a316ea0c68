"""The runs benchmarks/chaos.py kills: their data, their commands, one process run with a kill
plan, and what its output says about the kill (see benchmarks/chaos.py)."""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import string
import subprocess
import sys
import threading
import time

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
SECOND_DONE = _INJECTOR.SECOND_DONE
MISSING_HOOK = _INJECTOR.MISSING_HOOK

MODEL = "chaos"
TASK = "movie_reviews"
# A character vocabulary keeps the embeddings, the generator's softmax and the saves small.
CHARS = string.ascii_lowercase + string.digits + string.punctuation
CHAR_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *CHARS, *("##" + c for c in CHARS)]
TINY = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 1,
                                   "num_attention_heads": 2, "intermediate_size": 64},
        "embedding_size": 16, "max_seq_length": 32, "train_batch_size": 8,
        "vocab_size": len(CHAR_VOCAB)}
PRETRAIN = {**TINY, "num_train_steps": 200, "iterations_per_loop": 10,
            "save_checkpoints_steps": 10, "keep_checkpoint_max": 3, "num_warmup_steps": 10,
            "seed": 7}
FINETUNE = {**TINY, "eval_batch_size": 16, "init_checkpoint": None, "task_names": [TASK],
            "num_trials": 2, "keep_all_models": True, "num_train_epochs": 4.0,
            "iterations_per_loop": 4, "save_checkpoints_steps": 4, "write_test_outputs": True,
            "seed": 5}
KINDS = ("pretrain", "finetune")
LOST_WORKER_SECS = 20  # two workers: one silent this long is lost (the other stops)
STOP_SECONDS = 60  # from a SIGINT / SIGTERM to the end of the process, at least
RUN_SECONDS = 900  # a whole run, on a loaded machine
SHORT = 300  # characters: the one line a kill may print
STEP_LINE = re.compile(r"^\d+/\d+ = ")
SAVED_LINE = re.compile(r"^Saved \S+$")
HEADING_RULE = re.compile(r"^=+$")
REJECTED_LINE = re.compile(r"^Warning: checkpoint \S+ .*; moved it to \S+")  # set aside
STOP_LINE = re.compile(r"^run_\w+\.py:|error|warning", re.I)  # how a worker ends, or complains
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^Exception ignored", re.M)


def build_data(root: pathlib.Path, shared: pathlib.Path | None = None) -> None:
  """``root/pretrain``: the character vocab.txt + 2 TFRecord shards of length 32 from the
  reference corpus (3 novels' first chapters); ``root/finetune``: vocab.txt + a user task
  (task.json, CSV) of real SST-2 rows: 64 train, 32 dev, 16 test (further dev rows). Read from
  ``shared`` laid out as ../shared, else from the repository (tests/golden/, tests/data/)."""
  sys.path.insert(0, str(REPO))
  from data_prep import build_pretraining_dataset as bpd

  if shared is None:
    shared = root.parent / "inputs"
    shared.mkdir(parents=True, exist_ok=True)
    for name, target in (("reference", REPO / "tests" / "golden"),
                         ("data", REPO / "tests" / "data")):
      if not (shared / name).exists():
        (shared / name).symlink_to(target)

  vocab = "".join(t + "\n" for t in CHAR_VOCAB)
  pre = root / "pretrain"
  pre.mkdir(parents=True)
  (pre / "vocab.txt").write_text(vocab, encoding="utf-8")
  bpd.build(bpd.BuildArgs(corpus_dir=str(shared / "reference" / "pretrain_data" / "corpus"),
                          vocab_file=str(pre / "vocab.txt"),
                          output_dir=str(pre / "pretrain_tfrecords"), max_seq_length=32,
                          num_out_files=2, seed=1))
  task = root / "finetune" / "finetuning_data" / TASK
  task.mkdir(parents=True)
  (root / "finetune" / "vocab.txt").write_text(vocab, encoding="utf-8")
  (task / "task.json").write_text(json.dumps(
      {"type": "classification", "text_a": "review", "text_b": None, "label": "sentiment",
       "id": "review_id"}), encoding="utf-8")
  glue = shared / "data" / "glue" / "SST-2"
  train = _tsv(glue / "train.tsv")[1:65]
  dev = _tsv(glue / "dev.tsv")
  for name, header, rows in (
      ("train", ["sentiment", "review"], [[label, text] for text, label in train]),
      ("dev", ["sentiment", "review"], [[label, text] for text, label in dev[1:33]]),
      ("test", ["review_id", "review", "sentiment"],
       [[f"r{i}", text, label] for i, (text, label) in enumerate(dev[33:49])])):
    with open(task / f"{name}.csv", "w", encoding="utf-8", newline="") as f:
      csv.writer(f).writerows([header, *rows])
  sst = root / "finetune" / "finetuning_data" / "sst"  # a GLUE task: other SST-2 rows
  sst.mkdir()
  for name, rows, span in (("train", _tsv(glue / "train.tsv"), slice(65, 97)),
                           ("dev", dev, slice(49, 61)), ("test", _tsv(glue / "test.tsv"),
                                                         slice(1, 9))):
    (sst / f"{name}.tsv").write_text(
        "".join("\t".join(r) + "\n" for r in [rows[0], *rows[span]]), encoding="utf-8")


def _tsv(path: pathlib.Path) -> list[list[str]]:
  with open(path, encoding="utf-8-sig") as f:
    return [line.split("\t") for line in f.read().splitlines()]


def copy_data(data: pathlib.Path, kind: str, dest: pathlib.Path) -> pathlib.Path:
  """A fresh data_dir of ``kind`` for one run series (no models/ yet)."""
  shutil.copytree(data / kind, dest)
  return dest


# Settings a trial is drawn with: "hparams" (every run and the reference run), "first" (hparams
# of the series' first run only: flags changed before the reruns), "restart" (the second run
# gets --restart), "args" (command-line flags), "workers" (processes of one multi-worker run
# over loopback; the faults hit worker 0, the chief).
VARIANTS = {
  "pretrain": {"plain": {}, "accumulation": {"hparams": {"gradient_accumulation_steps": 2}},
               "mixed precision": {"args": ["--mixed_precision", "float16"]},
               "restart": {"restart": True},
               "two workers": {"workers": 2, "args": [
                   "--distribution_strategy=multi_worker_mirrored",
                   f"--lost_worker_secs={LOST_WORKER_SECS}"]}},
  "finetune": {"plain": {}, "keep_all_models false": {"hparams": {"keep_all_models": False}},
               "keep_all_models false->true": {"first": {"keep_all_models": False}},
               "num_trials 3->2": {"first": {"num_trials": 3}},
               "n_writes_test 2->1": {"hparams": {"n_writes_test": 1},
                                      "first": {"n_writes_test": 2}},
               "with GLUE sst": {"hparams": {"task_names": [TASK, "sst"]}}},
}


def hparams_of(kind: str, variant: str, first: bool = False) -> dict:
  """The hparams of a run of (kind, variant): the series' first run, or any other (and the
  reference run)."""
  v = VARIANTS[kind][variant]
  base = PRETRAIN if kind == "pretrain" else FINETUNE
  return {**base, **v.get("hparams", {}), **(v.get("first", {}) if first else {})}


def command(kind: str, data_dir: pathlib.Path, variant: str = "plain", n: int = 0) -> list[str]:
  """The command of run n (1: the first of a series; 0: the reference run) of (kind, variant)."""
  v = VARIANTS[kind][variant]
  hparams = hparams_of(kind, variant, first=n == 1)
  args = [*v.get("args", []), *(["--restart"] if v.get("restart") and n == 2 else [])]
  if kind == "pretrain":
    return [sys.executable, str(REPO / "run_pretraining.py"), "--data-dir", str(data_dir),
            "--model-name", MODEL, "--hparams", json.dumps(hparams), *args]
  hparams["vocab_file"] = str(data_dir / "vocab.txt")
  return [sys.executable, str(REPO / "run_finetuning.py"), "--data-dir", str(data_dir),
          "--model-name", MODEL, "--hparams", json.dumps(hparams), *args]


def model_dirs(kind: str, data_dir: pathlib.Path, variant: str = "plain") -> list[pathlib.Path]:
  """The checkpoint folders a completed run of (kind, variant) keeps (fine-tuning: one per
  kept trial)."""
  home = data_dir / "models" / MODEL
  if kind == "pretrain":
    return [home]
  h = hparams_of(kind, variant)
  trials = range(1, h["num_trials"] + 1) if h["keep_all_models"] else [h["num_trials"]]
  return [home / "finetuning_models" / f"{tasks_of(variant)}_model_{t}" for t in trials]


def workers_of(kind: str, variant: str) -> int:
  """The processes one run of (kind, variant) is (a multi-worker cluster over loopback)."""
  return VARIANTS[kind][variant].get("workers", 1)


def tasks_of(variant: str) -> str:
  """The fine-tuning tasks of ``variant`` as the folder and results names join them."""
  return ",".join(hparams_of("finetune", variant)["task_names"])


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
  second: Run | None = None  # the same command started while this one ran (a "second run")
  peer: Run | None = None  # worker 1 of a two-worker run (no fault of its own)


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
        stop_seconds: float = STOP_SECONDS, workers: int = 1) -> Run:
  """Runs ``cmd`` with the injector and ``kill`` planned; SIGKILLs it ``stop_seconds`` after a
  marker or RUN_SECONDS after its start, saying so in ``problem``. When the run asks for a
  second run (its SECOND marker), the same command is started beside it, without a fault.
  With ``workers`` 2, worker 1 runs beside it (``peer``), without a fault; it must end by
  itself within PEER_SECONDS of worker 0 once worker 0 reached its restore (else it is
  SIGKILLed, as a cluster manager would, and its ``problem`` says so)."""
  if STOPPING.is_set():
    raise RuntimeError("the harness is stopping")
  configs = tf_configs(workers) if workers > 1 else [None]
  peers = [_start(cmd, None, events.with_suffix(f".worker{i}.events"), config)
           for i, config in enumerate(configs[1:], 1)]
  try:
    first = _run(cmd, kill, events, stop_seconds, configs[0])
  finally:
    outcome = [_finish(p, time.monotonic() + PEER_SECONDS) for p in peers]
  if outcome:
    formed = any(e["ev"] == "call" and e["hook"] == "restore" for e in first.events)
    if not formed and outcome[0].problem:  # worker 0 died before the cluster formed: worker
      outcome[0].problem = None  # 1 waiting for it is what a cluster does
    first.peer = outcome[0]
  return first


@dataclasses.dataclass
class _Started:
  proc: subprocess.Popen
  chunks: list[bytes]
  reader: threading.Thread
  events: pathlib.Path
  start: float


def _env(kill: dict | None, events: pathlib.Path, tf_config: str | None) -> dict:
  events.unlink(missing_ok=True)
  pathlib.Path(str(events) + SECOND_DONE).unlink(missing_ok=True)
  env = {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "3",  # as a user runs
         ENV: json.dumps({"events": str(events), "kill": kill}),  # them (a test sets 2)
         "PYTHONPATH": os.pathsep.join(filter(None, [str(INJECT), os.environ.get("PYTHONPATH")]))}
  if tf_config:
    env["TF_CONFIG"] = tf_config
  return env


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


def _run(cmd: list[str], kill: dict | None, events: pathlib.Path, stop_seconds: float,
         tf_config: str | None) -> Run:
  """Worker 0 (the only one of a one-process run), with ``kill`` planned (see ``run``)."""
  env = _env(kill, events, tf_config)
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

  def start_second() -> None:
    try:
      second.append(run(cmd, None, events.with_suffix(".second.events"), stop_seconds))
    finally:  # the first run waits for this file at its hook
      pathlib.Path(str(events) + SECOND_DONE).touch()

  def read() -> None:
    for chunk in iter(lambda: proc.stdout.read1(65536), b""):
      chunks.append(chunk)
      recent = b"".join(chunks[-2:])
      if not marked and MARKER.encode() in recent:
        marked.append(time.monotonic())
        wall.append(time.time())
      if not seconds and SECOND.encode() in recent:
        seconds.append(threading.Thread(target=start_second, daemon=True))
        seconds[0].start()

  reader = threading.Thread(target=read, daemon=True)
  reader.start()
  problem = None
  while proc.poll() is None:
    now = time.monotonic()
    if marked and signalled and now - marked[0] > stop_seconds:
      problem = f"still running {stop_seconds:.0f} s after the kill"
    elif now - start > RUN_SECONDS:
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
  return Run(proc.returncode, output, recorded, end - start, MARKER in output,
             end - marked[0] if marked else None, problem, proc.pid,
             wall[0] if wall else None, second[0] if second else None)


def after_kill(output: str) -> list[str]:
  """The non-empty lines printed after the kill marker (a line the marker split counts once)."""
  i = output.find(MARKER)
  if i < 0:
    return []
  rest = output[i + len(MARKER):]
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
  status 1 and no checkpoint saved."""
  second = first.second
  if second is None:
    return ["the second run did not start"]
  lines = [line for line in second.output.splitlines() if line.strip()]
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
