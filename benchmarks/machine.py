"""What machine a benchmark ran on: CPU model, cores and instruction-set level.

A speed figure belongs to the machine that produced it: the same code can be twice as fast with
AVX-512 as with AVX2 alone (and faster again with AMX or AVX512-BF16), so every benchmark prints
this line next to its figures. The ISA level is not the whole story: AMD Zen 4 runs AVX-512 on
256-bit halves, so its float32 matmul peak is AVX2's (measured on the development VM: 224
against 215 GFLOP/s), while Intel server cores with two 512-bit FMA units double it. The
theoretical peak below counts Zen 4's halves (AMD family 25 with AVX-512); for every other CPU
it is the most any CPU of its level can do, so it stays an upper bound (Intel parts with one
FMA unit per core reach half of it).
"""

import os
import platform
import sys


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


def cpu_family():
  """(vendor_id, cpu family) from /proc/cpuinfo, e.g. ('AuthenticAMD', 25); (None, None) if unknown."""
  vendor = family = None
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
          vendor = value.strip()
        elif key.strip() == "cpu family":
          family = int(value.strip())
        if vendor is not None and family is not None:
          break
  except (OSError, ValueError):
    pass
  return vendor, family


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


# oneDNN's ISA names (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA) -> the level they allow at most.
_ONEDNN_CAPS = {"SSE41": "below AVX2", "AVX": "below AVX2", "AVX2": "AVX2",
                "AVX2_VNNI": "AVX2", "AVX2_VNNI_2": "AVX2", "AVX512_CORE": "AVX-512",
                "AVX512_CORE_VNNI": "AVX-512", "AVX512_CORE_BF16": "AVX-512 + BF16",
                "AVX512_CORE_FP16": "AVX-512 + BF16", "AVX512_CORE_AMX": "AMX",
                "AVX512_CORE_AMX_FP16": "AMX"}
_LEVELS = ("below AVX2", "AVX2", "AVX-512", "AVX-512 + BF16", "AMX")


def hardware_isa_level(flags=None):
  """'AMX', 'AVX-512 + BF16', 'AVX-512', 'AVX2' or 'below AVX2': what the CPU offers."""
  flags = cpu_flags() if flags is None else flags
  if "amx_tile" in flags:
    return "AMX"
  if "avx512f" in flags:
    return "AVX-512 + BF16" if "avx512_bf16" in flags else "AVX-512"
  return "AVX2" if "avx2" in flags else "below AVX2"


def isa_cap(environ=None):
  """The level ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) allows oneDNN at most, or None."""
  environ = os.environ if environ is None else environ
  value = (environ.get("ONEDNN_MAX_CPU_ISA") or environ.get("DNNL_MAX_CPU_ISA") or "").upper()
  return _ONEDNN_CAPS.get(value)


def isa_level(flags=None, environ=None):
  """The ISA level the matmuls can use: the CPU's, lowered by a ONEDNN_MAX_CPU_ISA cap."""
  level = hardware_isa_level(flags)
  cap = isa_cap(environ)
  if cap is not None and _LEVELS.index(cap) < _LEVELS.index(level):
    return cap
  return level


# Most FLOPs per cycle per core that any CPU of an ISA level executes in a precision: two fused
# multiply-add units (2 FLOPs per lane) of the vector width (AVX2: 8 float32 lanes, AVX-512: 16);
# AVX512-BF16's dot product does 2 bfloat16 pairs per float32 lane; an AMX tile unit does 1,024
# bfloat16 multiply-adds per cycle. float16 has no matmul units below AMX-FP16 here: it runs as
# float32. CPUs with one FMA unit per core (some Xeon Silver/Bronze) reach half.
_FLOPS_PER_CYCLE = {
    "below AVX2": {"fp32": 16, "bf16": 16, "fp16": 16},
    "AVX2": {"fp32": 32, "bf16": 32, "fp16": 32},
    "AVX-512": {"fp32": 64, "bf16": 64, "fp16": 64},
    "AVX-512 + BF16": {"fp32": 64, "bf16": 128, "fp16": 64},
    "AMX": {"fp32": 64, "bf16": 2048, "fp16": 2048},
}
# The clock used when the OS does not expose the CPU's maximum (VMs usually do not): no server
# CPU sustains vector code above it. --max_clock_ghz / BENCH_MAX_CLOCK_GHZ override it.
CLOCK_CEILING_GHZ = 5.0


def max_clock_ghz(environ=None):
  """(GHz, where it came from): BENCH_MAX_CLOCK_GHZ, the OS's maximum, or the ceiling."""
  environ = os.environ if environ is None else environ
  if environ.get("BENCH_MAX_CLOCK_GHZ"):
    return float(environ["BENCH_MAX_CLOCK_GHZ"]), "BENCH_MAX_CLOCK_GHZ"
  try:
    with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as f:
      return int(f.read().strip()) / 1e6, "cpufreq maximum"
  except (OSError, ValueError):
    return CLOCK_CEILING_GHZ, "ceiling (the OS does not expose the maximum clock)"


def splits_avx512(family=None):
  """True for CPUs that run each 512-bit operation as two 256-bit halves: AMD family 25 (Zen 4;
  Zen 3, the same family, has no AVX-512). Zen 5 (family 26) server cores have the full width."""
  vendor, number = cpu_family() if family is None else family
  return vendor == "AuthenticAMD" and number == 25


def theoretical_peak(precision="fp32", level=None, cores=None, clock=None, family=None):
  """(GFLOP/s, derivation text): cores x max clock x FLOPs/cycle of the ISA level.

  An upper bound: no computation in `precision` on this machine can exceed it, whatever the
  load, so training above 100% of it would mean the FLOP count is wrong. `family` is
  (vendor_id, cpu family), by default this CPU's: see splits_avx512.
  """
  level = isa_level() if level is None else level
  cores = (os.cpu_count() or 1) if cores is None else cores
  ghz, source = max_clock_ghz() if clock is None else clock
  per_cycle = _FLOPS_PER_CYCLE[level][precision]
  if level.startswith("AVX-512") and splits_avx512(family):
    per_cycle //= 2
    level += " on 256-bit halves"
  return cores * ghz * per_cycle, ("%d cores x %.2f GHz (%s) x %d %s FLOP/cycle (%s)" % (
      cores, ghz, source, per_cycle, precision, level))


# Environment that makes an AVX-512 machine run as an AVX2-only one for every matmul path the
# benchmarks use: TF's oneDNN kernels, TF's XLA CPU compiler, torch's own kernels and its MKL.
# (TensorFlow's Eigen kernels are built for AVX already.)
AVX2_CAP_ENV = {"ONEDNN_MAX_CPU_ISA": "AVX2", "XLA_FLAGS": "--xla_cpu_max_isa=AVX2",
                "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def describe():
  """One line: CPU model, cores, ISA level (and the oneDNN cap when one lowers it)."""
  level, hardware = isa_level(), hardware_isa_level()
  capped = "" if level == hardware else " (capped by ONEDNN_MAX_CPU_ISA; the CPU has %s)" % hardware
  return "%s, %d cores, %s%s" % (cpu_model(), os.cpu_count() or 0, level, capped)


if __name__ == "__main__":
  # python benchmarks/machine.py            -> the describe() line
  # python benchmarks/machine.py --avx2_env -> `export` lines of AVX2_CAP_ENV (for eval in bash)
  if sys.argv[1:] == ["--avx2_env"]:
    print("\n".join("export %s=%s" % item for item in sorted(AVX2_CAP_ENV.items())))
  else:
    print(describe())
