"""The embedded demo corpus: real English from the standard library's docstrings."""

from data_prep.build_demo_corpus import build_demo_corpus


def test_demo_corpus_has_documents_and_paragraphs(tmp_path):
  stats = build_demo_corpus(str(tmp_path), num_files=3, max_modules=60)
  assert stats["modules"] >= 30 and stats["words"] > 10_000
  files = sorted(tmp_path.glob("stdlib_docs_*.txt"))
  assert len(files) == 3
  text = files[0].read_text(encoding="utf-8")
  documents = [d for d in text.split("\n\n") if d.strip()]
  assert len(documents) >= 10  # blank lines separate one module's document from the next
  assert all(len(line.split()) >= 4 for d in documents for line in d.splitlines())
