r"""Does pre-training pay off? ELECTRA vs masked-LM pre-training vs random init on few-label SST-2.

One command, the whole experiment (defaults: about an hour on 2 CPU cores; docs/transfer.md):

  python benchmarks/transfer.py                       # writes runs/transfer/
  python benchmarks/transfer.py --out_dir runs/tiny --electra_steps 20 --budgets 32,64 \
      --seeds 1 --dev_rows 64 --hidden 32 ...         # smoke-test sizes (see --help)

1. Unlabelled in-domain corpus from ``$DATA_DIR`` (default ``../shared/data``): the sentences
   of SST-2's train split without labels (its 67k rows are phrases, most of them pieces of the
   same ~7k sentences: only phrases no longer phrase contains are kept, shuffled and packed
   ``--sentences_per_doc`` to a document) and wikitext-2's ``wiki.test.raw`` (one document per
   article).
2. ``data_prep/learn_vocab.py`` (WordPiece vocabulary of that corpus) and
   ``data_prep/build_pretraining_dataset.py`` (TFRecords).
3. ``run_pretraining.py`` twice at equal pre-training FLOPs
   (``electra_tf/pretraining/flops.py``, as the training log counts them): the ELECTRA
   objective for ``--electra_steps`` steps, masked LM only (``"electra_objective": false``) for
   as many steps as the same FLOPs buy; then the evaluation run of each (disc AUC / recall,
   masked-LM accuracy).
4. ``run_finetuning.py`` on SST-2 (task ``sst``) from each model and from random
   initialisation, same shape and hparams, for every label budget (rows sampled from SST-2
   train with a fixed seed; ``--seeds`` trials, seeds 1..N) and scored on SST-2 dev.
   ``--eval_on heldout`` scores on held-out SST-2 *train* sentences instead (none of their
   phrases is in any budget): that is how the fine-tuning hparams were chosen, never on dev.
5. One table (budget x start: accuracy mean ± sd over seeds), ``transfer.png`` (accuracy vs
   labels, one line per start) and ``transfer.json`` in ``--out_dir``; the last lines read
   ``transfer: labels B: random X  mlm Y  electra Z  (electra - random +D)``, the smallest
   budget last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from transfer_data import (
  read_sst,
  sentences_of,
  split_sst,
  write_corpus,
  write_tsv,
)
from transfer_report import STARTS, report
from transfer_reuse import claim_out_dir, model_key, read_json, refuse_other, write_json
from transfer_runs import (
  REPO,
  Runner,
  flops_per_example,
  pretraining_hparams,
  read_unsup_results,
  shape_hparams,
  trial_accuracies,
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--out_dir", default=os.path.join(REPO, "runs", "transfer"))
  p.add_argument("--data_dir", default=os.environ.get(
      "DATA_DIR", os.path.join(os.path.dirname(REPO), "shared", "data")),
      help="folder with glue/SST-2/ and wikitext2/ (env DATA_DIR)")
  g = p.add_argument_group("corpus")
  g.add_argument("--sentences_per_doc", type=int, default=50,
                 help="SST-2 sentences packed into one pre-training document")
  g.add_argument("--max_sentences", type=int, default=0, help="0: all SST-2 sentences")
  g.add_argument("--no_wikitext", action="store_true", help="SST-2 sentences only")
  g.add_argument("--vocab_size", type=int, default=8000, help="asked of the vocab learner")
  g.add_argument("--vocab_min_count", type=int, default=10,
                 help="words seen fewer times are split into WordPieces")
  g = p.add_argument_group("model (discriminator / fine-tuned encoder)")
  g.add_argument("--layers", type=int, default=2)
  g.add_argument("--hidden", type=int, default=256)
  g.add_argument("--heads", type=int, default=4)
  g.add_argument("--embedding_size", type=int, default=128)
  g = p.add_argument_group("pre-training")
  g.add_argument("--seq_len", type=int, default=128)
  g.add_argument("--batch", type=int, default=32)
  g.add_argument("--electra_steps", type=int, default=600,
                 help="ELECTRA steps; masked LM gets the steps of the same FLOPs")
  g.add_argument("--lr", type=float, default=1e-4,
                 help="peak pre-training learning rate (5e-4 collapses the discriminator here)")
  g.add_argument("--warmup_frac", type=float, default=0.1)
  g.add_argument("--generator_size", type=float, default=0.125,
                 help="generator hidden size / discriminator hidden size")
  g.add_argument("--mlm_steps", type=int, default=0,
                 help="masked-LM steps (0: the steps of the ELECTRA run's FLOPs)")
  g.add_argument("--mlm_lr", type=float, default=None,
                 help="peak learning rate of the masked-LM-only run (default: --lr)")
  g.add_argument("--uniform_generator", action="store_true",
                 help="ELECTRA replaces masked tokens by uniformly sampled ones (no generator)")
  g.add_argument("--temperature", type=float, default=1.0, help="generator sampling temperature")
  g.add_argument("--disc_weight", type=float, default=50.0)
  g.add_argument("--mask_prob", type=float, default=0.15)
  g.add_argument("--log_every", type=int, default=100)
  g.add_argument("--eval_batches", type=int, default=20)
  g = p.add_argument_group("fine-tuning (identical for the three starts)")
  g.add_argument("--budgets", default="2000,500", help="comma-separated SST-2 train rows")
  g.add_argument("--seeds", type=int, default=3, help="trials per budget and start")
  g.add_argument("--dev_rows", type=int, default=0, help="0: the whole dev set (872 rows)")
  g.add_argument("--eval_on", choices=("dev", "heldout"), default="dev")
  g.add_argument("--heldout_sentences", type=int, default=500,
                 help="SST-2 train sentences kept out of every budget (--eval_on heldout)")
  g.add_argument("--ft_seq_len", type=int, default=64)
  g.add_argument("--ft_batch", type=int, default=32)
  g.add_argument("--ft_lrs", default="1e-4,3e-4",
                 help="fine-tuning learning rates; with more than one, the script picks one "
                      "on held-out SST-2 train sentences (smallest budget, one seed, every "
                      "start; best mean), never on dev")
  g.add_argument("--ft_epochs", type=float, default=3.0)
  g.add_argument("--ft_min_steps", type=int, default=200,
                 help="at least this many fine-tuning steps (more epochs for small budgets)")
  g.add_argument("--starts", default=",".join(STARTS), help="subset of random,mlm,electra")
  return p.parse_args(argv)


# ---------------------------------------------------------------- steps

def checked_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str], list[int]]:
  """(args, starts, budgets, largest first); exits with one line on a bad flag."""
  args = parse_args(argv)
  starts = [s.strip() for s in args.starts.split(",") if s.strip()]
  if not starts or any(s not in STARTS for s in starts):
    sys.exit(f"transfer: --starts {args.starts!r}: choose from {','.join(STARTS)}")
  try:
    budgets = sorted({int(b) for b in args.budgets.split(",") if b.strip()}, reverse=True)
  except ValueError:
    sys.exit(f"transfer: --budgets {args.budgets!r}: expected comma-separated integers")
  if not budgets or min(budgets) < 1:
    sys.exit(f"transfer: --budgets {args.budgets!r}: expected positive integers")
  if args.seeds < 1 or args.electra_steps < 1:
    sys.exit("transfer: --seeds and --electra_steps must be at least 1")
  sst_dir = os.path.join(args.data_dir, "glue", "SST-2")
  for need in (os.path.join(sst_dir, "train.tsv"), os.path.join(sst_dir, "dev.tsv"),
               os.path.join(args.data_dir, "wikitext2", "wiki.test.raw")):
    if not os.path.isfile(need) and not (args.no_wikitext and "wikitext2" in need):
      sys.exit(f"transfer: {need} not found (set --data_dir or DATA_DIR)")
  return args, starts, budgets


def prepare_corpus(args: argparse.Namespace, out: str, train: list[tuple[str, str]],
                   run: Runner, record: dict[str, Any]) -> tuple[str, int]:
  """Steps 1-2: corpus, vocabulary, TFRecords; returns (vocab file, vocabulary size)."""
  sentences, _ = sentences_of([text for text, _ in train])
  record["corpus"] = write_corpus(args, sentences, os.path.join(out, "corpus"))
  vocab_file = os.path.join(out, "vocab.txt")
  record["timings_s"]["vocab"] = run(
      "learn_vocab", "data_prep/learn_vocab.py", "--corpus_dir", os.path.join(out, "corpus"),
      "--vocab_file", vocab_file, "--vocab_size", str(args.vocab_size),
      "--min_count", str(args.vocab_min_count))
  with open(vocab_file, encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)
  record["timings_s"]["tfrecords"] = run(
      "build_pretraining_dataset", "data_prep/build_pretraining_dataset.py",
      "--corpus_dir", os.path.join(out, "corpus"), "--vocab_file", vocab_file,
      "--output_dir", os.path.join(out, "pretrain_tfrecords"),
      "--max_seq_length", str(args.seq_len), "--num_out_files", "4", "--seed", "1")
  print(f"corpus: {record['corpus']['sst2_sentences']} SST-2 train sentences, "
        f"{record['corpus'].get('wikitext_articles', 0)} wikitext-2 articles; "
        f"vocabulary {vocab_size} WordPieces", flush=True)
  return vocab_file, vocab_size


def pretraining_steps(args: argparse.Namespace, vocab_size: int
                      ) -> tuple[dict[str, int], dict[str, float]]:
  """(steps, FLOPs per sequence) of each objective: masked LM gets ELECTRA's FLOPs."""
  per_example = {
      "electra": flops_per_example(pretraining_hparams(args, vocab_size, True, 1)),
      "mlm": flops_per_example(pretraining_hparams(args, vocab_size, False, 1))}
  steps = {"electra": args.electra_steps,
           "mlm": args.mlm_steps or max(1, round(args.electra_steps * per_example["electra"]
                                                 / per_example["mlm"]))}
  return steps, per_example


def pretrain(args: argparse.Namespace, out: str, name: str, steps: int, per_example: float,
             vocab_size: int, corpus: dict[str, Any], run: Runner) -> dict[str, Any]:
  """Step 3 for one objective: pre-training and its evaluation run, unless a finished run of
  the same settings is in models/<name> (refused: another one); returns its record."""
  total = steps * args.batch * per_example
  print(f"pre-training {name}: {steps} steps of {args.batch} x {args.seq_len} tokens, "
        f"{per_example / 1e9:.3f} GFLOPs per sequence, {total / 1e15:.4f} PFLOPs in all",
        flush=True)
  hparams = pretraining_hparams(args, vocab_size, name == "electra", steps)
  model_dir = os.path.join(out, "models", name)
  stamp, key = os.path.join(model_dir, "transfer_run.json"), model_key(corpus, hparams)
  stored = read_json(stamp)
  if stored is not None or os.path.isdir(model_dir):
    refuse_other(model_dir, (stored or {}).get("key"), key, "pre-trained")
  if stored is None or stored.get("result") is None:
    write_json(stamp, {"key": key, "result": None})
    common = ["--data_dir", out, "--model_name", name]
    train_s = run(f"pretrain_{name}", "run_pretraining.py", *common,
                  "--hparams", json.dumps(hparams))
    run(f"pretrain_{name}_eval", "run_pretraining.py", *common,
        "--hparams", json.dumps({**hparams, "do_train": False, "do_eval": True}))
    metrics = read_unsup_results(os.path.join(model_dir, "results", "unsup_results.txt"))
    stored = {"key": key, "result": {"train_s": train_s, "eval": metrics}}
    write_json(stamp, stored)
  train_s, metrics = stored["result"]["train_s"], stored["result"]["eval"]
  shown = ", ".join(f"{k} {metrics[k]:.3f}" for k in
                    ("disc_auc", "disc_recall", "masked_lm_accuracy") if k in metrics)
  print(f"  {train_s:.0f} s; evaluation: {shown}", flush=True)
  return {"steps": steps, "flops_per_example": per_example, "total_flops": total,
          "train_s": train_s, "eval": metrics, "hparams": hparams}


class FineTuner:
  """Step 4: ``run_finetuning.py`` on one label budget from one start, reusing a finished run
  whose inputs (hparams, rows, corpus, initial model) are the same.

  Args:
    args: the parsed flags; out: --out_dir; run: the subprocess runner.
    budget_rows: label budget -> its SST-2 train rows.
    common: the fine-tuning hparams shared by every run.
    keys: start -> the key of the model it starts from (None: random init).
  """

  def __init__(self, args: argparse.Namespace, out: str, run: Runner,
               budget_rows: dict[int, list[tuple[str, str]]], common: dict[str, Any],
               keys: dict[str, Any]):
    self.args, self.out, self.run = args, out, run
    self.budget_rows, self.common, self.keys = budget_rows, common, keys

  def __call__(self, tag: str, b: int, start: str, lr: float, rows: list, trials: int
               ) -> tuple[list[float], dict[str, Any]]:
    """(accuracy per trial, the run's record) of budget ``b`` from ``start``."""
    args, ft_dir = self.args, os.path.join(self.out, tag)
    write_tsv(self.budget_rows[b], os.path.join(ft_dir, "finetuning_data", "sst", "train.tsv"))
    write_tsv(rows, os.path.join(ft_dir, "finetuning_data", "sst", "dev.tsv"))
    epochs = max(args.ft_epochs, args.ft_min_steps * args.ft_batch / b)
    init = None if start == "random" else os.path.join(self.out, "models", start)
    hparams = {**self.common, "learning_rate": lr, "num_train_epochs": epochs,
               "num_trials": trials, "init_checkpoint": init}
    results = os.path.join(ft_dir, "models", start, "results", "sst_results.json")
    done = os.path.join(ft_dir, "models", start, "transfer_done.json")
    key = json.loads(json.dumps({"hparams": hparams, "train": self.budget_rows[b],
                                 "eval": rows, "init": self.keys[start]}))
    previous = read_json(done)
    if previous is not None and previous.get("key") == key and os.path.exists(results):
      accs = trial_accuracies(results)  # a rerun reuses finished runs
      return accs, {"accuracy": accs, "wall_s": previous["wall_s"], "hparams": hparams}
    secs = self.run(f"finetune_{tag}_{start}", "run_finetuning.py", "--data_dir", ft_dir,
                    "--model_name", start, "--hparams", json.dumps(hparams))
    accs = trial_accuracies(results)
    write_json(done, {"key": key, "wall_s": secs})
    return accs, {"accuracy": accs, "wall_s": secs, "hparams": hparams}


def select_lr(args: argparse.Namespace, finetune: FineTuner, budgets: list[int],
              starts: list[str], heldout: list, record: dict[str, Any]) -> float:
  """The fine-tuning rate: the only one given, else the best mean over the starts on held-out
  SST-2 train sentences (smallest budget, one seed), never on dev."""
  lrs = [float(x) for x in args.ft_lrs.split(",") if x.strip()]
  if len(lrs) == 1:
    return lrs[0]
  b, held = min(budgets), heldout[:args.dev_rows] if args.dev_rows else heldout
  scores = {}
  for lr in lrs:
    accs = [finetune(f"select_lr{lr:g}", b, s, lr, held, 1)[0][0] for s in starts]
    scores[lr] = statistics.mean(accs)
    by_start = dict(zip(starts, accs, strict=True))
    record["lr_selection"][f"{lr:g}"] = by_start
    print(f"fine-tuning lr {lr:g} on {b} labels, held-out SST-2 train sentences "
          f"({len(held)}): " + "  ".join(f"{s} {a:.1f}" for s, a in by_start.items()),
          flush=True)
  ft_lr = max(lrs, key=lambda lr: scores[lr])
  print(f"fine-tuning lr: {ft_lr:g} (best held-out mean over the starts)", flush=True)
  return ft_lr


def finetune_budgets(args: argparse.Namespace, finetune: FineTuner, budgets: list[int],
                     starts: list[str], lr: float, eval_rows: list, record: dict[str, Any]
                     ) -> dict[int, dict[str, list[float]]]:
  """Step 4: every budget from every start; accuracy per trial."""
  acc: dict[int, dict[str, list[float]]] = {}
  for b in budgets:
    acc[b] = {}
    for s in starts:
      acc[b][s], info = finetune(f"sst_{b}", b, s, lr, eval_rows, args.seeds)
      record["runs"][f"{b}/{s}"] = info
      print(f"fine-tuning from {s}, {b} labels: {args.eval_on} accuracy "
            + " ".join(f"{a:.1f}" for a in acc[b][s]) + f" ({info['wall_s']:.0f} s)",
            flush=True)
  return acc


# ---------------------------------------------------------------- main

def main(argv: Sequence[str] | None = None) -> None:
  args, starts, budgets = checked_args(argv)
  t0 = time.time()
  out = os.path.abspath(args.out_dir)
  sst_dir = os.path.join(args.data_dir, "glue", "SST-2")
  os.makedirs(out, exist_ok=True)
  corpus = claim_out_dir(args, out, sst_dir)
  run = Runner(out)
  record: dict[str, Any] = {"args": vars(args), "timings_s": {}}
  train = read_sst(os.path.join(sst_dir, "train.tsv"))
  vocab_file, vocab_size = prepare_corpus(args, out, train, run, record)

  steps, per_example = pretraining_steps(args, vocab_size)  # 3. at equal FLOPs
  record["pretraining"], keys = {}, {"random": {"corpus": corpus}}
  for name in ("electra", "mlm"):
    if name in starts:
      record["pretraining"][name] = info = pretrain(
          args, out, name, steps[name], per_example[name], vocab_size, corpus, run)
      keys[name] = model_key(corpus, info["hparams"])

  # 4. fine-tuning: the learning rate chosen on held-out train sentences, then every budget
  budget_rows, heldout = split_sst(train, budgets, args.heldout_sentences)
  eval_rows = read_sst(os.path.join(sst_dir, "dev.tsv")) if args.eval_on == "dev" else heldout
  if args.dev_rows:
    eval_rows = eval_rows[:args.dev_rows]
  finetune = FineTuner(args, out, run, budget_rows, {
      **shape_hparams(args, vocab_size), "task_names": ["sst"], "vocab_file": vocab_file,
      "max_seq_length": args.ft_seq_len, "train_batch_size": args.ft_batch,
      "eval_batch_size": args.ft_batch, "seed": 1, "keep_all_models": False}, keys)
  record["finetuning"] = ft = {"eval_on": args.eval_on, "eval_rows": len(eval_rows),
                               "runs": {}, "lr_selection": {}}
  ft["learning_rate"] = lr = select_lr(args, finetune, budgets, starts, heldout, ft)
  acc = finetune_budgets(args, finetune, budgets, starts, lr, eval_rows, ft)
  report(args, out, acc, starts, len(eval_rows), record, t0)


if __name__ == "__main__":
  main()
