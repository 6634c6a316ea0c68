"""Writes the in-repo fine-tuning task files under tests/data/ (glue/, chunk/, squad/).

Why: the real GLUE (CoLA, SST-2, MRPC, RTE, QNLI) and CoNLL-2000 rows carry no open licence, so
the tests read files in exactly their layouts (headers, columns, BOMs, label sets, trailing
newlines) whose rows are Jane Austen sentences (tests/data/gutenberg, public domain) or
sentences built here from word lists, with labels that carry learnable signal. STS-B and SQuAD
2.0 rows are written here as well (no third-party text). Deterministic: every draw comes from
``random.Random`` seeded per file; run ``python tests/data/make_task_files.py`` to rewrite
the same bytes (tests/data/SOURCE.md describes every file).
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import random
import re

HERE = pathlib.Path(__file__).resolve().parent
GUTENBERG = HERE / "gutenberg"
AUSTEN = ("austen-emma.txt", "austen-persuasion.txt", "austen-sense.txt")

# rows per split (data rows, header excluded); chunk: sentences
COUNTS = {
    "CoLA": {"train": 60, "dev": 30, "test": 20},
    "SST-2": {"train": 320, "dev": 60, "test": 40},
    "MRPC": {"train": 60, "dev": 30, "test": 20},
    "RTE": {"train": 120, "dev": 205, "test": 112},
    "STS-B": {"train": 80, "dev": 40, "test": 120},
    "QNLI": {"dev": 30, "test": 20},
    "chunk": {"train": 120, "test": 110},
}


def _write(path: pathlib.Path, text: str, bom: bool = False) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))


def _paragraphs(name: str) -> list[str]:
  text = (GUTENBERG / name).read_text(encoding="utf-8")
  return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]


def austen_sentences() -> list[str]:
  """Sentences of the Austen excerpts (6-60 words, no quotes, underscores or brackets)."""
  out = []
  for name in AUSTEN:
    for paragraph in _paragraphs(name):
      for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", paragraph):
        words = sentence.split()
        if (6 <= len(words) <= 60 and sentence[-1] in ".!?" and sentence[0].isupper()
            and not re.search(r"[\"_\[\]()\t]|--|Mrs?\.$|Dr\.$|St\.$", sentence)):
          out.append(sentence)
  return out


def _clauses(sentence: str) -> list[str]:
  """Comma / semicolon parts of at least four words (without a leading conjunction), as
  sentences of their own."""
  parts = [p.strip(" .!?;:,") for p in re.split(r"[,;:]\s", sentence)]
  parts = [re.sub(r"^(and|but|or|for) ", "", p) for p in parts]
  return [p[0].upper() + p[1:] + "." for p in parts if len(p.split()) >= 4]


def _tsv(header: list[str] | None, rows: list[list[str]], final_newline: bool = True) -> str:
  lines = (["\t".join(header)] if header else []) + ["\t".join(r) for r in rows]
  return "\n".join(lines) + ("\n" if final_newline else "")


# ---------------------------------------------------------------------------------------------
# RTE: premise an Austen sentence; hypothesis one of its own clauses (entailment) or a clause of
# another sentence (not_entailment), balanced.


def write_rte(sentences: list[str]) -> None:
  rng = random.Random(1)
  pool = [s for s in sentences if len(_clauses(s)) >= 2]
  rng.shuffle(pool)
  need = sum(COUNTS["RTE"].values())
  assert len(pool) >= need, (len(pool), need)
  premises = pool[:need]
  rows = []
  for i, premise in enumerate(premises):
    if i % 2 == 0:
      rows.append((premise, rng.choice(_clauses(premise)), "entailment"))
    else:  # a clause of the next premise but one (never the premise itself)
      other = premises[(i + 2) % need]
      rows.append((premise, rng.choice(_clauses(other)), "not_entailment"))
  rng.shuffle(rows)
  start = 0
  for split in ("train", "dev", "test"):
    part = rows[start:start + COUNTS["RTE"][split]]
    start += len(part)
    if split == "test":
      text = _tsv(["index", "sentence1", "sentence2"], [[str(i), p, h] for i, (p, h, _) in
                                                         enumerate(part)])
    else:
      text = _tsv(["index", "sentence1", "sentence2", "label"],
                  [[str(i), p, h, y] for i, (p, h, y) in enumerate(part)])
    _write(HERE / "glue" / "RTE" / f"{split}.tsv", text)


# ---------------------------------------------------------------------------------------------
# SST-2: lower-cased, space-tokenised review phrases built from clearly positive or negative
# adjectives; label 1 = positive. Like the original: a space before the tab.

POSITIVE = ("charming", "delightful", "witty", "moving", "warm", "lovely", "brilliant",
            "tender", "graceful", "funny", "engaging", "gorgeous", "clever", "heartfelt",
            "joyous", "wonderful", "touching", "elegant")
NEGATIVE = ("dull", "tedious", "clumsy", "bleak", "lifeless", "tiresome", "shallow", "awful",
            "boring", "muddled", "sour", "flat", "dreary", "hollow", "sluggish", "stale",
            "pointless", "bland")
NOUNS = ("film", "movie", "story", "comedy", "drama", "performance", "script", "picture",
         "romance", "tale", "ending", "cast", "debut", "adaptation", "sequel", "score")
ADVERBS = ("often", "quietly", "simply", "thoroughly", "remarkably", "rather", "truly")
TAILS = ("from start to finish", "for most of its running time", "in every scene",
         "despite its length", "at almost every turn", "right to the last reel")
SST_TEMPLATES = (
    "the {n} is {adv} {a} .",
    "a {a} , {b} {n} {t} .",
    "{a} and {b}",
    "this {n} feels {a} {t} .",
    "an {adv} {a} {n} with a {b} {n2}",
    "it 's a {a} and {adv} {b} {n} .",
)


def _sst_sentence(rng: random.Random, positive: bool) -> str:
  words = POSITIVE if positive else NEGATIVE
  a, b = rng.sample(words, 2)
  n, n2 = rng.sample(NOUNS, 2)
  text = rng.choice(SST_TEMPLATES).format(a=a, b=b, n=n, n2=n2, adv=rng.choice(ADVERBS),
                                          t=rng.choice(TAILS))
  text = re.sub(r"\ban? (?=[aeiou])", "an ", text)
  return re.sub(r"\ban (?=[^aeiou])", "a ", text)


def write_sst() -> None:
  rng = random.Random(2)
  for split, n in COUNTS["SST-2"].items():
    rows = []
    for i in range(n):
      label = rng.random() < 0.5
      sentence = _sst_sentence(rng, label) + " "
      rows.append([str(i), sentence] if split == "test" else [sentence, str(int(label))])
    header = ["index", "sentence"] if split == "test" else ["sentence", "label"]
    _write(HERE / "glue" / "SST-2" / f"{split}.tsv", _tsv(header, rows))


# ---------------------------------------------------------------------------------------------
# CoLA: short sentences written here (label 1) and the same words out of order (label 0, with
# the original's "*" mark); no header in train/dev, dev without a final newline, as in GLUE.

SUBJECTS = ("Emma", "Harriet", "the captain", "my sister", "the old gentleman", "Anne",
            "the housekeeper", "her father", "Elinor", "the young man")
VERBS = ("admired", "visited", "praised", "forgot", "answered", "watched", "invited", "teased")
OBJECTS = ("the vicar", "her neighbour", "the letter", "the garden", "his cousin", "the piano",
           "the new curate", "the drawing")


def _cola_sentence(rng: random.Random) -> tuple[str, bool]:
  words = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}".split()
  if rng.random() < 0.3:
    words += rng.choice((["yesterday"], ["at", "once"], ["with", "care"]))
  good = rng.random() < 0.65
  if not good:
    while True:
      shuffled = rng.sample(words, len(words))
      if shuffled != words:
        words = shuffled
        break
  text = " ".join(words)
  return text[0].upper() + text[1:] + ".", good


def write_cola() -> None:
  rng = random.Random(3)
  for split, n in COUNTS["CoLA"].items():
    rows = []
    for i in range(n):
      sentence, good = _cola_sentence(rng)
      rows.append([str(i), sentence] if split == "test" else
                  ["aus11", str(int(good)), "" if good else "*", sentence])
    _write(HERE / "glue" / "CoLA" / f"{split}.tsv",
           _tsv(["index", "sentence"] if split == "test" else None, rows,
                final_newline=split != "dev"))


# ---------------------------------------------------------------------------------------------
# MRPC: sentence 1 an Austen sentence; sentence 2 its clauses in another order (Quality 1) or
# its first clause joined to a clause of another sentence (Quality 0). BOM on train/dev.


def write_mrpc(sentences: list[str]) -> None:
  rng = random.Random(4)
  pool = [s for s in sentences if len(_clauses(s)) >= 2]
  rng.shuffle(pool)
  pool = pool[-200:]
  rows, next_id = [], 1000001
  for i in range(sum(COUNTS["MRPC"].values())):
    s1 = pool[i]
    clauses = [c.rstrip(".") for c in _clauses(s1)]
    same = i % 3 != 2
    if same:
      parts = clauses[1:] + clauses[:1]
    else:
      parts = [clauses[0], _clauses(pool[-1 - i])[-1].rstrip(".")]
    s2 = ", ".join([parts[0]] + [p[0].lower() + p[1:] if not p.startswith(("I ", "Emma", "Mr",
                                                                          "Anne")) else p
                                 for p in parts[1:]]) + "."
    rows.append((str(int(same)), str(next_id), str(next_id + 13), s1, s2))
    next_id += 2 * rng.randrange(3, 400)
  start = 0
  for split in ("train", "dev", "test"):
    part = rows[start:start + COUNTS["MRPC"][split]]
    start += len(part)
    if split == "test":
      text = _tsv(["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                  [[str(i), *r[1:]] for i, r in enumerate(part)])
    else:
      text = _tsv(["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                  [list(r) for r in part])
    _write(HERE / "glue" / "MRPC" / f"{split}.tsv", text, bom=split != "test")


# ---------------------------------------------------------------------------------------------
# STS-B: caption-like pairs written here; score = 5 x word-set overlap (Jaccard) of the pair.

PEOPLE = ("A man", "A woman", "A girl", "A boy", "An old man", "A young woman", "A child",
          "A farmer", "A sailor", "A dancer")
ACTIONS = ("is playing a guitar", "is riding a horse", "is slicing an onion",
           "is reading a letter", "is walking a dog", "is cooking some rice",
           "is painting a fence", "is feeding a cat", "is climbing a hill",
           "is singing a song", "is rowing a boat", "is writing a note")
PLACES = ("", " on the beach", " in the kitchen", " near the church", " at the fair")


def _caption(rng: random.Random) -> str:
  return f"{rng.choice(PEOPLE)} {rng.choice(ACTIONS)}{rng.choice(PLACES)}."


def _words(text: str) -> set[str]:
  return set(text.lower().rstrip(".").split())


def write_sts() -> None:
  rng = random.Random(5)
  total = sum(COUNTS["STS-B"].values())
  rows = []
  for i in range(total):
    s1 = _caption(rng)
    kind = i % 4
    if kind == 0:  # an unrelated caption
      s2 = _caption(rng)
    else:  # change 0-2 of person, action, place
      person, rest = next((p, s1[len(p):]) for p in PEOPLE if s1.startswith(p + " "))
      action = next(a for a in ACTIONS if rest.startswith(" " + a))
      place = rest[len(action) + 1:-1]
      if kind >= 2:
        person = rng.choice(PEOPLE)
      if kind == 3:
        action = rng.choice(ACTIONS)
      if rng.random() < 0.5:
        place = rng.choice(PLACES)
      s2 = f"{person} {action}{place}."
    a, b = _words(s1), _words(s2)
    rows.append((s1, s2, f"{5 * len(a & b) / len(a | b):.3f}"))
  start = 0
  header = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
            "sentence1", "sentence2"]
  for split in ("train", "dev", "test"):
    part = rows[start:start + COUNTS["STS-B"][split]]
    out = []
    for i, (s1, s2, score) in enumerate(part):
      row = [str(i), "main-captions", "handmade", "2026", f"{start + i:04d}", "none", "none",
             s1, s2]
      out.append(row if split == "test" else row + [score])
    start += len(part)
    _write(HERE / "glue" / "STS-B" / f"{split}.tsv",
           _tsv(header if split == "test" else header + ["score"], out))


# ---------------------------------------------------------------------------------------------
# QNLI: an Austen sentence; the question asks about a name in it (entailment) or a name that is
# not in it (not_entailment).

NAMES = ("Emma", "Harriet", "Anne", "Elinor", "Marianne", "Mr. Knightley", "Mr. Woodhouse",
         "Sir Walter", "Lady Russell", "Mrs. Dashwood", "Miss Taylor", "Frank Churchill",
         "Captain Wentworth", "Mrs. Weston", "Edward", "Elizabeth")
QUESTIONS = ("What did {} do?", "Who spoke with {}?", "What was said of {}?",
             "How did {} feel?")


def write_qnli(sentences: list[str]) -> None:
  rng = random.Random(6)
  named = [(s, [n for n in NAMES if re.search(r"\b" + re.escape(n) + r"\b", s)])
           for s in sentences]
  named = [(s, ns) for s, ns in named if ns]
  rng.shuffle(named)
  for split in ("dev", "test"):
    rows = []
    for i in range(COUNTS["QNLI"][split]):
      sentence, names = named.pop()
      entails = i % 2 == 0
      name = rng.choice(names if entails else [n for n in NAMES if n not in names])
      question = rng.choice(QUESTIONS).format(name)
      rows.append([str(i), question, sentence] +
                  ([] if split == "test" else ["entailment" if entails else "not_entailment"]))
    header = ["index", "question", "sentence"] + ([] if split == "test" else ["label"])
    _write(HERE / "glue" / "QNLI" / f"{split}.tsv", _tsv(header, rows))


# ---------------------------------------------------------------------------------------------
# chunk: sentences built from chunks with fixed POS and CoNLL-2000 chunk tags (B-/I-, O for
# punctuation and "and"): multi-word NP and VP, one-word PP, ADJP and ADVP, every tag given by
# the chunk it is in. Their BIOES set is the 12 tags of tests/golden/finetune_heads'
# chunk_label_mapping.json (test_deploy_exports tags these files with that head).

NP = [[("Emma", "NNP")], [("Harriet", "NNP")], [("Mr.", "NNP"), ("Knightley", "NNP")],
      [("Captain", "NNP"), ("Wentworth", "NNP")], [("she", "PRP")], [("he", "PRP")],
      [("they", "PRP")], [("the", "DT"), ("letter", "NN")], [("the", "DT"), ("old", "JJ"),
                                                             ("captain", "NN")],
      [("a", "DT"), ("long", "JJ"), ("walk", "NN")], [("the", "DT"), ("new", "JJ"),
                                                      ("curate", "NN")],
      [("her", "PRP$"), ("sister", "NN")], [("his", "PRP$"), ("young", "JJ"),
                                            ("friends", "NNS")],
      [("the", "DT"), ("village", "NN"), ("school", "NN")], [("some", "DT"), ("books", "NNS")],
      [("the", "DT"), ("garden", "NN")], [("Highbury", "NNP")], [("the", "DT"), ("house", "NN")]]
VP = [[("visited", "VBD")], [("admired", "VBD")], [("will", "MD"), ("visit", "VB")],
      [("had", "VBD"), ("written", "VBN")], [("was", "VBD"), ("reading", "VBG")],
      [("wanted", "VBD"), ("to", "TO"), ("see", "VB")], [("praised", "VBD")],
      [("could", "MD"), ("not", "RB"), ("find", "VB")], [("liked", "VBD")]]
VP_ADJ = [[("was", "VBD")], [("seemed", "VBD")], [("became", "VBD")]]
PP = [("in", "IN"), ("with", "IN"), ("near", "IN"), ("to", "TO"), ("from", "IN"),
      ("at", "IN")]
ADJP = [("happy", "JJ"), ("certain", "JJ"), ("tired", "JJ"), ("cold", "JJ"), ("sorry", "JJ")]
ADVP = [("soon", "RB"), ("afterwards", "RB"), ("quickly", "RB"), ("there", "RB")]


def _chunk(kind: str, words: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
  return [(w, p, ("B-" if i == 0 else "I-") + kind) for i, (w, p) in enumerate(words)]


def _clause(rng: random.Random) -> list[tuple[str, str, str]]:
  out = _chunk("NP", rng.choice(NP))
  if rng.random() < 0.25:
    out += _chunk("VP", rng.choice(VP_ADJ)) + _chunk("ADJP", [rng.choice(ADJP)])
  else:
    out += _chunk("VP", rng.choice(VP)) + _chunk("NP", rng.choice(NP))
    if rng.random() < 0.5:
      out += _chunk("PP", [rng.choice(PP)]) + _chunk("NP", rng.choice(NP))
  if rng.random() < 0.3:
    out += _chunk("ADVP", [rng.choice(ADVP)])
  return out


def _chunk_sentence(rng: random.Random) -> list[tuple[str, str, str]]:
  out = []
  if rng.random() < 0.2:
    out += _chunk("ADVP", [rng.choice(ADVP)]) + [(",", ",", "O")]
  out += _clause(rng)
  join = rng.random()
  if join < 0.25:
    out += [(",", ",", "O"), ("and", "CC", "O")] + _clause(rng)
  elif join < 0.5:
    out += [("and", "CC", "O")] + _clause(rng)
  out.append((".", ".", "O"))
  if out[0][1] not in ("NNP",):
    out[0] = (out[0][0][0].upper() + out[0][0][1:], *out[0][1:])
  return out


def write_chunk() -> None:
  rng = random.Random(7)
  for split in ("train", "test"):
    sentences = [_chunk_sentence(rng) for _ in range(COUNTS["chunk"][split])]
    text = "".join("".join(f"{w} {p} {c}\n" for w, p, c in s) + "\n" for s in sentences)
    _write(HERE / "chunk" / f"{split}.txt", text)


# ---------------------------------------------------------------------------------------------
# squad/dev-v2.0-small.json: the layout of SQuAD 2.0 (2 articles, 4 paragraphs, 14 questions,
# 6 unanswerable with plausible answers); contexts are Austen paragraphs, questions written here.

SQUAD = [
    ("Emma", "austen-emma.txt", [
        ("Emma Woodhouse, handsome", 2, [
            ("How many years had Emma lived in the world?", "nearly twenty-one years", False),
            ("Who supplied the place of Emma's mother?", "an excellent woman as governess",
             False),
            ("How many sons did Mr. Woodhouse have?", "two daughters", True),
            ("Whom did Emma's sister marry?", "her sister's marriage", True)]),
        ("Sixteen years had Miss Taylor", 1, [
            ("How long had Miss Taylor been in Mr. Woodhouse's family?", "Sixteen years",
             False),
            ("Which daughter was Miss Taylor particularly fond of?", "Emma", False),
            ("Whose judgment did Miss Taylor esteem highly?", "Miss Taylor's judgment", True)]),
    ]),
    ("Sense_and_Sensibility", "austen-sense.txt", [
        ("The family of Dashwood", 1, [
            ("Where had the family of Dashwood long been settled?", "Sussex", False),
            ("What was the residence of the Dashwood family called?", "Norland Park", False),
            ("How many years before the owner's own death did his sister die?", "ten years",
             False),
            ("Who was the late owner's wife?", "his sister", True)]),
        ("By a former marriage", 1, [
            ("How much money did the father have in his own disposal?",
             "seven thousand pounds", False),
            ("How many sons did Mr. Henry Dashwood have by his present lady?",
             "three daughters", True),
            ("What did the son inherit from his wife?", "his wealth", True)]),
    ]),
]


def write_squad() -> None:
  data = []
  for title, book, paragraphs in SQUAD:
    texts = _paragraphs(book)
    out = []
    for start, n, questions in paragraphs:
      first = next(i for i, p in enumerate(texts) if p.startswith(start))
      context = " ".join(texts[first:first + n])
      qas = []
      for question, answer, impossible in questions:
        at = context.find(answer)
        assert at >= 0, answer
        qid = hashlib.sha1(question.encode("utf-8")).hexdigest()[:24]
        span = [{"text": answer, "answer_start": at}]
        if impossible:
          qas.append({"plausible_answers": span, "question": question, "id": qid,
                      "answers": [], "is_impossible": True})
        else:
          qas.append({"question": question, "id": qid, "answers": span,
                      "is_impossible": False})
      out.append({"qas": qas, "context": context})
    data.append({"title": title, "paragraphs": out})
  _write(HERE / "squad" / "dev-v2.0-small.json",
         json.dumps({"version": "v2.0", "data": data}, indent=4) + "\n")


def main() -> None:
  sentences = austen_sentences()
  write_rte(sentences)
  write_sst()
  write_cola()
  write_mrpc(sentences)
  write_sts()
  write_qnli(sentences)
  write_chunk()
  write_squad()


if __name__ == "__main__":
  main()
