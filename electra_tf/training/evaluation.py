"""Evaluation: the compiled loop (step_loop.py) over a number of batches; mean scalar outputs
and streaming metrics, written to TensorBoard and a results file."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf
import tf_keras

from electra_tf import folder_lock
from electra_tf.training import monitoring, step_loop
from electra_tf.training.errors import InputDataError, data_error_line


def run(loop: Callable, iterator, num_steps: int, metrics: Sequence[tf_keras.metrics.Metric],
        step: int, log_fn: Callable[[str], None]) -> dict[str, float]:
  """Runs `loop` (step_loop.make_loop of an eval step) over up to num_steps batches of
  `iterator`; returns each scalar output's mean over batches and replicas (`total_loss` as
  `loss`, as estimator.evaluate does), each metric's `result()` and `global_step` = `step`."""
  try:
    result = step_loop.run(loop, iterator, num_steps)
  except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as e:
    raise InputDataError(f"{data_error_line(e)} (during evaluation)") from None
  if result.done < num_steps:
    log_fn(f"Eval data ran out after {result.done} of {num_steps} steps")
  results = {("loss" if k == "total_loss" else k): v / max(result.done, 1)
             for k, v in result.sums.items()}
  results.update({m.name: float(m.result()) for m in metrics})
  results["global_step"] = step  # printed by the caller's summary, not here
  return results


def write(results: dict[str, float], model_dir: str, results_file: str | None) -> None:
  """TensorBoard scalars in model_dir/eval at the results' global_step, and `results_file`
  (monitoring.write_results) if given."""
  folder_lock.check_held(model_dir)  # a run that lost its lease writes nothing more
  step = results["global_step"]
  writer = tf.summary.create_file_writer(f"{model_dir}/eval")
  with writer.as_default():
    for k, v in results.items():
      if k != "global_step":
        tf.summary.scalar(k, v, step=step)
  writer.close()
  if results_file:
    monitoring.write_results(results_file, results)
