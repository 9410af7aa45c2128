"""Fit GB10's step-model coefficients to published vLLM runs on one DGX Spark, and print every run beside
what the fitted model predicts for it, in sample and leaving its model out.

    .venv/bin/python benchmarks/gb10/fit.py                      # the committed runs -> benchmarks/gb10/fit.json
    .venv/bin/python benchmarks/gb10/fit.py my-spark.csv --out my-fit.json   # your own runs, or a newer vLLM

The runs (results.csv, one row per measurement; SOURCES.md says where they come from): model, format,
engine, engine_version, mode (the serve flags, `moe-backend=` / `linear-backend=` / `--enforce-eager`
read from it), kv_dtype, context (`in=N,out=M` as llama-benchy sends it), concurrency, metric
(`decode_tok_s_single_stream` or `aggregate_decode_tok_s`), value (tok/s), source, notes; an optional
`config` column names the checkpoint's config folder or hub id (else tests/reference_configs/ORG__NAME).
The seeds' GB10 figures (roofline/data/measurements.toml, Qwen3-8B quantized with lm_head kept BF16,
single stream, KV fp8, context not recorded: 1024) join them.

What each run is priced as: the step model (roofline/predict/step.py) at the concurrency as batch, the
mean context over the decode (prompt + half the output: llama-benchy's `--latency-mode generation`
times the decode alone), the run's KV dtype and backend, MoE routing "uniform" (llama-benchy sends each
stream its own prompt; "shared" routing prices these runs 2-3x too fast, the script prints both).

What is fitted, each on the rows that determine it, with the same fit as the H200's
(roofline/live/engine_fit.py) and the rows priced with every backend figure neutral (so the fit never
reads its own output):
1. the device: GB10's achievable share of its 273 GB/s and the floor per replayed kernel, from the runs
   on vLLM's default unquantized path (BF16 cuBLAS); the compute utilization is not determined by any
   GB10 run (none turns compute-bound) and stays the H200's, labelled an estimate;
2. each quantized backend with a full-rate path the bench never ran (FP8 CUTLASS, FP4 FlashInfer CUTLASS /
   b12x): its share of the bandwidth relative to the device's, from its seed figure against the seed of the
   same model on a kernel family fitted in 3 (the Marlin W4A16 seed): a contrast on one model and box, so
   the seeds' other stack and unknown context cancel (one figure each);
3. each weight-only kernel family (Marlin's FP4 kernels for NVFP4 W4A16 and W4A4-on-Marlin; Marlin's
   MXFP4 MoE): the rate its weights stream at and its GEMMs' share of the BF16 tensor rate;
4. the Grace host's cost per eager kernel: no run determines it (every bench run ran CUDA graphs, the one
   eager seed is device-bound), so it is calibrated to one report (HOST_REPORT: a hybrid MoE in NVFP4
   lost ~65% of its tok/s to --enforce-eager on a DGX Spark), with the device's fitted coefficients and
   the MoE / Mamba layers' Python measured on the H200 (kernels.toml [python.*]): in sample by
   construction; the eager seed checks that a dense model stays device-bound at it.
Leaving one model out refits all of it without that model's runs; a backend with no run left falls back
to the tables' estimate for it (MXFP4 on the FP4 Marlin figures), which is the transfer a user meets.

tests/test_gb10_fit.py fails when fit.json or the tables (hardware.toml [gb10], launch.toml [floor.gb10],
rules.toml's 12.1 rates) part from what this script computes from results.csv.
"""
from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent.parent
HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results.csv"
FIT_FILE = HERE / "fit.json"
CONFIGS = REPO / "tests" / "reference_configs"
sys.path.insert(0, str(REPO))

from roofline.data import load_table  # noqa: E402
from roofline.live import engine_fit  # noqa: E402
from roofline.live.engine_fit import Row  # noqa: E402

HARDWARE = "gb10"
SEED_CONTEXT = 1024  # the seeds' context is not recorded
METRICS = {"decode_tok_s_single_stream", "aggregate_decode_tok_s"}
# weight-only backends that run one kernel family, fitted together (rules.toml names)
KERNEL_FAMILY = {"NVFP4 W4A16 Marlin": "FP4 Marlin", "NVFP4 W4A4 on Marlin": "FP4 Marlin",
                 "MXFP4 Marlin (W4A16)": "MXFP4 Marlin"}
# a kernel family with no run of its own in a fit borrows another's figures (rules.toml says "estimate")
BORROWS = {"MXFP4 Marlin": "FP4 Marlin"}
RELATIVE = np.arange(600, 1401, 2) / 1000
HOSTS_US = np.arange(50, 601, 1) / 10
# the one GB10 eager figure for a model that is host-bound in eager mode (roofline/data/rules.toml
# [cuda_graphs] source): eager tok/s over CUDA-graph tok/s, the bundled config, single stream
HOST_REPORT = {"config": "examples/Qwen3.6-35B-A3B-NVFP4", "eager_over_graphs": 0.35, "kv_cache_dtype": "fp8",
               "context": 1024, "source": "a DGX Spark user report: a hybrid MoE in NVFP4 (Qwen3.6-35B-A3B-NVFP4) "
                                         "lost ~65% of its speed to --enforce-eager"}
# GB10's grids for a weight-only kernel family: its weights below the device's ~190 GB/s, its GEMMs far
# below the H200's share (the published runs put them at a few percent of the BF16 tensor rate)
WEIGHT_GBPS = np.arange(20, 301, 2).astype(float)
GEMM_SHARES = np.arange(1, 101) / 100


@dataclass
class Run:
    """One published measurement, as the step model sees it."""

    model: str  # the checkpoint
    base: str  # the model it is a variant of: what leave-one-model-out leaves out
    config: str
    format_label: str
    simulate: str | None  # a format to simulate on the base config (the seeds), else None
    backend_flag: str | None  # vLLM's --linear-backend / --moe-backend spelling, None: the default
    backend_name: str | None  # a rules.toml name (the seeds)
    graphs: bool
    kv_cache_dtype: str
    context: int
    concurrency: int
    tok_s: float  # aggregate
    source: str
    seed: bool = False  # a seed figure (measurements.toml): another stack, used only where the bench ran nothing
    row: Row | None = None
    inventory: object = None  # as priced (a seed's format simulated)
    backend: object = None
    family: str = ""
    predictions: dict = field(default_factory=dict)

    @property
    def measured_ms(self) -> float:
        return 1e3 * self.concurrency / self.tok_s


def _base_model(model: str) -> str:
    """The model a checkpoint quantizes: its name without the format suffix."""
    name = model.split("/")[-1]
    return re.sub(r"-(BF16|FP8|NVFP4|NVFP4A16|MXFP4|FP8-dynamic)$", "", name, flags=re.I)


def _context(text: str) -> int:
    """The mean context over a llama-benchy decode: prompt + half the output."""
    parts = dict(p.split("=", 1) for p in text.replace(" ", "").split(","))
    return int(parts["in"]) + int(parts["out"]) // 2


def read_runs(path: Path) -> list[Run]:
    """results.csv's rows, checked, plus the seeds' GB10 figures; one clear line for a row it cannot use."""
    runs = []
    with open(path, newline="", encoding="utf-8") as handle:
        for number, row in enumerate(csv.DictReader(handle), start=2):
            where = f"{path.name} line {number}"
            if row.get("metric") not in METRICS:
                raise SystemExit(f"{where}: metric {row.get('metric')!r} is not one of {sorted(METRICS)}")
            if (row.get("engine") or "vllm") != "vllm":
                raise SystemExit(f"{where}: engine {row['engine']!r}: the fit is of vLLM")
            try:
                concurrency, value, context = int(row["concurrency"]), float(row["value"]), _context(row["context"])
            except (KeyError, ValueError) as exc:
                raise SystemExit(f"{where}: concurrency, value and context (in=N,out=M) must be numbers ({exc})")
            if not (concurrency >= 1 and math.isfinite(value) and value > 0):
                raise SystemExit(f"{where}: concurrency must be >= 1 and value a positive tok/s")
            mode = row.get("mode", "")
            flags = dict(re.findall(r"(moe|linear)-backend=(\w+)", mode))
            if len(set(flags.values())) > 1:
                raise SystemExit(f"{where}: different --linear-backend and --moe-backend are not priced apart")
            config = row.get("config") or str(CONFIGS / row["model"].replace("/", "__"))
            runs.append(Run(model=row["model"], base=_base_model(row["model"]), config=config,
                            format_label=row["format"], simulate=None,
                            backend_flag=next(iter(flags.values()), None), backend_name=None,
                            graphs="enforce-eager" not in mode.replace("no --enforce-eager", ""),
                            kv_cache_dtype=row.get("kv_dtype") or "auto", context=context, concurrency=concurrency,
                            tok_s=value, source=row.get("source", "")))
    for seed in load_table("measurements")["measured"]:
        if seed["hardware"] != HARDWARE:
            continue
        runs.append(Run(model=seed["checkpoint"], base=seed["base"], config=str(CONFIGS / "Qwen__Qwen3-8B"),
                        format_label=seed["format"], simulate=seed["format"], backend_flag=None,
                        backend_name=seed["backend"], graphs=seed.get("graphs", True), kv_cache_dtype="fp8",
                        context=SEED_CONTEXT, concurrency=1, tok_s=seed["tok_s"],
                        source="roofline/data/measurements.toml: " + seed["source"], seed=True))
    return runs


def neutral(backend):
    """The backend with none of its fitted figures: what the fit starts from."""
    return replace(backend, rates=(), relative_efficiency=1.0)


def price_runs(runs: list[Run]) -> None:
    """Each run's step terms (engine_fit.Row), priced with neutral backends."""
    from roofline.advise.simulate import get_recipe, simulate
    from roofline.audit import load_inventory
    from roofline.predict.backends import backend_named, backends_for
    from roofline.predict.bands import model_family
    from roofline.predict.hardware import get_hardware
    from roofline.predict.step import StepConfig

    hardware = replace(get_hardware(HARDWARE), family_efficiency={})  # neutral, as the backends
    inventories: dict[str, object] = {}
    for run in runs:
        key = f"{run.config}|{run.simulate}"
        if key not in inventories:
            inventory = load_inventory(run.config)
            inventories[key] = simulate(inventory, run.simulate, get_recipe("default")) if run.simulate else inventory
        inventory = inventories[key]
        fmt = inventory.main_format()
        if run.backend_name:
            backend = next(b for b in backends_for(fmt, hardware) if b.name == run.backend_name)
        else:
            backend = backend_named(fmt, run.backend_flag, hardware)
        run.backend, run.family, run.inventory = backend, model_family(inventory), inventory
        result = {"config": run.config, "quantization": None, "mode": "graphs" if run.graphs else "eager",
                  "vllm_version": "0.26.0", "gpu": "GB10",
                  "decode": [{"batch": run.concurrency, "context": run.context, "step_ms": run.measured_ms}]}
        base = StepConfig(kv_cache_dtype=run.kv_cache_dtype, backend=neutral(backend))
        run.row = engine_fit.rows_for(result, inventory, hardware, run.model, "uniform", base)[0]


@dataclass
class GB10Fit:
    efficiency: float
    floor_us: float
    utilization: float
    host_us: float  # Grace, per eager kernel
    relative: dict[str, float]  # backend name -> relative efficiency
    family: dict[str, float]  # model family -> relative efficiency (a family the bench never ran)
    weight_only: dict[str, tuple[float | None, float]]  # kernel family -> (weight GB/s or None, GEMM utilization)
    points: dict[str, list[str]]  # coefficient -> the runs it rests on

    def graphs_s(self, row: Row, backend, model_family: str = "") -> float:
        name = backend.name
        efficiency = self.efficiency * self.family.get(model_family, 1.0)
        if backend.weight_only:
            family = KERNEL_FAMILY.get(name, name)
            rate = self.weight_only.get(family) or self.weight_only.get(BORROWS.get(family, ""))
            gbps, share = rate if rate else (None, None)
            return row.graphs_s(efficiency, self.floor_us, self.utilization, gbps, share)
        return row.graphs_s(efficiency * self.relative.get(name, 1.0), self.floor_us, self.utilization)

    def eager_s(self, row: Row, backend, host_us: float | None = None, model_family: str = "") -> float:
        python = load_table("kernels")["python"]
        launches = row.eager_kernels + row.host_equiv + row.moe_layers * python["moe"]["eager_host_equiv"] \
            + row.mamba_layers * python["mamba"]["eager_host_equiv"]
        return max(self.graphs_s(row, backend, model_family), launches * (host_us or self.host_us) * 1e-6)

    def predict_ms(self, run: Run) -> float:
        return 1e3 * (self.graphs_s(run.row, run.backend, run.family) if run.graphs
                      else self.eager_s(run.row, run.backend, model_family=run.family))


def _label(run: Run) -> str:
    return f"{run.model} c={run.concurrency} ctx={run.context}"


def fit(runs: list[Run], utilization: float) -> GB10Fit:
    """The GB10 coefficients from these runs (graph mode only: no eager run determines anything). The
    device and the weight-only families rest on the bench's runs; a seed figure (another stack, context
    unknown) only sets a backend the bench never ran, against a seed of the same model (share_of)."""
    graphs = [r for r in runs if r.graphs]
    bench = [r for r in graphs if not r.seed]
    device = [r for r in bench if not r.backend.weight_only and r.backend.compute == "bf16"]
    if not device:
        raise SystemExit("no run on vLLM's unquantized path (BF16): the device's share of the bandwidth is not "
                         "determined")
    efficiency, floor_us, _ = engine_fit.fit_graphs([r.row for r in device], engine_fit.FLOORS_US,
                                                    np.array([utilization]))
    points = {"efficiency": [_label(r) for r in device], "graph_floor": [_label(r) for r in device]}
    weight_only: dict[str, tuple[float | None, float]] = {}
    achievable = efficiency * 273  # GB/s
    for family in sorted({KERNEL_FAMILY.get(r.backend.name, r.backend.name) for r in bench if r.backend.weight_only}):
        mine = [r for r in bench if r.backend.weight_only and KERNEL_FAMILY.get(r.backend.name, r.backend.name) == family]
        # no fixed time per grouped expert GEMM on GB10 (none measured there: the rate holds it)
        gbps, share, _ = engine_fit.fit_weight_backend([r.row for r in mine], efficiency, floor_us, utilization,
                                                       WEIGHT_GBPS, GEMM_SHARES, np.zeros(1))
        # a rate at or above what the device reaches does not bind: the weights stream at the device's share
        weight_only[family] = (gbps if gbps < achievable else None, share)
        points[family] = [_label(r) for r in mine]
    model = GB10Fit(efficiency, floor_us, utilization, 0.0, {}, {}, weight_only, points)
    # a full-rate quantized backend the bench never ran: its seed's speed against a seed of the same model on
    # a kernel family fitted above (same base model, same box: the stack's and the context's share cancels)
    def share_of(mine: list[Run], gbps: float | None = None, gemm: float | None = None) -> float:
        """The multiple of the device's efficiency that prices these runs best."""
        loss = [sum(math.log(r.row.graphs_s(efficiency * x, floor_us, utilization, gbps, gemm) * 1e3
                             / r.measured_ms) ** 2 for r in mine) for x in RELATIVE]
        return float(RELATIVE[int(np.argmin(loss))])

    anchors = {r.base: (share_of([r], *weight_only[KERNEL_FAMILY[r.backend.name]]), _label(r)) for r in graphs
               if r.seed and r.backend.weight_only and KERNEL_FAMILY.get(r.backend.name) in weight_only}
    # a family the bench never ran reads at its Marlin seed's share: the seeds are all dense
    bench_families = {r.family for r in bench}
    for family in sorted({r.family for r in graphs if r.seed} - bench_families):
        mine = [anchors[r.base] for r in graphs if r.seed and r.family == family and r.base in anchors]
        if mine:
            model.family[family] = round(statistics.mean(share for share, _ in mine), 3)
            points[f"family {family}"] = [label for _, label in mine]
    for name in sorted({r.backend.name for r in graphs if not r.backend.weight_only and r.backend.compute != "bf16"}):
        mine = [r for r in bench if r.backend.name == name] or [r for r in graphs if r.backend.name == name]
        anchor = anchors.get(mine[0].base) if all(r.seed for r in mine) else None
        model.relative[name] = round(share_of(mine) / (anchor[0] if anchor else 1.0), 3)
        points[name] = [_label(r) for r in mine] + ([f"relative to {anchor[1]}"] if anchor else [])
    report_row, report_backend = host_report_row()
    graph_s = model.graphs_s(report_row, report_backend)
    loss = [(model.eager_s(report_row, report_backend, host) / graph_s - 1 / HOST_REPORT["eager_over_graphs"]) ** 2
            for host in HOSTS_US]
    model.host_us = float(HOSTS_US[int(np.argmin(loss))])
    points["host"] = [HOST_REPORT["source"]]
    return model


@functools.lru_cache(maxsize=1)
def host_report_row():
    """The reported hybrid's step terms (engine_fit.Row) on its default backend, neutral; built once."""
    from roofline.audit import load_inventory
    from roofline.predict.backends import default_backend
    from roofline.predict.hardware import get_hardware
    from roofline.predict.step import StepConfig

    hardware = replace(get_hardware(HARDWARE), family_efficiency={})
    inventory = load_inventory(str(REPO / HOST_REPORT["config"]))
    backend = default_backend(inventory.main_format(), hardware)
    result = {"config": HOST_REPORT["config"], "quantization": None, "mode": "graphs", "vllm_version": "0.26.0",
              "gpu": "GB10", "decode": [{"batch": 1, "context": HOST_REPORT["context"], "step_ms": 1.0}]}
    base = StepConfig(kv_cache_dtype=HOST_REPORT["kv_cache_dtype"], backend=neutral(backend))
    return engine_fit.rows_for(result, inventory, hardware, "report", "uniform", base)[0], backend


def class_of(run: Run) -> tuple:
    """The validation class: family x format x mode x concurrency (one stream, or several)."""
    fmt = run.backend.format
    return (run.family, fmt, "graphs" if run.graphs else "eager", "1" if run.concurrency == 1 else "2-16")


def summary(values: list[float]) -> dict:
    if not values:
        return {"points": 0}
    return {"points": len(values), "mean_abs": statistics.mean(abs(v) for v in values),
            "max_abs": max(abs(v) for v in values)}


def leave_out(runs: list[Run], group_of, key: str, utilization: float, keep=lambda group: True) -> None:
    """Each group's runs priced by a fit without the group: their error of tok/s in predictions[key]. A group whose
    absence leaves nothing to determine the device gets none."""
    for name in sorted({group_of(r) for r in runs}):
        group = [r for r in runs if group_of(r) == name]
        if not keep(group):
            continue
        try:
            partial = fit([r for r in runs if group_of(r) != name], utilization)
        except SystemExit:
            continue
        for run in group:
            run.predictions[key] = run.measured_ms / partial.predict_ms(run) - 1


def run_fit(path: Path = RESULTS) -> dict:
    """Everything fit.json holds: coefficients, each run's predictions, errors by class."""
    from roofline.predict.bands import layouts, lineage
    from roofline.predict.step import compute_utilization
    from roofline.predict.hardware import get_hardware

    runs = read_runs(path)
    price_runs(runs)
    utilization = compute_utilization(get_hardware("h200"))[0]
    model = fit(runs, utilization)
    for run in runs:  # errors of tok/s: + where the model is too fast
        run.predictions["in_sample"] = run.measured_ms / model.predict_ms(run) - 1
    # each model left out in turn, then every model of its family at once (lineage.toml: Qwen3.6 and the Qwen3-8B
    # seeds), where the family has more than the one model already left out
    leave_out(runs, lambda r: r.base, "left_out", utilization)
    lineages = {r.base: lineage(r.inventory) for r in runs}
    leave_out(runs, lambda r: lineages[r.base], "family_out", utilization,
              keep=lambda group: len({r.base for r in group}) > 1)
    classes = {}
    for key in sorted({class_of(r) for r in runs}):
        members = [r for r in runs if class_of(r) == key]
        classes["|".join(key)] = {
            "family": key[0], "format": key[1], "mode": key[2], "concurrency": key[3],
            "in_sample": summary([r.predictions["in_sample"] for r in members]),
            "left_out": summary([r.predictions["left_out"] for r in members if "left_out" in r.predictions]),
            "family_out": summary([r.predictions["family_out"] for r in members if "family_out" in r.predictions]),
            # what the class's models were made of: a model with a layout or expert width none had is widened
            "layouts": sorted({x for r in members for x in layouts(r.inventory)}),
            "expert_widths": sorted({r.inventory.shape.expert_width for r in members
                                     if r.inventory.shape.expert_width}),
            "kernels": sorted({r.backend.kernel for r in members})}
    return {
        "schema": "roofline.gb10_fit/1",
        "command": ".venv/bin/python benchmarks/gb10/fit.py",
        "results": str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path),
        "hardware": HARDWARE,
        "coefficients": {
            "efficiency": model.efficiency, "graph_floor_us_per_kernel": model.floor_us,
            "host_us_per_kernel": model.host_us,
            "compute_utilization": {"value": model.utilization, "kind": "estimate",
                                    "source": "the H200's (no GB10 run turns compute-bound)"},
            "relative_efficiency": model.relative,
            "family_efficiency": model.family,
            "weight_only": {family: {"weight_gbps": gbps, "gemm_utilization": share, "backends": sorted(
                name for name, f in KERNEL_FAMILY.items() if f == family)}
                            for family, (gbps, share) in model.weight_only.items()},
        },
        "points": model.points,
        "runs": [{"model": r.model, "base": r.base, "format": r.format_label, "backend": r.backend.name,
                  "family": r.family, "lineage": lineages[r.base], "mode": "graphs" if r.graphs else "eager", "kv_cache_dtype": r.kv_cache_dtype,
                  "context": r.context, "concurrency": r.concurrency, "measured_tok_s": r.tok_s,
                  "predicted_tok_s": r.tok_s * (1 + r.predictions["in_sample"]),
                  "in_sample": r.predictions["in_sample"], "left_out": r.predictions.get("left_out"),
                  "family_out": r.predictions.get("family_out"),
                  "class": "|".join(class_of(r)), "source": r.source} for r in runs],
        "in_sample": summary([r.predictions["in_sample"] for r in runs if r.graphs and not r.seed]),
        "left_out": summary([r.predictions["left_out"] for r in runs
                             if r.graphs and not r.seed and "left_out" in r.predictions]),
        "seeds": {"in_sample": summary([r.predictions["in_sample"] for r in runs if r.seed]),
                  "left_out": summary([r.predictions["left_out"] for r in runs if r.seed and "left_out" in r.predictions])},
        "classes": classes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=RESULTS, help="the runs (CSV, results.csv's columns)")
    parser.add_argument("--out", type=Path, default=None, help="where to write the fit (default: beside the runs)")
    args = parser.parse_args()
    if not args.results.is_file():
        print(f"{args.results}: no such file", file=sys.stderr)
        return 2
    payload = run_fit(args.results.resolve())
    c = payload["coefficients"]
    print(f"GB10: efficiency {c['efficiency']:.3f} of 273 GB/s ({273 * c['efficiency']:.0f} GB/s), graph floor "
          f"{c['graph_floor_us_per_kernel']:.2f} us per kernel, compute utilization {c['compute_utilization']['value']:.2f}"
          " (estimate: the H200's)")
    print(f"  Grace host {c['host_us_per_kernel']:.1f} us per eager kernel (calibrated to one report: "
          f"{HOST_REPORT['eager_over_graphs']:.2f}x of graph tok/s eager)")
    for family, value in c["family_efficiency"].items():
        print(f"  {family} models: {value:.3f} x the device's share (the bench ran none: from the Marlin seed)")
    for name, value in c["relative_efficiency"].items():
        print(f"  {name}: {value:.3f} x the device's share")
    for family, figures in c["weight_only"].items():
        weights = "at the device's share" if figures["weight_gbps"] is None else f"at {figures['weight_gbps']:g} GB/s"
        print(f"  {family}: weights {weights}, GEMMs at {figures['gemm_utilization']:g} of the BF16 tensor rate")
    print(f"\n{'run':58}{'backend':40}{'measured':>9}{'fitted':>8}{'error':>7}{'left out':>9}")
    for r in payload["runs"]:
        left = "-" if r["left_out"] is None else f"{100 * r['left_out']:+.0f}%"
        print(f"{r['model'][:38] + ' c=' + str(r['concurrency']) + ' ctx=' + str(r['context']):58}{r['backend'][:39]:40}"
              f"{r['measured_tok_s']:9.2f}{r['predicted_tok_s']:8.2f}{100 * r['in_sample']:+6.1f}%{left:>9}")
    print(f"\n{'class (family, format, mode, streams)':48}{'points':>7}{'in sample':>16}{'left out':>16}")
    for key, entry in payload["classes"].items():
        def cell(s):
            return f"{100 * s['mean_abs']:.1f}% / {100 * s['max_abs']:.0f}%" if s["points"] else "-"
        print(f"{key.replace('|', ', '):48}{entry['in_sample']['points']:>7}{cell(entry['in_sample']):>16}"
              f"{cell(entry['left_out']):>16}")
    s, h = payload["in_sample"], payload["left_out"]
    print(f"\nthe bench's runs (the fit set): in sample mean |error| {100 * s['mean_abs']:.1f}% (max {100 * s['max_abs']:.0f}%, "
          f"{s['points']} runs); leaving the model out {100 * h['mean_abs']:.1f}% (max {100 * h['max_abs']:.0f}%, "
          f"{h['points']} runs)")
    s, h = payload["seeds"]["in_sample"], payload["seeds"]["left_out"]
    print(f"the seeds (another stack, dense Qwen3-8B): in sample {100 * s['mean_abs']:.1f}% (max {100 * s['max_abs']:.0f}%), "
          f"leaving the model out {100 * h['mean_abs']:.1f}% (max {100 * h['max_abs']:.0f}%)")
    out = args.out or (FIT_FILE if args.results.resolve() == RESULTS else args.results.with_suffix(".fit.json"))
    out.write_text(json.dumps(payload, indent=1, allow_nan=False) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
