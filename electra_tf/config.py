"""Pre-training and fine-tuning hyperparameters: the official names, defaults and derived values.

``PretrainingConfig`` mirrors the official ``configure_pretraining.py`` and ``FinetuningConfig``
the official ``configure_finetuning.py``, including the order in which defaults, ``--hparams``,
size / task presets and ``debug`` are applied, so the same ``--hparams`` give the same values.
``model_sizes`` turns a config into transformer sizes and ``hparams_input`` reads ``--hparams``.
Other modules take plain values from these objects; nothing here builds a model.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from typing import Any

from electra_tf.hparams import HParams
from electra_tf.model_files import VOCAB_FILE

# Official util/training_utils.get_bert_config: per-size defaults before model_hparam_overrides.
MODEL_SIZES: dict[str, dict[str, int]] = {
  "small": {"hidden_size": 256, "num_hidden_layers": 12},
  "base": {"hidden_size": 768, "num_hidden_layers": 12},
  "large": {"hidden_size": 1024, "num_hidden_layers": 24},
}
OPTIMIZERS = ("adamw", "lamb")  # electra_tf.optimization.create_optimizer(optimizer=...)
# Pre-training masking (``pretraining/word_masking.py``): the official one, whole words, spans.
MASKINGS = ("token", "whole_word", "span")


# Official presets, as {hparam: value} tables applied in the order each config's __init__ says.
_PRETRAINING_DEBUG = {"train_batch_size": 8, "num_train_steps": 20, "eval_batch_size": 4,
                      "iterations_per_loop": 1, "num_eval_steps": 2}
_FINETUNING_SIZES: dict[str, dict[str, Any]] = {
  "large": {"learning_rate": 5e-5, "layerwise_lr_decay": 0.9},
  "small": {"embedding_size": 128},
}
_FINETUNING_DEBUG = {"save_checkpoints_steps": 1000000, "use_tfrecords_if_existing": False,
                     "num_trials": 1, "iterations_per_loop": 1, "train_batch_size": 32,
                     "num_train_epochs": 3.0, "log_examples": True}


def _single_task_preset(task: str) -> dict[str, Any]:
  """Official ``configure_finetuning`` values for a run of this one task."""
  if task in ("rte", "sts"):
    return {"num_train_epochs": 10.0}
  if "squad" in task or "qa" in task:
    # (the official also sets write_distill_outputs = False; nothing reads it)
    return {"max_seq_length": 512, "num_train_epochs": 2.0, "write_test_outputs": False}
  if task == "chunk":
    return {"max_seq_length": 256}
  return {"num_train_epochs": 3.0}


@dataclasses.dataclass(init=False, eq=False)
class _HParams(HParams):
  """The hparams and checks both official configs share."""

  # TPU settings (accepted for --hparams compatibility)
  use_tpu: bool = False
  num_tpu_cores: int = 1
  tpu_job_name: str | None = None
  tpu_name: str | None = None
  tpu_zone: str | None = None
  gcp_project: str | None = None

  def _apply(self, preset: dict[str, Any]) -> None:
    for key, value in preset.items():
      setattr(self, key, value)

  def _check_update_settings(self) -> None:
    """optimizer name and masking; the update's batch must split into
    gradient_accumulation_steps."""
    masking = getattr(self, "masking", None)
    if masking is not None and masking not in MASKINGS:
      raise ValueError(f"Unknown masking {masking!r}; expected one of {', '.join(MASKINGS)}")
    if self.optimizer not in OPTIMIZERS:
      raise ValueError(f"Unknown optimizer {self.optimizer!r}; expected one of "
                       f"{', '.join(OPTIMIZERS)}")
    self.check_batch_split()

  def check_batch_split(self, replicas: int = 1) -> None:
    """One-line ValueError unless the train and eval batches split over ``replicas`` and the
    train batch over ``replicas`` x ``gradient_accumulation_steps`` micro-batches."""
    for name in ("train_batch_size", "eval_batch_size"):
      if getattr(self, name) % replicas:
        raise ValueError(f"{name} {getattr(self, name)} is not divisible by the {replicas} "
                         "replicas of the distribution strategy")
    k = self.gradient_accumulation_steps
    if k < 1 or self.train_batch_size % (replicas * k):
      by = (f"gradient_accumulation_steps {k} (need a positive divisor)" if replicas == 1
            else f"{replicas} replicas x gradient_accumulation_steps {k}")
      raise ValueError(f"train_batch_size {self.train_batch_size} is not divisible by {by}")

  def _check_model_size(self) -> None:
    if self.model_size not in MODEL_SIZES:
      raise ValueError(f"Unknown model_size {self.model_size!r}; expected one of "
                       f"{', '.join(MODEL_SIZES)}")


@dataclasses.dataclass(init=False, eq=False)
class PretrainingConfig(_HParams):
  """Pre-training hparams; names, defaults and presets of the official ``configure_pretraining``.

  ``PretrainingConfig(model_name, data_dir, **hparams)``. Order as in the official code: defaults
  and paths under ``data_dir``; hparams; ``max_predictions_per_seq``; ``debug`` shrinking;
  ``model_size == "small"`` -> ``embedding_size = 128``; ``electric_objective`` ->
  ``two_tower_generator``; hparams again (so they beat every preset). ``seed`` is ours: ``None``
  keeps the official nondeterminism, an int makes masking, sampling, dropout and shuffling
  repeatable.
  """

  _NOT_SETTABLE: typing.ClassVar[dict[str, str]] = {
    "max_predictions_per_seq":
      "it is int((mask_prob + 0.005) * max_seq_length); set mask_prob / max_seq_length",
  }

  model_name: str = ""
  debug: bool = False  # tiny batches and few steps (the transformer shrinks in get_bert_config)
  do_train: bool = True
  do_eval: bool = False  # evaluate generator / discriminator on unlabeled data
  # losses: ELECTRA, Electric, or (both False) a BERT-style masked LM
  electra_objective: bool = True
  electric_objective: bool = False
  gen_weight: float = 1.0  # generator (MLM) loss weight
  disc_weight: float = 50.0  # discriminator loss weight
  mask_prob: float = 0.15  # fraction of tokens masked / replaced
  # ours: "token" (official) | "whole_word" | "span" (SpanBERT: geometric span lengths in words,
  # p = 1 / span_mean_length, truncated to span_max_length)
  masking: str = "token"
  span_mean_length: float = 5.0
  span_max_length: int = 10
  # optimization
  learning_rate: float = 5e-4
  lr_decay_power: float = 1.0  # 1.0 = linear decay
  weight_decay_rate: float = 0.01
  num_warmup_steps: int = 10000
  optimizer: str = "adamw"  # ours: "adamw" (official) | "lamb" (large batches)
  # ours: micro-batches per update; train_batch_size stays the update's global batch
  gradient_accumulation_steps: int = 1
  # training loop
  iterations_per_loop: int = 200
  save_checkpoints_steps: int = 1000
  num_train_steps: int = 1000000
  num_eval_steps: int = 100
  keep_checkpoint_max: int | None = 5  # 0 or None keeps every checkpoint
  # model
  model_size: str = "small"  # small | base | large
  model_hparam_overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
  embedding_size: int | None = None  # None: the hidden size
  vocab_size: int = 30522
  do_lower_case: bool = True
  # generator
  uniform_generator: bool = False  # sample replacements uniformly at random
  two_tower_generator: bool = False  # Electric's two-tower cloze generator
  untied_generator_embeddings: bool = False
  untied_generator: bool = True  # False: generator and discriminator share every weight
  generator_layers: float = 1.0  # fraction of discriminator layers
  generator_hidden_size: float = 0.25  # fraction of discriminator hidden size
  disallow_correct: bool = False  # never sample the original token
  temperature: float = 1.0  # generator sampling temperature
  # batch sizes
  max_seq_length: int = 128
  train_batch_size: int = 128
  eval_batch_size: int = 128
  # locations, by default under data_dir
  pretrain_tfrecords: str = ""  # glob or comma-separated files
  vocab_file: str = ""
  model_dir: str = ""
  results_txt: str = ""
  results_pkl: str = ""
  # ours: start from this checkpoint (official TF1 or ours) when model_dir has none
  init_checkpoint: str | None = None
  # derived
  max_predictions_per_seq: int = 0
  # ours: None = nondeterministic like the official code
  seed: int | None = None

  def __init__(self, model_name: str, data_dir: str, **kwargs: Any):
    self._check_kwargs(kwargs)
    self._set_defaults()
    self.model_name = model_name
    self.pretrain_tfrecords = os.path.join(data_dir, "pretrain_tfrecords/pretrain_data.tfrecord*")
    self.vocab_file = os.path.join(data_dir, VOCAB_FILE)
    self.model_dir = os.path.join(data_dir, "models", model_name)
    results_dir = os.path.join(self.model_dir, "results")
    self.results_txt = os.path.join(results_dir, "unsup_results.txt")
    self.results_pkl = os.path.join(results_dir, "unsup_results.pkl")
    self._update(kwargs)

    self.max_predictions_per_seq = int((self.mask_prob + 0.005) * self.max_seq_length)
    if self.debug:
      self._apply(_PRETRAINING_DEBUG)
    # The official code sets only the small preset; its base/large values are a comment there
    # (they are in configs/electra_{base,large}.json here).
    if self.model_size == "small":
      self.embedding_size = 128
    if self.electric_objective:
      self.two_tower_generator = True
    self._update(kwargs)
    self._check_model_size()
    self._check_update_settings()


@dataclasses.dataclass(init=False, eq=False)
class FinetuningConfig(_HParams):
  """Fine-tuning hparams; names, defaults and presets of the official ``configure_finetuning``.

  ``FinetuningConfig(model_name, data_dir, **hparams)``. Order as in the official code: defaults
  and paths (from the ``task_names`` hparam); hparams; single-task presets (rte/sts: 10 epochs;
  a task name containing "squad" or "qa": 512 tokens, 2 epochs, no test outputs; chunk: 256
  tokens; other: 3 epochs); size presets (large: lr 5e-5, layerwise_lr_decay 0.9; small:
  embedding_size 128); ``debug``; hparams again. Path templates are methods:
  ``raw_data_dir(task)``, ``qa_eval_file(task)``, ``qa_preds_file(task)``, ``qa_na_file(task)``,
  ``test_predictions(task, split, trial)``; as hparams they take format strings (``raw_data_dir``
  also a parent folder). ``seed`` is ours (trial ``t`` can use ``seed + t``).
  """

  _TEMPLATES: typing.ClassVar[dict[str, int]] = {
    "raw_data_dir": 1, "qa_eval_file": 1, "qa_preds_file": 1, "qa_na_file": 1,
    "test_predictions": 3,
  }

  # general
  model_name: str = ""
  debug: bool = False
  log_examples: bool = False  # print some train examples
  num_trials: int = 1  # train+eval runs (< 0: forever)
  do_train: bool = True
  do_eval: bool = True
  keep_all_models: bool = True  # False: keep only the last trial's checkpoint
  # model
  model_size: str = "small"  # small | base | large
  task_names: list[str] = dataclasses.field(default_factory=lambda: ["chunk"])
  model_hparam_overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
  embedding_size: int | None = None  # None: the hidden size
  vocab_size: int = 30522
  do_lower_case: bool = True
  # training
  learning_rate: float = 1e-4
  weight_decay_rate: float = 0.01
  layerwise_lr_decay: float = 0.8  # > 0: layer lr = lr * decay^(depth from the top)
  num_train_epochs: float = 3.0
  warmup_proportion: float = 0.1
  optimizer: str = "adamw"  # ours: "adamw" (official) | "lamb" (large batches)
  # ours: micro-batches per update; train_batch_size stays the update's global batch
  gradient_accumulation_steps: int = 1
  # ours: XLA-compile each step's forward + backward; "bfloat16": mixed precision (float32
  # weights, optimizer and loss; bfloat16 matmuls and activations), None: float32
  jit_compile: bool = False
  mixed_precision: str | None = None
  # ours: XLA for each layer's elementwise work only, matmuls with TensorFlow's kernels
  # (modeling/fusion.py; with bfloat16 on a CPU, where XLA computes bfloat16 matmuls in float32)
  xla_elementwise: bool = False
  save_checkpoints_steps: int = 1000000
  iterations_per_loop: int = 1000  # unless set: capped at 10% of the steps (see below)
  use_tfrecords_if_existing: bool = True  # reuse featurized TFRecords when present
  # writing outputs
  write_test_outputs: bool = False  # GLUE and SQuAD 2.0 test-set predictions
  n_writes_test: int = 5  # for the first n trials
  # sizing
  max_seq_length: int = 128
  train_batch_size: int = 32
  eval_batch_size: int = 32
  predict_batch_size: int = 32
  double_unordered: bool = True  # train symmetric pair tasks on both orders
  # QA
  max_query_length: int = 64
  doc_stride: int = 128
  n_best_size: int = 20
  max_answer_length: int = 30
  answerable_classifier: bool = True  # SQuAD 2.0
  answerable_uses_start_logits: bool = True
  answerable_weight: float = 0.5
  joint_prediction: bool = True  # predict start and end jointly
  beam_size: int = 20
  qa_na_threshold: float = -2.75  # "no answer" threshold for SQuAD 2.0 test outputs
  # locations, by default under data_dir (templates are methods, see the class docstring)
  data_dir: str = ""
  vocab_file: str = ""
  init_checkpoint: str | None = None
  model_dir: str = ""
  results_txt: str = ""
  results_pkl: str = ""
  preprocessed_data_dir: str = ""
  # ours: None = nondeterministic like the official code
  seed: int | None = None

  def __init__(self, model_name: str, data_dir: str, **kwargs: Any):
    self._check_kwargs(kwargs)
    self._set_defaults()
    self.model_name = model_name
    self.data_dir = data_dir
    self._set_paths(",".join(kwargs.get("task_names", self.task_names)))
    self._update(kwargs)
    if len(self.task_names) == 1:
      self._apply(_single_task_preset(self.task_names[0]))
    self._apply(_FINETUNING_SIZES.get(self.model_size, {}))
    if self.debug:
      self._apply(_FINETUNING_DEBUG)
    self._update(kwargs)
    self._check_model_size()
    self._check_update_settings()
    if not self.task_names:
      raise ValueError("task_names must name at least one task")
    self._preset_iterations_per_loop = (
        None if "iterations_per_loop" in kwargs else self.iterations_per_loop)

  def _set_paths(self, tasks_str: str) -> None:
    """Official default paths under ``data_dir`` for the run of ``tasks_str`` ("a,b")."""
    data_dir = self.data_dir
    model_home = os.path.join(data_dir, "models", self.model_name)
    self.vocab_file = os.path.join(model_home, VOCAB_FILE)
    if not _exists(self.vocab_file):
      self.vocab_file = os.path.join(data_dir, VOCAB_FILE)
    # self.debug is still the default here, as in the official code: debug neither clears
    # init_checkpoint nor adds "-debug" to preprocessed_data_dir unless set explicitly.
    self.init_checkpoint = None if self.debug else model_home
    self.model_dir = os.path.join(model_home, "finetuning_models", tasks_str + "_model")
    results_dir = os.path.join(model_home, "results")
    self.results_txt = os.path.join(results_dir, tasks_str + "_results.txt")
    self.results_pkl = os.path.join(results_dir, tasks_str + "_results.pkl")
    qa_dir = os.path.join(results_dir, tasks_str + "_qa")
    self.preprocessed_data_dir = os.path.join(
      model_home, "finetuning_tfrecords",
      tasks_str + "_tfrecords" + ("-debug" if self.debug else ""))
    self._templates = {
      "raw_data_dir": os.path.join(data_dir, "finetuning_data", "{:}"),
      "qa_eval_file": os.path.join(qa_dir, "{:}_eval.json"),
      "qa_preds_file": os.path.join(qa_dir, "{:}_preds.json"),
      "qa_na_file": os.path.join(qa_dir, "{:}_null_odds.json"),
      "test_predictions": os.path.join(model_home, "test_predictions",
                                       "{:}_{:}_{:}_predictions.pkl"),
    }

  @classmethod
  def _check_template(cls, key: str, value: Any) -> None:
    if key == "raw_data_dir" and isinstance(value, str) and "{" not in value:
      return  # a parent folder; see _update
    super()._check_template(key, value)

  def _update(self, kwargs: dict[str, Any]) -> None:
    raw = kwargs.get("raw_data_dir")
    if isinstance(raw, str) and "{" not in raw:
      kwargs = {**kwargs, "raw_data_dir": os.path.join(raw, "{:}")}
    super()._update(kwargs)

  def train_iterations_per_loop(self, num_train_steps: int) -> int:
    """Steps per training loop call (= per progress line). A value the user set is used as
    is (capped at ``num_train_steps``); the default 1000 is lowered to 10% of the steps so a
    short run reports its progress about ten times."""
    if self.iterations_per_loop != getattr(self, "_preset_iterations_per_loop", None):
      return max(1, min(self.iterations_per_loop, num_train_steps))
    return max(1, min(self.iterations_per_loop, num_train_steps // 10))

  def raw_data_dir(self, task_name: str) -> str:
    """Folder with the task's raw train/dev/test files."""
    return self._templates["raw_data_dir"].format(task_name)

  def qa_eval_file(self, task_name: str) -> str:
    return self._templates["qa_eval_file"].format(task_name)

  def qa_preds_file(self, task_name: str) -> str:
    return self._templates["qa_preds_file"].format(task_name)

  def qa_na_file(self, task_name: str) -> str:
    return self._templates["qa_na_file"].format(task_name)

  def test_predictions(self, task_name: str, split: str, trial: int) -> str:
    return self._templates["test_predictions"].format(task_name, split, trial)


def _exists(path: str) -> bool:
  if "://" in path:  # gs:// and friends need TensorFlow's file system
    import tensorflow as tf

    return tf.io.gfile.exists(path)
  return os.path.exists(path)
