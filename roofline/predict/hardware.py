"""The hardware catalogue (roofline/data/hardware.toml) as dataclasses."""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from typing import Annotated

import msgspec
from msgspec import Meta

from roofline.data import load_table
from roofline.errors import RooflineError, unknown
from roofline.files import read_regular
from roofline.schema import checked

DEFAULT_HARDWARE = "gb10"
SHIPPED = "roofline/data/hardware.toml"


BANDWIDTH_BASIS = {"datasheet": "the datasheet bandwidth", "measured": "the bandwidth `roofline calibrate` measured",
                   "user": "your --bandwidth"}


@dataclass(frozen=True)
class Hardware:
    key: str
    name: str
    bandwidth_gbps: float
    bandwidth_source: str
    memory_gb: float
    usable_memory_gb: float
    compute_capability: str
    tensor_tflops: dict[str, float]
    host: str
    efficiency: float
    efficiency_kind: str  # "calibrated" | "prior" | "user"
    efficiency_source: str
    aliases: tuple[str, ...] = field(default=())
    # per-kernel costs measured on this very host and GPU (`roofline calibrate --device cuda --save`);
    # None: the launch.toml table's figures for the host class and device apply
    host_us_per_kernel: float | None = None
    graph_floor_us_per_kernel: float | None = None
    launch_source: str = ""
    bandwidth_kind: str = "datasheet"  # datasheet | measured (calibrate) | user (--bandwidth)
    memory_source: str = ""
    tensor_source: str = ""
    # the device memory the CUDA runtime reports (cudaMemGetInfo total), the figure vLLM multiplies by
    # gpu_memory_utilization; None: memory_gb (the datasheet) stands for it
    runtime_memory_gib: float | None = None
    runtime_memory_source: str = ""
    # streaming multiprocessors (CUDA's multiProcessorCount): sizes vLLM's per-SM sampler buffers; None: unknown
    sm_count: int | None = None
    sm_count_source: str = ""
    vllm_version: str = ""  # the vLLM an entry's engine coefficients were fitted under (calibrate --engine vllm)
    # share of the datasheet tensor rate decode GEMMs reach, measured on this device (None: rules.toml's estimate)
    compute_utilization: float | None = None
    compute_utilization_source: str = ""
    # a model family's share of the bandwidth relative to `efficiency` where it was fitted apart (GB10: dense
    # models read faster than the MoE / hybrids the efficiency was fitted on); a family not named: 1.0
    family_efficiency: dict[str, float] = field(default_factory=dict)
    family_efficiency_source: str = ""
    # `calibrate --engine vllm` entries: the floor per replayed kernel of each model family it ran, a MoE /
    # Mamba layer's eager Python (in launches' worth) where it ran them eager, and how well its own fit priced
    # each class it measured (a family x mode: the entry's band, roofline.predict.bands)
    graph_floor_us_by_family: dict[str, float] = field(default_factory=dict)
    layer_python_launches: dict[str, float] = field(default_factory=dict)
    bands: tuple["CalibratedBand", ...] = ()
    origin: str = SHIPPED  # the file the entry comes from: the shipped table or the user's (calibrate --save)
    # the catalogue entry this one was fitted over (calibrate --from-results): the same device and box, so
    # the tables keyed by hardware (launch.toml floors, hardware.toml links) apply to it as to that one
    derived_from: str = ""

    def supports(self, compute: str) -> bool:
        return compute in self.tensor_tflops

    def bandwidth_basis(self) -> str:
        """What the ceiling's bandwidth is, in words: a ceiling is only as physical as its figure."""
        return BANDWIDTH_BASIS.get(self.bandwidth_kind, self.bandwidth_kind)

    def bandwidth_text(self) -> str:
        """"273 GB/s", and for --bandwidth what still applies on top of the user's figure."""
        text = f"{self.bandwidth_gbps:g} GB/s"
        if self.bandwidth_kind == "user":
            text += " (your --bandwidth, read as the datasheet figure: the entry's efficiency still applies on top)"
        return text


LINKS_KEY = "link"  # hardware.toml [link.*]: the interconnects, not devices


MAX_HARDWARE_FILE_BYTES = 16 << 20  # a user file of calibrated entries is kilobytes


def user_hardware_file() -> str:
    """Where `roofline calibrate --save` writes and the catalogue reads user entries:
    $ROOFLINE_HARDWARE_FILE, else $XDG_CONFIG_HOME/roofline/hardware.toml (~/.config/...)."""
    explicit = os.environ.get("ROOFLINE_HARDWARE_FILE")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "roofline", "hardware.toml")


# One catalogue entry as a file states it (the shipped table and the user's file alike): every
# figure finite, positive and below anything built (HBM4 parts reach ~20 TB/s; 1,000x headroom).
Text = Annotated[str, Meta(max_length=2000)]
Key = Annotated[str, Meta(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")]
_Rate = Annotated[float, Meta(gt=0, le=1e7)]


Family = Annotated[str, Meta(pattern=r"^(dense|moe|hybrid)$")]


class CalibratedBand(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One class (family x mode) a `calibrate --engine vllm` entry measured, and its own fit's error there."""
    family: Family
    mode: Annotated[str, Meta(pattern=r"^(graphs|eager)$")]
    points: Annotated[int, Meta(ge=1, le=100000)]
    # the band printed: 90% of the class's errors (pooled, raised: band_basis); entries saved before 2026-11-27
    # hold the mean |error| here and no mean_error
    error: Annotated[float, Meta(ge=0, le=100)]
    max_error: Annotated[float, Meta(ge=0, le=100)]
    basis: Annotated[str, Meta(pattern=r"^(out of sample|in sample)$")]
    models: Annotated[list[Annotated[str, Meta(max_length=200)]], Meta(max_length=64)] = []
    mean_error: Annotated[float, Meta(ge=0, le=100)] | None = None
    band_basis: Annotated[str, Meta(max_length=400)] = ""


class HardwareEntry(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, Meta(min_length=1, max_length=120)]
    bandwidth_gbps: Annotated[float, Meta(gt=0, le=1e6)]
    bandwidth_source: Text
    memory_gb: Annotated[float, Meta(gt=0, le=1e6)]
    usable_memory_gb: Annotated[float, Meta(gt=0, le=1e6)]
    compute_capability: Annotated[str, Meta(pattern=r"^([0-9]{1,3}\.[0-9]{1,3})?$")]  # "" on a CPU
    tensor_tflops: dict[Annotated[str, Meta(max_length=32)], _Rate]
    host: Annotated[str, Meta(pattern=r"^[a-z0-9_]{1,32}$")]  # a host class of launch.toml, or cpu
    efficiency: Annotated[float, Meta(gt=0, le=1)]
    efficiency_kind: Annotated[str, Meta(max_length=32)]
    efficiency_source: Text
    aliases: Annotated[list[Key], Meta(max_length=32)] = []
    host_us_per_kernel: Annotated[float, Meta(gt=0, le=1e6)] | None = None
    graph_floor_us_per_kernel: Annotated[float, Meta(ge=0, le=1e6)] | None = None
    launch_source: Text = ""
    bandwidth_kind: Annotated[str, Meta(max_length=32)] = "datasheet"
    memory_source: Text = ""
    tensor_source: Text = ""
    runtime_memory_gib: Annotated[float, Meta(gt=0, le=1e6)] | None = None
    runtime_memory_source: Text = ""
    sm_count: Annotated[int, Meta(ge=1, le=4096)] | None = None
    sm_count_source: Text = ""
    vllm_version: Annotated[str, Meta(max_length=64)] = ""
    compute_utilization: Annotated[float, Meta(gt=0, le=1)] | None = None
    compute_utilization_source: Text = ""
    family_efficiency: dict[Family, Annotated[float, Meta(gt=0.2, le=5)]] = msgspec.field(default_factory=dict)
    family_efficiency_source: Text = ""
    graph_floor_us_by_family: dict[Family, Annotated[float, Meta(ge=0, le=1e6)]] = msgspec.field(
        default_factory=dict)
    layer_python_launches: dict[Annotated[str, Meta(pattern=r"^(moe|mamba)$")],
                                Annotated[float, Meta(ge=0, le=1e4)]] = msgspec.field(default_factory=dict)
    bands: Annotated[list[CalibratedBand], Meta(max_length=64)] = []
    derived_from: Annotated[str, Meta(pattern=r"^([a-z0-9][a-z0-9_-]{0,63})?$")] = ""


def check_entries(table, where: str) -> dict[str, HardwareEntry]:
    """Hardware entries checked (keys, types, ranges, usable memory within memory), one clear
    error naming the file, the entry and the field."""
    if not isinstance(table, dict):
        raise RooflineError(f"{where}: not a table of hardware entries")
    out = {}
    for key, entry in table.items():
        checked(key, Key, f"{where}: hardware key")
        if not isinstance(entry, dict):
            raise RooflineError(f"{where}: [{key}] is not a table of fields")
        checked_entry = checked(entry, HardwareEntry, f"{where}: [{key}]")
        if checked_entry.usable_memory_gb > checked_entry.memory_gb:
            raise RooflineError(f"{where}: [{key}] usable_memory_gb {checked_entry.usable_memory_gb:g} is more "
                                f"than memory_gb {checked_entry.memory_gb:g}")
        out[key] = checked_entry
    return out


def read_user_entries(path: str) -> dict:
    """The user hardware file as a table (not yet checked)."""
    raw = read_regular(path, f"the user hardware file {path}", MAX_HARDWARE_FILE_BYTES)
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except RecursionError:
        raise RooflineError(f"{path}: the user hardware file nests too deep") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RooflineError(f"{path}: cannot read the user hardware file: {exc}") from None


def _user_entries() -> tuple[str, dict[str, HardwareEntry]]:
    path = user_hardware_file()
    if not os.path.exists(path):
        return path, {}
    return path, check_entries(read_user_entries(path), path)


def catalogue() -> dict[str, Hardware]:
    """The shipped table plus the user's entries (a user entry of the same key wins)."""
    out = {}
    shipped = {key: entry for key, entry in load_table("hardware").items() if key != LINKS_KEY}
    for key, entry in shipped.items():
        entry = dict(entry)
        entry["aliases"] = tuple(entry.get("aliases", ()))
        out[key] = Hardware(key=key, **entry)
    path, user = _user_entries()
    for key, entry in user.items():
        fields = msgspec.structs.asdict(entry)
        fields["aliases"], fields["bands"] = tuple(fields["aliases"]), tuple(fields["bands"])
        out[key] = Hardware(key=key, origin=path, **fields)
    return out


def entry_of(hardware: Hardware) -> dict:
    """The catalogue entry `hardware` was read from, as its file holds it (the shipped table or the user's),
    for an entry derived from it (calibrate --from-results). Its own bands go: they priced its old figures."""
    if hardware.origin == SHIPPED:
        entry = dict(load_table("hardware")[hardware.key])
    else:
        entry = msgspec.structs.asdict(check_entries({hardware.key: read_user_entries(hardware.origin)[hardware.key]},
                                                     hardware.origin)[hardware.key])
    entry.pop("bands", None)
    return {key: (list(value) if isinstance(value, tuple) else value) for key, value in entry.items()}


def get_hardware(name: str | None = None, bandwidth_gbps: float | None = None) -> Hardware:
    """A catalogue entry by key or alias; --bandwidth overrides its bandwidth."""
    table = catalogue()
    # "DGX Spark" as people write it: the catalogue's keys and aliases are lower-case, hyphenated
    wanted = "-".join((name or DEFAULT_HARDWARE).lower().split())
    found = table.get(wanted) or next((hw for hw in table.values() if wanted in hw.aliases), None)
    if found is None:
        raise unknown("hardware", name, {key: tuple(a for a in hw.aliases if a != key) for key, hw in table.items()})
    if bandwidth_gbps is not None:
        if bandwidth_gbps <= 0:
            raise RooflineError("--bandwidth must be positive")
        found = Hardware(**{**found.__dict__, "bandwidth_gbps": float(bandwidth_gbps),
                            "bandwidth_source": "user (--bandwidth)", "bandwidth_kind": "user"})
    return found
