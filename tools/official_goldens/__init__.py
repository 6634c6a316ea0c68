"""Writes the repository's official goldens (tests/golden/) by running google-research/electra.

Run ``python -m tools.official_goldens --official_dir <checkout>`` from the repository root;
tests/golden/README.md describes every file and the family that made it.
"""
