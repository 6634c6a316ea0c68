"""benchmarks/transfer.py and its modules (transfer_data, transfer_report, transfer_runs,
transfer_reuse): the SST-2 splits it fine-tunes and scores on (SST-2-format rows of tests/data;
the real SST-2 rows in the extended lane), and the whole experiment at a tiny size as
a real subprocess (corpus -> vocab -> TFRecords -> ELECTRA and masked-LM pre-training ->
fine-tuning from both and from random init -> table, PNG, JSON)."""

import json
import pathlib
import re
import subprocess
import sys

import pytest
import tensorflow as tf
from helpers.paths import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import transfer  # noqa: E402
import transfer_data  # noqa: E402
import transfer_report  # noqa: E402
import transfer_runs  # noqa: E402


def test_sentences_of_keeps_phrases_no_longer_phrase_contains():
  phrases = ["a good film", "good film", "good", "a bad one", "bad", "film good"]
  sentences, owner = transfer_data.sentences_of(phrases)
  assert sorted(sentences) == ["a bad one", "a good film", "film good"]
  assert [sentences[o] for o in owner] == [
      "a good film", "a good film", "a good film", "a bad one", "a bad one", "film good"]


def _check_sst_budgets(sst_dir: pathlib.Path, big: int, small: int, held: int) -> None:
  train = transfer_data.read_sst(str(sst_dir / "train.tsv"))
  budgets, heldout = transfer_data.split_sst(train, [big, small], heldout_sentences=held)
  assert len(budgets[big]) == big and budgets[small] == budgets[big][:small]
  assert len(heldout) == held and {y for _, y in heldout} == {"0", "1"}
  held_text = [" ".join(t.split()) for t, _ in heldout]
  for text, _ in budgets[big]:
    words = " " + " ".join(text.split()) + " "
    assert not any(words in f" {h} " for h in held_text), text
  again = transfer_data.split_sst(train, [big, small], heldout_sentences=held)
  assert again == (budgets, heldout)  # fixed seed: every run fine-tunes on the same rows


def test_sst_budgets_are_nested_and_share_no_sentence_with_the_heldout_rows(data_dir):
  # tests/data's SST-2 train.tsv: 320 rows (318 sentences), so budgets of 160 and 40 rows
  _check_sst_budgets(data_dir / "glue" / "SST-2", 160, 40, held=40)


@pytest.mark.extended
def test_sst_budgets_of_the_full_sst2_train_split(shared_data_dir):
  _check_sst_budgets(shared_data_dir / "glue" / "SST-2", 2000, 500, held=300)


def test_sizing_flags_reach_only_the_run_they_name():
  args = transfer.parse_args(["--lr", "2e-4", "--mlm_lr", "1e-3", "--uniform_generator",
                              "--temperature", "3", "--batch", "8"])
  electra = transfer_runs.pretraining_hparams(args, 100, electra=True, steps=2400)
  mlm = transfer_runs.pretraining_hparams(args, 100, electra=False, steps=2564)
  assert (electra["learning_rate"], mlm["learning_rate"]) == (2e-4, 1e-3)
  assert electra["uniform_generator"] and not mlm["uniform_generator"]
  assert electra["temperature"] == 3.0
  assert electra["train_batch_size"] == mlm["train_batch_size"] == 8
  assert (electra["num_warmup_steps"], mlm["num_train_steps"]) == (240, 2564)
  default = transfer.parse_args([])
  mlm_default = transfer_runs.pretraining_hparams(default, 100, electra=False, steps=1)
  assert mlm_default["learning_rate"] == 1e-4


def test_final_lines_put_the_smallest_budget_last():
  summary = {500: {"random": (60.0, 1.0), "mlm": (63.25, 0.5), "electra": (66.04, 2.0)},
             2000: {"random": (70.0, 1.0), "mlm": (71.0, 0.5), "electra": (69.5, 0.2)}}
  assert transfer_report.final_lines(summary) == [
      "transfer: labels 2000: random 70.0  mlm 71.0  electra 69.5  (electra - random -0.5)",
      "transfer: labels 500: random 60.0  mlm 63.2  electra 66.0  (electra - random +6.0)"]


def test_bad_sst_row_names_file_and_row(tmp_path):
  bad = tmp_path / "train.tsv"
  bad.write_text("sentence\tlabel\ngood film \t1\nno label here\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"train.tsv, row 3: expected sentence<TAB>0\|1"):
    transfer_data.read_sst(str(bad))


# --heldout_sentences 40: tests/data's SST-2 train split has 318 sentences (the default 500
# would hold out all of them and leave no rows for the budgets)
TINY = ["--max_sentences", "300", "--no_wikitext", "--vocab_size", "400", "--layers", "1",
        "--hidden", "32", "--heads", "2", "--embedding_size", "16", "--seq_len", "32",
        "--batch", "8", "--electra_steps", "4", "--log_every", "2", "--eval_batches", "1",
        "--budgets", "16,32", "--seeds", "2", "--dev_rows", "24", "--ft_seq_len", "32",
        "--ft_batch", "8", "--ft_epochs", "1", "--ft_min_steps", "0", "--ft_lrs", "3e-4",
        "--heldout_sentences", "40"]


def _transfer(out, data_dir, *flags):
  return subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "transfer.py"),
                         "--out_dir", str(out), "--data_dir", str(data_dir), *TINY, *flags],
                        text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1800)


def _trained_step(model_dir):
  """The step counter stored in a model folder's newest checkpoint (what the run trained)."""
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir)))
  return int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE"))


@pytest.mark.slow
def test_tiny_transfer_experiment_end_to_end(tmp_path, data_dir):
  out = tmp_path / "transfer"
  proc = _transfer(out, data_dir)
  assert proc.returncode == 0, proc.stdout[-4000:]
  lines = proc.stdout.strip().splitlines()
  assert re.fullmatch(r"transfer: labels 32: random \d+\.\d  mlm \d+\.\d  electra \d+\.\d  "
                      r"\(electra - random [+-]\d+\.\d\)", lines[-2]), lines[-2]
  assert lines[-1].startswith("transfer: labels 16: random "), lines[-1]

  record = json.loads((out / "transfer.json").read_text())
  assert (out / "transfer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  pre = record["pretraining"]
  # the steps each model was trained for (its checkpoint), not the flag: 4 ELECTRA steps, and
  # the masked-LM steps that the same FLOPs buy, from the FLOPs per sequence of each model
  assert _trained_step(out / "models" / "electra") == 4
  fe, fm = pre["electra"]["flops_per_example"], pre["mlm"]["flops_per_example"]
  assert fm < fe and _trained_step(out / "models" / "mlm") == round(4 * fe / fm)
  assert {"disc_auc", "disc_recall"} <= set(pre["electra"]["eval"])
  for budget in ("16", "32"):
    row = record["summary"][budget]
    assert set(row) == {"random", "mlm", "electra"}
    for start in row:
      accs = record["finetuning"]["runs"][f"{budget}/{start}"]["accuracy"]
      assert len(accs) == 2 and row[start]["mean"] == pytest.approx(sum(accs) / 2)
      shown = re.search(rf"{start} (\d+\.\d)", lines[-1 if budget == "16" else -2]).group(1)
      assert float(shown) == round(row[start]["mean"], 1)
  table = proc.stdout[proc.stdout.index("SST-2 dev accuracy (24 rows)"):]
  assert re.search(r"^\s+16\s+\d+\.\d ± \d+\.\d", table, re.M), table
  assert re.search(r"^\s+32\s+\d+\.\d ± \d+\.\d", table, re.M), table

  # a rerun of the same command reuses every model and fine-tuning run
  logs = {p.name: p.stat().st_mtime_ns for p in (out / "logs").iterdir()}
  again = _transfer(out, data_dir)
  assert again.returncode == 0, again.stdout[-4000:]
  assert again.stdout.strip().splitlines()[-2:] == lines[-2:]
  assert {p.name: p.stat().st_mtime_ns for p in (out / "logs").iterdir()
          if p.name.startswith(("pretrain_", "finetune_"))} == {
              n: t for n, t in logs.items() if n.startswith(("pretrain_", "finetune_"))}
  # another pre-training flag: refused in one line, the models left as they are
  checkpoint = out / "models" / "electra" / "ckpt-4.index"
  mtime = checkpoint.stat().st_mtime_ns
  other = _transfer(out, data_dir, "--lr", "2e-4")
  assert other.returncode == 1 and "Traceback" not in other.stdout, other.stdout[-4000:]
  assert other.stdout.strip().splitlines()[-1] == (
      f"transfer: {out / 'models' / 'electra'} was pre-trained with other settings "
      "(learning_rate changed (0.0001 -> 0.0002)); use another --out_dir (or move that folder "
      "away)")
  assert checkpoint.stat().st_mtime_ns == mtime


def test_a_finetuning_run_is_reused_only_with_the_same_inputs(tmp_path):
  """The fine-tuning cache is keyed by the hparams, the rows and the initial model's settings,
  not by the model's path."""
  args = transfer.parse_args(["--ft_epochs", "1", "--ft_min_steps", "0"])
  rows = [("a fine film", "1"), ("a dull one", "0")]
  calls = []

  def run(name, script, *flags):
    calls.append(name)
    ft_dir = flags[flags.index("--data_dir") + 1]
    start = flags[flags.index("--model_name") + 1]
    results = pathlib.Path(ft_dir, "models", start, "results", "sst_results.json")
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps({"trials": [{"sst": {"accuracy": 50.0 + len(calls)}}]}))
    return 1.0

  finetune = transfer.FineTuner(args, str(tmp_path), run, {2: rows}, {"seed": 1},
                                {"electra": {"hparams": {"learning_rate": 1e-4}}})
  first = finetune("sst_2", 2, "electra", 1e-4, rows, 1)[0]
  assert finetune("sst_2", 2, "electra", 1e-4, rows, 1)[0] == first and len(calls) == 1
  finetune.keys["electra"] = {"hparams": {"learning_rate": 2e-4}}  # the same path, other model
  assert finetune("sst_2", 2, "electra", 1e-4, rows, 1)[0] == [52.0] and len(calls) == 2
  assert finetune("sst_2", 2, "electra", 3e-4, rows, 1)[0] == [53.0] and len(calls) == 3
  assert finetune("sst_2", 2, "electra", 3e-4, rows[:1], 1)[0] == [54.0] and len(calls) == 4
