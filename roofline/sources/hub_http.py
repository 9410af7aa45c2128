"""Every read from the hub (or a mirror behind HF_ENDPOINT) bounded in time and size.

huggingface_hub 2.x speaks HTTP through one shared httpx2 client, which has no total deadline
(a body that drips a byte every half second never times out a read) and no size cap. `bound_hub()`
gives huggingface_hub a client whose transport wraps every response body: past its deadline or its
byte cap the read stops with a HubOverrun (one line, a HubError: worth asking again later). A request
may ask for tighter bounds than the defaults through its `extensions` (`request_bounds`), as the
safetensors header fetches and the variant listing do.

The listing of a base model's variants is paginated here (the hub's Link: next headers), with a bound
on pages and on items, so a hub whose "next page" never ends cannot keep the tool reading.
"""
from __future__ import annotations

import threading
import time

from roofline.errors import RooflineError

DEADLINE_S = 120.0  # one response, whole body
BODY_LIMIT = 256 * 2**20  # one response (config files are KB; a safetensors header at most 100 MB)
CONNECT_READ_TIMEOUT_S = 20.0  # connect, and silence between two reads
_EXTENSION = "roofline.bounds"


class HubError(RooflineError):
    """The hub could not be asked, or refused (network, offline, auth, gating, missing, an answer
    past its bounds): unlike a broken file, worth asking again later."""


class HubOverrun(HubError):
    """A hub answer that ran past its deadline (too_large False) or its size cap (too_large True)."""

    def __init__(self, message: str, too_large: bool):
        super().__init__(message)
        self.too_large = too_large


def request_bounds(deadline_s: float | None = None, limit: int | None = None) -> dict:
    """The `extensions` of a request that wants tighter bounds than the defaults."""
    return {_EXTENSION: (deadline_s or DEADLINE_S, limit or BODY_LIMIT)}


def _transport_classes():
    import httpx2

    class BoundedStream(httpx2.SyncByteStream):
        def __init__(self, inner, url, deadline_s: float, limit: int):
            self.inner, self.url, self.deadline_s, self.limit = inner, url, deadline_s, limit
            self.end = time.monotonic() + deadline_s

        def __iter__(self):
            size = 0
            for chunk in self.inner:
                size += len(chunk)
                if size > self.limit:
                    raise HubOverrun(f"{_where(self.url)}: the hub's answer is larger than "
                                     f"{self.limit / 2**20:.3g} MiB; refusing to read more", too_large=True)
                if time.monotonic() > self.end:
                    raise HubOverrun(f"{_where(self.url)}: the hub's answer was still arriving after "
                                     f"{self.deadline_s:g} s; giving up", too_large=False)
                yield chunk

        def close(self):
            self.inner.close()

    class BoundedTransport(httpx2.BaseTransport):
        def __init__(self, inner):
            self.inner = inner

        def handle_request(self, request):
            deadline_s, limit = request.extensions.get(_EXTENSION, (DEADLINE_S, BODY_LIMIT))
            response = self.inner.handle_request(request)
            response.stream = BoundedStream(response.stream, request.url, deadline_s, limit)
            return response

        def close(self):
            self.inner.close()

    return BoundedTransport


def _where(url) -> str:
    from roofline.untrusted import printable, redact_url

    return printable(redact_url(str(url)), 160)


_installed = False
_lock = threading.Lock()
_reachable: bool | None = None
PROBE_TIMEOUT_S = 1.5
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def hub_reachable() -> bool:
    """Whether the hub's host takes a TCP connection within PROBE_TIMEOUT_S (asked once per process).
    huggingface_hub retries an unreachable hub for ~20 s before it falls back to its cache; one
    quick connection says the same in a second. Behind a proxy the hub is not reached directly:
    then the probe is skipped (True)."""
    global _reachable
    if _reachable is None:
        import os
        import socket
        import urllib.parse

        from huggingface_hub import constants

        parts = urllib.parse.urlsplit(constants.ENDPOINT)
        if any(os.environ.get(v) for v in PROXY_VARIABLES) or not parts.hostname:
            _reachable = True
        else:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                socket.create_connection((parts.hostname, port), timeout=PROBE_TIMEOUT_S).close()
                _reachable = True
            except OSError:
                _reachable = False
    return _reachable


def go_offline_if_unreachable() -> bool:
    """huggingface_hub switched to offline mode (its cache only) when the hub cannot be reached;
    True when it was. The error that follows a cache miss carries the offline hint."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or hub_reachable():
        return False
    constants.HF_HUB_OFFLINE = True
    return True


def bound_hub() -> None:
    """Make huggingface_hub's shared client a bounded one (once per process)."""
    global _installed
    with _lock:
        if _installed:
            return
        import httpx2
        from huggingface_hub.utils import _http as hub_http
        from huggingface_hub.utils import set_client_factory

        bounded = _transport_classes()

        def factory():
            return httpx2.Client(event_hooks={"request": [hub_http.hf_request_event_hook]}, follow_redirects=True,
                                 timeout=httpx2.Timeout(CONNECT_READ_TIMEOUT_S),
                                 transport=bounded(httpx2.HTTPTransport()))

        set_client_factory(factory)
        _installed = True
