"""The hardware catalogue (roofline/data/hardware.toml) as dataclasses."""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field

from roofline.data import load_table
from roofline.errors import RooflineError

DEFAULT_HARDWARE = "gb10"


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

    def supports(self, compute: str) -> bool:
        return compute in self.tensor_tflops


LINKS_KEY = "link"  # hardware.toml [link.*]: the interconnects, not devices


def user_hardware_file() -> str:
    """Where `roofline calibrate --save` writes and the catalogue reads user entries:
    $ROOFLINE_HARDWARE_FILE, else $XDG_CONFIG_HOME/roofline/hardware.toml (~/.config/...)."""
    explicit = os.environ.get("ROOFLINE_HARDWARE_FILE")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "roofline", "hardware.toml")


def _user_entries() -> dict:
    path = user_hardware_file()
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RooflineError(f"{path}: cannot read the user hardware file: {exc}") from None


def catalogue() -> dict[str, Hardware]:
    """The shipped table plus the user's entries (a user entry of the same key wins)."""
    out = {}
    user = _user_entries()
    shipped = {key: entry for key, entry in load_table("hardware").items() if key != LINKS_KEY}
    for key, entry in list(shipped.items()) + list(user.items()):
        entry = dict(entry)
        entry["aliases"] = tuple(entry.get("aliases", ()))
        try:
            out[key] = Hardware(key=key, **entry)
        except TypeError as exc:
            raise RooflineError(f"{user_hardware_file()}: hardware entry [{key}] is malformed: {exc}") from None
    return out


def get_hardware(name: str | None = None, bandwidth_gbps: float | None = None) -> Hardware:
    """A catalogue entry by key or alias; --bandwidth overrides its bandwidth."""
    table = catalogue()
    wanted = (name or DEFAULT_HARDWARE).lower()
    found = table.get(wanted) or next((hw for hw in table.values() if wanted in hw.aliases), None)
    if found is None:
        raise RooflineError(f"unknown hardware {name!r}; known: {', '.join(sorted(table))}")
    if bandwidth_gbps is not None:
        if bandwidth_gbps <= 0:
            raise RooflineError("--bandwidth must be positive")
        found = Hardware(**{**found.__dict__, "bandwidth_gbps": float(bandwidth_gbps),
                            "bandwidth_source": "user (--bandwidth)", "bandwidth_kind": "user"})
    return found
