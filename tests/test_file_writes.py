"""Files the tool updates in place keep every writer's change (a lock, a re-read under it, an atomic write);
files it writes for the user go where asked only (no folder made up from a typo) with the user's umask."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib

from roofline.errors import RooflineError

SAVE = """
import sys
from roofline.live.calibrate import save_entry
key, path = sys.argv[1], sys.argv[2]
entry = {"name": key, "bandwidth_gbps": 100.0, "bandwidth_source": "test", "memory_gb": 16.0,
         "usable_memory_gb": 14.0, "compute_capability": "", "tensor_tflops": {"bf16": 1.0}, "host": "cpu",
         "efficiency": 0.5, "efficiency_kind": "prior", "efficiency_source": "test"}
for _ in range(5):  # widen the window in which an unlocked read-modify-write loses another writer's key
    save_entry(key, entry, path)
"""


def test_concurrent_saves_into_one_hardware_file_keep_every_entry(tmp_path):
    path = tmp_path / "config" / "hardware.toml"
    keys = [f"host-{i}" for i in range(6)]
    children = [subprocess.Popen([sys.executable, "-c", SAVE, key, str(path)]) for key in keys]
    assert all(child.wait(timeout=120) == 0 for child in children)
    assert sorted(tomllib.loads(path.read_text())) == keys
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_json_out_into_a_missing_folder_is_refused(tmp_path):
    from roofline.files import write_json

    target = tmp_path / "no" / "such" / "dir" / "out.json"
    try:
        write_json(str(target), {"a": 1})
    except RooflineError as exc:
        assert "no such directory" in str(exc)
    else:
        raise AssertionError("a missing folder was created")
    assert not (tmp_path / "no").exists()
    done = subprocess.run([sys.executable, "-m", "roofline.cli", "audit", "examples/Qwen3-8B", "--json-out",
                           str(target)], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 1 and "no such directory" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "no").exists()


def test_written_files_follow_the_umask(tmp_path):
    from roofline.files import write_json

    old = os.umask(0o022)
    try:
        path = write_json(str(tmp_path / "out.json"), {"a": 1})
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o777 == 0o644
    assert json.loads(open(path).read()) == {"a": 1}
