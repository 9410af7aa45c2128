"""Shared pytest fixtures: real checkpoints written by real libraries, and the reference configs.

The checkpoints are made by tests/fixtures/make_checkpoints.py in the fixture environment
(.venv-fixtures, made by `scripts/setup.sh --test`), all in one subprocess the first time any
is asked for, into `.cache/fixtures/<hash>/` where the hash covers the script and its pinned
requirements. Later sessions reuse them. Treat them as read-only: a test that changes a
checkpoint copies it to tmp_path first.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES_SOURCE = REPO / "tests" / "fixtures"
MAKE_SCRIPT = FIXTURES_SOURCE / "make_checkpoints.py"
REQUIREMENTS = FIXTURES_SOURCE / "requirements.txt"
CACHE_ROOT = REPO / ".cache" / "fixtures"
# another interpreter with the same libraries can stand in (e.g. while .venv-fixtures is rebuilt)
FIXTURE_PYTHON = Path(os.environ.get("ROOFLINE_FIXTURE_PYTHON", REPO / ".venv-fixtures" / "bin" / "python"))
# copies of public models' config files (tests/reference_configs/SOURCES.md): the suite never
# reads the shared folder beside the checkout, which a clean clone (CI) may not have beside it
REFERENCE_CONFIGS = REPO / "tests" / "reference_configs"

# the tests in this directory import these
sys.path.insert(0, str(Path(__file__).resolve().parent))


# the validation record defaults to the user data folder: a test run (and every command it starts)
# keeps its own, never the user's
os.environ.setdefault("ROOFLINE_RECORD", os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                      f"roofline-test-record-{os.getpid()}.jsonl"))


def _fixture_names() -> list[str]:
    # make_checkpoints.py imports only the standard library at module level, so the list of
    # names can be read here without the fixture environment's packages.
    spec = importlib.util.spec_from_file_location("_roofline_make_checkpoints", MAKE_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return list(module.NAMES)


FIXTURE_NAMES = _fixture_names()


def fixtures_key() -> str:
    digest = hashlib.sha256()
    for path in (MAKE_SCRIPT, REQUIREMENTS):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _complete(directory: Path) -> bool:
    return all((directory / name / "FIXTURE.json").is_file() for name in FIXTURE_NAMES)


def build_fixtures() -> Path:
    """The directory holding every fixture checkpoint, made now if the cache lacks it."""
    final = CACHE_ROOT / fixtures_key()
    if _complete(final):
        return final
    if not FIXTURE_PYTHON.is_file():
        pytest.fail(
            f"the fixture environment is missing ({FIXTURE_PYTHON} not found): "
            "run `scripts/setup.sh --test` to build .venv-fixtures", pytrace=False)
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    # several pytest processes may start at once: one builds, the others wait and reuse
    with open(CACHE_ROOT / f"{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _complete(final):
            return final
        building = CACHE_ROOT / f"{final.name}.tmp-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        log = CACHE_ROOT / f"{final.name}.log"
        with open(log, "w") as log_file:
            result = subprocess.run(
                [str(FIXTURE_PYTHON), str(MAKE_SCRIPT), str(building)],
                cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT,
                env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, timeout=900)
        if result.returncode != 0 or not _complete(building):
            shutil.rmtree(building, ignore_errors=True)
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            pytest.fail(f"making the fixture checkpoints failed (exit {result.returncode}); "
                        f"full log: {log}\n{tail}", pytrace=False)
        shutil.rmtree(final, ignore_errors=True)  # an incomplete leftover of an older layout
        building.rename(final)
    _prune_stale(keep=final.name)
    return final


def _prune_stale(keep: str) -> None:
    """Drop fixtures made by older versions of the script, unless someone is building them."""
    for lock_path in CACHE_ROOT.glob("*.lock"):
        key = lock_path.name[: -len(".lock")]
        if key == keep:
            continue
        with open(lock_path, "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(CACHE_ROOT / key, ignore_errors=True)
            (CACHE_ROOT / f"{key}.log").unlink(missing_ok=True)
        lock_path.unlink(missing_ok=True)


@pytest.fixture(scope="session", autouse=True)
def skeleton_cache_dir(tmp_path_factory):
    """The config path's skeleton cache, shared by the session's tests (each config is built with
    transformers once), never the user's ~/.cache. Subprocesses inherit it."""
    path = tmp_path_factory.mktemp("roofline-cache")
    previous = os.environ.get("ROOFLINE_CACHE")
    os.environ["ROOFLINE_CACHE"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("ROOFLINE_CACHE", None)
    else:
        os.environ["ROOFLINE_CACHE"] = previous


@pytest.fixture(scope="session")
def checkpoints() -> dict[str, Path]:
    """{name: checkpoint directory} for every fixture (see make_checkpoints.py SPECS)."""
    root = build_fixtures()
    return {name: root / name for name in FIXTURE_NAMES}


@pytest.fixture(scope="session")
def checkpoint(checkpoints) -> Callable[[str], Path]:
    """checkpoint("ct_nvfp4a16") -> the directory of that fixture checkpoint."""
    def get(name: str) -> Path:
        if name not in checkpoints:
            raise KeyError(f"no fixture checkpoint {name!r}; known: {', '.join(FIXTURE_NAMES)}")
        return checkpoints[name]
    return get


@pytest.fixture(scope="session")
def reference_configs() -> Path:
    """Real config.json / hf_quant_config.json of public models, copied into tests/."""
    return REFERENCE_CONFIGS


@pytest.fixture(autouse=True, scope="session")
def _no_columns():
    """Tables fit $COLUMNS when it is set, and the suite reads whole tables. GNU readline (which
    pytest's startup loads) writes COLUMNS=80 into the process environment behind os.environ's back,
    so every command a test starts would see it: unset it at the C level, after that."""
    os.environ["COLUMNS"] = ""
    del os.environ["COLUMNS"]
    yield




from vllm_server import LOCK as ENGINE_LOCK  # noqa: E402  (one vLLM engine at a time on the machine)
ENGINE_GROUP = "vllm-engines"


@functools.cache
def engine_files() -> frozenset[str]:
    """The test files that start vLLM engines: those that take the engine lock, themselves or through
    tests/vllm_server.py."""
    here = Path(__file__).resolve().parent
    return frozenset(path.name for path in here.glob("test_*.py")
                     if ENGINE_LOCK in (text := path.read_text()) or "vllm_server" in text)


def _engine_file(nodeid: str) -> bool:
    return Path(nodeid.split("::")[0]).name in engine_files()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile (scripts/test.sh) with the engine files as one unit: a file is one unit of work (its
    module-scoped engines and fixtures start once), and one worker runs every engine file, one after another,
    while the other runs the pure-Python files. Beside each other, two engine files made one worker wait on the
    lock ~4.5 of the suite's 28 minutes on a 2-core host."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class EngineFilesTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return ENGINE_GROUP if _engine_file(nodeid) else nodeid.split("::")[0]

    return EngineFilesTogether(config, log)


# an engine file that times vLLM's steps and fits them (the fit refuses steps a busy machine disturbed): it runs last
# of the engine files, after the fixture build and the other worker's first imports. On a fresh clone of a 2-core
# host without AVX-512 the whole 28-layer shape's engine took ~820 s beside the other worker (333 s alone, 144 of
# them compiling): the file now calibrates a 4-layer cut (118 s alone)
TIMED_ENGINE_FILES = ("test_calibrate_engine.py",)


def pytest_collection_modifyitems(items):
    """The engine files first: their unit is the longest, and the scheduler hands the units out in the
    collection's order (scripts/test.sh: --no-loadscope-reorder); within it, the timed engine last."""
    items.sort(key=lambda item: (not _engine_file(item.nodeid),
                                 Path(item.nodeid.split("::")[0]).name in TIMED_ENGINE_FILES))  # stable otherwise
