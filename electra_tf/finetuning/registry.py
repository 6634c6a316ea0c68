"""Fine-tuning tasks by official name (``task_builder``), with their raw data under
``<data_dir>/finetuning_data/<task>/``.

``get_tasks(task_names, tokenizer, data_dir, max_seq_length, **options)`` builds every task of a
run; ``options`` are plain values named as in the official ``FinetuningConfig`` (each task
takes the ones it uses; a name no task uses is an error).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from electra_tf.finetuning import classification, qa, tagging
from electra_tf.finetuning.task import Task
from electra_tf.finetuning.wordpiece import FullTokenizer

TASK_CLASSES: dict[str, type[Task]] = {
    "cola": classification.CoLA,
    "sst": classification.SST,
    "mrpc": classification.MRPC,
    "sts": classification.STS,
    "qqp": classification.QQP,
    "mnli": classification.MNLI,
    "qnli": classification.QNLI,
    "rte": classification.RTE,
    "wnli": classification.WNLI,  # not in the official task_builder
    "squad": qa.SQuAD,
    "squadv1": qa.SQuADv1,
    "newsqa": qa.NewsQA,
    "naturalqs": qa.NaturalQuestions,
    "triviaqa": qa.TriviaQA,
    "searchqa": qa.SearchQA,
    "chunk": tagging.Chunking,
}
TASK_NAMES: tuple[str, ...] = tuple(TASK_CLASSES)

_QA_OPTIONS = ("max_query_length", "doc_stride", "beam_size", "joint_prediction",
               "answerable_classifier", "answerable_uses_start_logits", "answerable_weight",
               "n_best_size", "max_answer_length", "qa_na_threshold")
_PAIR_OPTIONS = ("double_unordered",)
_TAGGING_OPTIONS = ("preprocessed_data_dir",)
TASK_OPTIONS: frozenset[str] = frozenset(_QA_OPTIONS + _PAIR_OPTIONS + _TAGGING_OPTIONS)


def raw_data_dir(data_dir: str, task_name: str) -> str:
  """Official ``FinetuningConfig.raw_data_dir``: ``<data_dir>/finetuning_data/<task>``."""
  return os.path.join(data_dir, "finetuning_data", task_name)


def make_tokenizer(vocab_file: str, do_lower_case: bool = True, strip_accents: bool = True):
  """The WordPiece tokenizer every task shares (official ``get_tasks``)."""
  return FullTokenizer(vocab_file, do_lower_case=do_lower_case, strip_accents=strip_accents)


def _check_name(task_name: str) -> type[Task]:
  if task_name not in TASK_CLASSES:
    raise ValueError(f"Unknown task {task_name!r}; known tasks: {', '.join(TASK_NAMES)}")
  return TASK_CLASSES[task_name]


def get_task(task_name: str, tokenizer: Any, data_dir: str, max_seq_length: int,
             task_id: int = 0, debug: bool = False, **options: Any) -> Task:
  """One task; ``options`` it does not use are ignored (see ``get_tasks`` for checking)."""
  cls = _check_name(task_name)
  unknown = sorted(set(options) - TASK_OPTIONS)
  if unknown:
    raise ValueError(f"Unknown task option(s) {', '.join(unknown)}; "
                     f"known: {', '.join(sorted(TASK_OPTIONS))}")
  kwargs: dict[str, Any] = {}
  if issubclass(cls, qa.QATask):
    kwargs = {k: options[k] for k in _QA_OPTIONS if k in options}
  elif task_name in ("mrpc", "sts"):
    kwargs = {k: options[k] for k in _PAIR_OPTIONS if k in options}
  elif issubclass(cls, tagging.TaggingTask) and options.get("preprocessed_data_dir"):
    kwargs["label_mapping_path"] = os.path.join(
        options["preprocessed_data_dir"],
        ("debug_" if debug else "") + task_name + "_label_mapping.json")
  return cls(raw_data_dir(data_dir, task_name), tokenizer, max_seq_length, task_id=task_id,
             debug=debug, **kwargs)


def get_tasks(task_names: Sequence[str], tokenizer: Any, data_dir: str, max_seq_length: int,
              debug: bool = False, **options: Any) -> list[Task]:
  """All tasks of a run; ``task_id`` is the position in ``task_names`` (official)."""
  if not task_names:
    raise ValueError(f"No task names given; known tasks: {', '.join(TASK_NAMES)}")
  for name in task_names:
    _check_name(name)
  if len(set(task_names)) != len(task_names):
    raise ValueError(f"Duplicate task names in {list(task_names)}")
  return [get_task(name, tokenizer, data_dir, max_seq_length, i, debug, **options)
          for i, name in enumerate(task_names)]


def _tfds_glue_names():
  from electra_tf.finetuning import tfds_glue
  return tfds_glue.TFDS_GLUE


def build_tasks(config: Any, use_tfds: bool = False) -> list[Any]:
  """The run's tasks (official ``task_builder.get_tasks``), raw data in
  ``config.raw_data_dir(task)``; an unknown name or a missing data folder is a one-line error."""
  for name in config.task_names:
    if name not in TASK_CLASSES:
      raise ValueError(f"Unknown task {name!r}; known tasks: {', '.join(TASK_NAMES)}")
    raw = config.raw_data_dir(name)
    if not (use_tfds and name in _tfds_glue_names()) and not os.path.isdir(raw):
      raise FileNotFoundError(f"data folder for task '{name}' not found: {raw}")
  if not os.path.isfile(config.vocab_file):
    raise FileNotFoundError(f"vocab file not found: {config.vocab_file} (put vocab.txt in the "
                            "model folder or in data_dir, or set the vocab_file hparam)")
  tokenizer = make_tokenizer(config.vocab_file, config.do_lower_case)
  options = {k: getattr(config, k) for k in TASK_OPTIONS}
  tasks = get_tasks(config.task_names, tokenizer, config.data_dir, config.max_seq_length,
                    debug=config.debug, **options)
  for task in tasks:  # honour a raw_data_dir hparam (the registry uses the default layout)
    task.raw_data_dir = config.raw_data_dir(task.name)
  return tasks
