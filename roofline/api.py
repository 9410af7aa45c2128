"""roofline from Python (notebooks, other tools): the commands' answers as the typed results their JSON
is made from, a deployment given as vLLM's own Python arguments (`LLM(...)` / EngineArgs names:
tensor_parallel_size, enforce_eager, speculative_config as a dict, ...).

    import roofline
    result = roofline.audit("examples/Qwen3-8B", hardware="gb10", kv_cache_dtype="fp8", enforce_eager=True)
    result.expected_tok_s, result.to_json()["deployment"]

Every answer is priced by the same code the CLI runs (predict/deployment.py for the arguments, the step
model for every tok/s); a bad argument raises roofline.errors.RooflineError with the CLI's one line."""
from __future__ import annotations

import os
from typing import Annotated, Literal, Mapping

import msgspec
from msgspec import Meta

from roofline.errors import RooflineError
from roofline.predict.arguments import RANGES
from roofline.untrusted import printable

__all__ = ["audit", "capacity", "plan", "preflight"]


def _ranged(name: str):
    """The API's type of one of the tool's ranges (predict/arguments.py: the CLI's options are made from it)."""
    r = RANGES[name]
    bounds = {"gt" if r.low_open else "ge": r.low, "le": r.high}
    return Annotated[int if r.integer else float, Meta(**bounds)]


Text = Annotated[str, Meta(min_length=1, max_length=4096)]
Env = dict[Annotated[str, Meta(max_length=256)], Annotated[str, Meta(max_length=1 << 16)]]


class _Common(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    hardware: Text = "gb10"
    bandwidth: _ranged("bandwidth_gbps") | None = None
    routing: Literal["uniform", "shared"] = "uniform"
    speculative_tokens: _ranged("draft_tokens") = 0
    acceptance_rate: _ranged("acceptance") | None = None
    mean_acceptance_length: _ranged("mean_acceptance_length") | None = None
    env: Env | None = None
    use_cache: bool = True


class _AuditArgs(_Common, forbid_unknown_fields=True, kw_only=True):
    model: Text = ""
    batch: _ranged("sequences") = 1
    context: _ranged("context") | None = None
    revision: Text | None = None
    config_only: bool = False


class _Load(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A load, in the CLI's words (commands/options.load_options)."""
    request_rate: _ranged("request_rate") | Annotated[list[_ranged("request_rate")], Meta(max_length=64)] | None = None
    burst: _ranged("requests") | None = None
    trace: Text | None = None
    num_prompts: _ranged("requests") = 200
    random_range_ratio: Annotated[float, Meta(ge=0, lt=1)] = 0.0
    shared_prefix: Annotated[float, Meta(ge=0, lt=1)] = 0.0
    seed: Annotated[int, Meta(ge=0, le=2**32 - 1)] = 0
    ttft_p90: _ranged("seconds") | None = None
    min_tok_s: _ranged("tok_s") | None = None


def _load(args: dict, prompt_len: int, output_len: int, function: str, targets_alone: bool = False):
    """The load asked of roofline.capacity / preflight (None: none), checked as the CLI checks it."""
    _checked(_Load, function, args)
    rates = args["request_rate"]
    rates = () if rates is None else tuple(rates) if isinstance(rates, (list, tuple)) else (rates,)
    from roofline.advise.load import workload_for

    trace = None
    if args["trace"]:
        from roofline.live.traces import read_trace

        trace = read_trace(args["trace"], "trace")
    return workload_for(rates=rates, burst=args["burst"], trace=trace, requests=args["num_prompts"],
                        range_ratio=args["random_range_ratio"], shared_prefix=args["shared_prefix"], seed=args["seed"],
                        ttft_p90_s=args["ttft_p90"], min_tok_s=args["min_tok_s"], prompt_len=prompt_len,
                        output_len=output_len, targets_alone=targets_alone)


class _CapacityArgs(_Common, forbid_unknown_fields=True, kw_only=True):
    model: Text = ""
    concurrency: Annotated[list[_ranged("sequences")], Meta(min_length=1, max_length=256)]
    prompt_len: _ranged("prompt_tokens") | None = None
    output_len: _ranged("prompt_tokens") = 256
    revision: Text | None = None
    config_only: bool = False


class _Lengths(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    prompt_len: _ranged("prompt_tokens")
    output_len: _ranged("prompt_tokens")


class _PlanArgs(_Common, forbid_unknown_fields=True, kw_only=True):
    model: Text = ""
    formats: Annotated[list[Text], Meta(min_length=1, max_length=64)]
    recipes: Annotated[list[Text], Meta(min_length=1, max_length=64)]
    concurrency: _ranged("sequences") = 1
    context: _ranged("context") | None = None
    kv_cache_dtype: Text = "auto"


class _PreflightArgs(_Common, forbid_unknown_fields=True, kw_only=True):
    serve_line: Annotated[str, Meta(min_length=1, max_length=1 << 16)] | \
        Annotated[list[Annotated[str, Meta(max_length=1 << 16)]], Meta(min_length=1, max_length=4096)] | None = None
    recipe: Text | None = None
    overrides: Env | None = None
    prompt_len: _ranged("prompt_tokens") = 1024
    output_len: _ranged("prompt_tokens") = 256


def _checked(kind: type, function: str, values: dict) -> None:
    """The arguments of roofline.<function>(...) against the same ranges the CLI's options take: a wrong type
    (batch="8", hardware=["gb10"], recipe=1), a value out of range (bandwidth=nan, batch=2.5) is one
    RooflineError naming the argument, never a TypeError further down or a wrong number."""
    values = {k: (list(v) if isinstance(v, tuple) else v) for k, v in values.items()}
    try:
        msgspec.convert(values, kind, strict=True)
    except msgspec.ValidationError as exc:
        text = str(exc)
        where = text.rsplit(" - at `$.", 1)
        name = where[1].rstrip("`").split("[")[0].split(".")[0] if len(where) == 2 else ""
        raise RooflineError(f"roofline.{function}({name}=...): {printable(where[0], 200)}") from None


def _deployment(model: str | None, vllm_args: dict, env: Mapping[str, str] | None, speculative_tokens: int,
                acceptance_rate: float | None, mean_acceptance_length: float | None):
    from roofline.audit import attach_draft
    from roofline.predict.deployment import python_values, with_acceptance

    deployment, acceptance = with_acceptance(
        python_values(vllm_args), {**os.environ, **(env or {})}, model=model, speculative_tokens=speculative_tokens,
        acceptance_rate=acceptance_rate, mean_acceptance_length=mean_acceptance_length)
    return attach_draft(deployment), acceptance


def _inventory(model: str, revision: str | None, config_only: bool, use_cache: bool):
    from roofline.audit import load_inventory

    return load_inventory(model, revision=revision, config_only=config_only, use_cache=use_cache)


def _draft(deployment, use_cache: bool):
    spec = deployment.speculative
    if not spec or not spec.reads_draft_checkpoint:
        return None
    from roofline.audit import load_inventory

    return load_inventory(spec.model, use_cache=use_cache)


def audit(model: str, *, hardware: str = "gb10", bandwidth: float | None = None, batch: int = 1,
          context: int | None = None, routing: str = "uniform", speculative_tokens: int = 0,
          acceptance_rate: float | None = None, mean_acceptance_length: float | None = None,
          env: Mapping[str, str] | None = None, revision: str | None = None, config_only: bool = False,
          use_cache: bool = True, **vllm_args):
    """`roofline audit MODEL`: an AuditResult (.expected_tok_s, .ceiling_tok_s, .residuals, .step,
    .to_json()) of the model as the vLLM arguments deploy it."""
    from roofline.advise.deploy import priced
    from roofline.audit import run_audit
    from roofline.predict.hardware import get_hardware
    from roofline.predict.traffic import Scenario

    _checked(_AuditArgs, "audit", dict(model=model, hardware=hardware, bandwidth=bandwidth, batch=batch,
                                        context=context, routing=routing, speculative_tokens=speculative_tokens,
                                        acceptance_rate=acceptance_rate, mean_acceptance_length=mean_acceptance_length,
                                        env=env, revision=revision, config_only=config_only, use_cache=use_cache))
    deployment, per_token = _deployment(model, vllm_args, env, speculative_tokens, acceptance_rate,
                                        mean_acceptance_length)
    if context is None:
        context = min(1024, deployment.max_model_len or 1024)
    if deployment.max_model_len is not None and context > deployment.max_model_len:
        raise RooflineError(f"context {context} is more than max_model_len {deployment.max_model_len}")
    scenario = Scenario(batch=batch, context=context, kv_cache_dtype=deployment.kv_cache_dtype,
                        speculative_tokens=deployment.speculative_tokens, draft_method=deployment.draft_method,
                        acceptance_rate=per_token,
                        routing=routing).validate()
    target = get_hardware(hardware, bandwidth)
    inventory = _inventory(model, revision, config_only, use_cache)
    deployed, config = priced(inventory, deployment, target, batch=batch, context=context, acceptance_rate=per_token,
                              routing=routing, draft=_draft(deployment, use_cache))
    return run_audit(deployed, scenario, target, step_config=config, deployment=deployment)


def capacity(model: str, *, hardware: str = "gb10", bandwidth: float | None = None,
             concurrency: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256), prompt_len: int | None = None,
             output_len: int = 256, routing: str = "uniform", speculative_tokens: int = 0,
             acceptance_rate: float | None = None, mean_acceptance_length: float | None = None,
             env: Mapping[str, str] | None = None, revision: str | None = None, config_only: bool = False,
             use_cache: bool = True, request_rate=None, burst: int | None = None, trace: str | None = None,
             num_prompts: int = 200, random_range_ratio: float = 0.0, shared_prefix: float = 0.0, seed: int = 0,
             ttft_p90: float | None = None, min_tok_s: float | None = None, **vllm_args):
    """`roofline capacity MODEL`: a Capacity (.kv.tokens, .kv.max_concurrency, .curve, .first_token_s(),
    .to_json()); with a load (request_rate: one rate or several, burst, trace; targets ttft_p90 seconds,
    min_tok_s) its answer under it as .load (the JSON `capacity --request-rate ...` prints under "load")."""
    from roofline.advise.capacity import capacity as size
    from roofline.advise.deploy import capacity_request, check, deployed_inventory
    from roofline.predict.hardware import get_hardware

    _checked(_CapacityArgs, "capacity", dict(
        model=model, hardware=hardware, bandwidth=bandwidth, concurrency=concurrency, prompt_len=prompt_len,
        output_len=output_len, routing=routing, speculative_tokens=speculative_tokens, acceptance_rate=acceptance_rate,
        mean_acceptance_length=mean_acceptance_length, env=env, revision=revision, config_only=config_only,
        use_cache=use_cache))
    deployment, per_token = _deployment(model, vllm_args, env, speculative_tokens, acceptance_rate,
                                        mean_acceptance_length)
    target = get_hardware(hardware, bandwidth)
    inventory = _inventory(model, revision, config_only, use_cache)
    check(deployment, inventory, target)
    request = capacity_request(deployment, inventory, target, per_token, levels=tuple(concurrency),
                               prompt_len=prompt_len, output_len=output_len, routing=routing)
    result = size(deployed_inventory(inventory, deployment, _draft(deployment, use_cache)), target, request)
    load = _load(dict(request_rate=request_rate, burst=burst, trace=trace, num_prompts=num_prompts,
                      random_range_ratio=random_range_ratio, shared_prefix=shared_prefix, seed=seed, ttft_p90=ttft_p90,
                      min_tok_s=min_tok_s), request.prompt_len, request.output_len, "capacity")
    if load is not None:
        from roofline.advise.load import load_json

        workload, rates, burst, targets, notes = load
        result.load = load_json(result.server, result.band, workload, rates, burst,
                                targets if targets.ttft_p90_s is not None else None, notes)
    return result


def plan(model: str, *, hardware: str = "gb10", bandwidth: float | None = None,
         formats: tuple[str, ...] = ("bf16", "fp8", "nvfp4-w4a16", "nvfp4-w4a4", "mxfp4", "int4-awq"),
         recipes: tuple[str, ...] = ("default", "modelopt", "hybrid-safe"), concurrency: int = 1,
         context: int | None = None, kv_cache_dtype: str = "auto", routing: str = "uniform",
         speculative_tokens: int = 0, acceptance_rate: float | None = None,
         mean_acceptance_length: float | None = None, env: Mapping[str, str] | None = None,
         use_cache: bool = True, request_rate: float | None = None, burst: int | None = None, trace: str | None = None,
         num_prompts: int = 200, random_range_ratio: float = 0.0, shared_prefix: float = 0.0, seed: int = 0,
         prompt_len: int = 512, output_len: int = 256, ttft_p90: float | None = None, min_tok_s: float | None = None,
         **vllm_args):
    """`roofline plan MODEL`: a Plan (.recommendations ranked, .to_json()) for one device and workload; with a load
    (one request_rate, a burst or a trace, and / or the targets ttft_p90 seconds and min_tok_s) the rows ranked
    under it, each row's run as .load (the JSON `plan --request-rate ...` prints)."""
    from roofline.advise.deploy import check, plan_workload
    from roofline.advise.recommend import build_plan
    from roofline.audit import is_quantized
    from roofline.model.limits import default_context
    from roofline.predict.hardware import get_hardware
    from roofline.sources.config import base_inventory

    _checked(_PlanArgs, "plan", dict(
        model=model, hardware=hardware, bandwidth=bandwidth, formats=formats, recipes=recipes, concurrency=concurrency,
        context=context, kv_cache_dtype=kv_cache_dtype, routing=routing, speculative_tokens=speculative_tokens,
        acceptance_rate=acceptance_rate, mean_acceptance_length=mean_acceptance_length, env=env, use_cache=use_cache))
    target = get_hardware(hardware, bandwidth)
    given = _inventory(model, None, False, use_cache)
    if context is None:
        context = default_context(given.config, 4096)
    inventory, base_of = given, None
    if is_quantized(given) and given.config:
        inventory, base_of = base_inventory(given, use_cache=use_cache), given
    deployment, per_token = _deployment(model, {**vllm_args, "kv_cache_dtype": kv_cache_dtype}, env,
                                        speculative_tokens, acceptance_rate, mean_acceptance_length)
    check(deployment, given, target)
    from roofline.advise.plan_load import plan_load

    _checked(_Lengths, "plan", dict(prompt_len=prompt_len, output_len=output_len))
    load = plan_load(_load(dict(request_rate=request_rate, burst=burst, trace=trace, num_prompts=num_prompts,
                                random_range_ratio=random_range_ratio, shared_prefix=shared_prefix, seed=seed,
                                ttft_p90=ttft_p90, min_tok_s=min_tok_s), prompt_len, output_len, "plan",
                           targets_alone=True))
    return build_plan(inventory, target, formats=list(formats), recipes=list(recipes), concurrency=concurrency,
                      context=context, kv_cache_dtype=deployment.kv_cache_dtype, routing=routing, base_of=base_of,
                      served_as=model, deployment=plan_workload(deployment, per_token), load=load)


def preflight(serve_line: str | list[str] | None = None, *, recipe: str | None = None,
              overrides: Mapping[str, str] | None = None, hardware: str = "gb10", bandwidth: float | None = None,
              prompt_len: int = 1024, output_len: int = 256, routing: str = "uniform",
              acceptance_rate: float | None = None, mean_acceptance_length: float | None = None,
              env: Mapping[str, str] | None = None, use_cache: bool = True, request_rate=None,
              burst: int | None = None, trace: str | None = None, num_prompts: int = 200,
              random_range_ratio: float = 0.0, shared_prefix: float = 0.0, seed: int = 0,
              ttft_p90: float | None = None, min_tok_s: float | None = None):
    """`roofline preflight`: a Preflight (.priced, .refusals, .effects, .to_json()) of a serve line
    (a string as a shell would split it, or its words) or a recipe file; with a load (as capacity's) its answer
    under it as .load."""
    from roofline.advise.preflight import Workload
    from roofline.advise.preflight import preflight as answer
    from roofline.predict.deployment import acceptance_for, parse_serve_line
    from roofline.predict.hardware import get_hardware

    _checked(_PreflightArgs, "preflight", dict(
        serve_line=serve_line, recipe=recipe, overrides=overrides, hardware=hardware, bandwidth=bandwidth,
        prompt_len=prompt_len, output_len=output_len, routing=routing, acceptance_rate=acceptance_rate,
        mean_acceptance_length=mean_acceptance_length, env=env, use_cache=use_cache))
    if (serve_line is None) == (recipe is None):
        raise RooflineError("give a serve line or a recipe, not both")
    recipe_json, line_env = None, {}
    if recipe is not None:
        from roofline.sources.recipe import read_recipe

        read = read_recipe(recipe, dict(overrides or {}), hardware=get_hardware(hardware, bandwidth).key)
        serve_line, line_env, recipe_json = read.serve_line, dict(read.env), read.to_json()
    deployment = parse_serve_line(serve_line, {**line_env, **(env or {})})
    per_token = acceptance_for(deployment, acceptance_rate, mean_acceptance_length)
    target = get_hardware(hardware, bandwidth)
    inventory = _inventory(deployment.model, None, False, use_cache)
    out = answer(inventory, deployment, target, Workload(prompt_len, output_len, routing, per_token),
                 draft=_draft(deployment, use_cache), recipe=recipe_json)
    load = _load(dict(request_rate=request_rate, burst=burst, trace=trace, num_prompts=num_prompts,
                      random_range_ratio=random_range_ratio, shared_prefix=shared_prefix, seed=seed, ttft_p90=ttft_p90,
                      min_tok_s=min_tok_s), prompt_len, output_len, "preflight")
    if load is not None and out.priced is not None:
        from roofline.advise.load import load_json

        workload, rates, burst, targets, notes = load
        out.load = load_json(out.priced.capacity.server, out.priced.capacity.band, workload, rates, burst, targets,
                             notes)
    return out
