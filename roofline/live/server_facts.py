"""What a running vLLM server says about itself, over HTTP only.

    /v1/models   served model id, max_model_len, root (the path or hub id vLLM loaded)
    /version     vLLM's version (outside the API base)
    /metrics     Prometheus text, parsed with prometheus-client's own parser: the KV cache config
                 (vllm:cache_config_info labels), request gauges, token and speculative-decoding
                 counters, and with --enable-mfu-metrics vLLM's analytic bytes estimate

Which series are read is data (roofline/data/doctor.toml [series]). Counters are snapshots: the
doctor takes one before and one after its bench and works with the differences.
"""
from __future__ import annotations

import http.client
import math
from dataclasses import dataclass, field

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.untrusted import printable, redact_url

from .bench import server_version
from .http import Connection, http_error, served_models

METRICS_LIMIT = 16 * 2**20  # a /metrics page is tens of KB; refuse to parse a runaway answer


@dataclass(frozen=True)
class Metrics:
    """One /metrics snapshot: sample name -> [(labels, value)], for the served model only."""

    samples: dict[str, list[tuple[dict, float]]]

    def total(self, key: str) -> float | None:
        """Sum over engines of the series doctor.toml names `key`; None when absent."""
        values = self.samples.get(series()[key])
        if not values:
            return None
        return sum(v for _, v in values)

    def mean(self, key: str) -> float | None:
        """The mean of the histogram doctor.toml names `key` (its _sum over its _count), None when absent or empty."""
        total, count = self.total(f"{key}_sum"), self.total(f"{key}_count")
        if total is None or not count or count < 0 or total < 0:
            return None
        return total / count

    def labels(self, key: str) -> dict | None:
        values = self.samples.get(series()[key])
        return dict(values[0][0]) if values else None

    def vllm_series(self) -> int:
        return sum(1 for name in self.samples if name.startswith("vllm:"))


@dataclass
class ServerFacts:
    url: str
    model: str
    root: str | None = None
    max_model_len: int | None = None
    version: str | None = None
    metrics: Metrics | None = None
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    num_kv_blocks: int | None = None
    kv_cache_tokens: int | None = None
    unseen: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # one line each: what made the diagnosis partial


def series() -> dict:
    return load_table("doctor")["series"]


def parse_metrics(text: str, model: str | None) -> Metrics:
    """Prometheus text -> Metrics, keeping samples of `model` (or without a model_name label)."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, list[tuple[dict, float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name_of_model = sample.labels.get("model_name")
                if model and name_of_model not in (None, model):
                    continue
                if not math.isfinite(sample.value):
                    continue
                samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    except (ValueError, TypeError, IndexError) as exc:
        raise RooflineError(f"/metrics is not Prometheus text ({exc})") from None
    return Metrics(samples)


def fetch_metrics(url: str, model: str | None, timeout_s: float) -> Metrics:
    """GET /metrics (beside the API base, as vLLM serves it)."""
    conn = Connection(url, timeout_s, base="")
    try:
        resp = conn.request("GET", "/metrics")
        if resp.status != 200:
            raise http_error(conn, resp, "/metrics")
        try:
            body = conn.read_body(resp, "/metrics", METRICS_LIMIT)
        except (OSError, http.client.HTTPException) as exc:
            raise RooflineError(f"/metrics broke off: {exc.__class__.__name__}") from None
        return parse_metrics(body.decode("utf-8", "replace"), model)
    finally:
        conn.close()


def _int(value) -> int | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    # a label beyond any real cache (2^40 blocks or tokens) is not vLLM's: unseen rather than believed
    return int(number) if math.isfinite(number) and 0 <= number < 2**40 else None


def read_cache_config(facts: ServerFacts) -> None:
    """KV cache dtype, block size and blocks from vllm:cache_config_info's labels."""
    labels = facts.metrics.labels("cache_config") if facts.metrics else None
    if labels is None:
        return
    names = load_table("doctor")["cache_labels"]
    facts.kv_cache_dtype = labels.get(names["kv_cache_dtype"]) or None
    facts.block_size = _int(labels.get(names["block_size"]))
    facts.num_kv_blocks = _int(labels.get(names["num_kv_blocks"]))
    facts.kv_cache_tokens = _int(labels.get(names["kv_cache_tokens"]))


def probe_server(url: str, model: str | None, timeout_s: float) -> ServerFacts:
    """Everything the server tells about itself. Unreachable or not an OpenAI server: raises;
    no /metrics or a vLLM of other series names: facts with `problems` set (partial)."""
    entries = served_models(url, timeout_s)
    names = ", ".join(printable(e.id, 80) for e in entries[:8]) + (", ..." if len(entries) > 8 else "")
    if not entries:
        raise RooflineError(f"{redact_url(url)}/models lists no model")
    if model is None:
        if len(entries) > 1:
            raise RooflineError(f"the server serves {len(entries)} models ({names}); pick one with --served-model")
        entry = entries[0]
    else:
        entry = next((e for e in entries if e.id == model), None)
        if entry is None:
            raise RooflineError(f"the server does not serve {printable(model)!r} (it serves {names})")
    facts = ServerFacts(url=url, model=entry.id, root=entry.root or None,
                        max_model_len=entry.max_model_len, version=server_version(url, timeout_s))
    if facts.max_model_len is None:
        facts.unseen.append("max_model_len (/v1/models does not state it)")
    try:
        facts.metrics = fetch_metrics(url, facts.model, timeout_s)
    except RooflineError as exc:
        facts.problems.append(f"no metrics: {exc} (not a vLLM server, or started without its metrics); "
                              "diagnosing from the checkpoint alone")
        facts.unseen += ["KV cache dtype, block size and blocks (/metrics)", "server-side token counters (/metrics)"]
        return facts
    missing = [series()[key] for key in series()["required"] if facts.metrics.total(key) is None
               and facts.metrics.labels(key) is None]
    if missing:
        facts.problems.append(f"/metrics lacks {', '.join(missing)} ({facts.metrics.vllm_series()} vllm:* series "
                              f"found): a vLLM version with other metric names{_version_note(facts)}")
    read_cache_config(facts)
    if facts.kv_cache_dtype is None:
        facts.unseen.append("KV cache dtype, block size and blocks (no vllm:cache_config_info)")
    return facts


def _version_note(facts: ServerFacts) -> str:
    return f" (server says {facts.version}; this roofline reads vLLM 0.32's names)" if facts.version else ""
