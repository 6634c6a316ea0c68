"""Peak FLOP/s of the device a step runs on, the denominator of model FLOPs utilisation (MFU).

GPUs: the vendor's dense peak for the training precision, looked up by device name (float32
counts TF32 tensor cores on Ampere and later, which TensorFlow uses for float32 matmuls by
default). CPUs: an estimate, cores x clock x FLOPs per cycle from the vector extensions
(two FMA pipes of the widest vector unit), so it is an upper bound and MFU a lower bound.
Pass an explicit value (``--peak_tflops``) where these guesses do not fit.
"""

from __future__ import annotations

import os
import re

import tensorflow as tf

# name substring -> peak TFLOP/s (dense) for (float32 incl. TF32, bfloat16, float16).
GPU_PEAK_TFLOPS: tuple[tuple[str, tuple[float, float, float]], ...] = (
  ("H200", (494.7, 989.4, 989.4)),
  ("H100 PCIe", (378.0, 756.0, 756.0)),
  ("H100", (494.7, 989.4, 989.4)),  # SXM
  ("A100", (156.0, 312.0, 312.0)),
  ("A10G", (35.0, 70.0, 70.0)),
  ("L4", (60.0, 121.0, 121.0)),
  ("V100", (15.7, 15.7, 125.0)),  # no bfloat16 tensor cores
  ("T4", (8.1, 8.1, 65.0)),
)
_PRECISION_INDEX = {None: 0, "float32": 0, "bfloat16": 1, "float16": 2}


def gpu_peak_flops(device_name: str, precision: str | None = None) -> float | None:
  """Dense peak FLOP/s of a GPU named like ``NVIDIA H100 80GB HBM3``, or None if unknown."""
  index = _PRECISION_INDEX[precision]
  for key, peaks in GPU_PEAK_TFLOPS:
    if key in device_name:
      return peaks[index] * 1e12
  return None


def _cpu_info(path: str = "/proc/cpuinfo") -> tuple[str, set[str], int | None]:
  """(vendor, ISA flags, CPU family) from /proc/cpuinfo; empty where unavailable."""
  try:
    with open(path) as f:
      text = f.read()
  except OSError:
    return "", set(), None
  vendor = re.search(r"^vendor_id\s*:\s*(\S+)", text, re.M)
  flags = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
  family = re.search(r"^cpu family\s*:\s*(\d+)", text, re.M)
  return (vendor.group(1) if vendor else "", set(flags.group(1).split()) if flags else set(),
          int(family.group(1)) if family else None)


def _cpu_hz() -> float:
  """Maximum clock of CPU 0 (cpufreq), else the clock /proc/cpuinfo reports, else 2 GHz."""
  try:
    with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as f:
      return float(f.read()) * 1e3
  except (OSError, ValueError):
    pass
  try:
    with open("/proc/cpuinfo") as f:
      mhz = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", f.read(), re.M)]
    if mhz:
      return max(mhz) * 1e6
  except OSError:
    pass
  return 2e9


def cpu_peak_flops(precision: str | None = None) -> float:
  """Estimated peak FLOP/s of the CPUs this process may use (see the module docstring)."""
  vendor, flags, family = _cpu_info()
  if "avx512f" in flags and not (vendor == "AuthenticAMD" and (family or 0) < 26):
    width = 512  # AMD Zen 4 (family 25) runs AVX-512 on 256-bit units
  elif "avx2" in flags or "avx512f" in flags:
    width = 256
  elif "avx" in flags:
    width = 256
  else:
    width = 128
  fp32_per_cycle = 2 * 2 * width // 32  # two FMA pipes, 2 FLOPs per FMA lane
  per_cycle = fp32_per_cycle
  if precision in ("bfloat16", "float16"):
    if "amx_bf16" in flags:
      per_cycle = 1024  # AMX tile units, per core
    elif "avx512_bf16" in flags:
      per_cycle = 2 * fp32_per_cycle  # VDPBF16PS: two bfloat16 products per float32 lane
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  return float(cores or 1) * _cpu_hz() * per_cycle


# Instruction sets with matrix / dot-product units for each low precision on x86 CPUs.
NATIVE_CPU_FLAGS = {"bfloat16": ("avx512_bf16", "amx_bf16"), "float16": ("avx512_fp16", "amx_fp16")}


def low_precision_note(precision: str | None) -> str | None:
  """One line when ``precision`` would run emulated (and slower than float32) on this CPU.

  None on GPUs / TPUs, for float32, and on CPUs whose flags list a native unit for it (on a
  CPU without them TensorFlow converts every operand to float32 and back, so a bfloat16 step
  runs at about half the float32 speed; see docs/performance.md).
  """
  if precision not in NATIVE_CPU_FLAGS or tf.config.list_physical_devices("GPU") or \
      tf.config.list_logical_devices("TPU"):
    return None
  _, flags, _ = _cpu_info()
  if not flags or flags & set(NATIVE_CPU_FLAGS[precision]):
    return None
  return (f"note: this CPU has no {precision} matrix instructions "
          f"({' / '.join(NATIVE_CPU_FLAGS[precision])} not in /proc/cpuinfo): {precision} "
          "matmuls are emulated and slower than float32 here; --mixed_precision none is faster")


def bfloat16_units(cpu_flags: set[str], gpu_capability: tuple[int, int] | None = None,
                   tpu: bool = False) -> str | None:
  """Which bfloat16 unit the training device has, in words, or None where it has none.

  TPUs; else GPU 0 when ``gpu_capability`` is given (compute capability >= 8.0: Ampere tensor
  cores); else the CPU flags (``amx_bf16`` tiles, ``avx512_bf16`` dot products).
  """
  if tpu:
    return "TPU"
  if gpu_capability is not None:
    if tuple(gpu_capability) >= (8, 0):
      return f"GPU compute capability {gpu_capability[0]}.{gpu_capability[1]}"
    return None
  found = [flag for flag in NATIVE_CPU_FLAGS["bfloat16"][::-1] if flag in cpu_flags]
  return f"{found[0]} in /proc/cpuinfo" if found else None


def device_bfloat16_units(cpuinfo: str = "/proc/cpuinfo") -> str | None:
  """``bfloat16_units`` of this process's training device (TPU, else GPU 0, else the CPU)."""
  tpu = bool(tf.config.list_logical_devices("TPU"))
  gpus = tf.config.list_physical_devices("GPU")
  capability = None
  if gpus and not tpu:
    capability = tf.config.experimental.get_device_details(gpus[0]).get("compute_capability")
    capability = capability or (0, 0)
  return bfloat16_units(_cpu_info(cpuinfo)[1], capability, tpu)


def peak_flops(precision: str | None = None) -> float | None:
  """Peak FLOP/s of ONE device the strategy trains on: GPU 0 if visible, else the CPUs."""
  gpus = tf.config.list_physical_devices("GPU")
  if gpus:
    details = tf.config.experimental.get_device_details(gpus[0])
    return gpu_peak_flops(details.get("device_name", ""), precision)
  if tf.config.list_logical_devices("TPU"):
    return None
  return cpu_peak_flops(precision)
