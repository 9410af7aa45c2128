"""A checkpoint as a vLLM deployment runs it: what its flags do to the inventory (vLLM's online FP8,
a draft checkpoint's layers read every draft token, an n-gram drafter that reads none) and the one
StepConfig the step model prices (roofline/predict/deployment.py), checked as vLLM would check it."""
from __future__ import annotations

from dataclasses import replace

from roofline.errors import RooflineError
from roofline.model.inventory import Inventory
from roofline.predict.deployment import (
    Deployment,
    backend,
    capture_tokens,
    checked,
    drafter_of,
    online_format,
    refusals,
    step_config,
)
from roofline.predict.hardware import Hardware
from roofline.predict.step import StepConfig

from .simulate import get_recipe, simulate

# the roles of a draft checkpoint that its drafting step does not read whole (roles.toml `read`)
DRAFT_KEEPS_ROLE = {"embedding"}


def host_flags(hardware: Hardware) -> frozenset[str] | None:
    """The CPU flags of this host where a CPU entry stands for it (a `calibrate --save` here)."""
    if hardware.host != "cpu":
        return None
    from roofline.sources.host import cpu_flags

    return cpu_flags()


def vllm_refusals(deployment: Deployment, inventory: Inventory, hardware: Hardware) -> list[str]:
    """What vLLM would refuse of the deployment here, this host's CPU included (predict/deployment.py)."""
    return refusals(deployment, inventory, hardware, host_flags(hardware))


def check(deployment: Deployment, inventory: Inventory, hardware: Hardware) -> Deployment:
    """The deployment, or one line with vLLM's first refusal, this host's CPU included."""
    return checked(deployment, inventory, hardware, host_flags(hardware))


def deployed_inventory(inventory: Inventory, deployment: Deployment, draft: Inventory | None = None) -> Inventory:
    """The inventory vLLM holds for this deployment: quantized online where --quantization asks it of a
    BF16 checkpoint, the draft checkpoint's layers added as draft layers (read once per draft token),
    the checkpoint's own MTP head left unloaded unless the drafter is MTP."""
    fmt = online_format(deployment, inventory)
    if fmt:
        inventory = simulate(inventory, fmt, get_recipe("vllm-online"))
        inventory = replace(inventory, quant=replace(inventory.quant, method=fmt, algo=f"{fmt.upper()} W8A8, online",
                                                     config_file=f"--quantization {fmt} (vLLM quantizes at load)"))
    spec = deployment.speculative
    if not spec or spec.method != "mtp":
        # vLLM loads a checkpoint's MTP layers only for the mtp method: the target model's loader skips them
        # (deepseek_v2 / qwen3_next / nemotron_h load_weights), so they take no memory and no reads otherwise
        inventory = replace(inventory, modules=[m for m in inventory.modules if m.role != "mtp"])
    if spec and spec.reads_draft_checkpoint:
        if draft is None:
            raise RooflineError(f"--speculative-config: the draft checkpoint {spec.model!r} was not read")
        prefix = "draft_model."
        added = [replace(m, name=prefix + m.name, layer=None,
                         role=m.role if m.role in DRAFT_KEEPS_ROLE else "mtp",
                         tied_to=prefix + m.tied_to if m.tied_to else None) for m in draft.modules]
        inventory = replace(inventory, modules=list(inventory.modules) + added)
    return inventory


def priced(inventory: Inventory, deployment: Deployment, hardware: Hardware, *, batch: int, context: int,
           acceptance_rate: float, routing: str = "uniform",
           draft: Inventory | None = None) -> tuple[Inventory, StepConfig]:
    """(the inventory as deployed, the StepConfig of `batch` streams at `context`): vLLM's refusals of
    the deployment first, as one line."""
    check(deployment, inventory, hardware)
    deployed = deployed_inventory(inventory, deployment, draft)
    return deployed, step_config(deployment, deployed, hardware, batch=batch, context=context,
                                 acceptance_rate=acceptance_rate, routing=routing)


DEFAULT_PROMPT = 512  # prompt tokens of the curve's requests when no --max-model-len says otherwise


def capacity_request(deployment: Deployment, inventory: Inventory, hardware: Hardware, acceptance_rate: float, *,
                     levels: tuple[int, ...], prompt_len: int | None, output_len: int, routing: str = "uniform",
                     min_tok_s: float | None = None, max_ttft_s: float | None = None, tp: int | None = None,
                     link: str | None = None, gpus: int | None = None, boxes: int | None = None,
                     network: str | None = None) -> "Request":
    """capacity's Request for this deployment: vLLM's memory flags, its topology, backend, graph mode and
    speculation; --max-model-len the model's own limit when not given (as vLLM), the curve's prompt the
    requests the KV answer counts."""
    from roofline.model.limits import check_max_model_len, max_positions

    from .capacity import Request

    max_model_len = deployment.max_model_len
    if prompt_len is None:
        # the curve prices the requests the user asked about: of --max-model-len tokens when given
        prompt_len = max(1, max_model_len - output_len) if max_model_len is not None else DEFAULT_PROMPT
    if max_model_len is None:
        max_model_len = max_positions(inventory.config)
        if max_model_len is None:
            raise RooflineError("the config states no max_position_embeddings: give --max-model-len")
    check_max_model_len(inventory.config, max_model_len)
    deployed = deployed_inventory(inventory, deployment) if not (deployment.speculative and
                                                                  deployment.speculative.reads_draft_checkpoint) \
        else inventory
    return Request(max_model_len=max_model_len, auto_max_model_len=deployment.auto_max_model_len,
                   kv_cache_dtype=deployment.kv_cache_dtype,
                   gpu_memory_utilization=deployment.gpu_memory_utilization,
                   kv_cache_memory_bytes=deployment.kv_cache_memory_bytes,
                   cpu_kvcache_space_gib=deployment.cpu_kvcache_space_gib, max_num_seqs=deployment.max_num_seqs,
                   max_num_batched_tokens=deployment.max_num_batched_tokens, block_size=deployment.block_size,
                   prefix_caching=deployment.prefix_caching is not False, concurrency=levels,
                   prompt_len=prompt_len, output_len=output_len, routing=routing, min_tok_s=min_tok_s,
                   max_ttft_ms=None if max_ttft_s is None else max_ttft_s * 1e3,
                   tp=tp if tp and tp != 1 else deployment.tp, link=link, enforce_eager=deployment.eager,
                   gpus=gpus, boxes=boxes, network=network, pp=deployment.pp, dp=deployment.dp,
                   expert_parallel=deployment.expert_parallel,
                   backend=backend(deployment, deployed, hardware),
                   attention_backend=deployment.attention_backend,
                   speculative_tokens=deployment.speculative_tokens, acceptance_rate=acceptance_rate,
                   draft_method=deployment.draft_method,
                   drafter=drafter_of(deployment, inventory),
                   chunked_prefill=deployment.chunked_prefill, async_scheduling=deployment.async_scheduling,
                   long_prefill_token_threshold=deployment.long_prefill_token_threshold,
                   max_num_active_seqs=deployment.max_num_active_seqs,
                   cudagraph_mode=deployment.cudagraph_mode or "full_and_piecewise",
                   capture_tokens=capture_tokens(deployment, hardware, inventory.shape.architecture))


def plan_workload(deployment: Deployment, acceptance_rate: float) -> dict:
    """What a deployment fixes of every plan row (recommend.Workload fields): eager or CUDA graphs, the
    backends asked for, speculation (its serve flag, tokens and per-token acceptance). plan simulates the
    model's own formats: a draft checkpoint is priced by audit, capacity and preflight."""
    import json

    spec = deployment.speculative
    if spec is not None and spec.reads_draft_checkpoint:
        raise RooflineError("plan simulates the model's own formats: a draft checkpoint (eagle / draft_model) is "
                            "priced by audit, capacity and preflight")
    fixed = {"graphs": not deployment.eager, "cudagraph_mode": deployment.cudagraph_mode or "full_and_piecewise",
             "async_scheduling": deployment.async_scheduling,
             "backend_names": tuple(n for n in (deployment.linear_backend, deployment.moe_backend) if n)}
    if spec is not None:
        fixed |= {"speculative_config": json.dumps({"method": spec.method, "num_speculative_tokens": spec.tokens}),
                  "speculative_tokens": spec.tokens, "draft_method": spec.method, "acceptance_rate": acceptance_rate}
    return fixed
