"""The hardware catalogue as JSON and as terminal text (`roofline hardware`)."""
from __future__ import annotations

from roofline.predict.hardware import SHIPPED, Hardware, user_hardware_file
from roofline.predict.launch import launch_costs
from roofline.predict.links import Link
from roofline.units import provenance

from .text import text_table

SCHEMA = "roofline.hardware/1"


def _tensor_kind(hw: Hardware) -> str:
    if not hw.tensor_tflops:
        return "none"
    return "datasheet" if hw.origin == SHIPPED else "measured"


def entry_json(hw: Hardware) -> dict:
    costs = launch_costs(hw)
    return {
        "key": hw.key, "name": hw.name, "aliases": list(hw.aliases), "origin": hw.origin,
        "bandwidth": {"gbps": hw.bandwidth_gbps, "kind": hw.bandwidth_kind, "source": hw.bandwidth_source},
        "memory": {"gb": hw.memory_gb, "usable_gb": hw.usable_memory_gb,
                   "kind": "datasheet" if hw.origin == SHIPPED else "measured", "source": hw.memory_source},
        "tensor_tflops": {"dense": dict(hw.tensor_tflops), "kind": _tensor_kind(hw), "source": hw.tensor_source},
        "compute_capability": hw.compute_capability or None,
        "host": hw.host,
        "efficiency": {"value": hw.efficiency, "kind": hw.efficiency_kind, "source": hw.efficiency_source},
        "launch": {"host_us_per_kernel": costs.host_us_per_kernel, "host_kind": costs.host_kind,
                   "host_source": costs.host_source, "graph_floor_us_per_kernel": costs.graph_floor_us_per_kernel,
                   "floor_kind": costs.floor_kind, "floor_source": costs.floor_source},
    }


def link_json(link: Link) -> dict:
    return {"key": link.key, "name": link.name, "scope": link.scope, "bandwidth_gbps": link.bandwidth_gbps,
            "latency_us": link.latency_us, "latency_kind": link.latency_kind, "max_ranks": link.max_ranks,
            "ranks_per_box": link.ranks_per_box}


def catalogue_json(devices: list[Hardware], links: list[Link]) -> dict:
    return {"schema": SCHEMA, "shipped": SHIPPED, "user_file": user_hardware_file(),
            "hardware": [entry_json(hw) for hw in devices], "links": [link_json(link) for link in links]}


def _tensor(entry: dict) -> str:
    dense = entry["tensor_tflops"]["dense"]
    return " / ".join(f"{fmt} {dense[fmt]:g}" for fmt in ("bf16", "fp8", "fp4") if fmt in dense) or "-"


def _row(entry: dict) -> list[str]:
    return [entry["key"], entry["name"], f"{entry['bandwidth']['gbps']:g}", entry["bandwidth"]["kind"],
            f"{entry['memory']['gb']:g}", _tensor(entry), entry["host"],
            f"{entry['efficiency']['value']:.2f} {entry['efficiency']['kind']}", ", ".join(entry["aliases"]) or "-"]


HEADER = ["key", "name", "GB/s", "kind", "GB", "dense TFLOP/s", "host", "efficiency", "aliases"]


def render_catalogue(payload: dict) -> str:
    shipped = [e for e in payload["hardware"] if e["origin"] == payload["shipped"]]
    saved = [e for e in payload["hardware"] if e["origin"] != payload["shipped"]]
    lines = [f"hardware ({payload['shipped']}): --hardware KEY or an alias"]
    lines += text_table([HEADER] + [_row(e) for e in shipped], right={2, 4})
    lines.append("")
    if saved:
        lines.append(f"saved by `roofline calibrate --save` ({payload['user_file']}):")
        lines += text_table([HEADER] + [_row(e) for e in saved], right={2, 4})
    else:
        lines.append(f"no saved entries ({payload['user_file']}): `roofline calibrate --save KEY` measures this "
                     "host and adds one")
    if payload["links"]:
        lines += ["", "links (plan --tp / --boxes / --gpus: --link, --network):"]
        lines += text_table([["key", "scope", "GB/s", "latency us", "kind", "devices", "name"]]
                            + [[link["key"], link["scope"], f"{link['bandwidth_gbps']:g}", f"{link['latency_us']:g}",
                                link["latency_kind"], str(link["max_ranks"]), link["name"]]
                               for link in payload["links"]], right={2, 3, 5})
    lines += ["", "`roofline hardware KEY` prints one entry with its sources; datasheet figures are dense "
                  "(sparse ones halved)"]
    return "\n".join(lines)


def render_entry(entry: dict) -> str:
    launch = entry["launch"]
    lines = [f"{entry['key']}: {entry['name']}" + (f" (aliases: {', '.join(entry['aliases'])})" if entry["aliases"] else ""),
             f"  from            {entry['origin']}",
             f"  bandwidth       {entry['bandwidth']['gbps']:g} GB/s, "
             f"{provenance(entry['bandwidth']['kind'], entry['bandwidth']['source'])}",
             f"  memory          {entry['memory']['gb']:g} GB ({entry['memory']['usable_gb']:g} usable), "
             f"{provenance(entry['memory']['kind'], entry['memory']['source'])}",
             f"  tensor          {_tensor(entry)} TFLOP/s dense, "
             f"{provenance(entry['tensor_tflops']['kind'], entry['tensor_tflops']['source'] or '-')}",
             f"  SM              {entry['compute_capability'] or '- (not a GPU)'}",
             f"  efficiency      {entry['efficiency']['value']:.3f}, "
             f"{provenance(entry['efficiency']['kind'], entry['efficiency']['source'])}",
             f"  host            {entry['host']}: {launch['host_us_per_kernel']:g} us per eager kernel, "
             f"{provenance(launch['host_kind'], launch['host_source'])}",
             f"  graph floor     {launch['graph_floor_us_per_kernel']:g} us per kernel, "
             f"{provenance(launch['floor_kind'], launch['floor_source'])}"]
    return "\n".join(lines)
