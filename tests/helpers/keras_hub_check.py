r"""Run a keras-hub preset folder on given inputs, in a fresh Keras 3 process (no network):
how tests/interop/test_deploy_exports.py and benchmarks/bench_litert.py load the preset as a user
would.

  python tests/helpers/keras_hub_check.py --preset <keras_hub folder> --inputs in.npz \
      --output out.npz

``in.npz``: int32 ``input_ids``, ``input_mask``, ``segment_ids`` [B, T] and optionally
``texts`` [N] (strings). ``out.npz``: ``sequence_output`` [B, T, H] and ``pooled_output``
[B, H] of ``keras_hub.models.ElectraBackbone.from_preset``, and for the texts ``token_ids``
[N, max] (-1 padded) of ``keras_hub.models.ElectraTokenizer.from_preset``. Run it without
``TF_USE_LEGACY_KERAS`` (keras-hub is Keras 3); tests and benchmarks compare its outputs with
ours.
"""

from __future__ import annotations

import argparse
import os


def run(preset: str, inputs: str, output: str) -> None:
  """Loads ``preset`` (local folder only), runs it on ``inputs``, writes ``output``."""
  import keras_hub
  import numpy as np

  data = dict(np.load(inputs, allow_pickle=False))
  backbone = keras_hub.models.ElectraBackbone.from_preset(preset)
  out = backbone.predict({"token_ids": data["input_ids"], "segment_ids": data["segment_ids"],
                          "padding_mask": data["input_mask"]}, verbose=0)
  result = {"sequence_output": np.asarray(out["sequence_output"]),
            "pooled_output": np.asarray(out["pooled_output"])}
  if "texts" in data:
    tokenizer = keras_hub.models.ElectraTokenizer.from_preset(preset)
    ids = [np.asarray(tokenizer(str(t))) for t in data["texts"]]
    width = max(len(i) for i in ids)
    result["token_ids"] = np.stack([np.pad(i, (0, width - len(i)), constant_values=-1)
                                    for i in ids]).astype(np.int32)
  np.savez(output, **result)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--preset", required=True)
  parser.add_argument("--inputs", required=True)
  parser.add_argument("--output", required=True)
  args = parser.parse_args()
  run(args.preset, args.inputs, args.output)


SCRIPT = os.path.abspath(__file__)


def check_env() -> dict[str, str]:
  """The environment for running this module in a subprocess: Keras 3, no downloads."""
  env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
  env.update(KERAS_BACKEND="tensorflow", HF_HUB_OFFLINE="1", KAGGLEHUB_OFFLINE="1",
             TF_CPP_MIN_LOG_LEVEL="3")
  return env


if __name__ == "__main__":
  main()
