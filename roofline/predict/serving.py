"""The serving configuration a prediction is made for (what `roofline doctor` reads off a server)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from roofline.data import load_table
from roofline.model.inventory import Inventory

from .deployment import Deployment, Speculation, step_config
from .hardware import Hardware
from .step import StepConfig
from .topology import Placement, tensor_parallel_placement
from .traffic import Scenario


@dataclass(frozen=True)
class Serving:
    """One server's decode configuration, as far as it could be seen."""

    kv_cache_dtype: str = "auto"  # the traffic model's spelling (traffic.KV_SPELLINGS values)
    context: int = 1024  # mean tokens in the KV cache over the measured decode
    speculative_tokens: int = 0
    speculative_method: str = "mtp"  # as priced: mtp (the model's own head) or ngram (a drafter reading no weights)
    acceptance: float = 0.0  # per-draft-token chance (1 + a + ... + a^n tokens per step)
    graphs: bool = True  # CUDA graphs on (vLLM's default) or eager
    tp: int = 1
    backend: str | None = None  # vLLM's name of the main format's GEMM backend; None: vLLM's default here

    def scenario(self) -> Scenario:
        return Scenario(batch=1, context=self.context, kv_cache_dtype=self.kv_cache_dtype,
                        speculative_tokens=self.speculative_tokens,
                        acceptance_rate=min(self.acceptance, 0.999999) if self.speculative_tokens else 0.7)

    def deployment(self) -> Deployment:
        """This server's configuration in vLLM's words: what the step model prices of it goes through
        the deployment's one StepConfig builder (predict/deployment.step_config), as every command's does."""
        return Deployment(kv_cache_dtype=self.kv_cache_dtype, enforce_eager=not self.graphs, tp=self.tp,
                          speculative=Speculation(self.speculative_method, self.speculative_tokens)
                          if self.speculative_tokens else None,
                          linear_backend=self.backend, moe_backend=self.backend)

    def placement(self, hardware: Hardware) -> Placement | None:
        """Where a TP server's ranks sit: the hardware's own link (two Sparks over ConnectX-7)."""
        return tensor_parallel_placement(hardware, self.tp) if self.tp > 1 else None

    def step_config(self, inventory: Inventory, hardware: Hardware) -> StepConfig:
        """The step model's configuration of this server (single stream)."""
        config = step_config(self.deployment(), inventory, hardware, batch=1, context=self.context,
                             acceptance_rate=self.scenario().acceptance_rate)
        return replace(config, placement=self.placement(hardware))


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
    fmt = inventory.main_quantized_format()
    votes: dict[str, int] = {}
    for module in inventory.modules:
        if module.format == fmt and (backend := backend_of(module.kernel)):
            votes[backend] = votes.get(backend, 0) + module.nbytes
    return max(votes, key=votes.get) if votes else None
