"""Preflight of a written-down deployment: a `vllm serve` line (or a recipe's) answered before vLLM
starts, for exactly that deployment. Memory and the KV tokens vLLM will log (advise/capacity.py), the
bytes of a token and what stayed BF16 (audit.py), tok/s at one stream and at --max-num-seqs (both from
the step model at the deployment's own StepConfig), TTFT, the validated band, vLLM's refusals, and what
each flag costs or buys against vLLM's default (the same pricing with that one flag taken away).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from roofline.audit import AuditResult, run_audit
from roofline.errors import RooflineError
from roofline.model.inventory import Inventory
from roofline.predict.deployment import Deployment, checkpoint_notes, flags, graph_notes, online_format, step_config
from roofline.predict.hardware import Hardware
from roofline.predict.scheduler_config import scheduler_settings
from roofline.predict.speculation import break_even, vllm_acceptance_rate
from roofline.predict.step import price_step
from roofline.predict.traffic import Scenario

from .capacity import Capacity, CurvePoint, capacity
from .deploy import capacity_request, deployed_inventory, vllm_refusals

SCHEMA = "roofline.preflight/1"


@dataclass(frozen=True)
class Workload:
    prompt_len: int = 1024
    output_len: int = 256
    routing: str = "uniform"
    acceptance_rate: float = 0.7  # per draft token (predict/speculation.py converts vLLM's figure)


@dataclass
class Priced:
    """One deployment priced: the audit of one stream, the capacity and its two curve points."""

    audit: AuditResult
    capacity: Capacity
    one: CurvePoint
    many: CurvePoint  # at --max-num-seqs, or the most that fit when fewer do

    def figures(self) -> dict:
        return {"tok_s_one_stream": self.one.aggregate_tok_s, "streams": self.many.concurrency,
                "tok_s_aggregate": self.many.aggregate_tok_s, "tok_s_per_stream": self.many.per_stream_tok_s,
                "kv_tokens": self.capacity.kv.tokens, "max_concurrency": self.capacity.kv.max_concurrency}


@dataclass
class FlagEffect:
    field: str
    given: str  # the flag or switch as written
    meaning: str
    without: dict | None  # the figures with this one flag at vLLM's default (None: not priceable)
    note: str = ""  # why it could not be priced without it (vLLM would refuse, does not fit, ...)

    def change(self, key: str, priced: dict) -> float | None:
        """Relative change of `key` that the flag makes (with vs without); None: not comparable."""
        if not self.without or not self.without.get(key):
            return None
        return priced[key] / self.without[key] - 1.0

    def to_json(self, priced: dict) -> dict:
        return {"field": self.field, "given": self.given, "meaning": self.meaning, "without": self.without,
                "note": self.note,
                "change": {key: self.change(key, priced) for key in ("tok_s_one_stream", "tok_s_aggregate",
                                                                     "kv_tokens", "max_concurrency")}}


@dataclass
class Preflight:
    deployment: Deployment
    hardware: Hardware
    workload: Workload
    refusals: list[str]
    priced: Priced | None
    error: str | None  # why the deployment could not be priced at all (does not fit, ...)
    effects: list[FlagEffect] = field(default_factory=list)
    break_even_acceptance: float | None = None  # vLLM's accepted / drafted below which speculation loses
    recipe: dict | None = None
    load: dict | None = None  # the deployment under a load (advise/load.LoadAnswer.to_json), when one was asked

    @property
    def starts(self) -> bool:
        return not self.refusals and self.error is None

    def to_json(self) -> dict:
        from roofline import __version__

        p = self.priced
        figures = p.figures() if p else None
        out = {"schema": SCHEMA, "roofline_version": __version__, "model": self.deployment.model,
               "hardware": self.hardware.key, "recipe": self.recipe, "deployment": self.deployment.to_json(),
               "workload": self.workload.__dict__ | {
                   "vllm_acceptance_rate": vllm_acceptance_rate(self.workload.acceptance_rate,
                                                                self.deployment.speculative_tokens)
                   if self.deployment.speculative else None},
               "scheduler": scheduler_settings(self.deployment, self.hardware).to_json(),
               "starts": self.starts, "refusals": list(self.refusals), "error": self.error, "figures": figures,
               "effects": [e.to_json(figures) for e in self.effects] if figures else [],
               "break_even_acceptance": self.break_even_acceptance}
        if p:
            audit = p.audit.to_json()
            out["audit"] = {key: audit[key] for key in (
                "weight_bytes", "bytes_per_token", "weight_bytes_per_token", "kv_bytes_per_token",
                "state_bytes_per_token", "ceiling_tok_s", "expected_tok_s", "expected_band", "residuals",
                "scenario", "quantization", "attention")}
            out["capacity"] = p.capacity.to_json()
            out["first_token"] = out["capacity"]["first_token"]
            out["one_stream"] = p.one.to_json()
            out["at_max_num_seqs"] = p.many.to_json()
        out["load"] = self.load
        return out


def _price(inventory: Inventory, deployment: Deployment, hardware: Hardware, workload: Workload,
           draft: Inventory | None) -> Priced:
    deployed = deployed_inventory(inventory, deployment, draft)
    streams = scheduler_settings(deployment, hardware).max_num_seqs
    request = capacity_request(deployment, inventory, hardware, workload.acceptance_rate, levels=(1, streams),
                               prompt_len=workload.prompt_len, output_len=workload.output_len,
                               routing=workload.routing)
    result = capacity(deployed, hardware, request)
    if result.fit_concurrency < streams and result.fit_concurrency >= 1:
        # fewer fit than --max-num-seqs admits: the most that run at once is what the server does
        streams = result.fit_concurrency
        result = capacity(deployed, hardware, replace(request, concurrency=tuple(sorted({1, streams}))))
    one = result.curve[0]
    many = next(p for p in result.curve if p.concurrency == streams)
    config = step_config(deployment, deployed, hardware, batch=1, context=result.context,
                         acceptance_rate=workload.acceptance_rate, routing=workload.routing)
    scenario = Scenario(batch=1, context=result.context, kv_cache_dtype=deployment.kv_cache_dtype,
                        speculative_tokens=deployment.speculative_tokens, draft_method=deployment.draft_method,
                        acceptance_rate=config.acceptance_rate,
                        routing=workload.routing)
    audit = run_audit(deployed, scenario, hardware, step_config=config, deployment=deployment)
    return Priced(audit, result, one, many)


def preflight(inventory: Inventory, deployment: Deployment, hardware: Hardware, workload: Workload, *,
              draft: Inventory | None = None, recipe: dict | None = None) -> Preflight:
    """The answer for exactly this deployment, each flag's effect beside it."""
    deployment = replace(deployment, notes=deployment.notes + checkpoint_notes(deployment, inventory)
                         + graph_notes(deployment, hardware, inventory.shape.architecture))
    found = vllm_refusals(deployment, inventory, hardware)
    try:
        priced = _price(inventory, deployment, hardware, workload, draft)
        error = None
    except RooflineError as exc:
        priced, error = None, str(exc)
    out = Preflight(deployment, hardware, workload, found, priced, error, recipe=recipe)
    if priced is None:
        return out
    meanings = {f.field: f.meaning for f in flags()} | {"speculative": "speculative decoding"}
    for name, given in deployment.spelled:
        if name in ("max_num_seqs",):
            # it sets the concurrency the figures are given at: its effect is the curve itself
            continue
        meaning = meanings.get(name, "")
        if name == "quantization" and online_format(deployment, inventory) is None:
            meaning = "the checkpoint's own quantization method, checked against its config as vLLM checks it"
        without = deployment.without(name)
        try:
            refused = vllm_refusals(without, inventory, hardware)
            if refused:
                raise RooflineError("; ".join(refused))
            figures = _price(inventory, without, hardware, workload, draft).figures()
            out.effects.append(FlagEffect(name, given, meaning, figures))
        except RooflineError as exc:
            out.effects.append(FlagEffect(name, given, meaning, None,
                                          note=f"without it: {exc}"))
    spec = deployment.speculative
    if spec:
        deployed = priced.audit.inventory
        base = step_config(deployment, deployed, hardware, batch=1, context=priced.capacity.context,
                           acceptance_rate=workload.acceptance_rate, routing=workload.routing)
        plain = price_step(deployed, hardware, replace(base, speculative_tokens=0)).tok_s
        even = break_even(lambda a: price_step(deployed, hardware, replace(base, acceptance_rate=a)).tok_s, plain,
                          spec.tokens)
        out.break_even_acceptance = None if even is None else vllm_acceptance_rate(even, spec.tokens)
    return out
