"""predict reads a fine-tuned model directory as evaluation reads it (hparams.json, tasks.json,
the newest checkpoint by the library's own readers): no Hugging Face import, no conversion
module, and the same outputs as the model's SavedModel export. On the tiny model of
``helpers.tiny_litert`` (no training), in a fresh process so ``sys.modules`` tells what loaded."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers import tiny_litert
from helpers.paths import REPO_ROOT

ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "PYTHONPATH": str(REPO_ROOT)}
NOT_LOADED = ("electra_tf.reading.hf_import", "electra_tf.interop.conversion",
              "electra_tf.reading.model_source")
# Opens each model directory given, then the SavedModel (last argument); prints what loaded
# after the model directories and every model's outputs on the same featurised rows.
SERVE = r"""
import json, sys
import numpy as np
from electra_tf.interop import serving_models, task_outputs

TEXTS = [("A man plays a guitar.", "A person makes music."), ("It rains.", None),
         ("The cat sat on the mat all day long.", "Dogs bark.")]


def outputs(path):
  p = serving_models.open_model(path)
  rows = [task_outputs.featurize_row(p.tokenizer, p.definition["kind"], p.max_seq_length, a, b,
                                     None)[0] for a, b in TEXTS]
  batch = {k: np.asarray([r[k] for r in rows], np.int32) for k in serving_models.INPUTS}
  return {k: np.asarray(v).tolist() for k, v in p.run_batch(batch).items()}


*folders, saved_model = sys.argv[1:]
got = {path: outputs(path) for path in folders}
loaded = sorted(m for m in sys.modules if m.startswith("electra_tf."))
got[saved_model] = outputs(saved_model)
print(json.dumps({"loaded": loaded, "outputs": got}))
"""


@pytest.fixture(scope="module")
def export(tmp_path_factory):
  return tiny_litert.build(tmp_path_factory.mktemp("tiny_model_dir"), litert=False)


def test_model_directory_loads_no_hf_import_and_equals_the_saved_model(export, tmp_path):
  run = tmp_path / "rte_model_1"  # as run_finetuning writes it: ckpt-<N> beside the JSON files
  run.mkdir()
  for name in os.listdir(export / "tf2"):
    shutil.copy(export / "tf2" / name, run / name.replace("ckpt.", "ckpt-7."))
  (run / "checkpoint").write_text('model_checkpoint_path: "ckpt-7"\n')
  folders = [run, export / "tf2", export / "tf1"]  # TF2 ckpt-<N>, TF2 ckpt, TF1 model.ckpt
  proc = subprocess.run([sys.executable, "-c", SERVE, *map(str, folders),
                         str(export / "saved_model")], cwd=REPO_ROOT, env=ENV,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(proc.stdout.splitlines()[-1])
  assert "electra_tf.finetuning.finetuning_model" in result["loaded"]  # a model was built
  assert [m for m in NOT_LOADED if m in result["loaded"]] == []
  want = result["outputs"][str(export / "saved_model")]
  for folder in folders:
    got = result["outputs"][str(folder)]
    assert sorted(got) == sorted(want), folder
    for key in want:
      np.testing.assert_allclose(got[key], want[key], atol=1e-5, err_msg=f"{folder}: {key}")
