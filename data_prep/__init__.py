"""Builders that turn raw text into ELECTRA pre-training TFRecords."""
