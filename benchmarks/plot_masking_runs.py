"""Learning curves of several pre-training runs side by side (one line per run and panel).

  python benchmarks/plot_masking_runs.py --png docs/masking_curves.png \\
      demo_out/models/demo_token demo_out/models/demo_whole_word demo_out/models/demo_span

reads each model folder's train scalars (``electra_tf.learning_curves.read_scalars``) and draws
the generator (MLM) loss, the discriminator loss, the discriminator's AUC and the masked-LM
accuracy against the step, with each run's ``masking`` hparam (from its ``hparams.json``) as its
label. It also prints the last logged value of each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from electra_tf import atomic_io  # noqa: E402
from electra_tf.learning_curves import read_scalars  # noqa: E402

PANELS = (("mlm_loss", "generator (MLM) loss"), ("disc_loss", "discriminator loss"),
          ("disc_auc", "discriminator AUC"), ("masked_lm_accuracy", "masked-LM accuracy"))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--png", required=True)
  parser.add_argument("model_dirs", nargs="+")
  args = parser.parse_args()
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.8), sharex=True)
  for folder in args.model_dirs:
    with open(os.path.join(folder, "hparams.json"), encoding="utf-8") as f:
      label = json.load(f).get("masking", "token")
    curves = read_scalars(folder)
    last = []
    for ax, (tag, title) in zip(axes, PANELS, strict=True):
      steps, values = zip(*curves[tag], strict=True)
      ax.plot(steps, values, label=label)
      ax.set_title(title)
      last.append(f"{tag} {values[-1]:.4g}")
    print(f"{label} ({folder}), step {steps[-1]}: {', '.join(last)}")
  for ax in axes:
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
  axes[0].legend(title="masking")
  fig.suptitle("Pre-training the demo corpus with each masking")
  fig.tight_layout()
  with atomic_io.temp_path(args.png) as tmp:
    fig.savefig(tmp, dpi=90, format="png", bbox_inches="tight")


if __name__ == "__main__":
  main()
