#!/usr/bin/env bash
# The whole journey on an embedded default, no download: builds a corpus from the Python standard
# library's docstrings, learns a WordPiece vocabulary, writes pre-training TFRecords, pre-trains a
# small ELECTRA on CPU, evaluates it and draws its learning curves, fine-tunes it on a small
# labelled task from the same corpus ("which package does this docstring sentence come from?",
# 6 packages, 384 labelled sentences) with FT_SEEDS seeds, exports the median seed's model as
# LiteRT int8 and classifies a few new sentences with it, then prints one summary. DEMO_DIR
# (default demo_out/) holds everything. The sizes below are the measured defaults
# (docs/demo.md); each can be overridden from the environment, e.g. STEPS=20 for a quick look.
set -euo pipefail
start=$(date +%s)  # the total wall time includes setting up .venv
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
# fine-tuning
FT_LABELS="${FT_LABELS:-6}"              # packages of the "topic" task
FT_TRAIN="${FT_TRAIN:-384}"              # train examples of the "topic" task (all labels)
FT_DEV="${FT_DEV:-384}"
FT_SEQ_LEN="${FT_SEQ_LEN:-64}"
FT_EPOCHS="${FT_EPOCHS:-10}"
FT_LEARNING_RATE="${FT_LEARNING_RATE:-0.0003}"
FT_SEEDS="${FT_SEEDS:-3}"                # fine-tuning runs (seeds 1, 2, ...)

echo "== 1/9 corpus: standard-library docstrings -> $DEMO_DIR/corpus"
"$PYTHON" data_prep/build_demo_corpus.py --output_dir "$DEMO_DIR/corpus" \
  --index_file "$DEMO_DIR/corpus_modules.tsv" --max_modules "$MAX_MODULES"
echo "== 2/9 WordPiece vocabulary -> $DEMO_DIR/vocab.txt"
[ -s "$DEMO_DIR/vocab.txt" ] || "$PYTHON" data_prep/learn_vocab.py \
  --corpus_dir "$DEMO_DIR/corpus" --vocab_file "$DEMO_DIR/vocab.txt" --vocab_size "$VOCAB_TARGET"
VOCAB_SIZE=$(wc -l < "$DEMO_DIR/vocab.txt")
echo "== 3/9 pre-training TFRecords -> $DEMO_DIR/pretrain_tfrecords; the labelled task 'topic' -> $DEMO_DIR/finetuning_data/topic"
"$PYTHON" data_prep/build_pretraining_dataset.py --corpus_dir "$DEMO_DIR/corpus" \
  --vocab_file "$DEMO_DIR/vocab.txt" --output_dir "$DEMO_DIR/pretrain_tfrecords" \
  --max_seq_length "$SEQ_LEN" --num_out_files 4 --seed 1
SHAPE="$MODEL_SHAPE, \"vocab_size\": $VOCAB_SIZE"
HPARAMS="{$SHAPE, \"generator_hidden_size\": $GENERATOR_SIZE, \"max_seq_length\": $SEQ_LEN, \"train_batch_size\": $BATCH,
 \"num_train_steps\": $STEPS, \"num_warmup_steps\": $((STEPS / 10)),
 \"learning_rate\": $LEARNING_RATE, \"save_checkpoints_steps\": $((STEPS < 100 ? STEPS : 100)),
 \"iterations_per_loop\": $LOG_EVERY, \"eval_batch_size\": $BATCH,
 \"num_eval_steps\": $EVAL_STEPS, \"seed\": 1"
# the labelled task: probed during pre-training, fine-tuned after it
"$PYTHON" data_prep/build_demo_task.py --corpus_dir "$DEMO_DIR/corpus" \
  --index_file "$DEMO_DIR/corpus_modules.tsv" --output_dir "$DEMO_DIR/finetuning_data/topic" \
  --num_labels "$FT_LABELS" --max_train "$FT_TRAIN" --max_dev "$FT_DEV"
echo "== 4/9 pre-training ($STEPS steps; rerun to resume from the last checkpoint)"
train_start=$(date +%s)
# The probe: every STEPS/8 steps, how well a linear read-out of the discriminator's frozen
# features labels the 'topic' task, against random initialisation (docs/pretraining.md).
"$PYTHON" run_pretraining.py --data_dir "$DEMO_DIR" --model_name demo --hparams "$HPARAMS}" \
  --probe_task topic --probe_every $((STEPS / 8 > 0 ? STEPS / 8 : 1)) \
  --probe_rows "$FT_TRAIN" --probe_dev_rows "$FT_DEV" --probe_max_seq_length "$FT_SEQ_LEN"
train_seconds=$(($(date +%s) - train_start))
echo "== 5/9 evaluation"
"$PYTHON" run_pretraining.py --data_dir "$DEMO_DIR" --model_name demo \
  --hparams "$HPARAMS, \"do_train\": false, \"do_eval\": true}"
echo "== 6/9 learning curves -> $DEMO_DIR/learning_curves.png"
"$PYTHON" -m electra_tf.learning_curves --model_dir "$DEMO_DIR/models/demo" \
  --png "$DEMO_DIR/learning_curves.png" --rows 5
echo "== 7/9 fine-tuning on a small labelled task: which package is a docstring sentence from?"
FT_HPARAMS="{\"task_names\": [\"topic\"], \"max_seq_length\": $FT_SEQ_LEN,
 \"train_batch_size\": 32, \"eval_batch_size\": 32, \"num_train_epochs\": $FT_EPOCHS,
 \"learning_rate\": $FT_LEARNING_RATE, \"seed\": 1, \"num_trials\": $FT_SEEDS}"
ft_start=$(date +%s)
"$PYTHON" run_finetuning.py --data_dir "$DEMO_DIR" --model_name demo --hparams "$FT_HPARAMS"
ft_seconds=$(($(date +%s) - ft_start))
# the seed whose dev accuracy is the median (the lower middle one for an even count)
MEDIAN_SEED=$("$PYTHON" - "$DEMO_DIR/models/demo/results/topic_results.json" <<'PY'
import json, sys
with open(sys.argv[1], encoding="utf-8") as f:
  accuracies = [trial["topic"]["accuracy"] for trial in json.load(f)["trials"]]
print(sorted(range(len(accuracies)), key=accuracies.__getitem__)[(len(accuracies) - 1) // 2] + 1)
PY
)
FINETUNED="$DEMO_DIR/models/demo/finetuning_models/topic_model_$MEDIAN_SEED"
EXPORT_DIR="$DEMO_DIR/topic_export"
echo "== 8/9 LiteRT int8 export of seed $MEDIAN_SEED's model -> $EXPORT_DIR/litert"
export_start=$(date +%s)
"$PYTHON" -m electra_tf.convert --checkpoint "$FINETUNED" --output_dir "$EXPORT_DIR" \
  --litert int8 --overwrite
export_seconds=$(($(date +%s) - export_start))
echo "== 9/9 the int8 model on new sentences, one written for each package -> $DEMO_DIR/new_sentences_predictions.csv"
cat > "$DEMO_DIR/new_sentences.csv" <<'CSV'
sentence,written_for
"Wait for the coroutine to finish on the running event loop, and cancel it if the timeout expires first.",asyncio
Run the interactive examples in this docstring and report every example whose output differs from the expected text.,doctest
Parse the message headers and return the decoded subject line together with its character set.,email
Return the names and default values of the parameters accepted by the given callable object.,inspect
"A generic alias for a dictionary mapping strings to optional integers, checked only by static type checkers.",typing
"Quote the query string, open the URL over HTTP, and return the response after following redirects.",urllib
CSV
# The int8 model labels raw text with no TensorFlow: the predict command tokenises as
# fine-tuning did and runs the .tflite file with the LiteRT interpreter.
"$PYTHON" -m electra_tf.predict --model "$EXPORT_DIR/litert/int8.tflite" \
  --input "$DEMO_DIR/new_sentences.csv" --output "$DEMO_DIR/new_sentences_predictions.csv" \
  --threads 1

# The summary, its closing sentence built from what this run measured (data_prep/demo_summary.py)
"$PYTHON" data_prep/demo_summary.py "$DEMO_DIR" "$VENV" "$MEDIAN_SEED" "$train_seconds" \
  "$ft_seconds" "$export_seconds" "$(($(date +%s) - start))"
