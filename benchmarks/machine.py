"""What machine a benchmark ran on: CPU model, cores and instruction-set level.

A speed figure belongs to the machine that produced it: the same code is several times faster
with AVX-512 (and again with AMX or AVX512-BF16) than with AVX2 alone, so every benchmark prints
this line next to its figures.
"""

import os
import platform


def cpu_flags():
  """The CPU's feature flags (from /proc/cpuinfo), as a set of lower-case names."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("flags"):
          return set(line.split(":", 1)[1].split())
  except OSError:
    pass
  return set()


def cpu_model():
  """The CPU's model name, e.g. 'AMD EPYC 7B13'."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown CPU"


def isa_level(flags=None):
  """'AMX', 'AVX-512 + BF16', 'AVX-512', 'AVX2' or 'below AVX2': what the matmuls can use."""
  flags = cpu_flags() if flags is None else flags
  if "amx_tile" in flags:
    return "AMX"
  if "avx512f" in flags:
    return "AVX-512 + BF16" if "avx512_bf16" in flags else "AVX-512"
  return "AVX2" if "avx2" in flags else "below AVX2"


def describe():
  """One line: CPU model, cores, ISA level."""
  return "%s, %d cores, %s" % (cpu_model(), os.cpu_count() or 0, isa_level())
