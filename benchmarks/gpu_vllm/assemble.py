"""Assemble the vLLM site the lent GPU machine lacks, here, from PyPI, and split it for carrying.

The GPU image has torch 2.11.0 (CUDA 13), transformers, numpy and ~200 packages but no vLLM.
vLLM 0.26.0 is the release pinned to torch==2.11.0; its wheel installs there with --no-deps beside
the pure / small packages the image lacks. This script:

1. downloads the vLLM wheel (versions.toml) for CPython 3.12 on manylinux x86_64;
2. walks its Requires-Dist (and theirs, breadth first), skipping what the image already holds
   (versions.toml [image] packages) and the GPU extras the offline decode path never imports
   ([skip]); each wheel is downloaded with --no-deps at the pinned version, or the newest one that
   satisfies the requirement when none is pinned (what it took is written to site.json);
3. unpacks everything into one site folder, leaves out what Hopper does not load (FlashAttention 2's
   library: Hopper runs FA3; the vllm-rs binary), and writes it as a .tar.xz split into parts of at
   most --part-mib MiB under OUT (default .whl/vllm-site, ignored by git) for one `device` call each.

    python benchmarks/gpu_vllm/assemble.py            # ~6 min on 2 cores, ~135 MB of parts, and .whl/roofline-deps
    python benchmarks/gpu_vllm/assemble.py --check    # only list what would be fetched

On the machine: cat part* | xz -d | tar -x -C /tmp/site; PYTHONPATH=/tmp/site (run_probe.sh does it).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PLATFORMS = ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_27_x86_64", "manylinux_2_28_x86_64",
             "manylinux_2_31_x86_64", "manylinux_2_34_x86_64", "manylinux_2_35_x86_64", "manylinux1_x86_64",
             "manylinux_2_5_x86_64"]
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(.*)$")


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requires(wheel: Path) -> list[str]:
    """The wheel's unconditional requirements for Linux x86_64, Python 3.12 (markers evaluated)."""
    from packaging.markers import Marker
    from packaging.requirements import Requirement

    env = {"python_version": "3.12", "python_full_version": "3.12.3", "platform_machine": "x86_64",
           "platform_system": "Linux", "sys_platform": "linux", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(meta).decode("utf-8", "replace")
    out = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = Requirement(line.split(":", 1)[1].strip())
        if requirement.marker is not None and not Marker(str(requirement.marker)).evaluate(env):
            continue
        out.append(str(requirement))
    return out


def download(spec: str, folder: Path) -> Path:
    before = set(folder.glob("*.whl"))
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
               "--implementation", "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none", "-q", "-d", str(folder)]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    command += ["--platform", "any", spec]
    subprocess.run(command, check=True)
    new = set(folder.glob("*.whl")) - before
    if new:
        return new.pop()
    name = normal(REQUIREMENT.match(spec).group(1))
    return next(w for w in folder.glob("*.whl") if normal(w.name.split("-")[0]) == name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / ".whl" / "vllm-site"))
    # a device call carries at most 64 MiB: a part and the working tree (~17 MiB with the recorded results)
    parser.add_argument("--part-mib", type=int, default=40)
    parser.add_argument("--check", action="store_true", help="list the wheels, build nothing")
    args = parser.parse_args()
    table = tomllib.loads((HERE / "versions.toml").read_text())
    image = {normal(n) for n in table["image"]["packages"]}
    skip = {normal(n) for n in table["skip"]["packages"]}
    pinned = {normal(k): v for k, v in table["pinned"].items()}
    out = Path(args.out)
    wheels_dir = out / "wheels"
    wheels_dir.mkdir(parents=True, exist_ok=True)

    queue = [f"vllm=={table['vllm']['version']}", *table.get("also", {}).get("packages", [])]
    seen: dict[str, Path] = {}
    while queue:
        spec = queue.pop(0)
        match = REQUIREMENT.match(spec)
        name = normal(match.group(1))
        if name in seen or name in image or name in skip:
            continue
        version = pinned.get(name)
        wanted = f"{name}=={version}" if version else (match.group(1) + match.group(3).split(";")[0].strip())
        wheel = download(wanted, wheels_dir)
        seen[name] = wheel
        print(f"{name:40} {wheel.name}")
        queue += requires(wheel)
    # roofline's own requirements the image lacks, for `run_probe.sh calibrate` (carried as .whl/roofline-deps)
    deps = out.parent / "roofline-deps"
    deps.mkdir(parents=True, exist_ok=True)
    for spec in table.get("roofline", {}).get("packages", []):
        print(f"{'roofline: ' + spec:40} {download(spec, deps).name}")
    if args.check:
        return 0

    site = out / "site"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir()
    for wheel in seen.values():
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    left_out = []
    for pattern in table["vllm"]["leave_out"]:
        for path in site.glob(pattern):
            left_out.append(str(path.relative_to(site)))
            path.unlink()
    (out / "site.json").write_text(json.dumps({"wheels": sorted(w.name for w in seen.values()),
                                                "left_out": left_out}, indent=1))
    archive = out / "site.tar.xz"
    with tarfile.open(archive, "w:xz", preset=6) as tar:
        tar.add(site, arcname=".")
    for old in out.glob("part*"):
        old.unlink()
    data, size, n = archive.read_bytes(), args.part_mib * 2**20, 0
    for n, start in enumerate(range(0, len(data), size)):
        (out / f"part{n:02d}").write_bytes(data[start:start + size])
    print(f"{archive} {len(data) / 2**20:.1f} MiB in {n + 1} parts of <= {args.part_mib} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
