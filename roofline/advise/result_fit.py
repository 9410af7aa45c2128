"""A hardware entry's efficiency fitted to the result files a user already has (`roofline calibrate
--from-results MODEL=FILE ...`): every level of every file priced by the one step model as the deployment
ran it (advise/deploy.priced -> predict/step.price_step), the share of the bandwidth that prices them best
searched, each model left out in turn where there are several, and the fit refused, in one line, where
the files do not determine it.

One coefficient, on purpose: a user's bench files (llama-benchy, vllm bench serve, guidellm) are a
handful of decode rates at a few concurrencies, which determine how fast the device streams bytes on
that stack and nothing finer; the entry keeps the base entry's launch costs, floors and compute rates.

An open-loop file (`vllm bench serve --request-rate`, a burst, guidellm's rate sweeps) is a point of its own:
its requests replayed through the load model (advise/load.py) at each efficiency tried, its time per output
token (each request's decode, the steps it shared with other prompts included) against the file's."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace

from roofline.errors import RooflineError
from roofline.model.inventory import Inventory
from roofline.predict.deployment import Deployment
from roofline.predict.hardware import Hardware
from roofline.predict.step import price_step
from roofline.predict.verdict import impossible

from .deploy import priced

# the share of the bandwidth searched: below the lower end no engine decodes (a fit there means the files
# measured something else than decode); the upper end is the device's whole datasheet bandwidth
LOWEST, HIGHEST = 0.05, 1.0
MAX_LEVELS = 1024  # measured levels one fit takes (every file together)
# a fit whose own points are priced worse than this (mean |error|) says the step model does not describe
# the files' stack: refused rather than saved
MAX_IN_SAMPLE_ERROR = 0.35


@dataclass(frozen=True)
class ResultPoint:
    """One measured level of a result file: a stream's decode rate at `streams` streams of `context`."""

    model: str
    source: str  # the file and the tool that wrote it
    streams: int
    context: int
    per_stream_tok_s: float
    # an open-loop run (live/result_files.LoadRun): its requests replayed through the load model, its decode rate
    # 1 / TPOT mean (each request's own, mixed steps included); `streams` is then its mean number in flight
    run: object = None


@dataclass
class ResultFit:
    base: Hardware
    efficiency: float
    points: list[ResultPoint]
    predicted: list[float]  # per-stream tok/s at the fitted efficiency
    left_out: list[float | None] = field(default_factory=list)  # each point's error with its model left out
    notes: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[float]:
        return [p / m.per_stream_tok_s - 1 for p, m in zip(self.predicted, self.points)]

    @property
    def mean_abs_error(self) -> float:
        return statistics.fmean(abs(e) for e in self.errors)

    @property
    def left_out_mean_abs_error(self) -> float | None:
        errors = [abs(e) for e in self.left_out if e is not None]
        return statistics.fmean(errors) if errors else None

    def to_json(self) -> dict:
        return {"base_hardware": self.base.key, "base_efficiency": self.base.efficiency,
                "efficiency": self.efficiency, "mean_abs_error": self.mean_abs_error,
                "left_out_mean_abs_error": self.left_out_mean_abs_error,
                "points": [{"model": p.model, "source": p.source, "streams": p.streams, "context": p.context,
                            "measured_tok_s": p.per_stream_tok_s, "predicted_tok_s": q, "error": e,
                            "left_out_error": lo}
                           for p, q, e, lo in zip(self.points, self.predicted, self.errors,
                                                  self.left_out or [None] * len(self.points))],
                "notes": self.notes}


def _pricer(inventories: dict[str, Inventory], hardware: Hardware, deployment: Deployment, acceptance: float):
    """point, efficiency -> predicted per-stream tok/s (the deployment's pricing, the efficiency swapped)."""
    configs: dict = {}

    loads: dict = {}

    def predict(point: ResultPoint, efficiency: float) -> float:
        if point.run is not None:
            return under_load(point, efficiency)
        return step_of(point).per_stream_tok_s_at(efficiency)

    def under_load(point: ResultPoint, efficiency: float) -> float:
        """1 / TPOT mean of the run's requests through the load model on the device at this efficiency (every
        step re-priced: prompt steps and mixed steps too). Kept per efficiency to 4 places: the search
        converges onto repeats."""
        from .load import run_workload, runs_server, serve

        key = (id(point), round(efficiency, 4))
        if key not in loads:
            at = replace(hardware, efficiency=round(efficiency, 4))
            server = runs_server(inventories[point.model], deployment, at, [point.run], context=point.context,
                                 acceptance=acceptance)
            tpot = serve(server, run_workload(point.run)).tpot
            loads[key] = 1 / tpot.mean if tpot and tpot.mean > 0 else math.inf
        return loads[key]

    def step_of(point: ResultPoint):
        key = (point.model, point.streams, point.context)
        if key not in configs:  # priced once; each efficiency re-times its bytes (StepTime.per_stream_tok_s_at)
            deployed, config = priced(inventories[point.model], deployment, hardware, batch=point.streams,
                                      context=point.context, acceptance_rate=acceptance)
            configs[key] = price_step(deployed, hardware, config)
        return configs[key]
    predict.step_of = step_of
    return predict


def _best_efficiency(points: list[ResultPoint], predict) -> float:
    """The efficiency with the least mean |log(predicted / measured)| (golden-section search: the
    error is unimodal in it, every time term but the bytes' being fixed)."""
    def loss(efficiency: float) -> float:
        return statistics.fmean(abs(math.log(predict(p, efficiency) / p.per_stream_tok_s)) for p in points)

    low, high = LOWEST, HIGHEST
    ratio = (math.sqrt(5) - 1) / 2
    a, b = high - ratio * (high - low), low + ratio * (high - low)
    fa, fb = loss(a), loss(b)
    for _ in range(48):
        if fa <= fb:
            high, b, fb = b, a, fa
            a = high - ratio * (high - low)
            fa = loss(a)
        else:
            low, a, fa = a, b, fb
            b = low + ratio * (high - low)
            fb = loss(b)
    return (low + high) / 2


def fit_results(points: list[ResultPoint], inventories: dict[str, Inventory], hardware: Hardware,
                deployment: Deployment, acceptance: float) -> ResultFit:
    if not points:
        raise RooflineError("--from-results: no measured level in the files")
    if len(points) > MAX_LEVELS:
        raise RooflineError(f"--from-results: {len(points):,} measured levels; a fit takes at most {MAX_LEVELS} "
                            "(a bench sweep has tens)")
    predict = _pricer(inventories, hardware, deployment, acceptance)
    for point in points:  # one check of a measurement, as validate and doctor check theirs
        step = predict.step_of(point if point.run is None else replace(point, streams=1, run=None))
        drafts = step.config.speculative_tokens
        refused = impossible(point.per_stream_tok_s, step.ceiling_tok_s / (point.streams if point.run is None else 1),
                             drafts)
        if refused:
            raise RooflineError(f"--from-results {point.source}: {point.streams} stream(s) at {point.context:,} "
                                f"tokens: {refused}; nothing fitted")
    efficiency = _best_efficiency(points, predict)
    fit = ResultFit(hardware, efficiency, points, [predict(p, efficiency) for p in points])
    models = sorted({p.model for p in points})
    if len(models) > 1:
        by_model = {m: _best_efficiency([p for p in points if p.model != m], predict) for m in models}
        fit.left_out = [predict(p, by_model[p.model]) / p.per_stream_tok_s - 1 for p in points]
    else:
        fit.left_out = [None] * len(points)
        fit.notes.append("one model: nothing to leave out; its in-sample error is no validation (give another "
                         "model's file to check the fit out of sample)")
    refused = refusal(fit)
    if refused:
        raise RooflineError(f"--from-results: {refused}; nothing saved")
    return fit


def refusal(fit: ResultFit) -> str | None:
    """Why this fit must not become a hardware entry, one line; None when it may."""
    span = HIGHEST - LOWEST
    if fit.efficiency >= HIGHEST - 1e-3 * span:
        return (f"the files measure faster than reading each step's bytes at the whole {fit.base.bandwidth_gbps:g} GB/s "
                f"of {fit.base.name} allows: a figure of several streams read as one, speculative decoding, or another "
                "device")
    if fit.efficiency <= LOWEST + 1e-3 * span:
        return (f"the files measure slower than {LOWEST:g}x the bandwidth of {fit.base.name}: not decode on this "
                "device (prefill counted in, another device, a host-bound stack)")
    if fit.mean_abs_error > MAX_IN_SAMPLE_ERROR:
        return (f"the best efficiency ({fit.efficiency:.3f}) still prices the files' own points with a mean error of "
                f"{100 * fit.mean_abs_error:.0f}%: the step model does not describe this stack with one coefficient "
                "(check the flags the runs used)")
    return None


def fitted_entry(fit: ResultFit, base_entry: dict, *, name: str | None, sources: list[str]) -> dict:
    """The base hardware entry with the fitted efficiency and where it comes from. The launch costs the
    fit priced with are written into it: the tables key them by the base's name (launch.toml [floor.gb10]),
    which the new entry does not carry."""
    from roofline.predict.launch import graphs_apply, launch_costs

    if graphs_apply(fit.base) and base_entry.get("graph_floor_us_per_kernel") is None:
        costs = launch_costs(fit.base)
        base_entry = base_entry | {
            "graph_floor_us_per_kernel": costs.graph_floor_us_per_kernel,
            "host_us_per_kernel": base_entry.get("host_us_per_kernel") or costs.host_us_per_kernel,
            "launch_source": f"{fit.base.key}'s: {costs.floor_source}; host: {costs.host_source}"}
    models = sorted({p.model for p in fit.points})
    error = (f"mean |error| {100 * fit.mean_abs_error:.1f}% in sample"
             + (f", {100 * fit.left_out_mean_abs_error:.1f}% leaving each model out"
                if fit.left_out_mean_abs_error is not None else ", one model (no out-of-sample check)"))
    return base_entry | {
        "name": name or f"{fit.base.name} (fitted to result files)",
        "aliases": [],
        "derived_from": fit.base.derived_from or fit.base.key,
        "efficiency": fit.efficiency,  # as fitted: the entry prices exactly what the fit printed
        "efficiency_kind": "calibrated",
        "efficiency_source": (f"roofline calibrate --from-results: fitted to {len(fit.points)} measured levels of "
                              f"{', '.join(models)} ({'; '.join(sources)}) over {fit.base.key}'s entry; {error}"),
    }
