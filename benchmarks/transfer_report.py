"""benchmarks/transfer.py's report: accuracy mean ± sd per label budget and start, as a table,
the ``transfer: labels B: ...`` lines, ``transfer.png`` and ``transfer.json``."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

from transfer_reuse import write_json

STARTS = ("random", "mlm", "electra")  # table column order


def summarise(acc: dict[int, dict[str, list[float]]]) -> dict[int, dict[str, tuple[float, float]]]:
  return {b: {s: (statistics.mean(v), statistics.stdev(v) if len(v) > 1 else 0.0)
              for s, v in row.items()} for b, row in acc.items()}


def table_lines(summary: dict[int, dict[str, tuple[float, float]]], starts: Sequence[str]
                ) -> list[str]:
  head = f"{'labels':>7}" + "".join(f"{s:>16}" for s in starts)
  lines = [head]
  for b in sorted(summary):
    cells = "".join(f"{m:>9.1f} ± {sd:<4.1f}" for m, sd in (summary[b][s] for s in starts))
    lines.append(f"{b:>7}" + cells)
  return lines


def final_lines(summary: dict[int, dict[str, tuple[float, float]]]) -> list[str]:
  """One ``transfer: labels B: ...`` line per budget, the smallest budget last."""
  lines = []
  for b in sorted(summary, reverse=True):
    m = {s: summary[b][s][0] for s in summary[b]}
    cells = "  ".join(f"{s} {m[s]:.1f}" for s in STARTS if s in m)
    gain = (f"  (electra - random {m['electra'] - m['random']:+.1f})"
            if "electra" in m and "random" in m else "")
    lines.append(f"transfer: labels {b}: {cells}{gain}")
  return lines


def plot(summary: dict[int, dict[str, tuple[float, float]]], starts: Sequence[str],
         eval_name: str, png: str) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  budgets = sorted(summary)
  fig, ax = plt.subplots(figsize=(5.5, 4))
  for s in starts:
    ax.errorbar(budgets, [summary[b][s][0] for b in budgets],
                yerr=[summary[b][s][1] for b in budgets], marker="o", capsize=3,
                label={"random": "random init", "mlm": "masked-LM pre-trained",
                       "electra": "ELECTRA pre-trained"}[s])
  ax.set_xscale("log")
  ax.set_xticks(budgets, [str(b) for b in budgets])
  ax.set_xlabel("labelled SST-2 train rows")
  ax.set_ylabel(f"SST-2 {eval_name} accuracy (mean ± sd over seeds)")
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fig.savefig(png, dpi=120)
  plt.close(fig)


def report(args: argparse.Namespace, out: str, acc: dict[int, dict[str, list[float]]],
           starts: list[str], n_eval: int, record: dict[str, Any], t0: float) -> None:
  """Step 5: the table, the PNG, transfer.json and the final lines."""
  summary = summarise(acc)
  png = os.path.join(out, "transfer.png")
  plot(summary, starts, args.eval_on, png)
  record["summary"] = {str(b): {s: {"mean": m, "sd": sd} for s, (m, sd) in row.items()}
                       for b, row in summary.items()}
  record["timings_s"]["total"] = time.time() - t0
  write_json(os.path.join(out, "transfer.json"), record, indent=2)
  print(f"\nSST-2 {args.eval_on} accuracy ({n_eval} rows), mean ± sd over "
        f"{args.seeds} seed(s):")
  print("\n".join(table_lines(summary, starts)))
  print(f"plot: {png}\nrecord: {os.path.join(out, 'transfer.json')}\n"
        f"wall time: {record['timings_s']['total'] / 60:.1f} min")
  print("\n".join(final_lines(summary)))
