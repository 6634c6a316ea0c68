"""The Beam pipeline's inputs: documents as line blocks (a None line between two records),
Parquet read by row group with bad rows named, folders and globs, prepared TFDS folders."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from electra_tf.data_prep import beam_inputs


def _lines(blocks):
  return [line for lines, _, _ in blocks for line in lines]


def test_jsonl_gz_records_become_documents_split_on_newlines(tmp_path):
  path = tmp_path / "x.jsonl.gz"
  with gzip.open(path, "wt", encoding="utf-8") as f:
    for text in ("one\r\ntwo\n", "", "three"):
      f.write(json.dumps({"text": text}) + "\n")
  bad = beam_inputs.BadRecords()
  lines = _lines(beam_inputs.unit_blocks("jsonl", str(path), bad))
  # as the text file "one\ntwo\n\n\nthree\n" reads: a None (document end) between records
  assert lines == ["one", "two", None, None, "three"]
  assert (bad.documents, bad.count) == (3, 0)


def test_parquet_row_groups_and_a_null_row(tmp_path):
  path = tmp_path / "x.parquet"
  pq.write_table(pa.table({"body": ["a b", None, "c", "d\ne"]}), path, row_group_size=2)
  bad = beam_inputs.BadRecords()
  lines = _lines(beam_inputs.unit_blocks("parquet", str(path), bad, text_field="body"))
  assert lines == ["a b", None, "c", None, "d", "e"]
  assert bad.messages == [f"{path}: row group 0 row 1: 'body' is not text; skipped"]
  with pytest.raises(beam_inputs.InputError, match=r"row group 0 row 1: .* \(--strict\)$"):
    _lines(beam_inputs.unit_blocks("parquet", str(path), beam_inputs.BadRecords(strict=True),
                                   text_field="body"))


def test_text_blocks_count_documents(tmp_path):
  path = tmp_path / "a.txt"
  path.write_text("s1\ns2\n\n\ns3\n\ns4\n")
  bad = beam_inputs.BadRecords()
  assert _lines(beam_inputs.unit_blocks("text", str(path), bad)) == [
      "s1", "s2", "", "", "s3", "", "s4"]
  assert bad.documents == 3
  bad = beam_inputs.BadRecords()
  _lines(beam_inputs.unit_blocks("text", str(path), bad, blanks_separate_docs=False))
  assert bad.documents == 1


def test_list_files_folder_and_glob(tmp_path):
  for name in ("b.txt", "a.txt", "c.json"):
    (tmp_path / name).write_text("x\n")
  (tmp_path / "sub").mkdir()
  assert beam_inputs.list_files(str(tmp_path)) == [
      str(tmp_path / n) for n in ("a.txt", "b.txt", "c.json")]
  assert beam_inputs.list_files(str(tmp_path / "*.txt")) == [
      str(tmp_path / n) for n in ("a.txt", "b.txt")]
  with pytest.raises(beam_inputs.InputError, match="matches no file"):
    beam_inputs.list_files(str(tmp_path / "*.parquet"))


def test_resolve_tfds_takes_the_newest_prepared_version(tmp_path):
  for version, prepared in (("1.0.0", True), ("1.10.0", True), ("2.0.0", False)):
    folder = tmp_path / "wiki" / "en" / version
    folder.mkdir(parents=True)
    if prepared:
      (folder / "dataset_info.json").write_text("{}")
  assert beam_inputs.resolve_tfds("wiki/en", str(tmp_path)) == str(tmp_path / "wiki/en/1.10.0")
  assert beam_inputs.resolve_tfds("wiki/en:1.0.0", str(tmp_path)) == str(
      tmp_path / "wiki/en/1.0.0")
  with pytest.raises(beam_inputs.InputError, match="wiki/fr is not prepared"):
    beam_inputs.resolve_tfds("wiki/fr", str(tmp_path))
