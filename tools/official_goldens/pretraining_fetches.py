"""Pre-training goldens' golden.npz: which official tensors are fetched, and how stored.

Full-vocabulary logits are stored as summaries (logsumexp, max, sum) plus the rows that are
read; the folder READMEs describe each key.
"""

from __future__ import annotations

import numpy as np

from tools.official_goldens import pretraining_inputs


def fetches(config, model, rec: dict, random: pretraining_inputs.InjectedRandom, tf1) -> dict:
  """Tensors of the official graph to store (see the folder README for each key)."""
  electric = config.electric_objective
  masked = rec["masked"][0]
  fake = rec["fake"][0]
  disc_out, clean_out = rec["disc"]
  models = rec["models"]
  mlm = model.mlm_output
  f = {
      "candidates_sample_logits": random.sample_logits[0],
      "masked_input_ids": masked.input_ids,
      "masked_lm_positions": masked.masked_lm_positions,
      "masked_lm_ids": masked.masked_lm_ids,
      "masked_lm_weights": masked.masked_lm_weights,
      "gen_mlm_logits": mlm.logits,
      "gen_mlm_preds": mlm.preds,
      "gen_mlm_per_example_loss": mlm.per_example_loss,
      "gen_mlm_loss": mlm.loss,
      "sampled_tokids": tf1.argmax(fake.sampled_tokens, -1, output_type=tf1.int32),
      "fake_input_ids": fake.inputs.input_ids,
      "disc_labels": fake.is_fake_tokens,
      "disc_probs": disc_out.probs,
      "disc_preds": disc_out.preds,
      "disc_per_example_loss": disc_out.per_example_loss,
      "disc_loss": disc_out.loss,
      "total_loss": model.total_loss,
      "sampler_out": rec["sampler_out"],
      "sampler_out_disallow": rec["sampler_out_disallow"],
      "log_mask_ratio": tf1.log(config.mask_prob / (1 - config.mask_prob)),
  }
  graph = tf1.get_default_graph()
  if electric:
    ltr, rtl, disc, clean = models
    cloze = rec["cloze"][0]
    f.update({
        "ltr_input_ids": rec["unmasked"].input_ids,
        "rtl_input_ids": rec["unmasked"].input_ids,
        "ltr_token_embeddings": ltr.token_embeddings,
        "ltr_embedding_postprocessed": rec["postprocessed"][0],
        "ltr_embedding_output": ltr.get_embedding_output(),
        "ltr_all_layer_outputs": tf1.stack(ltr.get_all_encoder_layers()),
        "rtl_embedding_output": rtl.get_embedding_output(),
        "rtl_all_layer_outputs": tf1.stack(rtl.get_all_encoder_layers()),
        "gen_sequence_output": rec["cloze_model_output"],  # the two-tower generator's output
        "cloze_logits": cloze.logits,
        "cloze_weights": cloze.weights,
        "cloze_per_example_loss": cloze.per_example_loss,
        "cloze_preds": cloze.preds,
        "cloze_loss": cloze.loss,
        "disc_logits_raw": graph.get_tensor_by_name("discriminator_predictions/Squeeze:0"),
        "disc_log_q": graph.get_tensor_by_name("discriminator_predictions/StopGradient:0"),
        "clean_disc_logits_raw":
            graph.get_tensor_by_name("discriminator_predictions_1/Squeeze:0"),
        "clean_disc_log_q":
            graph.get_tensor_by_name("discriminator_predictions_1/StopGradient:0"),
    })
    disc_post, clean_post = rec["postprocessed"][2], rec["postprocessed"][3]
  else:
    gen, disc, clean = models
    f.update({
        "gen_token_embeddings": gen.token_embeddings,
        "gen_embedding_postprocessed": rec["postprocessed"][0],
        "gen_embedding_output": gen.get_embedding_output(),
        "gen_all_layer_outputs": tf1.stack(gen.get_all_encoder_layers()),
    })
    disc_post, clean_post = rec["postprocessed"][1], rec["postprocessed"][2]
  del clean_post
  f.update({
      "disc_token_embeddings": disc.token_embeddings,
      "disc_embedding_postprocessed": disc_post,
      "disc_embedding_output": disc.get_embedding_output(),
      "disc_all_layer_outputs": tf1.stack(disc.get_all_encoder_layers()),
      "disc_logits": disc_out.probs.op.inputs[0],
      "clean_disc_sequence_output": clean.get_sequence_output(),
      "clean_disc_logits": clean_out.probs.op.inputs[0],
  })
  return f


def arrays(config, v: dict, ids, mask, segs, positions, mask_uniform, gumbel,
            sampler_logits, sampler_uniform, sampler_disallow) -> dict:
  """golden.npz: the fetched values plus summaries of the full-vocabulary logits."""
  electric = config.electric_objective
  weights = v["masked_lm_weights"]
  num = weights.sum(-1).astype(np.int32)
  a = {
      "input_ids": ids, "input_mask": mask, "segment_ids": segs,
      "inject_categorical_positions": positions.astype(np.int32),
      "inject_mask_uniform": mask_uniform,
      "num_to_predict": num,
      "disc_input_ids": v["fake_input_ids"],
      "gumbel_uniform_checksum": np.float64(gumbel.astype(np.float64).sum()),
      "gumbel_uniform_head": gumbel[0, 0, :16],
      "sampler_logits": sampler_logits, "sampler_uniform": sampler_uniform,
      "sampler_disallow": sampler_disallow,
  }
  logits = v.pop("gen_mlm_logits")
  real = [(r, s) for r in range(logits.shape[0]) for s in range(2) if weights[r, s] > 0]
  a["gen_mlm_logits_real_index"] = np.array(real, np.int32)
  a["gen_mlm_logits_real"] = np.stack([logits[r, s] for r, s in real])
  a.update(_summaries("gen_mlm_logits", logits))
  a["gen_mlm_logits_at_masked_lm_ids"] = np.take_along_axis(
      logits, v["masked_lm_ids"][..., None].astype(np.int64), -1)[..., 0]
  if not electric:
    a["gen_input_ids"] = v["masked_input_ids"]
  if electric:
    cl = v.pop("cloze_logits")
    a["cloze_logits_row0_pos0to3"] = cl[0, :4]
    a.update(_summaries("cloze_logits", cl))
    a["cloze_logits_at_input_ids"] = np.take_along_axis(
        cl, ids[..., None].astype(np.int64), -1)[..., 0]
    a["cloze_logits_at_fake_input_ids"] = np.take_along_axis(
        cl, v["fake_input_ids"][..., None].astype(np.int64), -1)[..., 0]
  for k, x in v.items():
    x = np.asarray(x)
    if x.dtype == np.int64:
      x = x.astype(np.int32)
    a[k] = x
  return a


def _summaries(prefix: str, logits: np.ndarray) -> dict:
  x = logits.astype(np.float64)
  m = x.max(-1, keepdims=True)
  return {f"{prefix}_logsumexp": (m[..., 0] + np.log(np.exp(x - m).sum(-1))),
          f"{prefix}_max": logits.max(-1),
          f"{prefix}_sum": x.sum(-1)}
