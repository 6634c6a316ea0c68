"""A tiny int8 LiteRT model for the predict tests that need no training: the golden lane's
fine-tuned checkpoint (``tests/golden/finetune_heads``, hidden 32, two layers) with its RTE head
(and its chunk tagging head when asked), converted to ``<root>/export/litert/int8.tflite``
(``litert.json`` and ``vocab.txt`` beside it). Its predictions are those of a tiny random-ish
head: the tests check plumbing, not accuracy."""

import json
import pathlib

from helpers.paths import GOLDEN

LABELS = ["entailment", "not_entailment"]


def _definitions(root: pathlib.Path, folder: pathlib.Path) -> dict[str, dict]:
  mapping = json.loads((folder / "chunk_label_mapping.json").read_text())
  return {"rte": {"name": "rte", "kind": "classification", "labels": LABELS,
                  "scorer": "scorers.AccuracyScorer", "data": str(root / "rte")},
          "chunk": {"name": "chunk", "kind": "tagging", "labels": sorted(mapping, key=mapping.get),
                    "spans": True, "scorer": "scorers.EntityLevelF1Scorer",
                    "data": str(root / "chunk")}}


def build(root: pathlib.Path, tasks: tuple[str, ...] = ("rte",), litert: bool = True
          ) -> pathlib.Path:
  """``<root>/export`` (SavedModel, tf1/, tf2/, and with ``litert`` litert/int8.tflite) of the
  golden heads ``tasks`` (``rte``, ``chunk``)."""
  from electra_tf.interop import litert_export, signatures
  from electra_tf.interop.conversion import convert_finetuned
  from electra_tf.reading import model_tasks

  folder = GOLDEN / "finetune_heads"
  model = root / "model"
  model.mkdir(parents=True)
  for name in ("model.ckpt.index", "model.ckpt.data-00000-of-00001", "checkpoint"):
    (model / name).symlink_to(folder / name)
  (model / "vocab.txt").symlink_to(GOLDEN / "vocab.txt")
  hparams = {**json.loads((folder / "hparams.json").read_text()), "task_names": list(tasks)}
  (model / "hparams.json").write_text(json.dumps(hparams))
  definitions = _definitions(root, folder)
  model_tasks.write_tasks(str(model), [definitions[t] for t in tasks])
  out = root / "export"
  result = convert_finetuned(str(model / "model.ckpt"), hparams, str(out))
  if not litert:
    return out
  tasks, config = result["tasks"], result["config"]
  names = signatures.signature_names({t.name: t.kind for t in tasks})
  litert_export.export_litert(str(out), tasks, names, config.max_seq_length, ["int8"],
                              str(out / "vocab.txt"), config.do_lower_case)
  return out
