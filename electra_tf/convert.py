r"""``python -m electra_tf.convert``: the conversion command's entry point.

  python -m electra_tf.convert --checkpoint <model dir | TF1 prefix or dir | TF2 checkpoint |
      Hugging Face folder> [--generator_checkpoint <HF folder>] [--hparams <JSON or .json>] \
      --output_dir <dir>

Flags and wiring only; what is read and written is described in ``electra_tf.interop.conversion``.
"""

from __future__ import annotations

import sys

from electra_tf import console, early_interrupt

if __name__ == "__main__":
  early_interrupt.install()
  console.quiet_logs(sys.argv)  # before TensorFlow loads
  console.require_tensorflow("convert")  # a device install: one line, no traceback
  console.use_tf_keras()
  from electra_tf.interop import conversion

  conversion.define_flags()
  console.run(conversion.main, "convert")
