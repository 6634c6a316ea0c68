#!/usr/bin/env bash
# The main job end to end on an embedded default, no download: builds a corpus from the Python
# standard library's docstrings, learns a WordPiece vocabulary, writes pre-training TFRecords,
# pre-trains a small ELECTRA for a few minutes on CPU, evaluates it and prints where the
# TensorBoard logs are. DEMO_DIR (default demo_out/) holds everything; STEPS the train steps.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/venv.sh
DEMO_DIR="${DEMO_DIR:-demo_out}"
STEPS="${STEPS:-300}"
PYTHON="$VENV/bin/python"

echo "== 1/5 corpus: standard-library docstrings -> $DEMO_DIR/corpus"
"$PYTHON" data_prep/build_demo_corpus.py --output_dir "$DEMO_DIR/corpus"
echo "== 2/5 WordPiece vocabulary -> $DEMO_DIR/vocab.txt"
[ -s "$DEMO_DIR/vocab.txt" ] || "$PYTHON" data_prep/learn_vocab.py \
  --corpus_dir "$DEMO_DIR/corpus" --vocab_file "$DEMO_DIR/vocab.txt" --vocab_size 8000
VOCAB_SIZE=$(wc -l < "$DEMO_DIR/vocab.txt")
echo "== 3/5 pre-training TFRecords -> $DEMO_DIR/pretrain_tfrecords"
"$PYTHON" data_prep/build_pretraining_dataset.py --corpus_dir "$DEMO_DIR/corpus" \
  --vocab_file "$DEMO_DIR/vocab.txt" --output_dir "$DEMO_DIR/pretrain_tfrecords" \
  --max_seq_length 128 --num_out_files 4 --seed 1
HPARAMS=$(cat <<JSON
{"model_size": "small", "vocab_size": $VOCAB_SIZE, "max_seq_length": 128,
 "model_hparam_overrides": {"num_hidden_layers": 4}, "train_batch_size": 32,
 "num_train_steps": $STEPS, "num_warmup_steps": $((STEPS / 10)), "learning_rate": 0.001,
 "save_checkpoints_steps": 100, "iterations_per_loop": 25, "eval_batch_size": 32,
 "num_eval_steps": 20, "seed": 1}
JSON
)
echo "== 4/5 pre-training ($STEPS steps; rerun to resume from the last checkpoint)"
"$PYTHON" run_pretraining.py --data_dir "$DEMO_DIR" --model_name demo --hparams "$HPARAMS"
echo "== 5/5 evaluation"
"$PYTHON" run_pretraining.py --data_dir "$DEMO_DIR" --model_name demo \
  --hparams "${HPARAMS%\}}, \"do_train\": false, \"do_eval\": true}"
echo
echo "Results: $DEMO_DIR/models/demo/results/unsup_results.txt"
cat "$DEMO_DIR/models/demo/results/unsup_results.txt"
echo "TensorBoard: $VENV/bin/tensorboard --logdir $DEMO_DIR/models/demo  (then open http://localhost:6006)"
