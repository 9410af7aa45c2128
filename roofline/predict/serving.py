"""The serving configuration a prediction is made for (what `roofline doctor` reads off a server)."""
from __future__ import annotations

from dataclasses import dataclass

from roofline.data import load_table
from roofline.model.formats import PLAIN_FORMATS
from roofline.model.inventory import Inventory

from .traffic import Scenario

# vLLM's --kv-cache-dtype spellings -> the traffic model's (others: not modelled)
KV_DTYPES = {"auto": "auto", "bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16",
             "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}


@dataclass(frozen=True)
class Serving:
    """One server's decode configuration, as far as it could be seen."""

    kv_cache_dtype: str = "auto"  # the traffic model's spelling (KV_DTYPES values)
    context: int = 1024  # mean tokens in the KV cache over the measured decode
    speculative_tokens: int = 0
    acceptance: float = 0.0  # per-draft-token chance (1 + a + ... + a^n tokens per step)
    graphs: bool = True  # CUDA graphs on (vLLM's default) or eager
    tp: int = 1
    backend: str | None = None  # GEMM backend of the checkpoint's main format; None: vLLM's default here

    def scenario(self) -> Scenario:
        return Scenario(batch=1, context=self.context, kv_cache_dtype=self.kv_cache_dtype,
                        speculative_tokens=self.speculative_tokens,
                        acceptance_rate=min(self.acceptance, 0.999999) if self.speculative_tokens else 0.7)


def main_format(inventory: Inventory) -> str | None:
    """The quantized format holding most weight bytes (None: an unquantized checkpoint)."""
    totals: dict[str, int] = {}
    for module in inventory.modules:
        if module.format not in PLAIN_FORMATS.values() and module.params:
            totals[module.format] = totals.get(module.format, 0) + module.nbytes
    return max(totals, key=totals.get) if totals else None


def backend_of(kernel_label: str | None) -> str | None:
    """vLLM's backend name for a capture's kernel label, by doctor.toml [[kernel]]."""
    if not kernel_label:
        return None
    text = kernel_label.lower().replace("_", "")
    for entry in load_table("doctor")["kernel"]:
        if entry["match"] in text:
            return entry["backend"]
    return None


def backend_in_use(inventory: Inventory) -> str | None:
    """The backend most of the main format's bytes run on, from the capture's kernel labels."""
    fmt = main_format(inventory)
    votes: dict[str, int] = {}
    for module in inventory.modules:
        if module.format == fmt and (backend := backend_of(module.kernel)):
            votes[backend] = votes.get(backend, 0) + module.nbytes
    return max(votes, key=votes.get) if votes else None
