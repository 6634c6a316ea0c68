"""hf_electra_2l/: a tiny Hugging Face ELECTRA pair written by ``transformers`` itself.

NOT official code: this family runs under PyTorch + transformers (a separate interpreter given by
``--hf_python``; neither is a project dependency) and imports nothing from the official checkout
or from tensorflow. Which function made which file:

- ``discriminator/``, ``generator/`` ``config.json`` + ``model.safetensors``:
  ``transformers.ElectraForPreTraining`` / ``ElectraForMaskedLM`` built from ``ElectraConfig``
  under ``torch.manual_seed(0)``, every parameter then shifted by N(0, 0.2) noise (so no bias is
  0 and no LayerNorm gamma is 1), the generator's ``electra.embeddings`` copied from the
  discriminator's (``generator_lm_head.weight`` stays tied to the word embeddings), saved with
  ``save_pretrained(..., safe_serialization=True)``.
- ``*/vocab.txt``, ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``:
  ``transformers.ElectraTokenizerFast(tests/golden/vocab.txt, do_lower_case=True)
  .save_pretrained``.
- ``golden.npz``: the same tokenizer encodes three Austen rows (T = 16); the models in eval mode
  give ``electra(...).last_hidden_state`` and the head logits (files.save_npz).
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import numpy as np

from tools.official_goldens import files

FOLDER = "hf_electra_2l"
SEQ_LEN = 16
SEED = 0
NOISE = 0.2  # well above the 0.02 init: attention far from uniform, so every tensor counts
PIP = ("python3 -m venv /work/hfvenv && /work/hfvenv/bin/pip install torch==2.13.0 "
       "transformers==4.57.6 numpy, then pass --hf_python /work/hfvenv/bin/python")

# Shapes (tiny versions of the shared set's 128 / 256 x 2 / 4 heads / 1024; generator 64, 1, 256).
DISC = {"embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 64}
GEN = {"embedding_size": 16, "hidden_size": 8, "num_hidden_layers": 2,
       "num_attention_heads": 1, "intermediate_size": 32}

# (first segment, second segment or None): Emma, Persuasion, Sense and Sensibility (public domain).
ROWS = (
    ("Emma Woodhouse, handsome and rich", "she was the youngest."),
    ("Sir Walter Elliot, of Kellynch Hall", None),
    ("The family of Dashwood", "had long been settled."),
)


def require_hf() -> None:
  """Exits with one line naming the missing package(s) and how to install them."""
  missing = [m for m in ("torch", "transformers", "safetensors")
             if importlib.util.find_spec(m) is None]
  if missing:
    print(f"hf_pair: {' and '.join(missing)} not installed in {sys.executable}; "
          f"install them apart from the project: {PIP}", file=sys.stderr)
    raise SystemExit(1)


def _perturb(model, generator) -> None:
  """Adds N(0, NOISE) to every parameter, in sorted name order (tied ones once)."""
  import torch

  with torch.no_grad():
    for _, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
      p.add_(torch.randn(p.shape, generator=generator) * NOISE)


def _inputs(tokenizer) -> dict[str, np.ndarray]:
  enc = [tokenizer(a, b, max_length=SEQ_LEN, padding="max_length", truncation=True)
         for a, b in ROWS]
  out = {"input_ids": [e["input_ids"] for e in enc],
         "input_mask": [e["attention_mask"] for e in enc],
         "segment_ids": [e["token_type_ids"] for e in enc]}
  arrays = {k: np.asarray(v, np.int32) for k, v in out.items()}
  assert arrays["input_ids"].shape == (len(ROWS), SEQ_LEN)
  assert all(m[-1] == 0 for m in arrays["input_mask"]), "every row must be padded"
  return arrays


def write(official_dir: str, golden_dir: pathlib.Path) -> None:
  """Writes golden_dir/hf_electra_2l/ (``official_dir`` is unused: not official code)."""
  del official_dir
  require_hf()
  import torch
  import transformers
  from transformers import (
    ElectraConfig,
    ElectraForMaskedLM,
    ElectraForPreTraining,
    ElectraTokenizerFast,
  )

  torch.manual_seed(SEED)
  torch.use_deterministic_algorithms(True)
  torch.set_num_threads(1)
  vocab_file = golden_dir / "vocab.txt"
  vocab_size = len(vocab_file.read_text(encoding="utf-8").splitlines())
  out = golden_dir / FOLDER
  tokenizer = ElectraTokenizerFast(vocab_file=str(vocab_file), do_lower_case=True)

  disc = ElectraForPreTraining(ElectraConfig(vocab_size=vocab_size, **DISC)).eval()
  gen = ElectraForMaskedLM(ElectraConfig(vocab_size=vocab_size, **GEN)).eval()
  noise = torch.Generator().manual_seed(SEED)
  _perturb(disc, noise)
  _perturb(gen, noise)
  # As in every released pair: one embedding table, the MLM output layer tied to it.
  gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
  assert gen.generator_lm_head.weight.data_ptr() == \
      gen.electra.embeddings.word_embeddings.weight.data_ptr()

  for name, model in (("discriminator", disc), ("generator", gen)):
    model.save_pretrained(str(out / name), safe_serialization=True)
    tokenizer.save_pretrained(str(out / name))
    # save_pretrained rewrites vocab.txt from its vocab map (it would drop a duplicated line);
    # ship the vocabulary file itself, as a hub upload would (same bytes as
    # tests/golden/vocab.txt).
    (out / name / "vocab.txt").write_bytes(vocab_file.read_bytes())

  arrays = _inputs(tokenizer)
  feed = {"input_ids": torch.from_numpy(arrays["input_ids"]).long(),
          "attention_mask": torch.from_numpy(arrays["input_mask"]).long(),
          "token_type_ids": torch.from_numpy(arrays["segment_ids"]).long()}
  with torch.no_grad():
    arrays["disc_sequence_output"] = disc.electra(**feed).last_hidden_state.numpy()
    arrays["disc_logits"] = disc(**feed).logits.numpy()
    arrays["gen_sequence_output"] = gen.electra(**feed).last_hidden_state.numpy()
    arrays["gen_logits"] = gen(**feed).logits.numpy()
  files.save_npz(out / "golden.npz", arrays)
  print(f"hf_pair: transformers {transformers.__version__}, torch {torch.__version__}, "
        f"vocab {vocab_size}, T {SEQ_LEN}")
