"""vLLM general plugin: a live inventory of the loaded model, from inside every worker.

Registered as the entry point `vllm.general_plugins: roofline_capture =
roofline.hooks.plugin:register`. vLLM calls `register()` once in every process it starts
(API server / LLM process, engine core, each worker) before any model is built. It does
nothing at all unless `ROOFLINE_CAPTURE` names an output file:

    ROOFLINE_CAPTURE=/tmp/capture.json vllm serve MODEL ...
    ROOFLINE_CAPTURE=/tmp/capture.json python -c "from vllm import LLM; LLM('MODEL')"

Where it hooks in (vLLM 0.32 source, checked):
- Every executor (uniproc, multiproc, Ray) loads the model by calling `load_model()` on a
  `WorkerWrapperBase` (vllm/v1/worker/worker_base.py), which forwards unknown attributes to
  the platform's worker (`Worker.load_model` in gpu_worker.py; `CPUWorker` and `XPUWorker`
  inherit it; out-of-tree platforms bring their own). Giving the wrapper class a
  `load_model` that calls the worker's own wraps *every* platform's worker in one place.
- The CPU backend's `UnquantizedLinearMethod.process_weights_after_loading` repacks each
  linear's weight into a oneDNN / SGL handle and replaces `layer.weight` by an empty tensor,
  so the bytes are gone after load. While the wrapped `load_model` runs, the module-level
  `process_weights_after_loading` that `BaseModelLoader.load_model` calls
  (vllm/model_executor/model_loader/base_loader.py) is wrapped too, to take a metadata
  snapshot of every tensor just before the repack. It is restored when load returns.
- vLLM's own modules are never imported early: the wrapper is installed when
  `vllm.v1.worker.worker_base` is imported (at once if it already is).

Every rank writes `<out>.rank<R>.json`; the last rank to finish merges all parts of the same
engine instance (vllm_config.instance_id) into `<out>` under a file lock.

Never harms vLLM: the original functions are always called exactly as before, with their
own arguments, results and exceptions; any failure of the capture itself is logged once and
swallowed.
"""
from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import json
import logging
import os
import sys
import time

ENV = "ROOFLINE_CAPTURE"
_WORKER_BASE = "vllm.v1.worker.worker_base"
_BASE_LOADER = "vllm.model_executor.model_loader.base_loader"
MERGED_KIND = "merged"

# a child of vLLM's logger, so messages come out in vLLM's format and process prefix
logger = logging.getLogger("vllm.roofline_capture")
_warned: set[str] = set()
_installed = False


def _warn_once(what: str, exc: BaseException | None = None) -> None:
    if what in _warned:
        return
    _warned.add(what)
    try:
        if exc is not None:
            logger.warning("roofline capture: %s failed (%s: %s); vLLM continues without it",
                           what, type(exc).__name__, exc)
        else:
            logger.warning("roofline capture: %s", what)
    except Exception:  # noqa: BLE001 - logging must not fail vLLM either
        pass


def register() -> None:
    """vLLM general-plugin entry point. Idempotent; a no-op unless ROOFLINE_CAPTURE is set."""
    global _installed
    try:
        if not os.environ.get(ENV) or _installed:
            return
        _installed = True
        module = sys.modules.get(_WORKER_BASE)
        if module is not None:
            _patch_worker_wrapper(module)
        else:
            sys.meta_path.insert(0, _PatchOnImport())
    except Exception as exc:  # noqa: BLE001
        _warn_once("installing the load_model hook", exc)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches WorkerWrapperBase right after vLLM itself imports worker_base."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _WORKER_BASE:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original_exec = spec.loader.exec_module

        def exec_module(module):
            original_exec(module)
            try:
                _patch_worker_wrapper(module)
            except Exception as exc:  # noqa: BLE001
                _warn_once("installing the load_model hook", exc)

        spec.loader.exec_module = exec_module
        return spec


def _patch_worker_wrapper(worker_base) -> None:
    wrapper_cls = worker_base.WorkerWrapperBase
    if getattr(wrapper_cls, "_roofline_capture", False):
        return
    own = wrapper_cls.__dict__.get("load_model")  # none in 0.32: __getattr__ forwards

    def load_model(self, *args, **kwargs):
        worker = self.worker
        call = (functools.partial(own, self) if own is not None else worker.load_model)
        return _capture_around_load(worker, call, args, kwargs)

    wrapper_cls.load_model = load_model
    wrapper_cls._roofline_capture = True


def _capture_around_load(worker, call, args, kwargs):
    """Runs the worker's load_model unchanged, with the pre-repack snapshot armed, then
    walks the loaded model and writes this rank's record."""
    state: dict = {"loaded": None, "timings": {}}
    restore = None
    try:
        restore = _arm_pre_repack_snapshot(state)
    except Exception as exc:  # noqa: BLE001
        _warn_once("arming the pre-repack snapshot", exc)
    try:
        result = call(*args, **kwargs)
    finally:
        if restore is not None:
            try:
                restore()
            except Exception as exc:  # noqa: BLE001
                _warn_once("restoring process_weights_after_loading", exc)
    try:
        _record(worker, state)
    except Exception as exc:  # noqa: BLE001
        _warn_once("recording the loaded model", exc)
    return result


def _arm_pre_repack_snapshot(state: dict):
    import importlib

    loader = importlib.import_module(_BASE_LOADER)
    original = loader.process_weights_after_loading
    if getattr(original, "_roofline_capture", False):
        return None

    @functools.wraps(original)
    def process_weights_after_loading(model, *args, **kwargs):
        try:
            from . import walk

            started = time.perf_counter()
            # the fingerprint fallback only matters when several ranks are merged
            state["loaded"] = walk.snapshot_tensors(model, multi_rank=_multi_rank())
            state["timings"]["loaded_walk_s"] = time.perf_counter() - started
        except Exception as exc:  # noqa: BLE001
            _warn_once("the pre-repack snapshot", exc)
        return original(model, *args, **kwargs)

    process_weights_after_loading._roofline_capture = True
    loader.process_weights_after_loading = process_weights_after_loading

    def restore():
        if loader.process_weights_after_loading is process_weights_after_loading:
            loader.process_weights_after_loading = original

    return restore


def _multi_rank() -> bool:
    try:
        from vllm.distributed import parallel_state

        return parallel_state.get_world_group().world_size > 1
    except Exception:  # noqa: BLE001
        return True


def _record(worker, state: dict) -> None:
    from . import walk

    model = worker.get_model()
    vllm_config = getattr(worker, "vllm_config", None)
    record = walk.build_record(model, vllm_config, state["loaded"], state["timings"])
    if state["loaded"] is None:
        record.setdefault("warnings", []).append(
            "the pre-repack moment was not reached (a model loader that does not call "
            "BaseModelLoader.process_weights_after_loading); bytes are those the modules "
            "hold after load, which on the CPU backend omits repacked unquantized weights")
    write_rank_record(os.environ[ENV], record)


def part_path(out: str, rank: int) -> str:
    stem = out[:-5] if out.endswith(".json") else out
    return f"{stem}.rank{rank}.json"


def write_rank_record(out: str, record: dict) -> None:
    """Writes this rank's part atomically, then (under a lock) merges every part of the same
    run into `out`; the merge is complete once all world_size ranks have written."""
    import fcntl
    import glob

    out = os.path.abspath(out)
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    started = time.perf_counter()
    part = part_path(out, int(record.get("rank", 0)))
    _atomic_write(part, record)
    with open(out + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stem = out[:-5] if out.endswith(".json") else out
        # every rank of this run known so far: those already merged into `out` (a rank that merged
        # last removed the parts, its own and this one's, before this rank got the lock), the parts
        # on disk, and this rank's own record
        by_rank: dict = {}
        sources = [out] + sorted(glob.glob(glob.escape(stem) + ".rank*.json"))
        for path in sources:
            try:
                with open(path) as f:
                    other = json.load(f)
            except (OSError, ValueError):
                continue
            if not isinstance(other, dict) or other.get("run_id") != record.get("run_id"):
                continue
            for rank_record in (other.get("ranks") or []) if path == out else [other]:
                if isinstance(rank_record, dict):
                    by_rank[rank_record.get("rank")] = rank_record
        by_rank[record.get("rank")] = record
        ranks = sorted(by_rank.values(), key=lambda r: r.get("rank", 0))
        world = int(record.get("world_size") or 1)
        complete = len({r.get("rank") for r in ranks}) >= world
        merged = {
            "format": record["format"], "version": record["version"], "kind": MERGED_KIND,
            "run_id": record.get("run_id"), "world_size": world, "complete": complete,
            "ranks": ranks,
        }
        merged_started = time.perf_counter()
        _atomic_write(out, merged)
        if complete:
            for r in ranks:
                try:
                    os.remove(part_path(out, int(r.get("rank", 0))))
                except OSError:
                    pass
    logger.info("roofline capture: rank %s wrote %s (%.2f s, merge %.2f s)%s",
                record.get("rank"), out, merged_started - started,
                time.perf_counter() - merged_started, "" if complete else "; waiting for other ranks")


def _atomic_write(path: str, data: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, separators=(",", ":"))
    os.replace(tmp, path)
