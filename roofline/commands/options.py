"""Options shared by audit, plan and validate: the scenario and the hardware."""
from __future__ import annotations

import os

import click

from roofline.errors import RooflineError
from roofline.predict.hardware import DEFAULT_HARDWARE, get_hardware
from roofline.predict.traffic import Scenario

from . import types


# which experts a step of several MoE streams reads: every command that prices a batch says which it assumed
routing_option = click.option(
    "--routing", type=click.Choice(["uniform", "shared"]), default="uniform", show_default=True,
    help="MoE experts per step of several streams: uniform (distinct prompts: E x (1 - (1 - k/E)^B) experts) or "
         "shared (one prompt sent to every stream at temperature 0, as many benchmarks do: one token's experts).")


class VllmValue(click.ParamType):
    """One vLLM serve flag's value, read as vLLM reads it (roofline/data/vllm_args.toml through
    predict/deployment.convert): a wrong one is one line and exit code 2."""

    def __init__(self, flag):
        self.flag = flag
        self.name = flag.value

    def convert(self, value, param, ctx):
        from roofline.errors import RooflineError
        from roofline.predict.deployment import convert

        if not isinstance(value, str):
            return value
        try:
            return convert(self.flag, value, self.flag.name)
        except RooflineError as exc:
            self.fail(str(exc).partition(": ")[2] or str(exc), param, ctx)


def deployment_options(func=None, *, skip: tuple[str, ...] = ()):
    """Every vLLM serve flag of the deployment table as an option, spelled as vLLM spells it, plus
    --env KEY=VALUE and speculation's acceptance in vLLM's terms. `skip`: fields the command takes
    its own way (none of the pricing commands drops one silently: test_deployment walks the table)."""
    from roofline.predict.deployment import flags

    def decorate(f):
        options = []
        for flag in flags():
            if flag.field in skip:
                continue
            help_text = f"vLLM's {flag.name}: {flag.meaning}."
            names = [n for n in flag.names if n != "-q"]  # -q is the tool's --quiet
            if flag.value == "bool":
                options.append(click.option(*names, flag.field, is_flag=True, default=None, help=help_text))
            elif flag.value == "negatable":
                options.append(click.option(f"{flag.name}/{flag.negative}", flag.field, default=None,
                                            help=help_text))
            else:
                options.append(click.option(*names, flag.field, type=VllmValue(flag), default=None,
                                            help=help_text))
        options += [
            click.option("--env", "env_assignments", multiple=True, metavar="KEY=VALUE",
                         help="A vLLM environment switch as the server would see it (VLLM_NVFP4_GEMM_BACKEND, "
                              "VLLM_USE_FLASHINFER_MOE_FP4, VLLM_TEST_FORCE_FP8_MARLIN, VLLM_CPU_KVCACHE_SPACE); "
                              "the command's own environment is read too."),
            click.option("--speculative", "speculative_tokens", type=types.DRAFT_TOKENS, default=0,
                         show_default=True, help="MTP draft tokens per step (0: off); the short form of "
                         "--speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": N}'."),
            click.option("--acceptance-rate", type=types.ACCEPTANCE, default=None,
                         help="Speculation's acceptance as vLLM reports it: accepted / drafted tokens "
                              "(vllm:spec_decode_num_accepted_tokens / num_draft_tokens) [default: 0.5]."),
            click.option("--mean-acceptance-length", type=types.MEAN_ACCEPTANCE_LENGTH, default=None,
                         help="Or vLLM's mean acceptance length: 1 + accepted tokens per draft."),
        ]
        for option in reversed(options):
            f = option(f)
        return f

    return decorate(func) if func is not None else decorate


def deployment_from(kwargs: dict, model: str | None = None):
    """Pop the deployment options out of a command's kwargs: one Deployment (the environment of the
    command and each --env read as the server would read its own) and the per-token acceptance the
    step model takes (predict/deployment.with_acceptance, the one conversion)."""
    from roofline.predict.deployment import flags, parse_env_assignments, with_acceptance

    values = {f.field: kwargs.pop(f.field) for f in flags() if f.field in kwargs}
    env = {**os.environ, **parse_env_assignments(kwargs.pop("env_assignments", ()) or ())}
    from roofline.audit import attach_draft

    deployment, acceptance = with_acceptance(
        values, env, model=model, speculative_tokens=kwargs.pop("speculative_tokens", 0),
        acceptance_rate=kwargs.pop("acceptance_rate", None),
        mean_acceptance_length=kwargs.pop("mean_acceptance_length", None))
    return attach_draft(deployment), acceptance


def scenario_options(func):
    for option in reversed([
        click.option("--hardware", "hardware_name", default=DEFAULT_HARDWARE, show_default=True,
                     help="Target from the hardware catalogue (gb10, h100-sxm, h200, b200, rtx-pro-6000, ...)."),
        click.option("--bandwidth", type=types.BANDWIDTH_GBPS, default=None, help="Override the memory bandwidth, GB/s."),
        click.option("--batch", type=types.SEQUENCES, default=1, show_default=True, help="Sequences decoded together."),
        click.option("--context", type=types.CONTEXT_TOKENS, default=None,
                     help="Tokens in each sequence's KV cache [default: 1024, or --max-model-len when shorter]."),
        routing_option,
    ]):
        func = option(func)
    return deployment_options(func)


DEFAULT_CONTEXT = 1024


def scenario_from(kwargs: dict, model: str | None = None):
    """(scenario, hardware, deployment) of a command priced at one scenario: the deployment's KV dtype
    and speculation, its --max-model-len bounding the context and its --max-num-seqs the batch."""
    deployment, per_token = deployment_from(kwargs, model)
    context, batch = kwargs.pop("context"), kwargs.pop("batch")
    if context is None:
        context = min(DEFAULT_CONTEXT, deployment.max_model_len or DEFAULT_CONTEXT)
    if deployment.max_model_len is not None and context > deployment.max_model_len:
        raise RooflineError(f"--context {context} is more than --max-model-len {deployment.max_model_len}: vLLM "
                            "holds no request that long")
    if deployment.max_num_seqs is not None and batch > deployment.max_num_seqs:
        raise RooflineError(f"--batch {batch} is more than --max-num-seqs {deployment.max_num_seqs}: vLLM decodes at "
                            f"most {deployment.max_num_seqs} sequences together")
    scenario = Scenario(batch=batch, context=context, kv_cache_dtype=deployment.kv_cache_dtype,
                        speculative_tokens=deployment.speculative_tokens, draft_method=deployment.draft_method,
                        acceptance_rate=per_token,
                        routing=kwargs.pop("routing")).validate()
    hardware = get_hardware(kwargs.pop("hardware_name"), kwargs.pop("bandwidth"))
    return scenario, hardware, deployment


no_cache_option = click.option(
    "--no-cache", is_flag=True,
    help="Config-only path: build the skeleton afresh instead of reading the cache ($ROOFLINE_CACHE, else "
         "$XDG_CACHE_HOME/roofline or ~/.cache/roofline).")


def _set_quiet(ctx, param, value):
    from roofline import progress

    progress.set_quiet(value)
    return value


quiet_option = click.option("--quiet", "-q", is_flag=True, expose_value=False, callback=_set_quiet,
                            help="No progress on stderr (shown only when stderr is a terminal).")


def source_options(func):
    """Where MODEL's inventory comes from: shared by audit and capacity."""
    for option in reversed([
        click.option("--revision", default=None, help="Hub revision (branch, tag or commit)."),
        click.option("--config-only", is_flag=True, help="Build the inventory from config.json alone (no safetensors)."),
        no_cache_option,
        quiet_option,
        click.option("--from-vllm", "from_vllm", type=click.Path(dir_okay=False), default=None,
                     help="Use a live inventory written by `roofline capture` instead of MODEL."),
    ]):
        func = option(func)
    return func


def draft_inventory(deployment, use_cache: bool = True):
    """The draft checkpoint a --speculative-config names (eagle / draft_model), read as MODEL is; None
    for MTP and n-gram drafting."""
    spec = deployment.speculative
    if not spec or not spec.reads_draft_checkpoint:
        return None
    from roofline.audit import load_inventory

    try:
        return load_inventory(spec.model, use_cache=use_cache)
    except RooflineError as exc:
        raise RooflineError(f"--speculative-config model {spec.model!r}: {exc}") from None


def priced_audit(inventory, scenario, hardware, deployment, use_cache: bool = True):
    """The audit of `inventory` as `deployment` runs it at `scenario` (audit, kernels, compare, validate)."""
    from roofline.advise.deploy import priced
    from roofline.audit import run_audit

    deployed, config = priced(inventory, deployment, hardware, batch=scenario.batch, context=scenario.context,
                              acceptance_rate=scenario.acceptance_rate, routing=scenario.routing,
                              draft=draft_inventory(deployment, use_cache))
    return run_audit(deployed, scenario, hardware, step_config=config, deployment=deployment)


def load_options(func):
    """The load a server is asked to carry (advise/load.py), in vllm bench serve's words where it has them."""
    for option in reversed([
        click.option("--request-rate", "request_rates", type=types.REQUEST_RATE, multiple=True,
                     help="Requests per second arriving at random (Poisson, as vllm bench serve sends them); "
                          "several for a sweep: TTFT, inter-token latency and end-to-end latency at each."),
        click.option("--burst", type=types.REQUESTS, default=None,
                     help="This many requests sent at once (how TTFT grows as they queue behind each other)."),
        click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None,
                     help="Requests from a file: JSONL of arrival time, prompt and output tokens (Mooncake's "
                          "timestamp / input_length / output_length / hash_ids, or prompt_tokens / output_tokens), "
                          "vLLM's custom dataset, or a `vllm bench serve --save-detailed` result (replayed)."),
        click.option("--num-prompts", "num_prompts", type=types.REQUESTS, default=200, show_default=True,
                     help="Requests of each run at a rate (as vllm bench serve's --num-prompts)."),
        click.option("--random-range-ratio", "range_ratio", type=types.Number(0, 1, high_open=True), default=0.0,
                     show_default=True, help="Prompt and output lengths uniform in L x (1 -/+ this) (vllm bench "
                                             "serve's); 0: every request the same."),
        click.option("--shared-prefix", type=types.Number(0, 1, high_open=True), default=0.0, show_default=True,
                     help="Share of every prompt that is one prefix shared by all requests (a system prompt vLLM's "
                          "prefix cache holds once)."),
        click.option("--seed", type=types.count(0, 2**32 - 1), default=0, show_default=True,
                     help="Seed of the arrivals and lengths (a run is reproducible bit for bit)."),
        click.option("--ttft-p90", "ttft_p90_s", type=types.SECONDS, default=None,
                     help="Target: 90% of first tokens within this many seconds; answers with the highest request "
                          "rate that keeps it (with --min-tok-s: both) and what breaks first above it."),
    ]):
        func = option(func)
    return func


def load_from(kwargs: dict, prompt_len: int, output_len: int, min_tok_s: float | None = None, *,
              targets_alone: bool = False):
    """(Workload, rates, burst, Targets, notes) from the load options in `kwargs` (popped), or None where none of them
    asks for a load (advise/load.workload_for; a --trace read here, at the edge)."""
    from roofline.advise.load import workload_for

    trace_path = kwargs.pop("trace_path", None)
    trace = None
    if trace_path:
        from roofline.live.traces import read_trace

        trace = read_trace(trace_path)
    return workload_for(rates=tuple(kwargs.pop("request_rates", ()) or ()), burst=kwargs.pop("burst", None),
                        trace=trace, requests=kwargs.pop("num_prompts", 200), range_ratio=kwargs.pop("range_ratio", 0.0),
                        shared_prefix=kwargs.pop("shared_prefix", 0.0), seed=kwargs.pop("seed", 0),
                        ttft_p90_s=kwargs.pop("ttft_p90_s", None), min_tok_s=min_tok_s, prompt_len=prompt_len,
                        output_len=output_len, targets_alone=targets_alone)
