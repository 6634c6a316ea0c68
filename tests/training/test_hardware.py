"""bfloat16 unit detection (training/hardware.py) and --mixed_precision auto (runtime.py)."""

import pytest
import tensorflow as tf

from electra_tf import training
from electra_tf.training import hardware

CPUINFO = """processor\t: 0
vendor_id\t: {vendor}
cpu family\t: 25
model name\t: Some CPU
flags\t\t: fpu sse2 avx2 avx512f {extra}
"""


@pytest.mark.parametrize("extra, expected", [
    ("avx512_bf16", "avx512_bf16 in /proc/cpuinfo"),
    ("amx_tile amx_bf16 avx512_bf16", "amx_bf16 in /proc/cpuinfo"),
    ("avx512_fp16 amx_tile", None),
    ("", None),
])
def test_cpu_bfloat16_units_from_a_fake_cpuinfo(tmp_path, extra, expected):
  if tf.config.list_physical_devices("GPU") or tf.config.list_logical_devices("TPU"):
    pytest.skip("the training device here is not the CPU")
  path = tmp_path / "cpuinfo"
  path.write_text(CPUINFO.format(vendor="AuthenticAMD", extra=extra))
  assert hardware.device_bfloat16_units(str(path)) == expected


def test_gpu_compute_capability_and_tpu_decide_before_the_cpu_flags():
  cpu = {"avx512_bf16"}
  assert hardware.bfloat16_units(cpu, (8, 0)) == "GPU compute capability 8.0"
  assert hardware.bfloat16_units(set(), (9, 0)) == "GPU compute capability 9.0"
  assert hardware.bfloat16_units(cpu, (7, 5)) is None  # T4: float16 tensor cores only
  assert hardware.bfloat16_units(set(), None, tpu=True) == "TPU"
  assert hardware.bfloat16_units(cpu) == "avx512_bf16 in /proc/cpuinfo"
  assert hardware.bfloat16_units(set()) is None


@pytest.mark.parametrize("units, expected", [
    ("amx_bf16 in /proc/cpuinfo", ("bfloat16", "mixed bfloat16 (auto: amx_bf16 in /proc/cpuinfo)")),
    (None, (None, "float32 (auto: no bfloat16 units on this device)")),
])
def test_auto_precision_is_bfloat16_only_where_the_device_has_units(monkeypatch, units,
                                                                     expected):
  monkeypatch.setattr(hardware, "device_bfloat16_units", lambda: units)
  assert training.resolve_precision("auto") == expected


def test_explicit_precisions_pass_through():
  assert training.resolve_precision(None) == (None, "float32")
  assert training.resolve_precision("float32") == (None, "float32")
  assert training.resolve_precision("bfloat16") == ("bfloat16", "mixed bfloat16")
  assert training.resolve_precision("float16") == ("float16", "mixed float16")
  with pytest.raises(ValueError, match="resolve 'auto'"):
    training.set_mixed_precision_policy("auto")
