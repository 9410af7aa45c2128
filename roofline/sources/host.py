"""The machine roofline runs on, where a CPU hardware entry stands for it (a `calibrate --save` of
this host): its CPU's feature flags, read from /proc/cpuinfo (Linux), bounded."""
from __future__ import annotations

import functools

CPUINFO = "/proc/cpuinfo"
CPUINFO_LIMIT = 4 << 20  # a 256-core host's cpuinfo is about 1 MB


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags ("avx512f", "avx512_bf16", "amx_tile", ...); empty where unknown."""
    try:
        with open(CPUINFO, encoding="utf-8", errors="replace") as handle:
            text = handle.read(CPUINFO_LIMIT)
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()
