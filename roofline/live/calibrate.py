"""This host's achievable memory bandwidth, measured, so a CPU (or any GPU) can be validated
against its own roof instead of a datasheet number.

Two kernels, each over buffers far larger than any last-level cache:
  copy  dst.copy_(src)          counts read + write = 2 x buffer bytes (the STREAM convention)
  gemv  y = W @ x, W in fp32 / bf16    counts the matrix bytes: the access pattern of decode,
                                       which reads every weight once per token
Each is repeated; the best repetition is the roof (what the memory system can do when nothing
else interferes), the median says how noisy the host is. The bandwidth saved is the best of all
kernels: a ceiling must stay an upper bound.

torch does the work (already a dependency; imported only here), on the CPU or a CUDA device.
"""
from __future__ import annotations

import os
import platform
import re
import statistics
import time
from dataclasses import asdict, dataclass, field

from roofline.errors import RooflineError
from roofline.files import locked, write_toml
from roofline.predict.hardware import check_entries, read_user_entries, user_hardware_file
from roofline.untrusted import printable

SCHEMA = "roofline.calibrate/1"
GEMV_COLUMNS = 4096  # a hidden size of a mid-size LLM: rows x 4096 weights, like one projection
# the compute roof: a batched-decode / prefill shaped GEMM, [tokens x hidden] @ [hidden x hidden]
GEMM_SHAPE = {"cpu": (256, 2048, 2048), "cuda": (4096, 8192, 8192)}


@dataclass
class KernelResult:
    kernel: str  # copy | gemv_fp32 | gemv_bf16
    bytes_moved: int  # per repetition
    best_gbps: float
    median_gbps: float
    repetitions: int


@dataclass
class Calibration:
    device: str  # cpu | cuda:0 ...
    device_name: str
    threads: int | None  # torch CPU threads (None on a GPU)
    buffer_mb: float
    kernels: list[KernelResult]
    memory_gb: float
    torch_version: str
    measured_at: str
    notes: list[str] = field(default_factory=list)
    launch: object | None = None  # roofline.live.launch_cost.LaunchCalibration, on a GPU
    compute_capability: str = ""  # "9.0" on an H100; empty on a CPU
    gemm_tflops: dict = field(default_factory=dict)  # {"bf16": best dense TFLOP/s of a large GEMM}
    gemm_source: str = ""

    @property
    def best(self) -> KernelResult:
        return max(self.kernels, key=lambda k: k.best_gbps)

    @property
    def bandwidth_gbps(self) -> float:
        return self.best.best_gbps

    def to_json(self) -> dict:
        return {"schema": SCHEMA, **asdict(self), "bandwidth_gbps": self.bandwidth_gbps,
                "bandwidth_kernel": self.best.kernel}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def _host_memory_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):
        return 0.0


def _time(fn, repetitions: int, sync) -> list[float]:
    fn()  # first touch / page faults / kernel selection: not measured
    sync()
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return times


def measure(device: str = "auto", buffer_mb: float = 512, repetitions: int = 10,
            threads: int | None = None, kernels: tuple[str, ...] = ("copy", "gemv_fp32", "gemv_bf16"),
            progress=None, launch: bool = True) -> Calibration:
    """Run the kernels; `buffer_mb` per buffer (MiB), which must dwarf the caches."""
    try:
        import torch
    except ImportError:
        raise RooflineError("roofline calibrate needs torch (pip install torch)") from None
    say = progress or (lambda message: None)
    if buffer_mb < 16:
        raise RooflineError("--size-mb must be at least 16 (a smaller buffer measures the caches)")
    if repetitions < 1:
        raise RooflineError("--repetitions must be at least 1")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RooflineError("--device cuda: torch sees no CUDA device")
        dev = torch.device(device)
        device_name = torch.cuda.get_device_name(dev)
        memory_gb = torch.cuda.get_device_properties(dev).total_memory / 1e9
        sync = lambda: torch.cuda.synchronize(dev)  # noqa: E731
        used_threads = None
    elif device == "cpu":
        dev = torch.device("cpu")
        if threads:
            torch.set_num_threads(threads)
        used_threads = torch.get_num_threads()
        device_name = _cpu_name()
        memory_gb = _host_memory_gb()
        sync = lambda: None  # noqa: E731
    else:
        raise RooflineError(f"unknown --device {device!r}; use auto, cpu or cuda[:N]")

    nbytes = int(buffer_mb * 2**20)
    results = []
    for kernel in kernels:
        try:
            if kernel == "copy":
                src = torch.ones(nbytes, dtype=torch.uint8, device=dev)
                dst = torch.empty_like(src)
                times = _time(lambda: dst.copy_(src), repetitions, sync)
                moved = 2 * nbytes
                del src, dst
            elif kernel.startswith("gemv_"):
                dtype = {"gemv_fp32": torch.float32, "gemv_bf16": torch.bfloat16}[kernel]
                rows = max(1, nbytes // (GEMV_COLUMNS * dtype.itemsize))
                weight = torch.empty(rows, GEMV_COLUMNS, dtype=dtype, device=dev).uniform_(-1, 1)
                x = torch.ones(1, GEMV_COLUMNS, dtype=dtype, device=dev)
                linear = torch.nn.functional.linear  # the call a decode step makes per projection
                times = _time(lambda: linear(x, weight), repetitions, sync)
                moved = weight.numel() * dtype.itemsize
                del weight, x
            else:
                raise RooflineError(f"unknown kernel {kernel!r}")
        except (RuntimeError, MemoryError) as exc:  # e.g. out of memory for the buffer
            raise RooflineError(f"calibrate {kernel} with {buffer_mb:g} MiB buffers failed: "
                                f"{str(exc).splitlines()[0]}; try a smaller --size-mb") from None
        best = moved / min(times) / 1e9
        median = moved / statistics.median(times) / 1e9
        results.append(KernelResult(kernel, moved, best, median, repetitions))
        say(f"{kernel:10} best {best:8.2f} GB/s   median {median:8.2f} GB/s")

    calibration = Calibration(device=str(dev), device_name=device_name, threads=used_threads,
                              buffer_mb=buffer_mb, kernels=results, memory_gb=memory_gb,
                              torch_version=torch.__version__, measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    _measure_gemm(calibration, torch, dev, sync, repetitions, say)
    if str(dev).startswith("cuda"):
        major, minor = torch.cuda.get_device_capability(dev)
        calibration.compute_capability = f"{major}.{minor}"
    if launch and str(dev).startswith("cuda"):
        from .launch_cost import measure_launch

        # the GEMV roof prices the bytes of the small kernels (the access pattern of decode)
        gemv = [k.best_gbps for k in results if k.kernel.startswith("gemv")]
        calibration.launch = measure_launch(str(dev), max(gemv) if gemv else calibration.bandwidth_gbps, say)
    spread = [k.median_gbps / k.best_gbps for k in results if k.best_gbps > 0]
    if spread and min(spread) < 0.7:
        calibration.notes.append("median repetitions ran well below the best: the host is busy; "
                                 "the best repetition is kept as the roof")
    return calibration


def _measure_gemm(calibration: Calibration, torch, dev, sync, repetitions: int, say) -> None:
    """Dense BF16 GEMM throughput: the compute roof of batched decode and prefill here."""
    tokens, inner, outer = GEMM_SHAPE["cpu" if str(dev) == "cpu" else "cuda"]
    try:
        a = torch.empty(tokens, inner, dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
        b = torch.empty(outer, inner, dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
        linear = torch.nn.functional.linear
        times = _time(lambda: linear(a, b), max(3, min(repetitions, 10)), sync)
    except (RuntimeError, MemoryError) as exc:
        calibration.notes.append(f"bf16 GEMM not measured: {str(exc).splitlines()[0]}")
        return
    tflops = 2 * tokens * inner * outer / min(times) / 1e12
    calibration.gemm_tflops = {"bf16": round(tflops, 4)}
    calibration.gemm_source = (f"roofline calibrate {calibration.measured_at}: best bf16 GEMM "
                               f"[{tokens}x{inner}] @ [{inner}x{outer}] on {calibration.device}"
                               + (f", {calibration.threads} threads" if calibration.threads else ""))
    say(f"{'gemm_bf16':10} best {tflops:8.3f} TFLOP/s")


# ---------------------------------------------------------------------------------------------
# Saving as a hardware entry the catalogue reads (roofline/predict/hardware.py: user entries)

def hardware_entry(calibration: Calibration, name: str | None = None, efficiency: float = 0.75) -> dict:
    """A catalogue entry (the fields of roofline/data/hardware.toml) for the measured device."""
    on_gpu = calibration.device.startswith("cuda")
    capability, tensor = calibration.compute_capability, dict(calibration.gemm_tflops)
    best = calibration.best
    return {
        "name": name or f"{calibration.device_name} (calibrated)",
        "aliases": [],
        "bandwidth_gbps": round(calibration.bandwidth_gbps, 3),
        "bandwidth_source": (f"roofline calibrate {calibration.measured_at}: best of {best.repetitions} "
                             f"{best.kernel} over {calibration.buffer_mb:g} MiB buffers on {calibration.device}"
                             + (f", {calibration.threads} threads" if calibration.threads else "")
                             + f", torch {calibration.torch_version}"),
        "bandwidth_kind": "measured",
        "memory_gb": round(calibration.memory_gb, 2),
        "usable_memory_gb": round(calibration.memory_gb * 0.9, 2),
        "memory_source": "as the OS / driver reports it; usable: 90% of it (estimate)",
        "compute_capability": capability,
        "tensor_tflops": tensor,
        "tensor_source": calibration.gemm_source or "not measured by roofline calibrate",
        # a CPU host runs no CUDA kernels: the launch-cost model does not apply to it
        "host": "x86_server" if on_gpu else "cpu",
        "efficiency": efficiency,
        "efficiency_kind": "prior",
        "efficiency_source": ("prior (--efficiency): share of the calibrated roof a decode engine reaches on this "
                              "host, not measured; `roofline validate` records measure it"),
    } | _launch_fields(calibration)


def _launch_fields(calibration: Calibration) -> dict:
    launch = calibration.launch
    if launch is None:
        return {}
    cases = ", ".join(f"{c.name} {c.kernels_per_call:g} kernels" for c in launch.cases)
    return {
        "host_us_per_kernel": round(launch.host_us_per_kernel, 3),
        "graph_floor_us_per_kernel": round(launch.graph_floor_us_per_kernel, 3),
        "launch_source": (f"roofline calibrate {calibration.measured_at} on {calibration.device_name} "
                          f"({_cpu_name()} host), torch {calibration.torch_version}: kernel-weighted mean over "
                          f"decode-width cases ({cases}); eager = host-bound loop wall time per kernel, floor = "
                          f"CUDA-graph replay time per kernel beyond its bytes at {launch.bandwidth_gbps:.0f} GB/s"),
    }


HARDWARE_KEY = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def check_key(key: str) -> str:
    """A hardware key as the catalogue looks keys up: ASCII letters, digits, '-' and '_' (lower
    case: --hardware is matched case-insensitively)."""
    if not isinstance(key, str) or not HARDWARE_KEY.fullmatch(key.lower()):
        raise RooflineError(f"hardware key {printable(key, 70)!r}: use up to 64 ASCII letters, digits, '-' and '_'")
    return key.lower()


def check_name(name: str | None) -> str | None:
    """A display name: printable, one line, at most 120 characters."""
    if name is not None and (printable(name, 1000) != name or not 0 < len(name) <= 120):
        raise RooflineError(f"--name {printable(name, 70)!r}: give one printable line of at most 120 characters")
    return name


def save_entry(key: str, entry: dict, path: str | None = None) -> str:
    """Insert or replace [key] in the user hardware file; the other entries are kept. The entry is
    checked like any catalogue entry, the file written with a TOML writer, atomically, and read back."""
    path = path or user_hardware_file()
    key = check_key(key)
    check_entries({key: entry}, f"--save {key}")
    with locked(path):  # another calibrate saving another key at the same time keeps its entry
        table: dict = read_user_entries(path) if os.path.exists(path) else {}
        table[key] = entry
        write_toml(path, table, make_parent=True,
                   header="# roofline user hardware entries (written by `roofline calibrate --save`).\n"
                          "# Same fields as roofline/data/hardware.toml; entries here add to that catalogue.")
    return path
