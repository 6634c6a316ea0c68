"""One command: ``python -m tools.official_goldens --official_dir <google-research/electra>``.

Writes every golden under tests/golden/ (``--only`` picks families). Each family runs in its
own process, so graph state and seeds never leak from one family into another; a rerun
rewrites the same files bit for bit.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
TEXT = ROOT / "tests" / "data" / "gutenberg"

# family -> module under tools.official_goldens; order matters (later ones read earlier ones).
FAMILIES = {
    "vocab": "vocab",
    "pretraining": "pretraining",   # electra_small_2l/, electric_2l/
    "finetuning": "finetuning",     # finetune_heads/ (initialised from electra_small_2l)
    "train_step": "train_step",     # train_step/finetune_rte/
    "optimizer": "optimizer",       # optimizer/
    "tokenizer": "tokenizer",       # tokenizer/
    "pretrain_data": "pretrain_data",  # pretrain_data/
    "hf_pair": "hf_pair",           # hf_electra_2l/ (written by transformers, not official code)
}
NOT_OFFICIAL = {"hf_pair"}  # families that run under --hf_python (torch + transformers)


def _run_family(name: str, official_dir: str) -> None:
  """Runs one family in this process (the child side of :func:`main`)."""
  import importlib

  if name not in NOT_OFFICIAL:  # hf_pair runs under --hf_python, which may lack tensorflow
    from tools.official_goldens import official

    official.load(official_dir)
  mod = importlib.import_module(f"tools.official_goldens.{FAMILIES[name]}")
  if name == "vocab":
    mod.write(TEXT, GOLDEN / "vocab.txt")
  else:
    mod.write(official_dir, GOLDEN)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--official_dir", required=True,
                      help="a checkout of google-research/electra (not edited)")
  parser.add_argument("--only", default="", help="comma-separated families (default: all)")
  parser.add_argument("--hf_python", default=sys.executable,
                      help="interpreter with torch + transformers for hf_pair (default: this "
                      "one); they are not project dependencies, so use a separate venv")
  parser.add_argument("--verbose", action="store_true",
                      help="show what the official code and TensorFlow print (hidden unless a "
                      "family fails)")
  parser.add_argument("--_family", default="", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args._family:
    _run_family(args._family, args.official_dir)
    return 0
  names = [n for n in args.only.split(",") if n] or list(FAMILIES)
  unknown = sorted(set(names) - set(FAMILIES))
  if unknown:
    parser.error(f"unknown family {unknown[0]!r}; choose from {', '.join(FAMILIES)}")
  env = {**os.environ, "PYTHONHASHSEED": "0", "TF_USE_LEGACY_KERAS": "1",
         "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
  for name in names:
    print(f"official goldens: {name}", flush=True)
    python = args.hf_python if name in NOT_OFFICIAL else sys.executable
    if not os.access(python, os.X_OK):
      print(f"official goldens: {name}: no interpreter at {python} (--hf_python)",
            file=sys.stderr)
      return 2
    out = None if args.verbose else subprocess.PIPE
    proc = subprocess.run([python, "-m", "tools.official_goldens", "--official_dir",
                           args.official_dir, "--_family", name], cwd=ROOT, env=env,
                          stdout=out, stderr=subprocess.STDOUT if out else None, text=True)
    if proc.returncode:  # the family's own output says why (its last lines)
      if proc.stdout:
        sys.stderr.write("".join(proc.stdout.splitlines(keepends=True)[-20:]))
      print(f"official goldens: {name} failed (exit {proc.returncode})", file=sys.stderr)
      return proc.returncode
  print(f"official goldens: wrote {', '.join(names)} under {GOLDEN.relative_to(ROOT)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
