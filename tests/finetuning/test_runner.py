"""ModelRunner's test-output dispatch: a task with ``write_predictions`` writes its own, one
file per split and trial."""

import os

from electra_tf.config import FinetuningConfig
from electra_tf.finetuning.runner import ModelRunner


class UserTask:
  name = "mine"

  def __init__(self):
    self.calls = []

  def get_test_splits(self):
    return ["test", "test_extra"]

  def write_predictions(self, predictions, stem):
    self.calls.append((predictions, stem))
    return stem + ".tsv"


def test_task_with_write_predictions_writes_its_own_outputs(tmp_path):
  task = UserTask()
  runner = ModelRunner.__new__(ModelRunner)  # no model: predictions come from predict below
  runner.config = FinetuningConfig("m", str(tmp_path), task_names=["mine"])
  runner.tasks = [task]
  outputs = {"test": [{"label": 1}, {"label": 0}], "test_extra": [{"label": 2}]}
  runner.predict = lambda tasks, split: iter(
      [(0, {t.name: out}) for t in tasks for out in outputs[split]])
  runner.write_test_outputs(trial=2, use_tfds=False)
  want = os.path.join(str(tmp_path), "models", "m", "test_predictions", "mine_{}_2_predictions")
  assert task.calls == [(outputs["test"], want.format("test")),
                        (outputs["test_extra"], want.format("test_extra"))]
