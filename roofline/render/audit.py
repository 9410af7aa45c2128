"""Terminal presentation of an audit result (text only; computes nothing new)."""
from __future__ import annotations

from roofline.audit import AuditResult
from roofline.model.formats import format_label
from roofline.predict.bands import band_short, band_text, spread
from roofline.predict.drafting import draft_method_run
from roofline.predict.scheduler_config import async_scheduling
from roofline.predict.speculation import vllm_acceptance_rate
from roofline.units import human_bytes, milliseconds

from .text import attention_text, text_table


def step_made_of(step) -> str:
    """What a predicted step is made of, in the breakdown's words: "memory 9.8 ms at 0.75 x 273 GB/s
    + launches 1.2 ms (484 kernels x 2.5 us, CUDA graphs)"."""
    b = step.breakdown()
    hw = step.hardware
    attention_s = sum(s.attention_kernel_s for s in step.main.segments)  # in the memory time (predict/attention.py)
    parts = [f"memory {milliseconds((b.memory_time_s - attention_s) * 1e3)} at "
             f"{step.achievable_bandwidth_gbps / hw.bandwidth_gbps:.2f} x {hw.bandwidth_gbps:g} GB/s"]
    if attention_s:
        parts.append(f"{step.attention.label}'s kernels {milliseconds(attention_s * 1e3)} beyond the KV at it")
    if b.compute_s > 0.005 * b.seconds:
        parts.append(f"compute {milliseconds(b.compute_s * 1e3)}")
    if b.launch_s > 0:
        if step.config.graphs:
            graph_s = b.kernels * step.costs.graph_floor_us_per_kernel * 1e-6
            drafts_s = step.main.draft_launch_s
            host_us = step.costs.host_us_per_kernel
            # the drafts' launches outside the graphs and the proposer's host time are in the step's launches
            drafts = (f"; {milliseconds(drafts_s * 1e3)} of it the drafts' {drafts_s * 1e6 / host_us:.0f} launches "
                      f"outside them x {host_us:g} us on the host" if drafts_s > 0 and host_us else "")
            proposer_s = b.launch_s - graph_s - drafts_s
            proposer = (f", {milliseconds(proposer_s * 1e3)} the proposer's on the host"
                        if proposer_s > 1e-5 and step.config.speculative_tokens else "")
            parts.append(f"launches {milliseconds(b.launch_s * 1e3)} ({b.kernels:.0f} kernels x "
                         f"{step.costs.graph_floor_us_per_kernel:g} us, CUDA graphs{drafts}{proposer})")
        else:
            python = sum(s.host_equiv for s in step.main.segments)
            # below 0: PyTorch's own ops launched one after another cost the host less than a layer's launch
            extra = f" + {python:.0f} launches' worth of layers' Python" if python >= 0.5 else \
                f" - {-python:.0f} launches' worth: PyTorch's own ops, a share of a launch each" if python <= -0.5 else ""
            host = f"{b.kernels:.0f} kernels{extra} x {step.costs.host_us_per_kernel:g} us, eager"
            if b.launch_s >= b.launch_time_s - 1e-12:  # the host's launches set the pace
                parts.append(f"host {milliseconds(b.launch_s * 1e3)} ({host})")
            else:  # the GPU's: the host launches ahead of it (predict/step.stage_seconds)
                waits = (f" + {milliseconds(b.eager_wait_s * 1e3)} the GPU waits on the host's stalls "
                         f"(launch.toml [eager_overlap])" if b.eager_wait_s > 0 else "")
                parts.append(f"launches {milliseconds(b.launch_s * 1e3)} ({b.kernels:.0f} kernels x "
                             f"{step.costs.graph_floor_us_per_kernel:g} us{waits}; the host's "
                             f"{milliseconds(b.launch_time_s * 1e3)}, {host}, runs ahead of the GPU)")
    if b.communication_s > 0:
        parts.append(f"collectives {milliseconds(b.communication_s * 1e3)}")
    if b.host_s > 0:
        costs = step.costs
        host = (f"{milliseconds(step.main.host_s * 1e3)} on the host: {costs.step_host_us:g} us + "
                f"{costs.step_host_us_per_request:g} us x {step.main.micro_batch} "
                f"request{'s' if step.main.micro_batch != 1 else ''}" + _kv_groups_text(step))
        if step.config.async_scheduling is False:  # the host's step comes after the GPU's
            parts.append(f"the engine's host {milliseconds(b.host_s * 1e3)} after the GPU's (async scheduling off: "
                         f"{_async_off_reason(step)}; each step waits for {host})")
        else:
            parts.append(f"the engine's host {milliseconds(b.host_s * 1e3)} beyond the GPU's (a step takes at "
                         f"least {host})")
    return " + ".join(parts) + f"; {b.bound}-bound"


def _kv_groups_text(step) -> str:
    """The host's time for the KV cache groups past the first, by kind: " + 220 us x 3 more KV cache groups (gdn)"."""
    costs, more = step.costs, step.main.kv_groups[1:]
    counts = {kind: more.count(kind) for kind in dict.fromkeys(more)}
    return "".join(f" + {costs.kv_group_us(kind):g} us x {n} more KV cache group{'s' if n != 1 else ''} ({kind})"
                   for kind, n in counts.items() if costs.kv_group_us(kind))


def _async_off_reason(step) -> str:
    """Why the step runs without async scheduling: vLLM's default for its speculation and executor, else the flag."""
    config = step.config
    default = async_scheduling(step.hardware, None, draft_method_run(config.draft_method, config.speculative_tokens),
                               step.placement.boxes)
    return "--no-async-scheduling" if default.on else default.why


def deployment_lines(deployment) -> list[str]:
    """The vLLM flags and switches the figures are priced with, as the user spelled them."""
    if deployment is None or not deployment.spelled:
        return []
    return (["vllm: " + "  ".join(spelled for _, spelled in deployment.spelled)]
            + [f"note: {note}" for note in deployment.notes])


def render_audit(result: AuditResult, max_rows: int = 25) -> str:
    inv, t, hw, s = result.inventory, result.traffic, result.hardware, result.scenario
    q = inv.quant
    lines = [
        f"{inv.model_id}  ({inv.shape.architecture}, source: {inv.source})",
        f"quantization: {q.method}{' ' + q.algo if q.algo else ''}"
        f"{'  kv-cache scales: ' + q.kv_cache if q.kv_cache else ''}",
        f"scenario: batch {s.batch}, context {s.context}, kv cache {t.kv_dtype}"
        f"{f', routing {s.routing}' if s.batch > 1 and inv.shape.num_experts else ''}"
        f"{f', speculative {s.speculative_tokens} tokens' if s.speculative_tokens else ''}"
        f"{f' (vLLM acceptance {vllm_acceptance_rate(s.acceptance_rate, s.speculative_tokens):.0%})' if s.speculative_tokens else ''}",
        *deployment_lines(result.deployment),
        f"hardware: {hw.name}, {hw.bandwidth_text()}",
        "",
        f"  weights resident     {human_bytes(inv.weight_bytes)}"
        f"{'' if inv.weight_bytes / 1e9 <= hw.usable_memory_gb else '  (does NOT fit in ' + str(hw.usable_memory_gb) + ' GB)'}",
        f"  bytes / token        {human_bytes(t.bytes_per_token)}  = weights {human_bytes(t.weight_bytes_per_token)}"
        f" + KV {human_bytes(t.kv_bytes_per_token)} + state {human_bytes(t.state_bytes_per_token)}",
        f"  ceiling              {result.ceiling_tok_s:.1f} tok/s"
        f"{f'  ({result.ceiling_tok_s / s.batch:.1f} per stream)' if s.batch > 1 else ''}"
        f"  (bytes at {hw.bandwidth_basis()})",
        f"  expected             {result.expected_tok_s:.1f} tok/s"
        f"{' ' + band_short(result.band()) if result.band() else ''}  ({step_made_of(result.step)})",
        f"  validated            {band_text(result.band())}",
        f"  attention            {attention_text(result.step.attention_json())}",
    ]
    ft = result.first_token
    if ft is not None:
        steps = len(ft.steps_s)
        lines.append(f"  first token          {ft.seconds * 1e3:,.1f} ms for a {ft.prompt:,}-token prompt alone"
                     f" ({steps} prompt step{'s' if steps > 1 else ''} of up to {ft.chunk_tokens:,} tokens"
                     f" + the host's {ft.overhead_s * 1e3:.1f} ms; prompt rates {spread(ft.rates['band'])},"
                     f" {ft.rates['kind']})")
    cg = result.cuda_graph
    if cg is not None:
        eager = result.band(graphs=False)
        lines.append(f"  CUDA graphs          {cg['graph_tok_s']:.1f} tok/s vs eager {cg['eager_tok_s']:.1f}"
                     f"{' ' + band_short(eager) if eager else ''}"
                     f"  (x{cg['benefit']:.2f}; {cg['kernels_per_token']:.0f} kernels/token)")
    lines += ["", "bytes per token by module kind:"]
    rows = [["module", "role", "n", "format", "quant method", "resident", "per token", "share", ""]]
    for g in result.groups[:max_rows]:
        rows.append([g.label, g.role, str(g.count), format_label(g.format), g.quant_method,
                     human_bytes(g.bytes), human_bytes(g.bytes_per_token), f"{100 * g.share:.1f}%",
                     "<- stayed " + format_label(g.format) if g.residual else ""])
    lines += ["  " + line for line in text_table(rows, {2, 5, 6, 7})]
    if len(result.groups) > max_rows:
        rest = result.groups[max_rows:]
        lines.append(f"  ... {len(rest)} more kinds, {human_bytes(sum(g.bytes_per_token for g in rest))} per token")
    residuals = result.residuals
    if residuals:
        total = sum(g.bytes_per_token for g in residuals)
        lines += ["", f"unquantized residuals: {human_bytes(total)} per token "
                      f"({100 * total / t.bytes_per_token:.1f}% of bytes/token)"]
    for note in inv.disagreements:
        lines.append(f"! tensors vs config: {note}")
    for note in result.notes + t.notes:
        lines.append(f"note: {note}")
    if cg is not None and cg.get("advice"):
        lines.append(f"advice: {cg['advice']}")
    return "\n".join(lines)
