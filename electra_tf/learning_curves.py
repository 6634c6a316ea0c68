r"""Learning curves of a pre-training run, read back from its TensorBoard event files.

  python -m electra_tf.learning_curves --model_dir demo_out/models/demo \
      --png demo_out/learning_curves.png --rows 5

plots the losses, the discriminator's AUC and recall and the masked-LM accuracy against the
step (train scalars from ``<model_dir>``, eval scalars from ``<model_dir>/eval`` as points) and,
when the run probed a task (``run_pretraining.py --probe_task``), a third panel: the probe's
dev score of [CLS] and mean-pooled features, with the random-init reference as a band (its mean
over seeds +- their spread). It prints the same curves as a small text table.
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Mapping, Sequence

from electra_tf import atomic_io, console, early_interrupt, probing

# (tag, label) in plot order; a tag absent from the run is skipped.
LOSSES = (("total_loss", "total loss"), ("mlm_loss", "generator (MLM) loss"),
          ("disc_loss", "discriminator loss"))
QUALITY = (("disc_auc", "disc AUC"), ("disc_recall", "disc recall"),
           ("disc_precision", "disc precision"), ("masked_lm_accuracy", "MLM accuracy"))
TABLE_TAGS = ("mlm_loss", "disc_loss", "masked_lm_accuracy", "disc_auc", "disc_recall")

Curves = dict[str, list[tuple[int, float]]]


def read_scalars(event_dir: str) -> Curves:
  """tag -> [(step, value)] sorted by step, from the event files directly in ``event_dir``."""
  import tensorflow as tf

  curves: Curves = {}
  for path in sorted(glob.glob(os.path.join(event_dir, "events.out.tfevents.*"))):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.HasField("tensor"):
          if value.tensor.dtype == tf.string.as_datatype_enum:  # a text summary: not a curve
            continue
          number = float(tf.make_ndarray(value.tensor))
        elif value.HasField("simple_value"):
          number = float(value.simple_value)
        else:
          continue
        curves.setdefault(value.tag, []).append((int(event.step), number))
  for tag, points in curves.items():
    latest = dict(points)  # a resumed run rewrites steps: keep the last value of each
    curves[tag] = sorted(latest.items())
  return curves


def text_table(curves: Mapping[str, Sequence[tuple[int, float]]], rows: int = 5,
               tags: Sequence[str] = TABLE_TAGS) -> str:
  """``rows`` evenly spaced log points (first and last included) of ``tags`` as a table."""
  tags = [t for t in tags if curves.get(t)]
  if not tags:
    return "(no scalars logged)"
  steps = sorted({s for t in tags for s, _ in curves[t]})
  if len(steps) > rows:
    picks = [round(i * (len(steps) - 1) / (rows - 1)) for i in range(rows)] if rows > 1 else [-1]
    steps = [steps[i] for i in picks]
  header = f"{'step':>7}" + "".join(f"{t:>20}" for t in tags)
  lines = [header]
  for step in steps:
    cells = []
    for tag in tags:
      value = dict(curves[tag]).get(step)
      cells.append(f"{value:>20.4f}" if value is not None else f"{'':>20}")
    lines.append(f"{step:>7}" + "".join(cells))
  return "\n".join(lines)


def probe_tasks(curves: Mapping[str, Sequence[tuple[int, float]]]) -> list[str]:
  """The tasks a run probed (``probe/<task>/cls`` tags), sorted."""
  found = {probing.parse_tag(tag) for tag in curves if curves[tag]}
  return sorted(task for task, name in filter(None, found) if name == "cls")


def _probe_panel(ax, train: Mapping[str, Sequence[tuple[int, float]]]) -> None:
  """The probe's scores per pooling and the random-init reference as a band."""
  tasks = probe_tasks(train)
  for task in tasks:
    prefix = f"{task}: " if len(tasks) > 1 else ""
    for name, label in (("cls", "[CLS]"), ("mean", "mean-pooled")):
      if train.get(probing.tag(task, name)):
        steps, values = zip(*train[probing.tag(task, name)], strict=True)
        ax.plot(steps, values, "o-", markersize=3, label=f"{prefix}{label}")
    reference = train.get(probing.tag(task, "random_init"))
    if reference:
      value = reference[-1][1]
      spread = dict(train.get(probing.tag(task, "random_init_spread")) or []).get(
          reference[-1][0], 0.0)
      ax.axhspan(value - spread, value + spread, color="0.5", alpha=0.25,
                 label=f"{prefix}random init ({value:.3f} ± {spread:.3f})")
      ax.axhline(value, color="0.4", linestyle="--", linewidth=1)
  ax.set_title(f"downstream probe: {', '.join(tasks)}")
  ax.set_ylabel("probe: the task's dev metric")


def figure(train: Mapping[str, Sequence[tuple[int, float]]],
           evaluation: Mapping[str, Sequence[tuple[int, float]]],
           title: str = "ELECTRA pre-training"):
  """The matplotlib figure: losses (log scale) and detection / MLM quality against the step,
  a third panel for a probed run; each panel's legend under it, clear of the curves."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from matplotlib.ticker import MaxNLocator

  panels = 3 if probe_tasks(train) else 2
  fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4.6), sharex=True)
  ax_loss, ax_quality = axes[:2]
  for ax, group in ((ax_loss, LOSSES), (ax_quality, QUALITY)):
    for tag, label in group:
      if train.get(tag):
        steps, values = zip(*train[tag], strict=True)
        line, = ax.plot(steps, values, label=label)
        if evaluation.get(tag):
          e_steps, e_values = zip(*evaluation[tag], strict=True)
          ax.plot(e_steps, e_values, "o", color=line.get_color(), label=f"{label} (eval)")
  if panels == 3:
    _probe_panel(axes[2], train)
  for ax in axes:
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2,
              frameon=False)
  ax_loss.set_yscale("log")
  ax_loss.set_ylabel("loss (log scale)")
  ax_loss.set_title("losses (train, per log interval)")
  ax_quality.set_ylim(0, 1)
  ax_quality.set_ylabel("AUC, recall, precision, accuracy")
  ax_quality.set_title("replaced-token detection and MLM")
  fig.suptitle(title)
  fig.tight_layout()
  return fig


def plot(train: Mapping[str, Sequence[tuple[int, float]]],
         evaluation: Mapping[str, Sequence[tuple[int, float]]], path: str,
         title: str = "ELECTRA pre-training") -> None:
  """Writes ``figure(...)`` as a PNG at ``path`` (atomically)."""
  import matplotlib.pyplot as plt

  fig = figure(train, evaluation, title)
  with atomic_io.temp_path(path) as tmp:
    fig.savefig(tmp, dpi=100, format="png", bbox_inches="tight")
  plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
  import argparse

  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--model_dir", required=True)
  parser.add_argument("--png", help="where to write the plot (default: no plot)")
  parser.add_argument("--rows", type=int, default=5, help="rows of the text table")
  parser.add_argument("-v", "--verbose", action="store_true")
  args = parser.parse_args(argv)
  with console.one_line_errors("learning_curves", args.verbose):
    if not glob.glob(os.path.join(args.model_dir, "events.out.tfevents.*")):
      raise FileNotFoundError(f"no TensorBoard event files in {args.model_dir}")
    if not console.has_tensorflow():  # reading event files needs it
      raise console.needs_tensorflow("reading TensorBoard event files")
    train = read_scalars(args.model_dir)
    evaluation = read_scalars(os.path.join(args.model_dir, "eval"))
    console.log(text_table(train, args.rows))
    probed = [probing.tag(task, name) for task in probe_tasks(train) for name in ("cls", "mean")]
    if probed:  # its own table: probes are fewer than log lines
      console.log(text_table(train, args.rows, probed))
    if args.png:
      plot(train, evaluation, args.png)
      console.log(f"Learning curves: {args.png}")


if __name__ == "__main__":
  early_interrupt.install()
  console.quiet_logs(sys.argv)
  console.use_tf_keras()
  main()
