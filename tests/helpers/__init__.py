"""Shared test helpers (imported as ``helpers.<module>``; test files never import each other).

- ``paths``: the repository root and the ``../shared`` reference / data folders.
- ``ckpt_by_name``: assign an official TF1 checkpoint to variables by exact name.
- ``procs``: wait on and SIGKILL training subprocesses.
- ``toy_train``, ``pretrain_replicas``: scripts the training tests run in subprocesses.
"""
