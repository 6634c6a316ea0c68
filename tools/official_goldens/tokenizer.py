"""Family ``tokenizer``: official ``FullTokenizer`` ids on real text plus edge cases.

Which official code made which file (``model/tokenization.py``, unedited):

- ``tokenizer/official_ids.jsonl`` and ``official_tokens.jsonl``:
  ``FullTokenizer(vocab.txt, do_lower_case=True)`` (strip_accents default true),
  ``convert_tokens_to_ids(tokenize(line))`` and ``tokenize(line)`` for each line of
  ``corpus.txt``.
- ``tokenizer/extra_cases.jsonl``: the same calls on each case text, and again with
  ``FullTokenizer(vocab.txt, do_lower_case=True, strip_accents=False)``.
- ``tokenizer/corpus.txt`` and ``stats.json``: inputs and counts (no official code).

The added lines and the edge cases below were written for this repository.
"""

from __future__ import annotations

import pathlib

from tools.official_goldens import files, official

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXT = ROOT / "tests" / "data" / "gutenberg"
PERSUASION_LINES = 900  # the first lines of tests/data/gutenberg/austen-persuasion.txt
BLAKE_LINES = 400       # all of tests/data/gutenberg/blake-poems.txt

# One-line inputs of many scripts and symbol kinds (each is a corpus line and an extra case).
ADDED_LINES = [
    "Crème fraîche, piñata, Müsli, Ærø, Brontë, señor, Öl, Šibenik, Ýr, Çeşme and Žižek.",
    "Où est la gare? Là-bas, près du café; ¿Quién sabe? ¡Ánimo, amigos!",
    "Größenwahn, Bärenhöhle, Übermaß, Weißwürste und Straßenbahnhaltestelle.",
    "Chữ Quốc ngữ: Đà Nẵng, Huế, bánh mì, nước mắm, Hạ Long.",
    "Açaí, Maranhão, Conceição; Poznań, Łódź, Szczęście, Żółć.",
    "THÉÂTRE DE L'ÉPÉE, CÔTE-D'IVOIRE, NOËL À GENÈVE",
    "Miss Elliot's rôle in the soirée was naïvely “admired” by Zoë.",
    "山川草木，春夏秋冬。我们今天学习汉字和标点符号！",
    "ことばの練習：あいうえお、アイウエオ、漢字かな交じり文です。",
    "바다와 하늘 사이에서: 부산광역시, 제주도 여행.",
    "Mixed: Austen小说 read in 2024年 by 学生 and readers.",
    "龍鳳 體驗 与 简化 文字 ㄉㄊㄋ 〇五六七 國語",
    "Extension B: 𠀃𠀄𠀅 then compatibility 金喝串 ideographs.",
    "?!?! ,,,, .... ---- ==== ++++ //// **** &&&& %%%% ____ ~~~~ ````",
    "Write to reader.name+austen@letters.example.net or see http://example.com/p?q=1&r=2#top",
    "€12,50 + $3.99 - £7 = ¥420 or ₹99 (roughly); 25% more!!! #tag @name ^up|bar\\slash",
    "“Curly doubles” and ‘curly singles’ – dash — longer dash … dots • dot · middle",
    "Code: a<b>c, x==y, k--; m[2]={4,5}; g(z)=z**3%7; C# & F# & C++.",
    "¿¡Both?! «angles» ‹one› „German“ ‚single‘ 「括弧」『二重括弧』【墨付き】",
    "Figures: 2.71828, 1,000,000, 6e23, 0xFF, 2^10, ⅓ ⅔ ⅛, ④⑤⑥, Ⅸ, ¹⁰.",
    "Tab\tseparated\tcolumns\tand  two  spaces   and\xa0no-break\xa0spaces here.",
    "Wide\u3000ideographic gap, hair\u200aspace, em\u2003space and no\u200bwidth\u200bjoins.",
    "Symbols may be [UNK]: 🙂 🚀 👋🏾 ☕ ⭐ and logic: ∀ ∃ ∧ ∨ ¬ ⊂ ⊃ ∈ ∉ ∅.",
    "Greek and Cyrillic: λόγος ΘΕΟΣ, Санкт-Петербург, Україна, Ὁμήρου.",
    "Arabic and Hebrew: مرحبا שלום; Devanagari: नमस्ते; Thai: สวัสดีครับ.",
    "Floccinaucinihilipilification honorificabilitudinitatibus "
    "incomprehensibilities counterrevolutionaries",
    "unkindness uncommonly re-read pre-war self-evident half_done kebab-case PascalCaseName",
    "The words [SEP] [CLS] [PAD] [MASK] [UNK] here are text, not control tokens.",
]

# Inputs that cannot be corpus lines (line breaks, controls, odd code points, long words).
EDGE_CASES = [
    "",
    "    ",
    "\n\t",
    "one\rtwo\r\nthree",
    "nul\x00here\x01there\x7fdelete\x0bvtab\x0cfeed",
    "mark\ufeffin the middle and a\ufffdreplacement",
    "para\u2029graph line\u2028break next\x85line",
    "co\xadoperate, decomposed cafe\u0301 and composed caf\u00e9",
    "z" * 201,
    "w" * 200,
    "ha" * 101,
    "private \ue001\uf8fe area and nonchar \ufffe",
    "Wide ＸＹＺ７８９？ and narrow ﾊﾝｶｸ",
    "ﬀ ﬃ ligatures, Ⅻ numeral, ㎝ unit, ℉ sign",
    "İzmir, ǈ title pair, ß, ẞ, ſ and ﬅ",
]


def corpus_lines() -> list[str]:
  """Persuasion's first lines, all of Blake's poems, then the added lines."""
  lines = []
  for name, n in (("austen-persuasion.txt", PERSUASION_LINES), ("blake-poems.txt", BLAKE_LINES)):
    text = (TEXT / name).read_text(encoding="utf-8").split("\n")
    lines += text[:n]
  return lines + ADDED_LINES


def write(official_dir: str, golden_dir: pathlib.Path) -> None:
  """Writes ``golden_dir/tokenizer/`` (corpus, official ids / tokens, edge cases, stats)."""
  del official_dir
  tokenization = official.module("model.tokenization")
  vocab = str(golden_dir / "vocab.txt")
  strip = tokenization.FullTokenizer(vocab, do_lower_case=True)
  keep = tokenization.FullTokenizer(vocab, do_lower_case=True, strip_accents=False)
  lines = corpus_lines()
  for line in lines:
    assert "\n" not in line and "\r" not in line and line.split("\n") == [line], line
  out = golden_dir / "tokenizer"
  text = "".join(line + "\n" for line in lines)
  files.save_text(out / "corpus.txt", text)
  tokens = [strip.tokenize(line) for line in lines]
  ids = [strip.convert_tokens_to_ids(t) for t in tokens]
  files.save_jsonl(out / "official_tokens.jsonl", tokens)
  files.save_jsonl(out / "official_ids.jsonl", ids)
  cases = []
  for case in EDGE_CASES + ADDED_LINES:
    t, k = strip.tokenize(case), keep.tokenize(case)
    cases.append({"text": case, "tokens": t, "ids": strip.convert_tokens_to_ids(t),
                  "tokens_no_strip_accents": k,
                  "ids_no_strip_accents": keep.convert_tokens_to_ids(k)})
  files.save_jsonl(out / "extra_cases.jsonl", cases)
  unk = strip.vocab["[UNK]"]
  files.save_json(out / "stats.json", {
      "added_lines": len(ADDED_LINES),
      "blake_lines": BLAKE_LINES,
      "corpus_bytes": len(text.encode("utf-8")),
      "corpus_lines": len(lines),
      "extra_cases": len(cases),
      "license_files": [],
      "persuasion_lines": PERSUASION_LINES,
      "tokens": sum(map(len, ids)),
      "unk_tokens": sum(row.count(unk) for row in ids),
      "vocab_size": len(strip.vocab),
  })
