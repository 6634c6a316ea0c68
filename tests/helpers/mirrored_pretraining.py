"""run_pretraining.py on one worker with two replicas: ``--distribution_strategy mirrored``
over 2 logical CPUs (a script: logical devices must be configured before TensorFlow
initialises, and run_pretraining.py's ``mirrored`` on a CPU-only machine has one device).

    python tests/helpers/mirrored_pretraining.py --data_dir D --model_name M --hparams '{...}'
"""

from __future__ import annotations

import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, REPO)

from electra_tf import console, early_interrupt  # noqa: E402, I001 -- before TensorFlow loads

early_interrupt.install()
console.quiet_logs(sys.argv)
console.use_tf_keras()

import tensorflow as tf  # noqa: E402

import run_pretraining  # noqa: E402
from electra_tf import training  # noqa: E402

NUM_CPUS = 2


def main() -> None:
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * NUM_CPUS)
  get_strategy = training.get_strategy

  def two_cpus(name, *args, **kwargs):
    if name == "mirrored":
      return get_strategy(name, devices=[f"CPU:{i}" for i in range(NUM_CPUS)])
    return get_strategy(name, *args, **kwargs)

  training.get_strategy = two_cpus
  run_pretraining.define_flags()
  console.run(run_pretraining.main, "run_pretraining.py")


if __name__ == "__main__":
  main()
