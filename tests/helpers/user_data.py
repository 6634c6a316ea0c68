"""GLUE / CoNLL-2000-layout rows of tests/data (make_task_files.py) written twice: in the
built-in layout (``sst``, ``mrpc``, ``sts``, ``chunk``) and as user tasks with a ``task.json``
(CSV, JSONL, CoNLL with other column names), for tests that compare the two."""

import csv
import json


def tsv_rows(path, start, stop):
  """Header and rows ``start:stop`` (1-based data rows after the header) of a GLUE TSV."""
  with open(path, encoding="utf-8-sig") as f:
    lines = f.read().split("\n")
  return [line.split("\t") for line in [lines[0], *lines[start:stop]]]


def sentences(path, start, stop):
  with open(path, encoding="utf-8") as f:
    return f.read().split("\n\n")[start:stop]


def _write_tsv(path, rows):
  path.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")


def _write_csv(path, header, rows):
  with open(path, "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(header)
    writer.writerows(rows)


def _write_jsonl(path, rows):
  path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _task_json(folder, spec):
  folder.mkdir(parents=True, exist_ok=True)
  (folder / "task.json").write_text(json.dumps(spec, indent=1), encoding="utf-8")


# rows per split (data rows after the header)
SPLITS = {"train": (1, 41), "dev": (1, 17), "test": (1, 9)}
CHUNK = {"train": (0, 24), "dev": (0, 12)}


def write_all(root, data_dir):
  """``<root>/finetuning_data/``: built-in sst, mrpc, sts, chunk and their user versions
  movie_reviews (CSV), paraphrase (JSONL, int labels), similarity (CSV), chunking (CoNLL).
  The user tasks' test files are their dev rows (with labels), to score written predictions."""
  data = root / "finetuning_data"
  glue = data_dir / "glue"
  for task, folder in (("sst", "SST-2"), ("mrpc", "MRPC"), ("sts", "STS-B")):
    (data / task).mkdir(parents=True, exist_ok=True)
    for split, (a, b) in SPLITS.items():
      _write_tsv(data / task / f"{split}.tsv", tsv_rows(glue / folder / f"{split}.tsv", a, b))

  _task_json(data / "movie_reviews", {"type": "classification", "text_a": "review",
                                      "text_b": None, "label": "sentiment",
                                      "id": "review_id"})
  for split in ("train", "dev"):
    rows = tsv_rows(glue / "SST-2" / f"{split}.tsv", *SPLITS[split])[1:]
    _write_csv(data / "movie_reviews" / f"{split}.csv", ["sentiment", "review"],
               [[label, text] for text, label in rows])
  _write_csv(data / "movie_reviews" / "test.csv", ["review_id", "review", "sentiment"],
             [[f"r{i}", text, label] for i, (text, label) in enumerate(
                 tsv_rows(glue / "SST-2" / "dev.tsv", *SPLITS["dev"])[1:])])

  _task_json(data / "paraphrase", {
      "type": "classification", "text_a": "first", "text_b": "second", "label": "same",
      "labels": [0, 1], "symmetric": True, "id": "pair",
      "metrics": ["accuracy", "precision", "recall", "f1"]})
  for split in ("train", "dev", "test"):
    rows = tsv_rows(glue / "MRPC" / f"{'dev' if split == 'test' else split}.tsv",
                    *SPLITS["dev" if split == "test" else split])[1:]
    _write_jsonl(data / "paraphrase" / f"{split}.jsonl",
                 [{"pair": f"{r[1]}-{r[2]}", "same": int(r[0]), "first": r[3],
                   "second": r[4]} for r in rows])

  _task_json(data / "similarity", {
      "type": "regression", "text_a": "s1", "text_b": "s2", "label": "similarity",
      "range": [0, 5], "symmetric": True, "metrics": ["pearson", "spearman", "mse"]})
  for split in ("train", "dev", "test"):
    rows = tsv_rows(glue / "STS-B" / f"{'dev' if split == 'test' else split}.tsv",
                    *SPLITS["dev" if split == "test" else split])[1:]
    _write_csv(data / "similarity" / f"{split}.csv", ["similarity", "s1", "s2"],
               [[r[-1], r[-3], r[-2]] for r in rows])

  chunk = data_dir / "chunk"
  (data / "chunk").mkdir(parents=True, exist_ok=True)
  _task_json(data / "chunking", {"type": "tagging"})
  for split, source in (("train", "train.txt"), ("dev", "test.txt")):
    text = "\n\n".join(sentences(chunk / source, *CHUNK[split])) + "\n\n"
    (data / "chunk" / f"{split}.txt").write_text(text, encoding="utf-8")
    (data / "chunking" / f"{split}.conll").write_text(text, encoding="utf-8")
  (data / "chunking" / "test.conll").write_text(
      (data / "chunking" / "dev.conll").read_text(encoding="utf-8"), encoding="utf-8")
  return data
