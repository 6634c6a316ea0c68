"""Fine-tuning tasks by official name (``task_builder``), with their raw data under
``<data_dir>/finetuning_data/<task>/``; any other name whose folder holds a ``task.json`` is a
user task (``user/tasks.py``).

``get_tasks(task_names, tokenizer, data_dir, max_seq_length, **options)`` builds every task of a
run; ``options`` are plain values named as in the official ``FinetuningConfig`` (each task
takes the ones it uses; a name no task uses is an error).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from electra_tf.config import FinetuningConfig
from electra_tf.finetuning.builtin import classification, qa, tagging, tfds_glue
from electra_tf.finetuning.task_base import Task
from electra_tf.finetuning.user import spec as user_spec
from electra_tf.finetuning.user import tasks as user_tasks
from electra_tf.tokenization import FullTokenizer

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


def _check_name(task_name: str, raw_dir: str | None = None) -> type[Task] | None:
  """The built-in class of ``task_name``, or None for a user task (``<raw_dir>/task.json``)."""
  if task_name in TASK_CLASSES:
    return TASK_CLASSES[task_name]
  if raw_dir and user_spec.has_task_file(raw_dir):
    return None
  raise ValueError(f"Unknown task {task_name!r}; known tasks: {', '.join(TASK_NAMES)}, or a "
                   f"folder with a task.json (none in {raw_dir or 'finetuning_data'})")


def get_task(task_name: str, tokenizer: Any, data_dir: str, max_seq_length: int,
             task_id: int = 0, debug: bool = False, raw_dir: str | None = None,
             **options: Any) -> Task:
  """One task; ``options`` it does not use are ignored (see ``get_tasks`` for checking).
  ``raw_dir``: its raw data folder (default ``<data_dir>/finetuning_data/<task>``)."""
  raw_dir = raw_dir or raw_data_dir(data_dir, task_name)
  cls = _check_name(task_name, raw_dir)
  unknown = sorted(set(options) - TASK_OPTIONS)
  if unknown:
    raise ValueError(f"Unknown task option(s) {', '.join(unknown)}; "
                     f"known: {', '.join(sorted(TASK_OPTIONS))}")
  if cls is None:
    return user_tasks.make_user_task(
        task_name, raw_dir, tokenizer, max_seq_length, task_id, debug,
        options.get("double_unordered", True), options.get("preprocessed_data_dir"))
  kwargs: dict[str, Any] = {}
  if issubclass(cls, qa.QATask):
    kwargs = {k: options[k] for k in _QA_OPTIONS if k in options}
  elif task_name in ("mrpc", "sts"):
    kwargs = {k: options[k] for k in _PAIR_OPTIONS if k in options}
  elif issubclass(cls, tagging.TaggingTask) and options.get("preprocessed_data_dir"):
    kwargs["label_mapping_path"] = os.path.join(
        options["preprocessed_data_dir"],
        ("debug_" if debug else "") + task_name + "_label_mapping.json")
  return cls(raw_dir, tokenizer, max_seq_length, task_id=task_id, debug=debug, **kwargs)


def get_tasks(task_names: Sequence[str], tokenizer: Any, data_dir: str, max_seq_length: int,
              debug: bool = False, raw_dirs: Sequence[str] | None = None,
              **options: Any) -> list[Task]:
  """All tasks of a run; ``task_id`` is the position in ``task_names`` (official).
  ``raw_dirs``: each task's raw data folder (default ``<data_dir>/finetuning_data/<task>``)."""
  if not task_names:
    raise ValueError(f"No task names given; known tasks: {', '.join(TASK_NAMES)}")
  raw_dirs = list(raw_dirs or [raw_data_dir(data_dir, name) for name in task_names])
  for name, raw_dir in zip(task_names, raw_dirs, strict=True):
    _check_name(name, raw_dir)
  if len(set(task_names)) != len(task_names):
    raise ValueError(f"Duplicate task names in {list(task_names)}")
  return [get_task(name, tokenizer, data_dir, max_seq_length, i, debug, raw_dir, **options)
          for i, (name, raw_dir) in enumerate(zip(task_names, raw_dirs, strict=True))]


def model_tasks(config: FinetuningConfig, definitions: Mapping[str, dict] | None,
                model: str, data_dir: str | None = None) -> list[Task]:
  """The tasks of a fine-tuned ``model`` (its ``config.task_names``) as its ``tasks.json``
  ``definitions`` define them: labels, tag ids and score ranges from the model, rows (dev
  rows, calibration) from ``<data_dir>/finetuning_data/<task>`` or else the folder it was
  trained on, when there. Without definitions (a model from before ``tasks.json``) the data
  folder defines them, as for training; with neither, a one-line error says what to pass."""
  if definitions is None:
    if data_dir:
      return build_tasks(config)
    raise ValueError(f"{model} has no tasks.json to define its tasks "
                     f"({', '.join(config.task_names)}): pass --data_dir, the data_dir it was "
                     "fine-tuned with (finetuning_data/<task>/ holds each task's files)")
  missing = [name for name in config.task_names if name not in definitions]
  if missing:
    raise ValueError(f"tasks.json of {model} does not define task '{missing[0]}' (it defines "
                     f"{', '.join(definitions)})")
  tokenizer = make_tokenizer(config.vocab_file, config.do_lower_case)
  options = {k: getattr(config, k) for k in TASK_OPTIONS}
  tasks = []
  for task_id, name in enumerate(config.task_names):
    definition = definitions[name]
    raw_dir = raw_data_dir(data_dir, name) if data_dir else definition["data"]
    if "task_json" in definition:
      spec = user_spec.parse_spec(definition["task_json"],
                                  os.path.join(raw_dir, user_spec.TASK_FILE))
      task = user_tasks.make_user_task(
          name, raw_dir, tokenizer, config.max_seq_length, task_id, config.debug,
          options["double_unordered"], spec=spec)
    else:
      task = get_task(name, tokenizer, data_dir or "", config.max_seq_length, task_id,
                      config.debug, raw_dir, **options)
    task.use_definition(definition)
    tasks.append(task)
  return tasks


def build_tasks(config: FinetuningConfig, use_tfds: bool = False) -> list[Task]:
  """The run's tasks (official ``task_builder.get_tasks``), raw data in
  ``config.raw_data_dir(task)``; an unknown name or a missing data folder is a one-line error."""
  for name in config.task_names:
    raw = config.raw_data_dir(name)
    _check_name(name, raw)
    if not (use_tfds and name in tfds_glue.TFDS_GLUE) and not os.path.isdir(raw):
      raise FileNotFoundError(f"data folder for task '{name}' not found: {raw}")
  if not os.path.isfile(config.vocab_file):
    raise FileNotFoundError(f"vocab file not found: {config.vocab_file} (put vocab.txt in the "
                            "model folder or in data_dir, or set the vocab_file hparam)")
  tokenizer = make_tokenizer(config.vocab_file, config.do_lower_case)
  options = {k: getattr(config, k) for k in TASK_OPTIONS}
  return get_tasks(config.task_names, tokenizer, config.data_dir, config.max_seq_length,
                   debug=config.debug,
                   raw_dirs=[config.raw_data_dir(name) for name in config.task_names], **options)
