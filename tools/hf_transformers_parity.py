r"""One-off check: load our Hugging Face export with real ``transformers`` and compare logits.

Not part of the test suite (it needs torch + transformers, which the project does not depend
on). Two processes, because the project venv has TensorFlow and the HF venv has torch:

  python3 -m venv /tmp/hfvenv
  /tmp/hfvenv/bin/pip install torch==2.13.0 transformers safetensors numpy
  TF_USE_LEGACY_KERAS=1 .venv/bin/python tools/hf_transformers_parity.py \
      --hf_python /tmp/hfvenv/bin/python [--work_dir /tmp/hf_parity]

The TF side exports three models (the official ``electra_small_2l`` checkpoint, and tiny random
models with untied generator embeddings and with a fully tied generator), runs our TF model on
the inputs and saves the logits; the HF side loads each folder with
``ElectraForPreTraining.from_pretrained`` / ``ElectraForMaskedLM.from_pretrained`` (eager and
sdpa attention, float32, eval mode), checks there are no missing / unexpected / mismatched keys, and
prints the max abs logit differences.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import subprocess
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
REFERENCE = pathlib.Path(os.environ.get("ELECTRA_SHARED", REPO.parent / "shared")) / "reference"


def _tf_side(work_dir: pathlib.Path) -> list[str]:
  """Exports the models and writes ``<variant>/inputs_and_ours.npz``; returns the variants."""
  os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
  sys.path.insert(0, str(REPO))
  from electra_tf import checkpoints
  from electra_tf.interop import hf_export
  from electra_tf.modeling.bert_config import BertConfig
  from electra_tf.modeling.encoder import Transformer
  from electra_tf.modeling.heads import DiscriminatorHead, MaskedLMHead

  def build(disc_cfg, gen_cfg, e, tied_generator=False, untied_embeddings=False):
    disc = Transformer(disc_cfg, e, scope="electra")
    disc.build(None)
    disc_head = DiscriminatorHead(disc_cfg.hidden_size, disc_cfg.hidden_act)
    disc_head.build([None, disc_cfg.hidden_size])
    if tied_generator:
      gen = disc
    else:
      gen = Transformer(gen_cfg, gen_cfg.hidden_size,
                        None if untied_embeddings else disc.embeddings, scope="generator")
      gen.build(None)
    gen_head = MaskedLMHead(gen.embeddings, disc_cfg.hidden_act)
    gen_head.build([None, gen.config.hidden_size])
    layers = [disc, disc_head, gen, gen_head]
    variables = checkpoints.variables_by_name(v for layer in layers for v in layer.weights)
    return (disc, disc_head, gen, gen_head), variables

  variants = []
  folder = REFERENCE / "electra_small_2l"
  g = np.load(folder / "golden.npz")
  disc_cfg = BertConfig.from_json_file(str(folder / "bert_config.json"))
  gen_cfg = BertConfig.from_json_file(str(folder / "generator_bert_config.json"))
  towers, variables = build(disc_cfg, gen_cfg, 128)
  checkpoints.load_tf1_checkpoint(variables, str(folder / "model.ckpt"), allow_unused=False)
  variants.append(("reference", towers, variables, disc_cfg, gen_cfg, 128, False,
                   (g["fake_input_ids"], g["input_mask"], g["segment_ids"]),
                   (g["masked_input_ids"], g["input_mask"], g["segment_ids"])))

  rng = np.random.RandomState(0)
  tiny = lambda h, n, layers: BertConfig(vocab_size=41, hidden_size=h, num_hidden_layers=layers,
                                         num_attention_heads=n, intermediate_size=4 * h,
                                         max_position_embeddings=20, type_vocab_size=2)
  ids = rng.randint(0, 41, (2, 11)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 7:] = 0
  seg = (np.arange(11)[None] >= 5).astype(np.int32).repeat(2, 0)
  for name, kw in (("untied_embeddings", {"untied_embeddings": True}),
                   ("tied_generator", {"tied_generator": True})):
    d_cfg, g_cfg = tiny(24, 3, 3), tiny(8, 2, 2)
    towers, variables = build(d_cfg, g_cfg, 12, **kw)
    for key in sorted(variables):
      value = rng.normal(0, 0.2, variables[key].shape.as_list())
      variables[key].assign((value + (1.0 if key.endswith("gamma") else 0.0)).astype(np.float32))
    variants.append((name, towers, variables, d_cfg, None if kw.get("tied_generator") else g_cfg,
                     12, bool(kw.get("untied_embeddings")), (ids, mask, seg), (ids, mask, seg)))

  names = []
  for (name, (disc, disc_head, gen, gen_head), variables, d_cfg, g_cfg, e, untied,
       disc_in, gen_in) in variants:
    out = work_dir / name
    hf_export.export_hf(variables, d_cfg, g_cfg, e, str(out), untied_generator_embeddings=untied)
    disc_logits = disc_head(disc(*disc_in)["sequence_output"]).numpy()
    gen_logits = gen_head(gen(*gen_in)["sequence_output"]).numpy()
    np.savez(out / "inputs_and_ours.npz", disc_ids=disc_in[0], disc_mask=disc_in[1],
             disc_seg=disc_in[2], gen_ids=gen_in[0], gen_mask=gen_in[1], gen_seg=gen_in[2],
             disc_logits=disc_logits, gen_logits=gen_logits)
    names.append(name)
  return names


def _hf_side(work_dir: pathlib.Path, names: list[str]) -> dict:
  """Loads every export with transformers and compares logits (runs in the torch venv)."""
  import torch
  import transformers

  torch.set_grad_enabled(False)
  report = {"torch": torch.__version__, "transformers": transformers.__version__}
  for name in names:
    out = work_dir / name
    d = np.load(out / "inputs_and_ours.npz")
    row = {}
    for (sub, cls, prefix), attn in itertools.product(
        (("discriminator", transformers.ElectraForPreTraining, "disc"),
         ("generator", transformers.ElectraForMaskedLM, "gen")), ("eager", "sdpa")):
      model, info = cls.from_pretrained(str(out / sub), output_loading_info=True,
                                        attn_implementation=attn, dtype=torch.float32)
      model.eval()
      bad = {k: list(v) for k, v in info.items() if v}
      logits = model(input_ids=torch.from_numpy(d[f"{prefix}_ids"].astype(np.int64)),
                     attention_mask=torch.from_numpy(d[f"{prefix}_mask"].astype(np.int64)),
                     token_type_ids=torch.from_numpy(d[f"{prefix}_seg"].astype(np.int64))).logits
      diff = np.abs(logits.numpy().astype(np.float64) - d[f"{prefix}_logits"])
      row[f"{sub}/{attn}"] = {"class": cls.__name__, "loading_problems": bad,
                  "max_abs_diff": float(diff.max()),
                  "max_abs_logit": float(np.abs(d[f"{prefix}_logits"]).max())}
    report[name] = row
  return report


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--hf_python", default="/tmp/hfvenv/bin/python")
  parser.add_argument("--work_dir", default="/tmp/hf_parity")
  parser.add_argument("--hf_side", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args()
  work_dir = pathlib.Path(args.work_dir)
  if args.hf_side:
    print(json.dumps(_hf_side(work_dir, args.hf_side.split(",")), indent=2))
    return
  names = _tf_side(work_dir)
  subprocess.run([args.hf_python, __file__, "--work_dir", str(work_dir),
                  "--hf_side", ",".join(names)], check=True)


if __name__ == "__main__":
  main()
