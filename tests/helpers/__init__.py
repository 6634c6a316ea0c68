"""Scripts and toy models that tests/test_training.py runs in subprocesses."""
