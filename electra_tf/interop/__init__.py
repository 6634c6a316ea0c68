"""Interchange: model paths in (official TF1, ours, Hugging Face) and every export out.

Reading a model path (``model_source``, ``model_dir``, ``hf_import``) needs only the
foundations, so the pre-training and fine-tuning runs use it to read ``init_checkpoint``; the
exports (``conversion``, ``saved_model``, ``finetuned_saved_model``, ``hf_export``,
``hf_tokenizer``, ``litert_export``, ``keras_hub_export``, ``deploy_exports``,
``staged_output``) build on the models and tasks. See docs/architecture.md.
"""
