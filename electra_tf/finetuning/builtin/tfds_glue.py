"""GLUE examples from TensorFlow Datasets (``glue/cola``, ...) instead of the GLUE TSV files.

Only data already prepared on this machine is read (``download=False``): a missing data set is
a one-line error, never a download. Examples come out as the tasks' ``InputExample``s in
``idx`` order (so an example's ``eid`` is its GLUE ``index``), labels mapped to the task's
label strings; ``double_unordered`` training copies are added as the TSV path adds them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from electra_tf.finetuning.builtin.classification import InputExample

# task -> (TFDS name, text_a field, text_b field or None)
TFDS_GLUE: dict[str, tuple[str, str, str | None]] = {
    "cola": ("glue/cola", "sentence", None),
    "sst": ("glue/sst2", "sentence", None),
    "mrpc": ("glue/mrpc", "sentence1", "sentence2"),
    "sts": ("glue/stsb", "sentence1", "sentence2"),
    "qqp": ("glue/qqp", "question1", "question2"),
    "mnli": ("glue/mnli", "premise", "hypothesis"),
    "qnli": ("glue/qnli", "question", "sentence"),
    "rte": ("glue/rte", "sentence1", "sentence2"),
    "wnli": ("glue/wnli", "sentence1", "sentence2"),
}
# our split name -> TFDS split name, where they differ
_SPLITS = {"dev": "validation", "dev_matched": "validation_matched",
           "dev_mismatched": "validation_mismatched"}


def tfds_split(task_name: str, split: str) -> tuple[str, str]:
  """(TFDS data set, TFDS split) holding ``split`` of ``task_name``."""
  if task_name not in TFDS_GLUE:
    raise ValueError(f"task {task_name!r} has no TFDS GLUE data set; TFDS tasks: "
                     f"{', '.join(TFDS_GLUE)}")
  if task_name == "mnli" and split == "diagnostic":
    return "glue/ax", "test"
  return TFDS_GLUE[task_name][0], _SPLITS.get(split, split)


def read_tfds(name: str, split: str, data_dir: str | None = None) -> tuple[list[dict], list[str]]:
  """Rows (numpy dicts) of a locally prepared TFDS split and its label names ([] if none)."""
  import tensorflow_datasets as tfds

  builder = tfds.builder(name, data_dir=data_dir)
  if not builder.is_prepared():
    raise FileNotFoundError(f"TFDS data set {name} is not prepared under {builder.data_dir} "
                            "(nothing is downloaded; prepare it or drop --use_tfds)")
  if split not in builder.info.splits:
    raise FileNotFoundError(f"TFDS data set {name} has no split {split!r} "
                            f"(has {', '.join(builder.info.splits)})")
  label = builder.info.features["label"] if "label" in builder.info.features else None
  names = list(getattr(label, "names", None) or [])
  rows = list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)))
  return rows, names


def _text(value: Any) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def to_examples(task: Any, split: str, rows: Iterable[Mapping[str, Any]],
                label_names: list[str]) -> list[InputExample]:
  """TFDS GLUE rows -> the task's examples (see the module docstring)."""
  _, field_a, field_b = TFDS_GLUE[task.name]
  rows = sorted(rows, key=lambda r: int(r["idx"]))
  has_labels = task.has_labels(split)
  examples = []
  for swap in (False, True) if task.swap_copy(split) else (False,):
    for row in rows:
      text_a, text_b = _text(row[field_a]), _text(row[field_b]) if field_b else None
      if swap:
        text_a, text_b = text_b, text_a
      label = task.dummy_label()
      if has_labels:
        value = row["label"]
        if hasattr(task, "label_list"):
          label = str(int(value)) if task.label_list == ("0", "1") else label_names[int(value)]
        else:
          label = float(value)
        label = task.check_label(label, f"tfds:{TFDS_GLUE[task.name][0]}", int(row["idx"]))
      examples.append(InputExample(eid=len(examples), task_name=task.name, text_a=text_a,
                                   text_b=text_b, label=label,
                                   source=f"tfds:{split}:{int(row['idx'])}"))
  return examples


def get_examples(task: Any, split: str, data_dir: str | None = None) -> list[InputExample]:
  """``task.get_examples(split)`` read from the locally prepared TFDS GLUE data set."""
  name, tfds_split_name = tfds_split(task.name, split)
  rows, label_names = read_tfds(name, tfds_split_name, data_dir)
  if task.debug:
    rows = rows[:100]
  return to_examples(task, split, rows, label_names)
