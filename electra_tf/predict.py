r"""``python -m electra_tf.predict``: label a file with a fine-tuned model.

  python -m electra_tf.predict --model <model dir | SavedModel | .tflite | litert/> \
      --input rows.csv [--output rows.predictions.jsonl] [--task <name>] [--batch_size 32] \
      [--show 0]

Flags and wiring only; what is read, run and written is described in
``electra_tf.interop.predicting``. A ``.tflite`` model (or a LiteRT folder) loads no TensorFlow.
"""

from __future__ import annotations

import sys

from electra_tf import console, early_interrupt

if __name__ == "__main__":
  early_interrupt.install()
  console.quiet_logs(sys.argv)  # before any library loads
  console.use_tf_keras()
  from electra_tf.interop import predicting

  predicting.define_flags()
  console.run(predicting.main, "predict")
