#!/usr/bin/env bash
# The main job end to end on an embedded default, no download: builds a corpus from the Python
# standard library's docstrings, learns a WordPiece vocabulary, writes pre-training TFRecords,
# pre-trains a small ELECTRA on CPU, evaluates it, draws its learning curves, then fine-tunes
# it on a small labelled task from the same corpus ("which package does this docstring sentence
# come from?", 6 packages, 384 labelled sentences) beside the same model from random
# initialisation, each with FT_SEEDS seeds, and prints one summary. DEMO_DIR (default demo_out/) holds
# everything. The sizes below are the measured defaults (docs/demo.md); each can be overridden
# from the environment, e.g. STEPS=20 for a quick look.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/venv.sh
PYTHON="$VENV/bin/python"
DEMO_DIR="${DEMO_DIR:-demo_out}"
# corpus and vocabulary
MAX_MODULES="${MAX_MODULES:-1000}"       # standard-library modules read for the corpus
VOCAB_TARGET="${VOCAB_TARGET:-8000}"     # WordPiece vocabulary size asked for
# pre-training
SEQ_LEN="${SEQ_LEN:-128}"
DEFAULT_SHAPE='"model_size": "small", "model_hparam_overrides": {"num_hidden_layers": 2}'
MODEL_SHAPE="${MODEL_SHAPE:-$DEFAULT_SHAPE}"   # hparams giving the model's shape
GENERATOR_SIZE="${GENERATOR_SIZE:-0.125}"  # generator width / discriminator width
BATCH="${BATCH:-32}"
STEPS="${STEPS:-800}"
LEARNING_RATE="${LEARNING_RATE:-0.0005}"
LOG_EVERY="${LOG_EVERY:-50}"
EVAL_STEPS="${EVAL_STEPS:-20}"
# fine-tuning (the same for the demo model and random init)
FT_LABELS="${FT_LABELS:-6}"              # packages of the "topic" task
FT_TRAIN="${FT_TRAIN:-384}"              # train examples of the "topic" task (all labels)
FT_DEV="${FT_DEV:-384}"
FT_SEQ_LEN="${FT_SEQ_LEN:-64}"
FT_EPOCHS="${FT_EPOCHS:-10}"
FT_LEARNING_RATE="${FT_LEARNING_RATE:-0.0003}"
FT_SEEDS="${FT_SEEDS:-3}"                # fine-tuning runs per initialisation (seeds 1, 2, ...)

start=$(date +%s)
echo "== 1/7 corpus: standard-library docstrings -> $DEMO_DIR/corpus"
"$PYTHON" data_prep/build_demo_corpus.py --output_dir "$DEMO_DIR/corpus" \
  --index_file "$DEMO_DIR/corpus_modules.tsv" --max_modules "$MAX_MODULES"
echo "== 2/7 WordPiece vocabulary -> $DEMO_DIR/vocab.txt"
[ -s "$DEMO_DIR/vocab.txt" ] || "$PYTHON" data_prep/learn_vocab.py \
  --corpus_dir "$DEMO_DIR/corpus" --vocab_file "$DEMO_DIR/vocab.txt" --vocab_size "$VOCAB_TARGET"
VOCAB_SIZE=$(wc -l < "$DEMO_DIR/vocab.txt")
echo "== 3/7 pre-training TFRecords -> $DEMO_DIR/pretrain_tfrecords"
"$PYTHON" data_prep/build_pretraining_dataset.py --corpus_dir "$DEMO_DIR/corpus" \
  --vocab_file "$DEMO_DIR/vocab.txt" --output_dir "$DEMO_DIR/pretrain_tfrecords" \
  --max_seq_length "$SEQ_LEN" --num_out_files 4 --seed 1
SHAPE="$MODEL_SHAPE, \"vocab_size\": $VOCAB_SIZE"
HPARAMS="{$SHAPE, \"generator_hidden_size\": $GENERATOR_SIZE, \"max_seq_length\": $SEQ_LEN, \"train_batch_size\": $BATCH,
 \"num_train_steps\": $STEPS, \"num_warmup_steps\": $((STEPS / 10)),
 \"learning_rate\": $LEARNING_RATE, \"save_checkpoints_steps\": $((STEPS < 100 ? STEPS : 100)),
 \"iterations_per_loop\": $LOG_EVERY, \"eval_batch_size\": $BATCH,
 \"num_eval_steps\": $EVAL_STEPS, \"seed\": 1"
echo "== 4/7 pre-training ($STEPS steps; rerun to resume from the last checkpoint)"
train_start=$(date +%s)
"$PYTHON" run_pretraining.py --data_dir "$DEMO_DIR" --model_name demo --hparams "$HPARAMS}"
train_seconds=$(($(date +%s) - train_start))
echo "== 5/7 evaluation"
"$PYTHON" run_pretraining.py --data_dir "$DEMO_DIR" --model_name demo \
  --hparams "$HPARAMS, \"do_train\": false, \"do_eval\": true}"
echo "== 6/7 learning curves -> $DEMO_DIR/learning_curves.png"
"$PYTHON" -m electra_tf.learning_curves --model_dir "$DEMO_DIR/models/demo" \
  --png "$DEMO_DIR/learning_curves.png" --rows 5
echo "== 7/7 fine-tuning on a small labelled task: which package is a docstring sentence from?"
"$PYTHON" data_prep/build_demo_task.py --corpus_dir "$DEMO_DIR/corpus" \
  --index_file "$DEMO_DIR/corpus_modules.tsv" --output_dir "$DEMO_DIR/finetuning_data/topic" \
  --num_labels "$FT_LABELS" --max_train "$FT_TRAIN" --max_dev "$FT_DEV"
# The model's shape is given explicitly, so the same hparams also build the random-init model.
FT_HPARAMS="{$SHAPE, \"task_names\": [\"topic\"], \"max_seq_length\": $FT_SEQ_LEN,
 \"train_batch_size\": 32, \"eval_batch_size\": 32, \"num_train_epochs\": $FT_EPOCHS,
 \"learning_rate\": $FT_LEARNING_RATE, \"seed\": 1, \"num_trials\": $FT_SEEDS"
ft_start=$(date +%s)
"$PYTHON" run_finetuning.py --data_dir "$DEMO_DIR" --model_name demo --hparams "$FT_HPARAMS}"
ft_seconds=$(($(date +%s) - ft_start))
"$PYTHON" run_finetuning.py --data_dir "$DEMO_DIR" --model_name random_init \
  --hparams "$FT_HPARAMS, \"init_checkpoint\": null}"

"$PYTHON" - "$DEMO_DIR" "$VENV" "$train_seconds" "$ft_seconds" "$(($(date +%s) - start))" <<'PY'
import json, sys
from electra_tf import console
demo_dir, venv, train_s, ft_s, total_s = *sys.argv[1:3], *map(int, sys.argv[3:])
with open(f"{demo_dir}/models/demo/results/unsup_results.txt", encoding="utf-8") as f:
  pre = {k: float(v) for k, v in (line.split(" = ") for line in f if " = " in line)}
with open(f"{demo_dir}/finetuning_data/topic/task.json", encoding="utf-8") as f:
  labels = json.load(f)["labels"]
def dev(model):
  with open(f"{demo_dir}/models/{model}/results/topic_results.json", encoding="utf-8") as f:
    results = json.load(f)
  return (results["median"]["topic"]["accuracy"],
          [trial["topic"]["accuracy"] for trial in results["trials"]])
(ours, ours_seeds), (rand, rand_seeds) = dev("demo"), dev("random_init")
lines = [
    f"  pre-training: {int(pre['global_step'])} steps in {train_s} s; final eval: disc AUC "
    f"{pre['disc_auc']:.3f}, disc recall {pre['disc_recall']:.3f}, disc precision "
    f"{pre['disc_precision']:.3f}, masked-LM accuracy {pre['masked_lm_accuracy']:.3f}",
    f"  learning curves: {demo_dir}/learning_curves.png",
    f"  fine-tuning 'topic' (which of {len(labels)} packages a sentence is from; dev accuracy, "
    f"median of {len(ours_seeds)} seed(s), {ft_s} s per initialisation):  from the demo model "
    f"{ours:.1f}   from random init {rand:.1f}"]
if len(ours_seeds) > 1:
  def seeds(values):
    return " ".join(f"{v:.1f}" for v in values)
  spread = max(max(v) - min(v) for v in (ours_seeds, rand_seeds))
  lines.append(f"    per seed: demo model {seeds(ours_seeds)}; random init {seeds(rand_seeds)} "
               f"(difference of medians {ours - rand:+.1f}, widest seed spread {spread:.1f})")
console.summary("Demo summary", lines + [
    f"  TensorBoard: {venv}/bin/tensorboard --logdir {demo_dir}/models/demo",
    f"  total wall time: {total_s} s"])
PY
