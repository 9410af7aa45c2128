"""The live half of `roofline doctor`: look at a running server and measure it.

observe() gathers, in this order, what the diagnosis stands on:
1. the server's own facts over HTTP (roofline.live.server_facts): model, max_model_len, version,
   the KV cache config and counters from /metrics;
2. the capture file the roofline plugin wrote inside that server at load time (`--capture`), when
   there is one: the inventory as vLLM loaded it, the kernels it chose, graph mode, TP, speculation;
   otherwise the checkpoint (MODEL, or the path / hub id the server says it loaded);
3. a measured single-stream decode (roofline.live.bench), with /metrics read before and after to
   cross-check the generated tokens and to read the speculative-decoding and (with
   --enable-mfu-metrics) vLLM's own bytes estimate over exactly that window;
4. the serving configuration (roofline.predict.serving.Serving) with where each part was seen
   (`evidence`) and what could not be seen (`unseen`).
Nothing here predicts: roofline.advise.doctor does.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace

from roofline.audit import load_inventory
from roofline.errors import RooflineError, UsageMissing
from roofline.model.inventory import Inventory
from roofline.predict.deployment import NO_WEIGHT_METHODS
from roofline.predict.serving import Serving, backend_in_use, backend_of
from roofline.predict.speculation import per_token_from_accepted
from roofline.predict.topology import tp_refusal
from roofline.predict.traffic import DRAFT_TOKENS_LIMIT, KV_SPELLINGS
from roofline.sources.capture import inventory_from_capture_data, load_capture
from roofline.sources.hub import looks_like_repo_id

from .bench import BenchConfig, BenchResult, run_bench
from .result_files import SavedStream
from .server_facts import Metrics, ServerFacts, fetch_metrics, probe_server, series


@dataclass
class Observation:
    facts: ServerFacts | None  # None: no --url (a capture alone)
    engine: dict  # rank 0's engine facts from the capture ({} without one)
    inventory: Inventory
    inventory_source: str
    serving: Serving
    bench: BenchResult | None = None
    saved: SavedStream | None = None  # a saved result file's single stream, instead of measuring
    counters: dict = field(default_factory=dict)  # server counter differences over the bench
    speculative: dict | None = None  # {method, num_draft, acceptance_rate} (vLLM's definition)
    graph_mode: str | None = None
    evidence: dict = field(default_factory=dict)
    unseen: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what made the diagnosis partial, one line each
    notes: list[str] = field(default_factory=list)

    @property
    def measured_tok_s(self) -> float | None:
        if self.saved is not None:
            return self.saved.tok_s
        return self.bench.decode.median if self.bench is not None and self.bench.decode else None


def _engine_facts(capture: dict) -> dict:
    ranks = sorted(capture["ranks"], key=lambda r: int(r.get("rank") or 0))
    return {k: v for k, v in ranks[0].items() if k not in ("modules", "aliases", "hf_config")}


def _inventory(model: str | None, capture_path: str | None, facts: ServerFacts | None,
               capture: dict | None, source: dict | None = None) -> tuple[Inventory, str]:
    """`source`: how MODEL is read (load_inventory's revision / config_only / use_cache, as audit takes them)."""
    source = source or {}
    if capture is not None:
        return inventory_from_capture_data(capture, where=capture_path), f"capture {capture_path}"
    if model:
        return load_inventory(model, **source), f"checkpoint {model}" + (" (config only)" if source.get("config_only")
                                                                         else "")
    root = facts.root if facts else None
    if root and (os.path.isdir(root) or (looks_like_repo_id(root) and not os.path.isabs(root))):
        return load_inventory(root, **source), f"checkpoint {root} (the path the server says it loaded)"
    raise UsageMissing("doctor needs the checkpoint: give MODEL (a folder or hub id) or --capture FILE"
                        + (f"; the server loaded {root!r}, which is not a folder here" if root else ""))


def _delta(before: Metrics | None, after: Metrics | None, key: str) -> float | None:
    if before is None or after is None:
        return None
    a, b = after.total(key), before.total(key)
    return None if a is None or b is None else a - b


def _graphs(engine: dict) -> tuple[bool | None, str | None]:
    """(CUDA graphs on, the mode's name) from the capture's engine facts."""
    if not engine:
        return None, None
    mode = engine.get("cudagraph_mode")
    if engine.get("enforce_eager"):
        return False, "eager (--enforce-eager)"
    if mode is None:
        return None, None
    return str(mode).upper() != "NONE", str(mode)


def observe(*, url: str | None, served_model: str | None, model: str | None, capture_path: str | None,
            bench: BenchConfig | None, context: int, timeout_s: float, progress=None,
            saved: SavedStream | None = None, source: dict | None = None) -> Observation:
    """What the server says about itself, its capture, and its single-stream decode: measured here
    (`bench`) or read from a result file the user saved (`saved`: nothing is measured then)."""
    say = progress or (lambda message: None)
    facts = probe_server(url, served_model, timeout_s) if url else None
    capture = load_capture(capture_path) if capture_path else None
    engine = _engine_facts(capture) if capture else {}
    inventory, where = _inventory(model, capture_path, facts, capture, source)
    obs = Observation(facts=facts, engine=engine, inventory=inventory, inventory_source=where, serving=Serving(),
                      saved=saved)
    if facts:
        obs.problems += facts.problems
        obs.unseen += facts.unseen
    if engine and facts and facts.root and engine.get("model") and \
            os.path.basename(str(engine["model"]).rstrip("/")) != os.path.basename(facts.root.rstrip("/")):
        obs.problems.append(f"the capture is of {engine['model']!r} but the server loaded {facts.root!r}: "
                            "give the capture this server wrote")

    # measure, with the server's counters on both sides of the window
    before = facts.metrics if facts else None
    after = None
    if saved is not None:
        obs.notes += list(saved.notes)
    elif not url:
        obs.unseen.append("measured decode (no --url: the capture alone)")
    elif bench is None:
        obs.unseen.append("measured decode (--no-bench)")
    if url and bench is not None:
        say(f"measuring single-stream decode of {facts.model} ({bench.runs} runs of {bench.max_tokens} tokens)")
        try:
            obs.bench = run_bench(replace(bench, model=facts.model))
        except RooflineError as exc:
            obs.problems.append(f"bench failed: {exc}")
        if obs.bench is not None and len(obs.bench.timed) < len(obs.bench.runs):
            failed = [r for r in obs.bench.runs if not r.ok]
            obs.problems.append(f"{len(failed)} of {len(obs.bench.runs)} bench runs failed ({failed[0].error}); "
                                "measured tok/s is over the runs that were timed")
        if before is not None:
            try:
                after = fetch_metrics(url, facts.model, timeout_s)
            except RooflineError as exc:
                obs.problems.append(f"/metrics after the bench: {exc} (did the server stop?)")
    _counters(obs, before, after)
    _serving(obs, context)
    return obs


# A counter that moved more than this over one bench window did not count this bench's tokens
COUNTER_LIMIT = 2**53
# vLLM's bytes estimate per generated token against the weights the model holds: a bench's prefill steps and
# long contexts add to it, a MoE's routing takes from it, but never by this factor either way
BELIEVABLE_READ_FACTOR = 20.0


def _counter_delta(obs: Observation, before: Metrics | None, after: Metrics | None, key: str) -> float | None:
    """A counter's rise over the bench, or None; a counter that fell, is not finite or rose past
    any real count is left out with a problem named (the server lies, or was restarted)."""
    delta = _delta(before, after, key)
    if delta is None:
        return None
    if not math.isfinite(delta) or not 0 <= delta <= COUNTER_LIMIT:
        obs.problems.append(f"/metrics counter {series()[key]} went from {before.total(key):.6g} to "
                            f"{after.total(key):.6g} over the bench: not a count of this bench (server restarted, "
                            "or its counters cannot be trusted); left out")
        return None
    return delta


def _counters(obs: Observation, before: Metrics | None, after: Metrics | None) -> None:
    generated = _counter_delta(obs, before, after, "generation_tokens")
    if obs.bench is not None and generated is not None:
        counted = obs.bench.warmup_tokens + sum(r.completion_tokens for r in obs.bench.runs)
        obs.counters["generation_tokens"] = {"server": int(generated), "bench": counted}
        if int(generated) != counted:
            obs.notes.append(f"the server generated {int(generated)} tokens during the bench, the bench received "
                             f"{counted}: another client was using the server (or a run broke off)")
    spec = {key: _counter_delta(obs, before, after, key)
            for key in ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens")}
    drafts, draft_tokens, accepted = spec.values()
    if None in spec.values():
        spec = {}  # the three only mean something together
    elif draft_tokens > drafts * DRAFT_TOKENS_LIMIT or accepted > draft_tokens:
        obs.problems.append(f"/metrics speculative counters do not add up ({int(accepted)} accepted of "
                            f"{int(draft_tokens)} draft tokens in {int(drafts)} drafts); left out")
        spec = {}
    for key, value in spec.items():
        if value is not None:
            obs.counters[key] = int(value)
    read = _counter_delta(obs, before, after, "estimated_read_bytes")
    if read == 0 and generated:  # the counter is there but did not move: vLLM estimates nothing without the flag
        obs.unseen.append("vLLM's own bytes estimate (its counter did not move: start the server with "
                          "--enable-mfu-metrics)")
    elif read is not None and generated:
        per_token = read / generated
        # a decode step reads at most every weight the model holds and every sequence's KV: vLLM's estimate
        # (one byte size per quantization method, no ignore lists) strays from that by tens of percent, never
        # by BELIEVABLE_READ_FACTOR; a counter that does was not written by vLLM's estimate of this model
        held = obs.inventory.weight_bytes
        if held > 0 and not held / BELIEVABLE_READ_FACTOR <= per_token <= held * BELIEVABLE_READ_FACTOR:
            obs.problems.append(f"/metrics vllm:estimated_read_bytes says {per_token:.4g} bytes per generated token, "
                                f"{per_token / held:.3g}x the {held:.4g} bytes of weights the model holds: not "
                                "believable as vLLM's estimate of this model; left out")
        else:
            obs.counters["vllm_estimated_read_bytes_per_token"] = per_token
    elif obs.facts and obs.facts.metrics is not None and obs.facts.metrics.total("estimated_read_bytes") is None:
        obs.unseen.append("vLLM's own bytes estimate (start the server with --enable-mfu-metrics)")
    running = after.total("running") if after is not None else None
    if running and math.isfinite(running) and 0 < running < COUNTER_LIMIT:
        obs.notes.append(f"{int(running)} request(s) still running on the server after the bench: other load")


def _priced_drafter(method, has_mtp: bool) -> tuple[str, str | None]:
    """(the method the step prices, what could not be seen) of a server that speculates: its own MTP head
    where the capture says mtp, or shows no method and the model has one; else a drafter that reads no weights
    (an n-gram), said so, since a draft checkpoint this server reads is not known here."""
    mtp = method is not None and str(method).endswith("mtp")
    if has_mtp and (mtp or method is None):
        return "mtp", None if method else ("speculative method (the counters show drafts, not what drafts them; "
                                           "priced as the model's own MTP head)")
    if method in NO_WEIGHT_METHODS:
        return str(method), None
    seen = f"method {method}" if method else "the counters show drafts, not what drafts them"
    return "ngram", (f"the drafter ({seen}; the model has no MTP head, and no draft checkpoint is read here): "
                     "priced as a drafter that reads no weights, an n-gram's; a draft model reads more")


def _serving(obs: Observation, context: int) -> None:
    """The Serving the prediction is made for, and where each part of it was seen."""
    facts, engine, evidence = obs.facts, obs.engine, obs.evidence
    if obs.bench is not None and obs.bench.mean_context is not None:
        context = obs.bench.mean_context
        evidence["context"] = f"bench: {obs.bench.prompt_tokens} prompt + {obs.bench.completion_tokens} // 2 tokens"
    elif obs.saved is not None and obs.saved.mean_context is not None:
        context = obs.saved.mean_context
        evidence["context"] = (f"{obs.saved.tool}: {obs.saved.prompt_tokens} prompt + "
                               f"{obs.saved.completion_tokens} // 2 tokens")

    kv_name, kv_where = None, None
    if facts and facts.kv_cache_dtype:
        kv_name, kv_where = facts.kv_cache_dtype, "metrics: vllm:cache_config_info cache_dtype"
    elif engine.get("kv_cache_dtype"):
        kv_name, kv_where = engine["kv_cache_dtype"], "capture: cache_config.cache_dtype"
    kv = KV_SPELLINGS.get(kv_name or "auto")
    if kv_name is None:
        obs.unseen.append("KV cache dtype (assumed vLLM's default, auto)")
    elif kv is None:
        obs.unseen.append(f"KV cache dtype {kv_name!r} is not modelled (counted as the model dtype)")
    else:
        evidence["kv_cache_dtype"] = f"{kv_where}={kv_name}"

    graphs, mode = _graphs(engine)
    obs.graph_mode = mode
    if graphs is None:
        obs.unseen.append("graph mode (only a capture shows it; assumed CUDA graphs on, vLLM's default)")
    else:
        evidence["graphs"] = f"capture: cudagraph_mode={engine.get('cudagraph_mode')}, enforce_eager={bool(engine.get('enforce_eager'))}"

    tp = int(engine.get("tp_size") or 1) if engine else 1
    if not engine:
        obs.unseen.append("tensor-parallel size (only a capture shows it; assumed 1)")
    refused = tp_refusal(obs.inventory.config, tp, expert_parallel=bool(engine.get("enable_expert_parallel")))
    if refused:  # the capture says vLLM ran a split vLLM itself refuses: the file is not what vLLM wrote
        raise RooflineError(f"{obs.inventory_source}: tensor parallel {tp}: vLLM refuses it ({refused})")

    backend = backend_in_use(obs.inventory) if engine else None
    if backend:
        kernels = sorted({m.kernel for m in obs.inventory.modules if m.kernel and backend_of(m.kernel) == backend})
        evidence["backend"] = f"capture: {kernels[0]}" + (f" (+{len(kernels) - 1} more)" if len(kernels) > 1 else "")
    elif engine and obs.inventory.main_quantized_format():
        obs.unseen.append("GEMM backend (the capture names no kernel for the main format)")
    elif not engine and obs.inventory.main_quantized_format():
        obs.unseen.append("GEMM backend (only a capture shows it; assumed vLLM's default for the device)")

    spec_tokens, acceptance = 0, 0.0
    spec = engine.get("speculative") if engine else None
    drafts, draft_tokens, accepted = (obs.counters.get(k) for k in ("spec_drafts", "spec_draft_tokens",
                                                                      "spec_accepted_tokens"))
    if spec and spec.get("num_speculative_tokens"):
        spec_tokens = int(spec["num_speculative_tokens"])
    elif drafts and draft_tokens:
        spec_tokens = round(draft_tokens / drafts)
    if spec_tokens > DRAFT_TOKENS_LIMIT:
        obs.problems.append(f"{spec_tokens} draft tokens per step is not a speculative config vLLM runs; "
                            "speculation left out of the prediction")
        spec_tokens = 0
    priced_method = "mtp"
    if spec_tokens:
        method = (spec or {}).get("method")
        priced_method, why = _priced_drafter(method, any(m.role == "mtp" for m in obs.inventory.modules))
        if why:
            obs.unseen.append(why)
        rate = accepted / draft_tokens if draft_tokens else None
        obs.speculative = {"method": method, "num_draft": spec_tokens, "acceptance_rate": rate}
        if drafts:
            acceptance = per_token_from_accepted(accepted / drafts, spec_tokens)
            evidence["speculative"] = (f"metrics: {accepted} of {draft_tokens} draft tokens accepted "
                                       f"({100 * rate:.0f}%) over {drafts} drafts of {spec_tokens}"
                                       + (f", method {method}" if method else ""))
        else:
            acceptance = 0.7
            obs.unseen.append("speculative acceptance (no drafts counted during the bench; assumed 0.7 per token)")
    obs.serving = Serving(kv_cache_dtype=kv or "auto", context=context, speculative_tokens=spec_tokens,
                          speculative_method=priced_method,
                          acceptance=acceptance, graphs=graphs if graphs is not None else True, tp=tp,
                          backend=backend)
    evidence["inventory"] = obs.inventory_source
