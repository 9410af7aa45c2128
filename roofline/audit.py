"""The audit: source -> inventory -> traffic -> the step model, as one result with a JSON form.

JSON schema (stable keys; version in "schema"): see README.md, "audit --json".
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, replace

from roofline.model.formats import PLAIN_FORMATS, format_label
from roofline.model.grouping import short_label
from roofline.model.inventory import Inventory
from roofline.model.limits import check_max_model_len
from roofline.model.roles import roles_where
from roofline.predict.bands import Band, band_for, band_json, step_regime
from roofline.predict.graphs import cuda_graph_summary
from roofline.predict.hardware import Hardware
from roofline.predict.first_token import FirstToken
from roofline.predict.step import StepConfig, StepTime, price_step
from roofline.predict.traffic import Scenario, Traffic, compute_traffic
from roofline.sources.capture import inventory_from_capture
from roofline.sources.config import load_config_only, load_config_only_hub
from roofline.sources.hub import NoSafetensors, load_hub, looks_like_repo_id
from roofline.sources.local import load_local

from . import __version__
from .errors import RooflineError

SCHEMA = "roofline.audit/1"
# roles whose staying unquantized in a quantized model is a residual worth naming (roles.toml)
RESIDUAL_ROLES = roles_where(residual=True)


def load_inventory(model: str, *, revision: str | None = None, config_only: bool = False,
                   from_vllm: str | None = None, trust_remote_code: bool = False, use_cache: bool = True) -> Inventory:
    """Pick the source for MODEL: a vLLM capture, a local folder, or a hub id."""
    if from_vllm:
        return inventory_from_capture(from_vllm)
    if not model:
        raise RooflineError("no MODEL given")
    local = os.path.isdir(model)
    if local:
        has_weights = any(f.endswith(".safetensors") for f in os.listdir(model))
        if config_only or not has_weights:
            if not os.path.lexists(os.path.join(model, "config.json")):
                raise RooflineError(f"{model}: no config.json")  # one that is there is read as a regular file
            return load_config_only(model, trust_remote_code=trust_remote_code, use_cache=use_cache)
        return load_local(model)
    if looks_like_repo_id(model):
        if config_only:
            return load_config_only_hub(model, revision=revision, trust_remote_code=trust_remote_code,
                                        use_cache=use_cache)
        try:
            return load_hub(model, revision=revision)
        except NoSafetensors:
            # config.json but no weights yet: what the config alone says (a local folder does the same)
            return load_config_only_hub(model, revision=revision, trust_remote_code=trust_remote_code,
                                        use_cache=use_cache)
    if os.path.exists(model):
        raise RooflineError(f"{model}: not a directory (give the checkpoint folder)")
    raise RooflineError(f"{model}: no such directory, and not a hub id of the form org/name")


@dataclass
class Group:
    label: str
    role: str
    format: str
    quant_method: str
    count: int
    params: int
    bytes: int
    bytes_per_token: float
    share: float  # of bytes per token
    residual: bool


@dataclass
class AuditResult:
    inventory: Inventory
    scenario: Scenario
    hardware: Hardware
    traffic: Traffic
    step: StepTime  # the step model's price of the scenario (roofline.predict.step)
    groups: list[Group]
    notes: list[str] = field(default_factory=list)
    cuda_graph: dict | None = None  # roofline.predict.graphs.cuda_graph_summary, on a GPU
    deployment: object = None  # roofline.predict.deployment.Deployment the step runs (None: vLLM's defaults)
    first_token: FirstToken | None = None  # a prompt of the scenario's context, alone (predict/first_token.py)

    @property
    def quantized(self) -> bool:
        return is_quantized(self.inventory)

    @property
    def residuals(self) -> list[Group]:
        return [g for g in self.groups if g.residual]

    @property
    def expected_tok_s(self) -> float:
        """The step model's aggregate tok/s for the scenario (CUDA graphs on, vLLM's default)."""
        return self.step.tok_s

    @property
    def ceiling_tok_s(self) -> float:
        return self.step.ceiling_tok_s

    def band(self, graphs: bool | None = None) -> Band | None:
        """The validated error band of the expected tok/s (None: no validation for this class)."""
        own_mode = graphs is None or graphs == self.step.config.graphs
        return band_for(self.inventory, self.hardware, self.step.config.graphs if graphs is None else graphs,
                        self.step.config.batch, step_regime(self.step) if own_mode else "",
                        kernel=self.step.backend.kernel)

    def to_json(self) -> dict:
        inv, shape, hw, t = self.inventory, self.inventory.shape, self.hardware, self.traffic
        weights_gb = inv.weight_bytes / 1e9
        out = {
            "schema": SCHEMA,
            "roofline_version": __version__,
            "model": inv.model_id,
            "source": inv.source,
            "architecture": {
                "architecture": shape.architecture, "model_type": shape.model_type,
                "num_layers": shape.num_layers, "hidden_size": shape.hidden_size, "vocab_size": shape.vocab_size,
                "dtype": shape.dtype, "num_experts": shape.num_experts,
                "experts_per_token": shape.experts_per_token, "attention_layers": len(shape.attention),
                "recurrent_layers": len(shape.recurrent), "mtp_layers": shape.mtp_layers,
                "tie_word_embeddings": shape.tie_word_embeddings,
            },
            "quantization": asdict(inv.quant),
            "hardware": {
                "key": hw.key, "name": hw.name, "bandwidth_gbps": hw.bandwidth_gbps,
                "bandwidth_source": hw.bandwidth_source, "bandwidth_kind": hw.bandwidth_kind,
                "bandwidth_basis": hw.bandwidth_basis(), "memory_gb": hw.memory_gb,
                "usable_memory_gb": hw.usable_memory_gb, "compute_capability": hw.compute_capability,
                "host": hw.host,
            },
            # the acceptance of a scenario without speculation is nobody's figure: null, not the default
            "scenario": asdict(self.scenario) | {"kv_cache_dtype_resolved": t.kv_dtype} | (
                {} if self.scenario.speculative_tokens else {"acceptance_rate": None}),
            "weight_bytes": inv.weight_bytes,
            "bytes_per_token": t.bytes_per_token,
            "weight_bytes_per_token": t.weight_bytes_per_token,
            "kv_bytes_per_token": t.kv_bytes_per_token,
            "state_bytes_per_token": t.state_bytes_per_token,
            "ceiling_tok_s": self.ceiling_tok_s,
            "ceiling_tok_s_per_stream": self.ceiling_tok_s / self.scenario.batch,
            "expected_tok_s": self.expected_tok_s,
            "first_token": self.first_token.to_json() if self.first_token is not None else None,
            "expected_band": band_json(self.band()),
            "eager_band": band_json(self.band(graphs=False)),
            "efficiency": {"value": hw.efficiency, "kind": hw.efficiency_kind, "source": hw.efficiency_source},
            "step": self.step.to_json(),
            "attention": self.step.attention_json(),
            "memory": {"weights_gb": weights_gb, "usable_gb": hw.usable_memory_gb,
                       "fits": weights_gb <= hw.usable_memory_gb},
            "modules": [
                {"name": m.name, "layer": m.layer, "role": m.role, "format": m.format,
                 "quant_method": m.quant_method, "params": m.params, "bytes": m.bytes,
                 "bytes_per_token": m.bytes_per_token, "read_fraction": m.read_fraction,
                 "experts": mod.experts, "tied_to": mod.tied_to, "kernel": mod.kernel}
                for m, mod in zip(t.modules, inv.modules)
            ],
            "groups": [asdict(g) | {"format_label": format_label(g.format)} for g in self.groups],
            "residuals": [asdict(g) | {"format_label": format_label(g.format)} for g in self.residuals],
            "disagreements": list(inv.disagreements),
            "notes": list(self.notes) + list(t.notes),
            "bytes_read": inv.bytes_read,
            "checkpoint_bytes": inv.checkpoint_bytes,
        }
        if self.cuda_graph is not None:
            out["cuda_graph"] = self.cuda_graph
        if self.deployment is not None:
            out["deployment"] = self.deployment.to_json()
        return out


def attach_draft(deployment):
    """The deployment with its draft checkpoint read (--speculative-config's `model` for EAGLE heads and draft
    models: a local folder or a hub id, audited like any checkpoint), so that its forwards are priced."""
    spec = deployment.speculative if deployment is not None else None
    if spec is None or not spec.reads_draft_checkpoint or not spec.model:
        return deployment
    try:
        draft = load_inventory(spec.model, revision=dict(spec.fields).get("revision"))
    except RooflineError as err:
        raise RooflineError(f"--speculative-config model: {err}") from None
    return replace(deployment, draft_inventory=draft)


def is_quantized(inventory: Inventory) -> bool:
    """Any weight stored below 16 bits: only then does an unquantized linear count as a residual."""
    return any(m.format not in PLAIN_FORMATS.values() and m.params for m in inventory.modules)


def group_modules(traffic: Traffic, quantized: bool) -> list[Group]:
    """role x format x quant method, per kind of module ("linear_attn.in_proj_qkvz")."""
    total = traffic.bytes_per_token or 1.0
    groups: dict[tuple, Group] = {}
    for m in traffic.modules:
        key = (short_label(m.name), m.role, m.format, m.quant_method)
        group = groups.get(key)
        if group is None:
            residual = quantized and m.format in PLAIN_FORMATS.values() and m.role in RESIDUAL_ROLES
            group = groups[key] = Group(key[0], m.role, m.format, m.quant_method, 0, 0, 0, 0.0, 0.0, residual)
        group.count += 1
        group.params += m.params
        group.bytes += m.bytes
        group.bytes_per_token += m.bytes_per_token
    for group in groups.values():
        group.share = group.bytes_per_token / total
    return sorted(groups.values(), key=lambda g: (-g.bytes_per_token, -g.bytes, g.label))


def audit_step_config(scenario: Scenario) -> StepConfig:
    """The serving configuration an audit prices: the scenario on one device, CUDA graphs on,
    vLLM's default backend for the checkpoint's format."""
    return StepConfig(batch=scenario.batch, context=scenario.context, kv_cache_dtype=scenario.kv_cache_dtype,
                      speculative_tokens=scenario.speculative_tokens, acceptance_rate=scenario.acceptance_rate,
                      routing=scenario.routing)


def run_audit(inventory: Inventory, scenario: Scenario, hardware: Hardware, *,
              step_config: StepConfig | None = None, deployment=None) -> AuditResult:
    check_max_model_len(inventory.config, scenario.context, "--context")
    traffic = compute_traffic(inventory, scenario)
    config = step_config or audit_step_config(scenario)
    step = price_step(inventory, hardware, config)
    return AuditResult(inventory, scenario, hardware, traffic, step, group_modules(traffic, is_quantized(inventory)),
                       cuda_graph=cuda_graph_summary(step), deployment=deployment,
                       first_token=first_token_of(inventory, hardware, config, deployment, scenario.context))


def first_token_of(inventory: Inventory, hardware: Hardware, config: StepConfig, deployment, prompt: int) \
        -> FirstToken | None:
    """The first token of a `prompt`-token request alone on this deployment (vLLM's defaults where None): its
    scheduler's step budget, its CUDA-graph capture, the step model's prompt steps, the host's time per request.
    None for a data-parallel split (each engine answers its own requests: capacity prices one)."""
    from roofline.predict.deployment import Deployment, capture_tokens
    from roofline.predict.first_token import first_token
    from roofline.predict.prefill import request_overhead_s
    from roofline.predict.scheduler_config import scheduler_settings
    from roofline.predict.step import StepPricer

    if config.topology.dp > 1:
        return None
    deployment = deployment or Deployment()
    if config.graphs and config.capture_tokens is None:
        config = replace(config, capture_tokens=capture_tokens(deployment, hardware, inventory.shape.architecture))
    pricer = StepPricer(inventory, hardware, replace(config, batch=1, chunks=()))
    return first_token(pricer, scheduler_settings(deployment, hardware), prompt, request_overhead_s(hardware))
