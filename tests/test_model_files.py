"""Where a model folder's vocabulary is found (``electra_tf.model_files.vocab_in``): beside the
checkpoints, else in a SavedModel's ``assets/``; and that every module names the vocabulary and
the SavedModel folder through the one constant."""

import pathlib
import re

from electra_tf import model_files

PACKAGE = pathlib.Path(model_files.__file__).resolve().parent


def test_vocab_in_prefers_the_folder_then_assets(tmp_path):
  assert model_files.vocab_in(str(tmp_path)) is None
  (tmp_path / "assets").mkdir()
  (tmp_path / "assets" / "vocab.txt").write_text("[PAD]\n")
  assert model_files.vocab_in(str(tmp_path)) == str(tmp_path / "assets" / "vocab.txt")
  (tmp_path / "vocab.txt").write_text("[PAD]\n")
  assert model_files.vocab_in(str(tmp_path)) == str(tmp_path / "vocab.txt")
  (tmp_path / "other").mkdir()
  (tmp_path / "other" / "vocab.txt").mkdir()  # a folder of that name is no vocabulary
  assert model_files.vocab_in(str(tmp_path / "other")) is None


def test_the_names_have_one_home():
  """No module but model_files spells "vocab.txt" or "saved_model" as a string of code (a key
  of a result dict may be named "saved_model"; docstrings and flag help are prose)."""
  literal = re.compile(r"""(?<![\w"'[])(["'])(vocab\.txt|saved_model)\1(?!\s*:)""")
  found = []
  for path in sorted(PACKAGE.rglob("*.py")):
    if path.name == "model_files.py":
      continue
    for number, line in enumerate(path.read_text().splitlines(), 1):
      code = line.split("#")[0]
      if literal.search(code) and not re.search(r"DEFINE_|help=", code):
        found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
  assert not found, "\n".join(found)
