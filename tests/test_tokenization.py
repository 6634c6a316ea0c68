"""Tokenizer parity with the official ELECTRA FullTokenizer (golden ids from the TF1 run)."""

import json
import random
import unicodedata

import pytest
from helpers.paths import GOLDEN

from electra_tf import tokenization


@pytest.fixture(scope="module")
def corpus(reference_dir):
  text = (reference_dir / "tokenizer" / "corpus.txt").read_text(encoding="utf-8")
  lines = text.split("\n")
  assert lines[-1] == ""
  return lines[:-1]


def _jsonl(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def official_ids(reference_dir):
  return _jsonl(reference_dir / "tokenizer" / "official_ids.jsonl")


@pytest.fixture(scope="module")
def extra_cases(reference_dir):
  return _jsonl(reference_dir / "tokenizer" / "extra_cases.jsonl")


@pytest.fixture(scope="module")
def lane_vocab(reference_dir):
  """The vocabulary the lane's official ids were made with (tests/golden or the shared one)."""
  return str(reference_dir / "vocab.txt")


def _vocab_entries(reference_dir):
  """Entries of the lane's vocabulary as the official load_vocab counts them (a dict: a repeated
  line counts once): the golden generator records it in stats.json; BERT's has 30522."""
  if reference_dir != GOLDEN:
    return 30522
  stats = json.loads((reference_dir / "tokenizer" / "stats.json").read_text(encoding="utf-8"))
  return stats["vocab_size"]


@pytest.fixture(scope="module")
def slow(lane_vocab):
  return tokenization.FullTokenizer(lane_vocab)


@pytest.fixture(scope="module")
def fast(lane_vocab):
  return tokenization.FastTokenizer(lane_vocab)


def _slow_ids(tokenizer, lines):
  return [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)) for line in lines]


def _first_mismatch(lines, got, want):
  for line, g, w in zip(lines, got, want, strict=True):
    if g != w:
      return f"{line!r}: got {g}, want {w}"
  return None


def test_slow_path_matches_official_tokens_and_ids(slow, corpus, official_ids, reference_dir):
  official_tokens = _jsonl(reference_dir / "tokenizer" / "official_tokens.jsonl")
  assert len(corpus) == len(official_ids) == len(official_tokens)
  tokens = [slow.tokenize(line) for line in corpus]
  assert _first_mismatch(corpus, tokens, official_tokens) is None
  ids = [slow.convert_tokens_to_ids(t) for t in tokens]
  assert _first_mismatch(corpus, ids, official_ids) is None
  assert slow.convert_ids_to_tokens(ids[0]) == tokens[0]


@pytest.mark.parametrize("batch_size", [8192, 997])
def test_fast_path_matches_official_ids(lane_vocab, corpus, official_ids, batch_size):
  fast = tokenization.FastTokenizer(lane_vocab, batch_size=batch_size)
  got = fast.tokenize_to_ids(corpus)
  assert sum(map(len, got)) == sum(map(len, official_ids))
  assert _first_mismatch(corpus, got, official_ids) is None


@pytest.mark.parametrize("strip_accents", [True, False])
def test_extra_cases_both_paths(lane_vocab, extra_cases, strip_accents):
  key = "ids" if strip_accents else "ids_no_strip_accents"
  tok_key = "tokens" if strip_accents else "tokens_no_strip_accents"
  texts = [case["text"] for case in extra_cases]
  want = [case[key] for case in extra_cases]
  slow = tokenization.FullTokenizer(lane_vocab, strip_accents=strip_accents)
  assert _first_mismatch(texts, [slow.tokenize(t) for t in texts],
                         [case[tok_key] for case in extra_cases]) is None
  assert _first_mismatch(texts, _slow_ids(slow, texts), want) is None
  fast = tokenization.FastTokenizer(lane_vocab, strip_accents=strip_accents)
  assert _first_mismatch(texts, fast.tokenize_to_ids(texts), want) is None
  # One line at a time too: routing must not depend on the rest of the batch.
  assert [fast.tokenize_to_ids([t])[0] for t in texts] == want


def _fuzz_lines(n, seed):
  """Random lines mixing ASCII, controls, odd whitespace, accents, CJK, casing edge cases."""
  pool = (list("abcdefgxyzABCXYZ0189 .,;!?'\"-_#$^`~[](){}<>@\\|/") +
          list("\t\r\n\x00\x01\x0b\x0c\x1c\x7f\x85\xa0\xad\u2028\u2029\u3000\u200b\ufeff\ufffd") +
          list("éÉèçñøßẞİıΣσςΟΔǅﬁ㎏Ⅷ①½\u0301\u0308\u0327\ue000\U000f0000\U0001f600") +
          list("東京大学豈𠀀ひらがなカタカナ한국어αβγМосква—“”…«»¿¡·;\u1fef\u0387"))
  rng = random.Random(seed)
  lines = []
  for _ in range(n):
    length = rng.choice([0, 1, 3, 10, 40, 120, 230])
    lines.append("".join(rng.choice(pool) for _ in range(length)))
  # Long words around the 200-char limit (counted after accent stripping).
  lines += ["a" * 200, "a" * 201, "é" * 200, "é" * 201, "e\u0301" * 101, "x " + "Σ" * 201 + "."]
  return lines


@pytest.mark.parametrize("do_lower_case,strip_accents", [(True, True), (True, False),
                                                         (False, True)])
def test_fast_equals_slow_on_fuzz_and_cased(lane_vocab, corpus, do_lower_case, strip_accents):
  lines = _fuzz_lines(400, seed=do_lower_case * 2 + strip_accents)
  if not do_lower_case:  # no golden data for cased; the reference path is the spec
    lines += corpus[::7]
  slow = tokenization.FullTokenizer(lane_vocab, do_lower_case, strip_accents)
  fast = tokenization.FastTokenizer(lane_vocab, do_lower_case, strip_accents, batch_size=128)
  want = _slow_ids(slow, lines)
  assert _first_mismatch(lines, fast.tokenize_to_ids(lines), want) is None


@pytest.mark.slow
def test_every_code_point_fast_equals_slow(slow, fast):
  """Each assigned code point alone, glued to ASCII and doubled, gives the same ids."""
  chars = [chr(cp) for cp in range(0x110000)
           if unicodedata.category(chr(cp)) not in ("Cn", "Co", "Cs")]
  chars += ["\ue000", "\U000f0000", "\ud800"]  # one of each skipped category
  lines = [f"{c}a{c}{c} b{c}" for c in chars]
  want = _slow_ids(slow, lines)
  assert _first_mismatch(lines, fast.tokenize_to_ids(lines), want) is None
  # Dense or varied non-ASCII text goes through str.translate; force the regex passes too.
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(tokenization, "_SAMPLE_CHARS", 0)
    patch.setattr(tokenization, "_MAX_REGEX_CHARS", len(chars))
    assert _first_mismatch(lines, fast.tokenize_to_ids(lines), want) is None


def test_batches_and_odd_lines(lane_vocab, corpus, slow):
  """All-ASCII and mixed batches, a line's own newlines, controls, bytes input, no lines."""
  odd = ["", "a\nb", "Ünï\r\ncödé", "x\x00y\tz", "  ", "東京\n", "\u00e9" * 201 + " \u00e9"]
  lines = corpus[:150] + odd + corpus[150:170] + odd[::-1] + ["plain ascii"] * 70
  want = _slow_ids(slow, lines)
  fast = tokenization.FastTokenizer(lane_vocab, batch_size=64)
  assert _first_mismatch(lines, fast.tokenize_to_ids(lines), want) is None
  # Bytes lines are decoded as the official convert_to_unicode does.
  assert fast.tokenize_to_ids([line.encode("utf-8") for line in lines]) == want
  assert fast.tokenize_to_ids([]) == []
  with pytest.raises(ValueError, match="batch_size"):
    tokenization.FastTokenizer(lane_vocab, batch_size=0)


def test_missing_vocab_file_is_one_line_error(tmp_path):
  missing = tmp_path / "nope" / "vocab.txt"
  for cls in (tokenization.FullTokenizer, tokenization.FastTokenizer):
    with pytest.raises(FileNotFoundError) as info:
      cls(str(missing))
    message = str(info.value)
    assert str(missing) in message and "\n" not in message


def test_validate_vocab(tmp_path, lane_vocab, reference_dir):
  vocab = tokenization.load_vocab(lane_vocab)
  assert len(vocab) == _vocab_entries(reference_dir) and vocab["[MASK]"] == 103
  tokenization.validate_vocab(vocab)
  del vocab["[MASK]"]
  with pytest.raises(ValueError, match=r"\[MASK\]") as info:
    tokenization.validate_vocab(vocab)
  assert "\n" not in str(info.value)
  # A file without [UNK] cannot drive tf-text; the fast path says so up front.
  small = tmp_path / "vocab.txt"
  small.write_text("[PAD]\nhello\n##s\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"\[UNK\]"):
    tokenization.FastTokenizer(str(small))


def test_odd_vocab_duplicates_and_blank_lines(tmp_path):
  """Official dict semantics (last duplicate wins, blank token never matches) on both paths."""
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[UNK]\nhello\n\nworld\nhello\n##s\n.\n", encoding="utf-8")
  lines = ["hello worlds.", "Hellos, world", "\u00e9"]
  want = _slow_ids(tokenization.FullTokenizer(str(vocab)), lines)
  assert want[0] == [4, 3, 5, 6]
  assert tokenization.FastTokenizer(str(vocab)).tokenize_to_ids(lines) == want
