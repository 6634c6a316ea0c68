"""The probe during pre-training: its flags, the checks before step 1, the random-init
reference, and the interval hook that probes the discriminator.

    probe = from_flags(FLAGS, config, strategy, data_dir)  # None without --probe_task
    ... build the run, restore the latest checkpoint (start step) ...
    probe.attach(trainer, model.discriminator, start)     # a Trainer interval hook
    trainer.train(...); lines = probe.summary_lines()     # probes every --probe_every steps

Before step 1 (every worker): the task is read and featurized with the run's vocabulary; a
task that does not exist, has too few rows, or whose text the vocabulary cannot spell
(more than ``MAX_UNKNOWN`` of its WordPieces ``[UNK]``) is one error line. Then, on the chief
only, the random-init reference: the probe of discriminator-shaped encoders at random init
(seeds ``SEEDS``), computed once per run and kept in ``<model_dir>/probe/<task>.json`` with the
key of what made it (rows, shape, seeds, versions). It is computed before the run builds its
model, whose seeding then happens as without a probe: a run trains the same with or without it.

At every probe interval and at the end the chief probes the discriminator (frozen, inference
mode) and writes ``probe/<task>/cls``, ``probe/<task>/mean`` and the reference (``random_init``:
the mean-pooled seeds' mean, ``random_init_spread``: their standard deviation) to TensorBoard
and the interval's log line, and keeps the history in the same JSON file, so a resumed run
continues it. The verdict reads mean pooling only (``probe.VERDICT_POOLING``): a paired exact
test of its per-row dev losses against each seed's (``paired.against_every``), each probe at
level 0.05 / the run's number of probes (``verdict``). The first probe above random init is one
line; the summary gives the last probe's interval and how many were above. A probe failing
mid-run (a full disk, an unreadable folder...) is one warning; training goes on.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras
from absl import flags

from electra_tf import atomic_io, probing
from electra_tf.config import PretrainingConfig
from electra_tf.console import error_line, log
from electra_tf.finetuning import registry
from electra_tf.model_sizes import get_bert_config
from electra_tf.probing import paired, probe, verdict
from electra_tf.training import runtime

# Five random-init seeds: a draw is sometimes clearly better than another on the same rows, so
# beating fewer seeds says too little. Against seeds 1-3 random-init draws came out "above" at
# 0.05 in 4 of 80 runs, against 1-5 in 1 of 80 (benchmarks/bench_probe_null.py, the demo's task).
SEEDS = (1, 2, 3, 4, 5)
MIN_TRAIN_ROWS = 20  # the ridge penalty is chosen on a fifth of them
MIN_DEV_ROWS = 10
MAX_UNKNOWN = 0.10  # fraction of a task's WordPieces that may be [UNK]
VERSION = 2  # of the method: part of the reference's cache key
DOCS = "docs/pretraining.md#a-downstream-probe-during-pre-training"


def define_flags() -> None:
  """run_pretraining.py's probe flags (defined on demand, as the script's own)."""
  flags.DEFINE_string("probe_task", None, "Probe the discriminator on this fine-tuning task "
                      "while pre-training: a GLUE name or a folder with a task.json, read from "
                      "<probe_data_dir>/finetuning_data/<task>/ (" + DOCS + ").")
  flags.DEFINE_string("probe_data_dir", None, "Folder holding finetuning_data/ (default: "
                      "--data_dir).")
  flags.DEFINE_integer("probe_rows", 500, "Train rows (the first N) the probe is fitted on.")
  flags.DEFINE_integer("probe_dev_rows", 500, "Dev rows (the first N; 0: all) it is scored on.")
  flags.DEFINE_integer("probe_every", 1000, "Probe at the first log line at or after every N "
                       "steps, and at the end.")
  flags.DEFINE_integer("probe_max_seq_length", 128, "Tokens per probe row, [CLS] and [SEP] "
                       "included.")


@dataclasses.dataclass(frozen=True)
class ProbeSettings:
  """What to probe and how often (the flags' values)."""

  task: str
  data_dir: str
  rows: int = 500
  dev_rows: int = 500  # 0: all
  every: int = 1000
  max_seq_length: int = 128

  def check(self, max_positions: int) -> None:
    if self.rows < MIN_TRAIN_ROWS:
      raise ValueError(f"--probe_rows must be >= {MIN_TRAIN_ROWS}; got {self.rows}")
    if self.dev_rows < 0 or self.every < 1:
      raise ValueError(f"--probe_dev_rows must be >= 0 and --probe_every >= 1; got "
                       f"{self.dev_rows} and {self.every}")
    if not 3 <= self.max_seq_length <= max_positions:
      raise ValueError(f"--probe_max_seq_length must be in [3, {max_positions}] (the model's "
                       f"max_position_embeddings); got {self.max_seq_length}")


def from_flags(values: flags.FlagValues, config: PretrainingConfig, strategy: Any,
               data_dir: str, log_fn: Callable[[str], None] = log) -> RunProbe | None:
  """The run's probe from the command line (None without --probe_task or training); the task
  is read from ``--probe_data_dir``, default ``data_dir`` (the run's)."""
  if not values.probe_task:
    given = [f"--{n}" for n in ("probe_data_dir", "probe_rows", "probe_dev_rows",
                                "probe_every", "probe_max_seq_length") if values[n].present]
    if given:
      raise ValueError(f"{', '.join(given)} given without --probe_task")
    return None
  if not config.do_train:
    return None
  settings = ProbeSettings(values.probe_task, values.probe_data_dir or data_dir,
                           values.probe_rows, values.probe_dev_rows, values.probe_every,
                           values.probe_max_seq_length)
  return prepare(config, settings, runtime.worker_role(strategy)[0], log_fn)


def _unknown_fraction(rows: probe.ProbeRows, vocab: Mapping[str, int]) -> float:
  """Fraction of the rows' WordPieces ([CLS], [SEP] and padding aside) that are [UNK]."""
  specials = [vocab[t] for t in ("[CLS]", "[SEP]") if t in vocab]
  ids = np.concatenate([rows.train.input_ids.ravel(), rows.dev.input_ids.ravel()])
  mask = np.concatenate([rows.train.input_mask.ravel(), rows.dev.input_mask.ravel()]) > 0
  words = ids[mask & ~np.isin(ids, specials)]
  return float(np.mean(words == vocab.get("[UNK]", -1))) if len(words) else 0.0


def checked_probe_rows(config: PretrainingConfig, settings: ProbeSettings) -> probe.ProbeRows:
  """The task's rows featurized with the run's vocabulary; one error line for a task that
  does not exist, has too few rows or does not fit the vocabulary."""
  settings.check(get_bert_config(config).max_position_embeddings)
  tokenizer = registry.make_tokenizer(config.vocab_file, config.do_lower_case)
  where = f"--probe_task {settings.task}"
  try:
    rows = probe.task_rows(settings.task, settings.data_dir, tokenizer, settings.max_seq_length,
                           settings.rows, settings.dev_rows or None)
  except (OSError, ValueError) as e:
    raise ValueError(f"{where}: {error_line(e, name_type=False)}") from None
  if len(rows.train) < MIN_TRAIN_ROWS or len(rows.dev) < MIN_DEV_ROWS:
    raise ValueError(f"{where}: {len(rows.train)} train and {len(rows.dev)} dev rows in "
                     f"{settings.data_dir}/finetuning_data/{settings.task}; the probe needs at "
                     f"least {MIN_TRAIN_ROWS} and {MIN_DEV_ROWS}")
  if rows.num_classes and len(np.unique(rows.train.labels)) < 2:
    raise ValueError(f"{where}: the first {len(rows.train)} train rows all have one label")
  unknown = _unknown_fraction(rows, tokenizer.vocab)
  if unknown > MAX_UNKNOWN:
    raise ValueError(f"{where}: {unknown:.0%} of its WordPieces are [UNK] with the run's "
                     f"vocabulary {config.vocab_file}: the task's text does not match the run's "
                     "vocabulary (another language, script or tokenizer?)")
  return rows


@dataclasses.dataclass(frozen=True)
class Reference:
  """The probe of random-init encoders: one score per seed and pooling, and each seed's
  per-row dev losses with the verdict's pooling (``probe.VERDICT_POOLING``)."""

  seeds: tuple[int, ...]
  cls: tuple[float, ...]
  mean: tuple[float, ...]
  losses: tuple[tuple[float, ...], ...]

  @property
  def value(self) -> float:
    """The verdict pooling's mean score over the seeds (what the picture draws)."""
    return float(np.mean(getattr(self, probe.VERDICT_POOLING)))

  @property
  def spread(self) -> float:
    """Standard deviation over the seeds (of the verdict's pooling)."""
    scores = getattr(self, probe.VERDICT_POOLING)
    return float(np.std(scores, ddof=1)) if len(self.seeds) > 1 else 0.0

  def __str__(self) -> str:
    return f"{self.value:.3f} ± {self.spread:.3f}"


def compute_reference(rows: probe.ProbeRows, config: PretrainingConfig,
                      seeds: tuple[int, ...] = SEEDS) -> Reference:
  """Probes ``len(seeds)`` discriminator-shaped encoders at random init (reseeds python,
  numpy and TF: call it before the run builds and seeds its model). One encoder is traced;
  each seed's initial weights are copied into it."""
  per_seed, losses, encoder, features = [], [], None, None
  for seed in seeds:
    fresh = probe.random_encoder(get_bert_config(config), config.embedding_size, seed)
    if encoder is None:
      encoder, features = fresh, probe.PooledFeatures(fresh)
    else:
      for variable, value in zip(encoder.variables, fresh.variables, strict=True):
        variable.assign(value)
    scores, row_losses = probe.evaluate(features, rows)
    per_seed.append(scores)
    losses.append(tuple(float(x) for x in row_losses))
  return Reference(tuple(seeds), *(tuple(s[p] for s in per_seed) for p in probe.POOLINGS),
                   tuple(losses))


def reference_key(rows: probe.ProbeRows, config: PretrainingConfig,
                  seeds: tuple[int, ...] = SEEDS) -> str:
  """What the reference depends on: the rows, the encoder's shape, the seeds, the versions."""
  shape = get_bert_config(config).to_dict()
  return json.dumps([VERSION, rows.signature(), shape, config.embedding_size, list(seeds),
                     tf.__version__, tf_keras.__version__, np.__version__], sort_keys=True)


def prepare(config: PretrainingConfig, settings: ProbeSettings, is_chief: bool = True,
            log_fn: Callable[[str], None] = log) -> RunProbe:
  """Checks and reads the task (every worker), then, on the chief, loads the cached reference
  or computes and caches it. Call before the run builds its model."""
  rows = checked_probe_rows(config, settings)
  state_file = os.path.join(config.model_dir, "probe", f"{settings.task}.json")
  if not is_chief:
    return RunProbe(settings, rows, None, state_file, config.num_train_steps, "", log_fn)
  key = reference_key(rows, config)
  state = _read_state(state_file)
  what = (f"probe {settings.task}: {len(rows.train)} train / {len(rows.dev)} dev rows, dev "
          f"{rows.metric_name}; random init ({len(SEEDS)} seeds)")
  reference = _cached_reference(state) if state.get("key") == key else None
  if reference is not None:
    log_fn(f"{what} {reference} (cached in {state_file})")
  else:
    start = time.perf_counter()
    reference = compute_reference(rows, config)
    changed = "; the probe's rows or the model changed: its history restarts" if state else ""
    state = {"key": key, "reference": dataclasses.asdict(reference), "history": []}
    log_fn(f"{what} {reference} ({time.perf_counter() - start:.0f} s{changed})")
    try:
      _write_state(state_file, state)
    except OSError as e:
      log_fn(f"Warning: cannot cache the probe's reference in {state_file}: "
             f"{error_line(e, name_type=False)}")
  return RunProbe(settings, rows, reference, state_file, config.num_train_steps, key, log_fn,
                  state)


def _cached_reference(state: Mapping[str, Any]) -> Reference | None:
  try:
    return reference_from(state["reference"])
  except (AttributeError, KeyError, TypeError, ValueError):
    return None  # damaged: recomputed


def reference_from(stored: Mapping[str, Any]) -> Reference:
  """The reference as ``<model_dir>/probe/<task>.json`` keeps it."""
  return Reference(tuple(stored["seeds"]), tuple(stored["cls"]), tuple(stored["mean"]),
                   tuple(tuple(seed) for seed in stored["losses"]))


def _read_state(path: str) -> dict[str, Any]:
  try:
    with open(path, encoding="utf-8") as f:
      state = json.load(f)
    return state if isinstance(state, dict) else {}
  except (OSError, ValueError):
    return {}  # none yet, or unreadable: recomputed


def _write_state(path: str, state: Mapping[str, Any]) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  atomic_io.write_json(path, state, indent=1)


class RunProbe:
  """The interval hook (``hook(step, logged values)``, see ``training.loop.IntervalHook``):
  probes at the first log line at or after every ``settings.every`` steps and at the end."""

  def __init__(self, settings: ProbeSettings, rows: probe.ProbeRows,
               reference: Reference | None, state_file: str, num_train_steps: int, key: str,
               log_fn: Callable[[str], None], state: dict[str, Any] | None = None):
    self.settings, self.rows, self.reference = settings, rows, reference
    self.state_file, self.num_train_steps, self.log_fn = state_file, num_train_steps, log_fn
    self.state = state or {"key": key, "history": []}
    self._features: probe.PooledFeatures | None = None
    self._next = 0
    self.failures: list[str] = []

  @property
  def history(self) -> list[dict[str, Any]]:
    """One ``verdict.probe_record`` per probe of this run, resumed processes included."""
    return self.state["history"]

  @property
  def num_probes(self) -> int:
    """How many probes the run makes: the Bonferroni divisor of each probe's level."""
    return verdict.num_probes(self.num_train_steps, self.settings.every)

  def attach(self, trainer: Any, encoder: Any, start_step: int) -> None:
    """Adds the hook to ``trainer`` (chief only) for ``encoder``, the run's discriminator;
    forgets what an earlier process probed after ``start_step`` (it is probed again)."""
    if self.reference is None or encoder is None:
      return
    self.state["history"] = [h for h in self.history if h["step"] <= start_step]
    self._features = probe.PooledFeatures(encoder)
    self._next = (start_step // self.settings.every + 1) * self.settings.every
    trainer.interval_hooks = (*trainer.interval_hooks, self)

  def __call__(self, step: int, logged: Mapping[str, float]) -> str | None:
    """Probes when due; the text for the interval's log line (None when not probed)."""
    if step < min(self._next, self.num_train_steps):
      return None
    self._next = (step // self.settings.every + 1) * self.settings.every
    start = time.perf_counter()
    try:
      scores, losses = probe.evaluate(self._features, self.rows)
      compared = paired.against_every(losses, self.reference.losses,
                                      paired.probe_alpha(self.num_probes))
    except Exception as e:  # noqa: BLE001 -- the probe must never stop the run
      self._failed(step, e)
      return None
    return self._record(step, scores, compared, time.perf_counter() - start)

  def _record(self, step: int, scores: Mapping[str, float], compared: paired.Paired,
              seconds: float) -> str:
    task, ref = self.settings.task, self.reference
    for name, value in (("cls", scores["cls"]), ("mean", scores["mean"]),
                        ("random_init", ref.value), ("random_init_spread", ref.spread)):
      tf.summary.scalar(probing.tag(task, name), value, step=step)
    tested = compared.reference  # the seed the verdict compared with, and its score
    entry = verdict.probe_record(step, scores, compared, ref.seeds[tested],
                                 getattr(ref, probe.VERDICT_POOLING)[tested])
    text = (f"probe {task} (dev {self.rows.metric_name}): [CLS] {scores['cls']:.3f}, mean "
            f"{scores['mean']:.3f}, random init {ref}; {verdict.probe_sentence(entry)} "
            f"({seconds:.1f} s)")
    earlier = [h for h in self.history if h["step"] < step]
    self.state["history"] = earlier + [entry]
    self.state["num_probes"] = self.num_probes
    if entry["above"] and not any(h["above"] for h in earlier):
      self.log_fn(f"Probe {task}: the mean-pooled features are above random init at step "
                  f"{step}: {verdict.probe_sentence(entry, self.num_probes)}; pre-training now "
                  "gives this task signal a linear read-out finds")
    try:
      _write_state(self.state_file, self.state)
    except OSError as e:
      self._failed(step, e)
    return text

  def _failed(self, step: int, error: BaseException) -> None:
    if not self.failures:
      self.log_fn(f"Warning: probe {self.settings.task} failed at step {step}: "
                  f"{error_line(error, name_type=False)}; training goes on")
    self.failures.append(f"step {step}: {error_line(error, name_type=False)}")

  def summary_lines(self) -> list[str]:
    """What the run's summary says about the probe, in words."""
    if self.reference is None:
      return []
    task, ref, history = self.settings.task, self.reference, self.history
    lines = []
    if not history:
      lines.append(f"  probe {task}: not probed yet (the first probe is at step {self._next})")
    else:
      last = history[-1]
      lines.append(f"  probe {task} (dev {self.rows.metric_name}) at step {last['step']}: "
                   f"[CLS] {last['cls']:.3f}, mean {last['mean']:.3f}; random init {ref}")
      lines.append(f"    {verdict.run_words(history, self.num_probes)} ({DOCS})")
    if self.failures:
      lines.append(f"    the probe failed {len(self.failures)} time(s), first at "
                   f"{self.failures[0]}")
    return lines
