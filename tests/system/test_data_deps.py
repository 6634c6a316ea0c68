"""The `data` extra (requirements-data.txt): Apache Beam imports beside TensorFlow in one
process, and the protobuf, numpy and pyarrow it brings satisfy what TensorFlow and
tensorflow-datasets declare."""

import importlib.metadata as md

from helpers.paths import REPO_ROOT
from packaging.requirements import Requirement

REPO = REPO_ROOT


def _requirements(dist: str) -> dict[str, Requirement]:
  out = {}
  for text in md.requires(dist) or []:
    req = Requirement(text)
    if req.marker is None or req.marker.evaluate({"extra": ""}):
      out[req.name.lower()] = req
  return out


def test_beam_imports_beside_tensorflow_within_its_requirements():
  import apache_beam
  import tensorflow as tf

  pinned = [line.strip() for line in (REPO / "requirements-data.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
  assert pinned == [f"apache-beam[dask]=={apache_beam.__version__}"]
  import dask
  import distributed

  assert dask.__version__ == distributed.__version__
  assert tf.constant([1, 2]).numpy().sum() == 3
  for dist in ("tensorflow", "tensorflow-datasets", "apache-beam"):
    reqs = _requirements(dist)
    for name in ("protobuf", "numpy", "pyarrow"):
      if name in reqs:
        version = md.version(name)
        assert reqs[name].specifier.contains(version, prereleases=True), (
            f"{dist} requires {reqs[name]}, installed {name} {version}")
