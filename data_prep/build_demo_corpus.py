r"""Writes a real-English demo corpus from the Python standard library's docstrings.

Every machine with Python has this text, so the README's first command needs no download and
the project ships no third-party data. One document per module: the module docstring, then the
docstrings of its public classes and functions, paragraphs separated by blank lines (the
layout ``build_pretraining_dataset.py`` expects with ``blanks_separate_docs``).

  python data_prep/build_demo_corpus.py --output_dir /tmp/demo/corpus \
      --index_file /tmp/demo/corpus_modules.tsv

``--index_file`` (outside the corpus folder, whose every file is corpus text) names the module of
each document: lines ``file<TAB>document<TAB>module``, ``document`` the 0-based position of the
document in ``file`` (``data_prep/build_demo_task.py`` labels sentences with it).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import pkgutil
import sys
import warnings

if __package__ in (None, ""):  # run as a script: make the repository root importable
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from electra_tf import console, early_interrupt  # noqa: E402,I001 -- before anything logs

if __name__ == "__main__":
  early_interrupt.install()
  console.quiet_logs(sys.argv)
  console.use_tf_keras()

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Command-line flags, defined on demand so importing this module defines none."""
  flags.DEFINE_string("output_dir", None, "Directory for the corpus .txt files.")
  flags.DEFINE_integer("num_files", 8, "Documents are spread round-robin over this many files.")
  flags.DEFINE_integer("max_modules", 1000, "Stop after this many modules with text.")
  flags.DEFINE_string("index_file", None, "Optional TSV naming each document's module "
                      "(file, document position, module); keep it outside output_dir.")

# Modules that start GUIs, print on import or are slow/unsafe to import.
_SKIP_PREFIXES = ("antigravity", "this", "idlelib", "tkinter", "turtle", "test", "lib2to3",
                  "ensurepip", "pydoc_data", "venv", "__", "_")


def _paragraphs(text: str | None) -> list[str]:
  """A docstring as paragraphs, each joined onto one line."""
  if not text:
    return []
  out = []
  for block in inspect.cleandoc(text).split("\n\n"):
    line = " ".join(part.strip() for part in block.splitlines() if part.strip())
    if len(line.split()) >= 4:  # skip signatures and one-word fragments
      out.append(line)
  return out


def module_document(module) -> list[str]:
  """Paragraphs of a module's docstring and of its public members' docstrings."""
  paragraphs = _paragraphs(module.__doc__)
  for name, member in sorted(vars(module).items()):
    if name.startswith("_") or getattr(member, "__module__", None) != module.__name__:
      continue
    if inspect.isclass(member) or inspect.isfunction(member):
      paragraphs.extend(_paragraphs(inspect.getdoc(member)))
  return paragraphs


def stdlib_module_names() -> list[str]:
  names = sorted(getattr(sys, "stdlib_module_names", ()))
  if not names:  # Python < 3.10
    names = sorted(m.name for m in pkgutil.iter_modules() if m.module_finder.path.startswith(
        os.path.dirname(os.__file__)))
  names = [n for n in names if not n.startswith(_SKIP_PREFIXES)]
  out = []
  for name in names:  # packages contribute their public submodules too (email.*, json.*, ...)
    out.append(name)
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.submodule_search_locations:
      out.extend(f"{name}.{m.name}" for m in pkgutil.iter_modules(spec.submodule_search_locations)
                 if not m.name.startswith(("_", "test")))
  return out


def build_demo_corpus(output_dir: str, num_files: int = 8, max_modules: int = 1000,
                      index_file: str | None = None) -> dict:
  """Writes ``output_dir/stdlib_docs_<i>.txt`` (and ``index_file``, see the module docstring);
  returns counts of modules, paragraphs, words."""
  if index_file and os.path.dirname(os.path.abspath(index_file)) == os.path.abspath(output_dir):
    raise ValueError(f"index_file {index_file} is inside output_dir {output_dir}, whose every "
                     "file is read as corpus text: write it elsewhere")
  try:
    os.makedirs(output_dir, exist_ok=True)
  except OSError as e:
    raise ValueError(f"output_dir {output_dir} cannot be created: {e.strerror}") from None
  documents, names = [], []
  for name in stdlib_module_names():
    if len(documents) >= max_modules:
      break
    try:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = importlib.import_module(name)
    except Exception:  # noqa: BLE001 - platform-specific modules simply do not contribute
      continue
    paragraphs = module_document(module)
    if len(paragraphs) >= 2:
      documents.append(paragraphs)
      names.append(name)
  if not documents:
    raise RuntimeError("found no standard-library docstrings (is this a stripped Python build?)")
  files = [[] for _ in range(num_files)]
  for i, doc in enumerate(documents):
    files[i % num_files].append("\n".join(doc))
  for i, docs in enumerate(files):
    with open(os.path.join(output_dir, f"stdlib_docs_{i}.txt"), "w", encoding="utf-8") as f:
      f.write("\n\n".join(docs) + "\n")
  if index_file:
    _write_index(index_file, names, num_files)
  words = sum(len(p.split()) for doc in documents for p in doc)
  return {"modules": len(documents), "paragraphs": sum(map(len, documents)), "words": words}


def _write_index(path: str, names: list[str], num_files: int) -> None:
  """``file<TAB>document<TAB>module`` per document, in the round-robin order of the files."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    for i, name in enumerate(names):
      f.write(f"stdlib_docs_{i % num_files}.txt\t{i // num_files}\t{name}\n")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  if not FLAGS.output_dir:
    raise app.UsageError("--output_dir is required")
  stats = build_demo_corpus(FLAGS.output_dir, FLAGS.num_files, FLAGS.max_modules,
                            FLAGS.index_file)
  console.log(f"demo corpus: {stats['modules']} modules, {stats['paragraphs']} paragraphs, "
              f"{stats['words']} words -> {FLAGS.output_dir}")


if __name__ == "__main__":
  define_flags()
  console.run(main, "build_demo_corpus.py")
