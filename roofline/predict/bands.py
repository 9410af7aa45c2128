"""How far a predicted tok/s is to be trusted: the error band of the nearest validated class
(roofline/data/validation.toml, generated with docs/VALIDATION.md from the real-vLLM measurements by
benchmarks/gpu_vllm/validation.py). A class is a GPU, a graph mode and a model family; the band is the
mean |error| of the step model on that class with each architecture left out of the fit in turn (out of
sample), or in sample where no other architecture of the class was measured, as the table says."""
from __future__ import annotations

from dataclasses import dataclass

from roofline.data import load_table
from roofline.model.inventory import Inventory

from .hardware import Hardware


def model_family(inventory: Inventory) -> str:
    """dense | moe | hybrid (recurrent layers beside attention, MoE or not): the validation classes."""
    if inventory.shape.recurrent:
        return "hybrid"
    if any(m.role == "moe_experts" for m in inventory.modules):
        return "moe"
    return "dense"


@dataclass(frozen=True)
class Band:
    error: float  # e.g. 0.08 for +-8%
    family: str
    mode: str  # graphs | eager
    validated_on: str  # the hardware key of the class
    exact: bool  # False: the nearest class (another GPU of the same architecture generation)
    points: int
    vllm_version: str
    basis: str  # "out of sample" | "in sample"
    formats: tuple[str, ...] = ()  # the weight formats the class's points ran

    def text(self) -> str:
        where = self.validated_on.upper() if self.exact else f"nearest: {self.validated_on.upper()}"
        return (f"±{100 * self.error:.0f}% ({where}, vLLM {self.vllm_version}, {self.mode}, {self.points} {self.family} "
                f"points in {', '.join(self.formats)}; docs/VALIDATION.md)")

    def to_json(self) -> dict:
        return {"error": self.error, "family": self.family, "mode": self.mode, "validated_on": self.validated_on,
                "exact": self.exact, "points": self.points, "vllm_version": self.vllm_version, "basis": self.basis,
                "formats": list(self.formats),
                "text": self.text()}


NO_VALIDATION = "no validation for this class"


def band_for(inventory: Inventory, hardware: Hardware, graphs: bool) -> Band | None:
    """The band of the class (hardware, mode, family), else of the same mode and family on a validated
    GPU of the same architecture generation (compute capability major); None: none validated."""
    family, mode = model_family(inventory), "graphs" if graphs else "eager"
    entries = [e for e in load_table("validation").get("band", []) if e["family"] == family and e["mode"] == mode]
    exact = [e for e in entries if e["hardware"] == hardware.key]
    generation = (hardware.compute_capability or "").split(".")[0]
    near = [e for e in entries if generation and e["compute_capability"].split(".")[0] == generation]
    chosen = (exact or near or [None])[0]
    if chosen is None:
        return None
    return Band(chosen["error"], family, mode, chosen["hardware"], bool(exact), chosen["points"],
                chosen["vllm_version"], chosen["basis"], tuple(chosen["formats"]))


def band_text(band: Band | None) -> str:
    return band.text() if band else NO_VALIDATION


def band_short(band: Band | None) -> str:
    """"±7%" beside a figure; "(unvalidated)" where no class was validated."""
    return f"±{100 * band.error:.0f}%" if band else "(unvalidated)"


def band_json(band: Band | None) -> dict:
    return band.to_json() if band else {"text": NO_VALIDATION}
