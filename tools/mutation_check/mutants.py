"""The table of porting mistakes the public (golden) lane must catch.

Each ``Mutant`` names the mistake, the files its code may live in (globs allowed; the first file
containing ``old`` is the target, so a module that moves is still found), the snippet ``old``
(exactly once in the target) and its ``new`` text, and the pytest selection that must fail.
"""
from __future__ import annotations

from typing import NamedTuple


class Mutant(NamedTuple):
  name: str
  what: str
  files: tuple[str, ...]
  old: str
  new: str
  tests: tuple[str, ...]  # pytest arguments: files and an optional "-k EXPR"


LAYERS = ("electra_tf/modeling/layers.py", "electra_tf/**/*.py")
ENCODER = ("electra_tf/modeling/encoder.py", "electra_tf/**/*.py")
CONFIG = ("electra_tf/config.py", "electra_tf/**/*.py")
BUILDER = ("electra_tf/pretraining/builder.py", "electra_tf/**/*.py")
MASKING = ("electra_tf/pretraining/masking.py", "electra_tf/**/*.py")
OBJECTIVE = ("electra_tf/pretraining/objective.py", "electra_tf/**/*.py")
OPT = ("electra_tf/optimization.py", "electra_tf/**/*.py")
TOKENIZER = ("electra_tf/full_tokenizer.py", "electra_tf/**/*.py")
EXAMPLES = ("electra_tf/data_prep/pretraining_examples.py", "data_prep/pretraining_examples.py",
            "electra_tf/**/*.py", "data_prep/*.py")
HEADS = ("electra_tf/finetuning/task_heads.py", "electra_tf/**/*.py")
DECODE = ("electra_tf/finetuning/builtin/qa_decoding.py", "electra_tf/**/*.py")

ENC = ("tests/modeling/test_encoder.py", "tests/reading/test_hf_import.py", "-k", "golden")
# the official goldens alone (not the Hugging Face pair): their kernels reach the GELU gap
OFFICIAL = ("tests/modeling/test_encoder.py", "tests/pretraining/test_objectives.py", "-k",
            "golden")
PRE = ("tests/pretraining/test_objectives.py", "-k", "golden")
MSK = ("tests/pretraining/test_masking.py", "-k", "golden or statistics")
OPTIM = ("tests/test_optimization.py", "-k", "golden or official")
TOK = ("tests/test_tokenization.py", "-k", "official or extra_cases")
DATA = ("tests/data_prep/test_data_prep.py", "-k", "golden")
TEMP = ("tests/pretraining/test_objectives.py", "-k", "golden or temperature")
HEAD = ("tests/finetuning/test_task_heads.py", "-k", "official")
QA = ("tests/finetuning/builtin/test_qa.py", "-k", "decod")

MUTANTS: tuple[Mutant, ...] = (
    Mutant("gelu_tanh", "GELU in its tanh approximation (keras-hub, BERT-TF2) instead of erf",
           LAYERS, "(1.0 + tf.math.erf(x / tf.cast(math.sqrt(2.0), x.dtype)))",
           "(1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))", OFFICIAL),
    Mutant("layernorm_eps", "LayerNorm epsilon 1e-5 (PyTorch's default) instead of 1e-12",
           LAYERS, "epsilon: float = 1e-12", "epsilon: float = 1e-5", ENC),
    Mutant("attention_scale", "attention scores divided by d instead of sqrt(d)",
           ENCODER, "* (1.0 / math.sqrt(float(self.head_size)))",
           "* (1.0 / float(self.head_size))", ENC),
    Mutant("attention_no_scale", "attention scores not scaled at all",
           ENCODER, "* (1.0 / math.sqrt(float(self.head_size)))", "* 1.0", ENC),
    Mutant("attention_mask_inverted", "padding mask read the other way (1 = masked)",
           ENCODER, "return (1.0 - mask) * -10000.0", "return mask * -10000.0", ENC),
    Mutant("position_off_by_one", "position ids start at 1 (RoBERTa's padding offset)",
           ENCODER, "self.position_embeddings), [0, 0], [seq_length, -1])",
           "self.position_embeddings), [1, 0], [seq_length, -1])", ENC),
    Mutant("token_type_dropped", "token-type embeddings not added",
           ENCODER, "token_embeddings + _one_hot_lookup(self.token_type_embeddings, segment_ids)",
           "token_embeddings", ENC),
    Mutant("generator_intermediate", "generator keeps the discriminator's intermediate size",
           CONFIG, "intermediate_size=4 * hidden,",
           "intermediate_size=bert_config.intermediate_size,", PRE),
    Mutant("generator_heads", "generator keeps the discriminator's head count (not hidden // 64)",
           CONFIG, "num_attention_heads=max(1, hidden // 64)",
           "num_attention_heads=bert_config.num_attention_heads", PRE),
    Mutant("generator_untied", "generator embeddings untied although tied is the default",
           BUILDER, "tied = None if config.untied_generator_embeddings else parts",
           "tied = None if True else parts", PRE),
    Mutant("mask_token_prob", "[MASK] probability 0.8 (BERT's) instead of ELECTRA's 0.85",
           MASKING, "MASK_TOKEN_PROB = 0.85", "MASK_TOKEN_PROB = 0.8", MSK),
    Mutant("mask_keep_side", "[MASK] when the draw is above 1 - p (keep and mask sides swapped)",
           MASKING, "tf.cast(uniform < MASK_TOKEN_PROB, tf.int32)",
           "tf.cast(uniform >= 1.0 - MASK_TOKEN_PROB, tf.int32)", MSK),
    Mutant("gumbel_sign", "Gumbel noise log(-log u) without the leading minus",
           MASKING, "gumbel = -tf.math.log(-tf.math.log(", "gumbel = tf.math.log(-tf.math.log(",
           MSK),
    Mutant("gumbel_log_order", "Gumbel noise -log(log(1/u)) written as -log(1 - log u)",
           MASKING, "gumbel = -tf.math.log(-tf.math.log(",
           "gumbel = -tf.math.log(1.0 - tf.math.log(", MSK),
    Mutant("temperature_ignored", "generator logits not divided by the sampling temperature",
           OBJECTIVE, "masking.sample_from_softmax(mlm_logits / objective.temperature,",
           "masking.sample_from_softmax(mlm_logits,", TEMP),
    Mutant("temperature_twice", "temperature applied twice (logits / T**2)",
           OBJECTIVE, "masking.sample_from_softmax(mlm_logits / objective.temperature,",
           "masking.sample_from_softmax(mlm_logits / objective.temperature ** 2,", TEMP),
    Mutant("disallow_correct_ignored", "disallow_correct never passed to the sampler",
           OBJECTIVE, "if objective.disallow_correct else None)", "if False else None)",
           ("tests/pretraining/test_objectives.py", "-k", "golden or disallow")),
    Mutant("disc_weight", "discriminator loss weight 1 instead of 50 by default",
           CONFIG, "disc_weight: float = 50.0", "disc_weight: float = 1.0",
           ("tests/test_config.py", "-k", "official_defaults or matches_reference")),
    Mutant("adam_epsilon", "Adam epsilon 1e-8 (Keras / PyTorch) instead of 1e-6",
           OPT, "next_m / (tf.sqrt(next_v) + self.epsilon)", "next_m / (tf.sqrt(next_v) + 1e-8)",
           OPTIM),
    Mutant("adam_beta2", "Adam beta_2 0.98 (RoBERTa's) instead of 0.999",
           OPT, "tf.multiply(self.beta_2, v) + tf.multiply(1.0 - self.beta_2,",
           "tf.multiply(0.98, v) + tf.multiply(1.0 - 0.98,", OPTIM),
    Mutant("adam_bias_correction", "Adam moments bias-corrected (the official optimizer is not)",
           OPT, "update = next_m / (tf.sqrt(next_v) + self.epsilon)",
           "t = tf.cast(self.iterations + 1, variable.dtype); update = (next_m / (1.0 - "
           "self.beta_1 ** t)) / (tf.sqrt(next_v / (1.0 - self.beta_2 ** t)) + self.epsilon)",
           OPTIM),
    Mutant("decay_layernorm", "weight decay applied to LayerNorm weights",
           OPT, 'EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")',
           'EXCLUDE_FROM_WEIGHT_DECAY = ("bias",)', OPTIM),
    Mutant("decay_bias", "weight decay applied to biases",
           OPT, 'EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")',
           'EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm")', OPTIM),
    Mutant("clip_per_tensor", "gradients clipped per tensor instead of by their global norm",
           OPT, "weight_decay=None, global_clipnorm=clip_norm,",
           "weight_decay=None, clipnorm=clip_norm,", OPTIM),
    Mutant("warmup_replaces", "warmup replaces the decayed rate (tf-models) instead of scaling it",
           OPT, "learning_rate *= tf.minimum(\n            1.0,",
           "learning_rate = self.initial_learning_rate * tf.minimum(\n            1.0,", OPTIM),
    Mutant("decay_power_ignored", "polynomial decay always linear (lr_decay_power ignored)",
           OPT, "end_learning_rate=0.0, power=power,", "end_learning_rate=0.0, power=1.0,", OPTIM),
    Mutant("layerwise_depth_fixed", "layer-wise decay depth 'fixed' (official #51 quirk lost)",
           OPT, "top = n_layers + 1 if fix_depth else n_layers + 2", "top = n_layers + 1", OPTIM),
    Mutant("tok_no_lowercase", "BasicTokenizer does not lower-case words",
           TOKENIZER, "token = token.lower()", "token = token", TOK),
    Mutant("tok_accents_nfc", "accents 'stripped' after NFC (composed letters keep them)",
           TOKENIZER, 'unicodedata.normalize("NFD", text) if',
           'unicodedata.normalize("NFC", text) if', TOK),
    Mutant("tok_cjk_main_block", "CJK splitting misses the main block U+4E00-U+9FFF",
           TOKENIZER, "_CJK_RANGES = ((0x4E00, 0x9FFF), ", "_CJK_RANGES = (", TOK),
    Mutant("tok_ascii_punctuation", "ASCII symbols ^ ` | ~ $ + < = > not split (P* only)",
           TOKENIZER, "if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:",
           "if 33 <= cp <= 35 or 37 <= cp <= 42 or 44 <= cp <= 47 or 58 <= cp <= 59:", TOK),
    Mutant("data_short_seq_prob", "short-sequence probability 0.1 (BERT's) instead of 0.05",
           EXAMPLES, "if rng.random() < 0.05:", "if rng.random() < 0.1:", DATA),
    Mutant("data_one_segment_prob", "single-segment probability 0.2 instead of 0.1",
           EXAMPLES, "if rng.random() < 0.1:", "if rng.random() < 0.2:", DATA),
    Mutant("data_ab_split", "A/B split aims at target // 2 (the 3 special tokens forgotten)",
           EXAMPLES, "first_target = (self._target_length - 3) // 2",
           "first_target = self._target_length // 2", DATA),
    Mutant("head_cls_mean_pool", "classification head mean-pools instead of reading [CLS]",
           HEADS, "_float(sequence_output)[:, 0], training, seed)  # [B, H]",
           "tf.reduce_mean(_float(sequence_output), 1), training, seed)  # [B, H]", HEAD),
    Mutant("head_regression_half_mse", "regression loss 0.5 * squared error (Keras MSE habit)",
           HEADS, "losses = tf.square(predictions - _float(targets))",
           "losses = 0.5 * tf.square(predictions - _float(targets))", HEAD),
    Mutant("head_tagging_mask_ignored", "tagging loss summed over unlabeled positions too",
           HEADS, "losses = tf.reduce_sum(losses * _float(labels_mask), axis=-1)",
           "losses = tf.reduce_sum(losses, axis=-1)", HEAD),
    Mutant("head_squad_no_null", "SQuAD answer mask does not open position 0 (no answer)",
           HEADS, "answer_mask += tf.one_hot(0, seq_length)", "answer_mask += 0.0", HEAD),
    Mutant("head_squad_end_concat", "SQuAD end head concatenates [token, start] not [start, token]",
           HEADS, "tf.concat([start_tiled, hidden], -1)", "tf.concat([hidden, start_tiled], -1)",
           HEAD),
    Mutant("squad_max_answer_len", "SQuAD decoder allows max_answer_length + 1 pieces",
           DECODE, "if end_index - start_index + 1 > task.max_answer_length:",
           "if end_index - start_index > task.max_answer_length:", QA),
    Mutant("squad_n_best", "SQuAD decoder keeps n_best_size + 1 answers",
           DECODE, "if len(nbest) >= task.n_best_size:", "if len(nbest) > task.n_best_size:", QA),
)
