"""Source: a Hugging Face Hub repository, read without downloading weights.

Config files come through huggingface_hub (its cache, HF_TOKEN, HF_HUB_OFFLINE and
HF_ENDPOINT all apply); safetensors headers through HTTP range requests on the same session,
at most two requests per shard. With HF_HUB_OFFLINE=1 the audit works from a cached snapshot.
"""
from __future__ import annotations

import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from roofline.errors import RooflineError
from roofline.progress import shown as progress_shown
from roofline.model.assemble import inventory_from_tensors
from roofline.model.inventory import Inventory, Tensor

from .hub_http import HubError, HubOverrun, bound_hub, go_offline_if_unreachable, request_bounds
from .local import INDEX, gc_paused, load_local, merge_shards, read_json, shard_names
from .safetensors_header import header_length, parse_header

# First request per shard: the 8-byte length and, speculatively, a header of up to this size.
SPECULATIVE_BYTES = 64 * 1024
SINGLE_FILE = "model.safetensors"  # the weights of an unsharded checkpoint
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class NoSafetensors(RooflineError):
    """The repository has a config.json but no safetensors weights (yet): the config path applies."""


def looks_like_repo_id(model: str) -> bool:
    return bool(REPO_ID.match(model)) and not os.path.exists(model)


def _hub_error(exc: Exception, repo_id: str, what: str) -> HubError:
    from huggingface_hub import errors

    if isinstance(exc, HubError):  # already one line (an answer past its bounds)
        return exc
    if isinstance(exc, (errors.OfflineModeIsEnabled, errors.LocalEntryNotFoundError)):
        return HubError(f"{repo_id}: {what} is not in the Hugging Face cache and the hub cannot be reached "
                        f"(offline or unreachable): run once with the network to fill the cache, or give a local "
                        f"folder (a config.json alone is enough with --config-only)")
    if isinstance(exc, errors.GatedRepoError):
        return HubError(f"{repo_id}: gated repository; accept its terms and set HF_TOKEN")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return HubError(f"{repo_id}: repository not found or not accessible (401/404); check the id or HF_TOKEN")
    if isinstance(exc, errors.RevisionNotFoundError):
        return HubError(f"{repo_id}: revision not found")
    if isinstance(exc, errors.EntryNotFoundError):
        return HubError(f"{repo_id}: {what} not found in the repository")
    if isinstance(exc, errors.HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", "?")
        return HubError(f"{repo_id}: hub answered HTTP {status} for {what}")
    return HubError(f"{repo_id}: cannot reach the hub for {what} ({exc.__class__.__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''})")


def download(repo_id: str, filename: str, revision: str | None, optional: bool = False) -> str | None:
    from huggingface_hub import errors, hf_hub_download

    bound_hub()
    go_offline_if_unreachable()  # a second, not ~20 s of retries, to find there is no network
    try:
        return hf_hub_download(repo_id, filename, revision=revision)
    except errors.EntryNotFoundError as exc:
        # offline and uncached is a LocalEntryNotFoundError, also an EntryNotFoundError: an
        # optional file we cannot check counts as absent, a required one is an error
        if optional:
            return None
        raise _hub_error(exc, repo_id, filename) from None
    except Exception as exc:  # noqa: BLE001 - every hub failure becomes one line
        raise _hub_error(exc, repo_id, filename) from None


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _fetch_header(url: str, headers: dict, name: str, repo_id: str) -> tuple[list[Tensor], int, int]:
    """(tensors, bytes transferred, file size) of one remote shard."""
    from huggingface_hub import get_session
    from huggingface_hub.utils import hf_raise_for_status

    bound_hub()
    session = get_session()
    where = f"{repo_id}/{name}"
    try:
        # a server that ignores Range would send the whole file: one byte past the range is enough to know
        try:
            response = session.get(url, headers={**headers, "Range": f"bytes=0-{SPECULATIVE_BYTES - 1}"},
                                   timeout=60, extensions=request_bounds(60.0, SPECULATIVE_BYTES + 1))
        except HubOverrun as exc:
            if exc.too_large:
                raise RooflineError(f"{where}: the server ignored the HTTP range request") from None
            raise
        hf_raise_for_status(response)
        first = response.content
        size = _total_size(response.headers.get("Content-Range"), len(first), response.status_code)
        if response.status_code == 200 and len(first) > SPECULATIVE_BYTES:
            # a server that ignores Range sends the whole file: refuse rather than download weights
            raise RooflineError(f"{where}: the server ignored the HTTP range request")
        length = header_length(first, where)
        if size is not None and 8 + length > size:
            raise RooflineError(f"{where}: safetensors header length {length} runs past the end of the file "
                                f"({size} bytes): truncated")
        transferred = len(first)
        if 8 + length <= len(first):
            raw = first[8:8 + length]
        else:
            response = session.get(url, headers={**headers, "Range": f"bytes={len(first)}-{8 + length - 1}"},
                                   timeout=120, extensions=request_bounds(120.0, 8 + length - len(first)))
            hf_raise_for_status(response)
            raw = first[8:] + response.content
            transferred += len(response.content)
            if len(raw) != length:
                raise RooflineError(f"{where}: header cut short ({len(raw)} of {length} bytes)")
    except RooflineError:
        raise
    except Exception as exc:  # noqa: BLE001
        from huggingface_hub import errors

        if isinstance(exc, errors.EntryNotFoundError) and name == SINGLE_FILE:
            raise NoSafetensors(f"{repo_id}: no safetensors in the repository") from None
        raise _hub_error(exc, repo_id, name) from None
    data_size = size - 8 - length if size is not None else None
    return parse_header(raw, where, data_size=data_size), transferred, size or 0


def _total_size(content_range: str | None, received: int, status: int) -> int | None:
    if content_range and "/" in content_range:
        total = content_range.rsplit("/", 1)[1].strip()
        if total.isdigit():
            return int(total)
    return received if status == 200 else None


@dataclass
class HubParts:
    """What the hub says about one checkpoint at one commit: its config files and the tensors of
    its safetensors headers (never the weights)."""

    repo_id: str
    commit: str | None
    config: dict
    hf_quant: dict | None
    tensors: list[Tensor]
    bytes_read: int
    checkpoint_bytes: int


def load_hub(repo_id: str, revision: str | None = None, progress: bool | None = None) -> Inventory:
    from huggingface_hub.utils import logging as hub_logging

    # the hub client logs each retry as a warning; a failure still ends as our one line
    hub_logging.set_verbosity_error()
    config_path = download(repo_id, "config.json", revision)
    snapshot = os.path.dirname(config_path)
    if _offline():
        # weights cached too? then the snapshot is an ordinary local checkpoint
        if any(f.endswith(".safetensors") for f in os.listdir(snapshot)):
            inventory = load_local(snapshot, model_id=repo_id)
            inventory.source = "hub-cache"
            return inventory
        raise RooflineError(f"{repo_id}: HF_HUB_OFFLINE is set and the cache holds no safetensors for it "
                            f"(only config files); go online or use --config-only")
    return inventory_from_parts(hub_parts(repo_id, revision, progress, config_path=config_path))


def inventory_from_parts(parts: HubParts) -> Inventory:
    with gc_paused():
        inventory = inventory_from_tensors(parts.repo_id, "hub", parts.config, parts.tensors, parts.hf_quant)
    inventory.bytes_read = parts.bytes_read
    inventory.checkpoint_bytes = parts.checkpoint_bytes
    return inventory


def hub_parts(repo_id: str, revision: str | None = None, progress: bool | None = None, *,
              config_path: str | None = None) -> HubParts:
    """Config files and safetensors headers of a hub checkpoint, over HTTP range requests."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    config_path = config_path or download(repo_id, "config.json", revision)
    snapshot = os.path.dirname(config_path)
    # pin every later request to the commit the config came from
    commit = os.path.basename(snapshot) if re.fullmatch(r"[0-9a-f]{40}", os.path.basename(snapshot)) else revision
    config = read_json(config_path)
    hf_quant_path = download(repo_id, "hf_quant_config.json", commit, optional=True)
    hf_quant = read_json(hf_quant_path) if hf_quant_path else None
    index_path = download(repo_id, INDEX, commit, optional=True)
    index = read_json(index_path) if index_path else None
    files = shard_names(index, f"{repo_id}/{INDEX}") if index else [SINGLE_FILE]
    headers = build_hf_headers()
    show = progress if progress is not None else (len(files) > 1 and progress_shown())
    with gc_paused():
        results = []
        with ThreadPoolExecutor(max_workers=min(8, len(files))) as pool:
            futures = [pool.submit(_fetch_header, hf_hub_url(repo_id, name, revision=commit), headers, name, repo_id)
                       for name in files]
            iterator = futures
            if show:
                from tqdm.auto import tqdm
                iterator = tqdm(futures, desc="safetensors headers", unit="shard", file=sys.stderr)
            for future in iterator:
                results.append(future.result())
        per_shard = [(name, tensors) for name, (tensors, _, _) in zip(files, results)]
        tensors = merge_shards(per_shard, index)
    bytes_read = sum(r[1] for r in results) + sum(
        os.path.getsize(p) for p in (config_path, hf_quant_path, index_path) if p)
    return HubParts(repo_id, commit, config, hf_quant, tensors, bytes_read, sum(r[2] for r in results))
