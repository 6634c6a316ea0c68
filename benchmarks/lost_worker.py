"""A two-worker run loses a worker: how long until the other stops? And a slow save: is it
mistaken for a lost worker?

Starts two ``run_pretraining.py`` workers over loopback (MultiWorkerMirroredStrategy, TF_CONFIG)
on a tiny model (checkpoints every 5 steps) and TFRecords built from real text (Emma,
../shared/data).

Lost worker: once worker 0 logs step ``--at_step``, sends ``--signal`` to ``--worker`` (KILL:
the process dies, its host stays up; STOP: it freezes, as a machine gone from the network, so
no connection breaks), then prints the seconds from the signal to the other worker's exit and
that worker's last line.

Slow save (``--slow_save S``): no signal; the chief's save of step 10 takes S seconds longer
(a large model's save), while worker 1 waits in the next collective. ``--collective_timeout C``
gives every collective a timeout of C seconds
(``tf.distribute.experimental.CommunicationOptions``). Prints whether both workers went on
past the save, or the line a worker stopped with.

  python benchmarks/lost_worker.py --signal KILL --worker 1 [--lost_worker_secs 60]
  python benchmarks/lost_worker.py --slow_save 45 [--collective_timeout 30]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # quiet workers and data build
REPO = pathlib.Path(__file__).resolve().parents[1]
SAVE_STEP = 10
TINY = {"model_hparam_overrides": {"hidden_size": 64, "num_hidden_layers": 2},
        "embedding_size": 64, "max_seq_length": 32, "train_batch_size": 8,
        "num_train_steps": 10**6, "iterations_per_loop": 1, "save_checkpoints_steps": 5,
        "num_warmup_steps": 1, "seed": 3}


def tf_configs() -> list[str]:
  """TF_CONFIG of a 2-worker cluster on free loopback ports, worker 0 first."""
  ports = []
  for _ in range(2):
    with socket.socket() as s:
      s.bind(("127.0.0.1", 0))
      ports.append(s.getsockname()[1])
  workers = [f"127.0.0.1:{p}" for p in ports]
  return [json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}})
          for i in range(2)]


def worker_process(slow_save: float, collective_timeout: float, argv: list[str]) -> None:
  """Runs run_pretraining.py with the chief's save of SAVE_STEP slowed and the collectives'
  timeout set (the benchmark's changes, made before the run starts)."""
  sys.path.insert(0, str(REPO))
  from electra_tf.training import checkpointing

  save = checkpointing.CheckpointKeeper.save

  def slow(self, step: int) -> str:
    if self.is_chief and step == SAVE_STEP:
      time.sleep(slow_save)
    return save(self, step)

  checkpointing.CheckpointKeeper.save = slow
  if collective_timeout:
    from tensorflow.python.distribute import collective_util  # the strategy's default options

    defaults = list(collective_util.Options.__init__.__defaults__)
    defaults[1] = collective_timeout  # (bytes_per_pack, timeout_seconds, implementation)
    collective_util.Options.__init__.__defaults__ = tuple(defaults)
  sys.argv = [str(REPO / "run_pretraining.py"), *argv]
  runpy.run_path(sys.argv[0], run_name="__main__")


def start(root: pathlib.Path, args: argparse.Namespace) -> list[subprocess.Popen]:
  flags = [] if args.lost_worker_secs is None else [f"--lost_worker_secs={args.lost_worker_secs}"]
  command = [str(REPO / "run_pretraining.py")]
  if args.slow_save:
    command = [__file__, "--worker_process", str(args.slow_save), str(args.collective_timeout)]
  return [subprocess.Popen(
      [sys.executable, *command, "--data_dir", str(root), "--model_name", "m",
       "--distribution_strategy=multi_worker_mirrored", "--check_data=false", *flags,
       "--hparams", json.dumps(TINY)], cwd=REPO, env={**os.environ, "TF_CONFIG": tf_config},
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for tf_config in tf_configs()]


def wait_for(runs: list[subprocess.Popen], lines: list[list[str]], pattern: str) -> bool:
  """Waits until worker 0 logs a line matching `pattern` (True) or a worker exits (False)."""
  while not any(re.search(pattern, line) for line in list(lines[0])):
    if any(run.poll() is not None for run in runs):
      return False
    time.sleep(0.05)
  return True


def main() -> None:
  if sys.argv[1:2] == ["--worker_process"]:
    worker_process(float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:])
    return
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--signal", choices=["KILL", "STOP"], default="KILL")
  p.add_argument("--worker", type=int, choices=[0, 1], default=1, help="the worker to stop")
  p.add_argument("--at_step", type=int, default=12)
  p.add_argument("--lost_worker_secs", type=float, default=None, help="default: the flag's")
  p.add_argument("--slow_save", type=float, default=0.0, help="seconds added to a save")
  p.add_argument("--collective_timeout", type=float, default=0.0, help="0: none")
  args = p.parse_args()
  root = pathlib.Path(tempfile.mkdtemp(prefix="lost-worker-"))
  sys.path.insert(0, str(REPO / "benchmarks"))
  import soak  # its data build; imports TensorFlow

  soak.build_data(root, 30000)
  runs = start(root, args)
  lines: list[list[str]] = [[], []]
  for i, run in enumerate(runs):
    threading.Thread(target=lambda i=i, run=run: lines[i].extend(run.stdout), daemon=True).start()
  try:
    if args.slow_save:
      went_on = wait_for(runs, lines, rf"^{SAVE_STEP + 3}/")
      time.sleep(0.5)
      print(f"lost_worker: a {args.slow_save:g} s save on the chief, collective timeout "
            f"{args.collective_timeout or 'none'}: " + (
                "both workers went on past it" if went_on else "a worker stopped:\n" + "\n".join(
                    f"worker {i}: {lines[i][-1].rstrip()}" for i in range(2))))
      return
    if not wait_for(runs, lines, rf"^{args.at_step}/"):
      raise SystemExit("lost_worker: a worker ended first:\n" + "".join(lines[0][-20:]))
    other = runs[1 - args.worker]
    runs[args.worker].send_signal(getattr(signal, f"SIG{args.signal}"))
    sent = time.perf_counter()
    other.wait(timeout=600)
    seconds = time.perf_counter() - sent
  finally:
    for run in runs:
      run.kill()
      run.wait()
    shutil.rmtree(root, ignore_errors=True)
  time.sleep(0.2)  # the reader thread's last line
  print(f"lost_worker: SIG{args.signal} to worker {args.worker}: worker {1 - args.worker} "
        f"exited {seconds:.1f} s later, status {other.returncode}, saying:\n"
        f"{lines[1 - args.worker][-1].rstrip()}")


if __name__ == "__main__":
  main()
