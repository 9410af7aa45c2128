"""The GEMM / MoE backends vLLM runs a format on, as data (roofline/data/rules.toml [[backend]]),
spelled as vLLM spells them (roofline/data/serving.toml [backends]).

A Backend is what the step model prices a format's GEMMs with: the tensor-core format they run in
(`compute`), the share of the achievable bandwidth the path reaches relative to the hardware's
calibrated efficiency, and the vLLM names (--linear-backend / --moe-backend) that pick the kernel
counts in roofline/data/kernels.toml and go on the serve line.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from roofline.data import load_table
from roofline.errors import RooflineError

from .hardware import Hardware


@dataclass(frozen=True)
class Rate:
    """A backend's figures on one compute capability, with the data they rest on."""

    cc: str  # compute capability, as hardware.toml spells it ("9.0", "12.1")
    kind: str  # measured | calibrated | estimate
    source: str
    # GB/s its weight-only kernels stream the format's weights at, where below the device's achievable
    # bandwidth (dequantizing in the kernel shares the SMs: Marlin / Machete)
    weight_gbps: float | None = None
    # share of the datasheet tensor rate its GEMMs reach where they turn compute-bound
    gemm_utilization: float | None = None
    # share of the device's achievable bandwidth the path reaches, relative to the device's efficiency
    relative_efficiency: float | None = None
    # us each grouped GEMM of the routed experts (vLLM's two a MoE layer: rules.toml [compute]) takes beyond its bytes
    # at weight_gbps and the device's floor per kernel: a few experts' tiles leave most SMs idle, so a one-token
    # step's expert GEMMs do not stream at the rate many tokens' do
    routed_call_us: float | None = None


@dataclass(frozen=True)
class Backend:
    format: str
    name: str  # a label for people: "NVFP4 W4A16 Marlin"
    min_cc: float
    compute: str  # hardware.toml tensor_tflops key the GEMMs run in
    relative_efficiency: float
    source: str
    max_cc: float | None = None
    linear_backend: str | None = None  # vLLM --linear-backend value
    moe_backend: str | None = None  # vLLM --moe-backend value
    reason: str = ""
    requires: str = ""
    # an emulation path writes a BF16 copy of each weight and reads it back every step
    dequantized_bytes_per_weight: float = 0.0
    # the kernels dequantize the weights to BF16 in the GEMM and multiply BF16 activations (Marlin, Machete)
    weight_only: bool = False
    # what was measured or fitted of this backend on one compute capability (rules.toml [[backend.rate]])
    rates: tuple[Rate, ...] = ()

    @property
    def kernel(self) -> str:
        """The kernel the weights run on, as a validation class records it: the stored weights and vLLM's spelling
        of the backend (a W4A4 checkpoint run on Marlin and a W4A16 one are one kernel), else the label."""
        spelling = self.linear_backend or self.moe_backend
        return f"{weight_family(self.format)} on {spelling}" if spelling else self.name

    def rate(self, hardware: Hardware) -> Rate | None:
        """The backend's own figures on `hardware`'s compute capability; None: none known there."""
        return next((r for r in self.rates if r.cc == (hardware.compute_capability or "")), None)

    def weight_gbps(self, hardware: Hardware) -> float | None:
        """The rate this backend streams its format's weights at on `hardware`, None where no figure
        is known (the device's achievable bandwidth applies)."""
        rate = self.rate(hardware)
        return rate.weight_gbps if rate else None

    def routed_call_us(self, hardware: Hardware) -> float:
        """us each grouped expert GEMM takes on `hardware` beyond its bytes and the floor (0: none measured)."""
        rate = self.rate(hardware)
        return (rate.routed_call_us or 0.0) if rate else 0.0

    def gemm_utilization(self, hardware: Hardware) -> float | None:
        """The share of the tensor rate this backend's GEMMs reach on `hardware`; None: the device's."""
        rate = self.rate(hardware)
        return rate.gemm_utilization if rate else None

    def relative(self, hardware: Hardware) -> float:
        """The share of the hardware's achievable bandwidth this path reaches, relative to its efficiency:
        the rate's where one was fitted on this compute capability, else the entry's (1.0: unmeasured)."""
        rate = self.rate(hardware)
        return rate.relative_efficiency if rate and rate.relative_efficiency is not None else \
            self.relative_efficiency


@functools.lru_cache(maxsize=1)
def vllm_backend_names() -> frozenset[str]:
    table = load_table("serving")["backends"]
    return frozenset(table["linear"]) | frozenset(table["moe"]) | frozenset(table["unflagged"])


def _checked(name: str | None, where: str) -> str | None:
    if name is not None and name not in vllm_backend_names():
        raise RooflineError(f"{where}: backend {name!r} is not one of vLLM's spellings "
                            f"(roofline/data/serving.toml [backends])")
    return name


@functools.lru_cache(maxsize=1)
def weight_family(fmt: str) -> str:
    """The stored weights of a format: NVFP4 W4A4 and W4A16 are one family (the same tensors; the backend decides
    the activations), so a backend of either may be asked of a checkpoint and a band of either covers both."""
    return fmt.split("-w")[0]


def backends() -> tuple[Backend, ...]:
    out = []
    for entry in load_table("rules").get("backend", []):
        rates = tuple(Rate(**r) for r in entry.get("rate", []))
        backend = Backend(**{k: v for k, v in entry.items() if k != "rate"}, rates=rates)
        _checked(backend.linear_backend, "rules.toml [[backend]]")
        _checked(backend.moe_backend, "rules.toml [[backend]]")
        out.append(backend)
    for kind in ("gemm", "moe"):
        for entry in load_table("kernels")[kind]:
            _checked(entry["backend"], f"kernels.toml [[{kind}]]")
    for entry in load_table("doctor")["kernel"]:
        _checked(entry["backend"], "doctor.toml [[kernel]]")
    return tuple(out)


def kernel_named(name: str) -> str:
    """Backend.kernel of the backend with this label (a fit's rows keep the label)."""
    return next(b.kernel for b in backends() if b.name == name)


def backends_for(fmt: str, hardware: Hardware) -> list[Backend]:
    """The backends that run `fmt` on this device, vLLM's default first."""
    cc = float(hardware.compute_capability or 0)  # "": a CPU, no GPU backend applies
    return [b for b in backends() if b.format == fmt and cc >= b.min_cc and (b.max_cc is None or cc < b.max_cc)]


def default_backend(fmt: str, hardware: Hardware) -> Backend:
    """vLLM's default for `fmt` here; a format no entry rates runs its GEMMs in BF16 at the
    hardware's own efficiency."""
    if hardware.host == "cpu":  # no tensor-core backends: vLLM-CPU runs its GEMMs in the model dtype
        return Backend(fmt, "CPU (oneDNN / torch GEMM)", 0.0, "bf16", 1.0, "vLLM CPU backend: GEMMs in the model dtype")
    found = backends_for(fmt, hardware)
    if found:
        return found[0]
    return Backend(fmt, "unrated", 0.0, "bf16", 1.0, "no backend rated for this format on this device")


def _emulation(name: str) -> float:
    for entry in load_table("doctor")["kernel"]:
        if entry["backend"] == name:
            return float(entry.get("dequantized_bytes_per_weight", 0.0))
    return 0.0


def backend_named(fmt: str, name: str | None, hardware: Hardware) -> Backend:
    """The backend a server runs `fmt` on, by vLLM's name for it (a capture's kernel); None: the
    default. A name no entry rates here keeps the hardware's efficiency (nothing was measured)."""
    if name is None:
        return default_backend(fmt, hardware)
    _checked(name, "backend")
    for entry in backends_for(fmt, hardware):
        if name in (entry.linear_backend, entry.moe_backend):
            return entry
    default = default_backend(fmt, hardware)
    return replace(default, name=name, linear_backend=name, moe_backend=name, relative_efficiency=1.0,
                   source=f"{name}: not rated for this format here (relative efficiency 1.0)",
                   dequantized_bytes_per_weight=_emulation(name))
