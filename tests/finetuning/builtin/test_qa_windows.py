"""The sliding-window QA pieces (``electra_tf.finetuning.builtin.qa_windows``) on hand-made
cases, and the answer text mapped back to the context (``qa_decoding.get_final_text``)."""

from electra_tf.finetuning import registry
from electra_tf.finetuning.builtin import qa_windows
from electra_tf.finetuning.builtin.qa_decoding import get_final_text


def test_window_pieces_hand_cases(tmp_path):
  # its own vocabulary: the goldens' small one splits "1895" into single digits
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "(", ")", "-", ".",
                              "1895", "1943"]) + "\n", encoding="utf-8")
  tokenizer = registry.make_tokenizer(str(vocab))
  words, offsets = qa_windows.split_context("Sir  Walter\u202fElliot, of\tKellynch")
  assert words == ["Sir", "Walter", "Elliot,", "of", "Kellynch"]
  assert offsets[:6] == [0, 0, 0, 0, 0, 1] and len(offsets) == 31
  # "(1895-1943)." -> word pieces ( 1895 - 1943 ) . ; the answer "1895" is narrowed to one piece
  pieces = tokenizer.tokenize("(1895-1943).")
  assert qa_windows.improve_answer_span(pieces, 0, len(pieces) - 1, tokenizer, "1895") == (1, 1)
  spans = qa_windows.doc_spans(10, 4, 3)
  assert spans == [qa_windows.DocSpan(0, 4), qa_windows.DocSpan(3, 4), qa_windows.DocSpan(6, 4)]
  # token 4 is in spans 0 (right context 0) and 1 (left 1, right 2): span 1 wins
  assert qa_windows.is_max_context(spans, 1, 4) and not qa_windows.is_max_context(spans, 0, 4)
  basic = tokenizer.basic_tokenizer
  assert get_final_text("steve smith", "Steve Smith's", basic) == "Steve Smith"
  assert get_final_text("1895", "(1895-1943).", basic) == "1895"
  assert get_final_text("cafe", "Caf\u00e9s", basic) == "Caf\u00e9"  # accent stripped
  assert get_final_text("xyz", "Steve", basic) == "Steve"  # not found: original text
