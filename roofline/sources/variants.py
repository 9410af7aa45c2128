"""The hub's quantized variants of a base model, audited from their safetensors headers.

Discovery is the hub's own model-tree relation: huggingface_hub's HfApi.list_models with the
filter `base_model:quantized:BASE` (what the "Quantizations" link of a model page lists), never
scraping. Each variant is then read like `roofline audit org/name` (config files + headers over
HTTP range requests), in a bounded thread pool.

Cache (under $ROOFLINE_CACHE or ~/.cache/roofline, variants/): the last listing of each base
(what HF_HUB_OFFLINE=1 falls back to), and each variant's config and header tensors keyed by
(repo, commit) — a rerun reads nothing new, a new commit is read again. Entries are data, checked
before use; a bad one is read again from the hub.

What vLLM cannot serve from safetensors (GGUF, MLX, ONNX, EXL2, ...) is skipped with its reason,
as is a gated repository without a token; one broken variant is a skipped row, not a failure.
"""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Union

import msgspec
from msgspec import Meta

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.progress import shown as progress_shown
from roofline.model.inventory import Inventory
from roofline.schema import checked
from roofline.untrusted import is_commit_id, printable, shown, under_root

from .cache_files import (
    cache_root,
    read_entry,
    tensor_rows,
    tensors_from_rows,
    write_entry,
)
from .hub import REPO_ID, HubError, HubParts, hub_parts, inventory_from_parts
from .hub_http import bound_hub, go_offline_if_unreachable, request_bounds

SCHEMA = "roofline.variant/1"
DEFAULT_POOL = 8


@dataclass
class Variant:
    repo: str
    sha: str | None = None
    downloads: int = 0
    gated: bool = False
    tags: list[str] = field(default_factory=list)
    library: str | None = None
    files: list[str] = field(default_factory=list)
    skipped: str | None = None  # why it is not audited


def _variants_dir() -> Path:
    return cache_root() / "variants"


def _listing_path(base: str) -> Path:
    return under_root(_variants_dir(), f"{base.replace('/', '__')}.listing.json")


# The hub's answer to /api/models, as far as it is read: checked before any of it is used.
MAX_PAGES = 50  # of one listing
MAX_ITEMS = 5_000  # variants of one base (the most quantized base models list a few thousand)
PAGE_SIZE = 1_000  # the hub's largest page
PAGE_LIMIT = 64 * 2**20  # bytes of one page (1000 entries with their file lists: a few MB)
EXPAND = ("sha", "downloads", "gated", "siblings", "tags", "library_name")
Text = Annotated[str, Meta(max_length=1024)]


class Sibling(msgspec.Struct):
    rfilename: Text


class ModelSummary(msgspec.Struct):
    id: Annotated[str, Meta(max_length=200)]
    sha: Text | None = None
    downloads: Annotated[int, Meta(ge=0, le=2**53)] = 0
    gated: Union[bool, Text] = False
    tags: Annotated[list[Text], Meta(max_length=10_000)] = []
    library_name: Text | None = None
    siblings: Annotated[list[Sibling], Meta(max_length=100_000)] = []


def _listing_pages(base: str, limit: int | None):
    """The hub's listing of BASE's quantized variants, page by page (Link: next), at most
    MAX_PAGES pages and `limit` (or MAX_ITEMS) items, each page bounded in time and size."""
    from huggingface_hub import constants, get_session
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

    bound_hub()
    wanted = min(limit or MAX_ITEMS, MAX_ITEMS)
    url = f"{constants.ENDPOINT}/api/models"
    params = [("filter", f"base_model:quantized:{base}"), ("sort", "downloads"), ("direction", "-1"),
              ("limit", str(min(wanted, PAGE_SIZE)))] + [("expand", e) for e in EXPAND]
    session, headers, items = get_session(), build_hf_headers(), 0
    for page in range(MAX_PAGES):
        response = session.get(url, params=params, headers=headers, extensions=request_bounds(limit=PAGE_LIMIT))
        hf_raise_for_status(response)
        try:
            rows = msgspec.json.decode(response.content)
        except msgspec.DecodeError:
            raise RooflineError(f"{base}: the hub's listing (page {page + 1}) is not JSON") from None
        rows = checked(rows, list[ModelSummary], f"{base}: the hub's listing (page {page + 1})")
        rows = rows[:wanted - items]
        items += len(rows)
        yield rows
        following = response.links.get("next", {}).get("url")
        if items >= wanted or not following or not rows:
            return
        url, params = following, None
    raise RooflineError(f"{base}: the hub's listing ran past {MAX_PAGES} pages; not a listing the hub sends")


def _variant(summary: ModelSummary) -> Variant:
    """A listed repository as a Variant; a repository id or a commit id that is not one is
    skipped with the reason, never used in a path or a request."""
    variant = Variant(repo=summary.id, sha=summary.sha, downloads=summary.downloads, gated=bool(summary.gated),
                      tags=list(summary.tags), library=summary.library_name,
                      files=[s.rfilename for s in summary.siblings])
    if not REPO_ID.match(summary.id):
        variant.repo = printable(summary.id, 100)
        variant.skipped = "the hub listed a repository id that is not one"
    elif summary.sha is not None and not is_commit_id(summary.sha):
        variant.skipped = f"the hub listed commit {shown(summary.sha, 60)!r}, not a commit id (40 hex digits)"
        variant.sha = None
    return variant


def list_variants(base: str, limit: int | None = None) -> tuple[list[Variant], str]:
    """(variants of BASE by downloads, where the list came from: "hub" or "cache")."""
    from huggingface_hub import constants

    if not REPO_ID.match(base):
        raise RooflineError(f"--variants {shown(base, 100)!r}: give a hub id such as org/name")
    bound_hub()
    if go_offline_if_unreachable() or constants.HF_HUB_OFFLINE:
        return _cached_listing(base, limit), "cache"
    try:
        summaries = [summary for page in _listing_pages(base, limit) for summary in page]
    except Exception as exc:  # noqa: BLE001 - an unreachable hub falls back to the last listing
        cached = _cached_listing(base, limit, missing_ok=True)
        if cached is not None:
            return cached, "cache"
        if isinstance(exc, RooflineError):
            raise
        raise RooflineError(f"{base}: cannot list its quantized variants on the hub ({exc.__class__.__name__}: "
                            f"{shown(str(exc).splitlines()[0] if str(exc) else '', 160)})") from None
    variants = [_variant(summary) for summary in summaries]
    write_entry(_listing_path(base), {"schema": SCHEMA, "base": base, "variants": [asdict(v) for v in variants]})
    return variants, "hub"


def _cached_listing(base: str, limit: int | None, missing_ok: bool = False, entry=None) -> list[Variant] | None:
    """The listing of BASE last fetched (`entry`: that file already read)."""
    entry = read_entry(_listing_path(base)) if entry is None else entry
    if not isinstance(entry, dict) or entry.get("base") != base or not isinstance(entry.get("variants"), list):
        if missing_ok:
            return None
        raise RooflineError(f"{base}: offline (HF_HUB_OFFLINE, or the hub cannot be reached) and no cached listing of its variants; "
                            f"run once online")
    try:
        rows = checked(entry["variants"], list[CachedVariant], str(_listing_path(base)))
    except RooflineError:
        if missing_ok:
            return None
        raise
    variants = [_variant(ModelSummary(id=row.repo, sha=row.sha, downloads=row.downloads, gated=row.gated,
                                      tags=row.tags, library_name=row.library,
                                      siblings=[Sibling(f) for f in row.files])) for row in rows]
    return variants[:limit] if limit else variants


class CachedVariant(msgspec.Struct):
    """A row of a cached listing (a Variant as list_variants wrote it)."""

    repo: Annotated[str, Meta(max_length=200)]
    sha: Text | None = None
    downloads: Annotated[int, Meta(ge=0, le=2**53)] = 0
    gated: bool = False
    tags: list[Text] = []
    library: Text | None = None
    files: list[Text] = []


def classify(variant: Variant, has_token: bool) -> str | None:
    """Why vLLM cannot serve this variant from safetensors (roofline/data/hub.toml), or None."""
    table = load_table("hub")
    markers = {t.lower() for t in variant.tags} | {(variant.library or "").lower()}
    files = [f.lower() for f in variant.files]
    for rule in table["unservable"]:
        marker = rule["marker"]
        if marker in markers or any(f.endswith(f".{marker}") for f in files):
            if rule.get("without_safetensors_only") and any(f.endswith(".safetensors") for f in files):
                continue
            return rule["reason"]
    if files and not any(f.endswith(".safetensors") for f in files):
        return "no safetensors files"
    if variant.gated and not has_token:
        return "needs HF_TOKEN (gated repository)"
    return None


def audit_variants(variants: list[Variant], *, pool: int = DEFAULT_POOL, progress: bool | None = None,
                   offline: bool = False) -> list[tuple[Variant, Inventory | None]]:
    """Each variant's inventory (None with variant.skipped set), in the input order."""
    from huggingface_hub import get_token

    has_token = get_token() is not None
    for variant in variants:
        variant.skipped = variant.skipped or classify(variant, has_token)
    todo = [v for v in variants if not v.skipped]

    def one(variant: Variant) -> Inventory | None:
        try:
            return _inventory(variant, offline)
        except HubError as exc:  # the hub could not be asked: try again next time
            variant.skipped = str(exc)
        except RooflineError as exc:  # the files at this commit are broken: they stay broken
            variant.skipped = str(exc)
            if variant.sha:
                write_entry(_entry_path(variant), {"schema": SCHEMA, "repo": variant.repo, "sha": variant.sha,
                                              "failed": variant.skipped})
        except Exception as exc:  # noqa: BLE001 - one broken variant must not sink the table
            variant.skipped = f"{exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return None

    show = progress if progress is not None else progress_shown()
    results: dict[str, Inventory | None] = {}
    if todo:
        with ThreadPoolExecutor(max_workers=max(1, min(pool, len(todo)))) as executor:
            futures = {executor.submit(one, v): v for v in todo}
            iterator = futures
            if show:
                from tqdm.auto import tqdm
                iterator = tqdm(futures, desc="variants", unit="repo", file=sys.stderr)
            for future in iterator:
                results[futures[future].repo] = future.result()
    return [(v, results.get(v.repo)) for v in variants]


def _entry_path(variant: Variant) -> Path:
    sha = variant.sha if is_commit_id(variant.sha) else "unknown"
    return under_root(_variants_dir(), f"{variant.repo.replace('/', '__')}@{sha}.json")


def _inventory(variant: Variant, offline: bool) -> Inventory:
    path = _entry_path(variant)
    entry = read_entry(path) if variant.sha else None
    if (isinstance(entry, dict) and entry.get("schema") == SCHEMA and entry.get("repo") == variant.repo
            and entry.get("sha") == variant.sha and isinstance(entry.get("failed"), str)):
        raise RooflineError(entry["failed"])  # found broken at this commit before
    parts = _parts_from_entry(entry, variant)
    if parts is None:
        if offline:
            raise RooflineError("offline and not in the cache")
        parts = hub_parts(variant.repo, variant.sha, progress=False)
        if variant.sha:
            write_entry(path, {"schema": SCHEMA, "repo": variant.repo, "sha": variant.sha, "config": parts.config,
                          "hf_quant": parts.hf_quant, "bytes_read": parts.bytes_read,
                          "checkpoint_bytes": parts.checkpoint_bytes,
                          "tensors": tensor_rows(parts.tensors)})
    else:
        parts.bytes_read = 0  # nothing was read this time
    return inventory_from_parts(parts)


def _parts_from_entry(entry, variant: Variant) -> HubParts | None:
    """A cached entry, checked like a header: anything odd means read it again."""
    try:
        if (not isinstance(entry, dict) or entry.get("schema") != SCHEMA or entry.get("repo") != variant.repo
                or entry.get("sha") != variant.sha or not isinstance(entry.get("config"), dict)):
            return None
        tensors = tensors_from_rows(entry["tensors"])
        if tensors is None:
            return None
        hf_quant = entry.get("hf_quant")
        return HubParts(variant.repo, variant.sha, entry["config"], hf_quant if isinstance(hf_quant, dict) else None,
                        tensors, int(entry.get("bytes_read", 0)), int(entry.get("checkpoint_bytes", 0)))
    except (TypeError, ValueError, KeyError):
        return None


def cached_published(base_name: str) -> list[dict]:
    """Published variants of a base model as far as this machine already knows them, with no
    network: every cached listing (what `roofline compare --variants` fetched) whose base has this
    name, each servable variant whose headers are cached, with its main format. Rows as
    roofline/data/measurements.toml holds them (checkpoint, base, format, source); most
    downloaded first. Anything unreadable in the cache is passed over."""
    from roofline.model.naming import repo_name

    rows: list[dict] = []
    folder = _variants_dir()
    if not folder.is_dir():
        return rows
    for path in sorted(folder.glob("*.listing.json")):
        entry = read_entry(path)
        base = entry.get("base") if isinstance(entry, dict) else None
        if not isinstance(base, str) or repo_name(base).lower() != base_name.lower():
            continue
        for variant in _cached_listing(base, None, missing_ok=True, entry=entry) or []:
            if variant.skipped or classify(variant, has_token=True):
                continue
            try:
                fmt = _inventory(variant, offline=True).main_quantized_format()
            except Exception:  # noqa: BLE001 - not cached or broken: not known to be published
                continue
            if fmt:
                rows.append({"checkpoint": variant.repo, "base": base_name,
                             "format": fmt, "downloads": variant.downloads,
                             "source": f"the hub's quantized variants of {base} (cached listing)"})
    rows.sort(key=lambda r: -r["downloads"])
    return rows
