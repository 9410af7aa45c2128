"""Every read from the hub (or a mirror behind HF_ENDPOINT) bounded in time and size.

huggingface_hub 2.x speaks HTTP through one shared httpx2 client, which has no total deadline
(headers or a body that drip a byte every half second never time out a read) and no size cap.
`bound_hub()` gives huggingface_hub a client with one deadline per request from connect to the last
byte (its connection pool's network backend caps every socket connect, read and write at what is
left of it: the status line and headers too) and a transport that wraps every response body: past the
deadline or the byte cap the read stops with a HubOverrun (one line, a HubError: worth asking again
later). A request
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
            # one deadline from connect to the last byte: the socket reads of the status line and
            # headers (DeadlineBackend) and the body's chunks (BoundedStream) count against it
            _DEADLINE.end, _DEADLINE.url, _DEADLINE.seconds = time.monotonic() + deadline_s, request.url, deadline_s
            response = self.inner.handle_request(request)
            response.stream = BoundedStream(response.stream, request.url, deadline_s, limit)
            return response

        def close(self):
            self.inner.close()

    return BoundedTransport


_DEADLINE = threading.local()  # the request this thread is reading: its end (monotonic), URL, seconds


def _remaining(timeout: float | None) -> float | None:
    """A socket operation's timeout, capped at what is left of its request's deadline; past it, the
    request is over (a HubOverrun, never retried as a timeout would be)."""
    end = getattr(_DEADLINE, "end", None)
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise HubOverrun(f"{_where(_DEADLINE.url)}: the hub's answer was still arriving after "
                         f"{_DEADLINE.seconds:g} s; giving up", too_large=False)
    return left if timeout is None else min(timeout, left)


def _deadline_backend(inner):
    """httpcore2's network backend with every connect, read and write bounded by the request's deadline:
    the client's own timeout is per read (a header that drips a byte a second never trips it)."""
    import httpcore2

    def bounded(operation, timeout, *args):
        try:
            return operation(*args, _remaining(timeout))
        except (httpcore2.ReadTimeout, httpcore2.WriteTimeout, httpcore2.ConnectTimeout):
            end = getattr(_DEADLINE, "end", None)
            if end is not None and end - time.monotonic() < 0.1:  # the deadline cut it short
                _DEADLINE.end = time.monotonic() - 1.0
                _remaining(None)  # raises the HubOverrun
            raise  # the client's own timeout (silence between two reads)

    class DeadlineStream(httpcore2.NetworkStream):
        def __init__(self, stream):
            self.stream = stream

        def read(self, max_bytes, timeout=None):
            return bounded(self.stream.read, timeout, max_bytes)

        def write(self, buffer, timeout=None):
            return bounded(self.stream.write, timeout, buffer)

        def close(self):
            return self.stream.close()

        def start_tls(self, ssl_context, server_hostname=None, timeout=None):
            return DeadlineStream(bounded(self.stream.start_tls, timeout, ssl_context, server_hostname))

        def get_extra_info(self, info):
            return self.stream.get_extra_info(info)

    class DeadlineBackend(httpcore2.NetworkBackend):
        def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
            return DeadlineStream(bounded(lambda t: inner.connect_tcp(host, port, t, local_address, socket_options),
                                          timeout))

        def connect_unix_socket(self, path, timeout=None, socket_options=None):
            return DeadlineStream(bounded(lambda t: inner.connect_unix_socket(path, t, socket_options), timeout))

        def sleep(self, seconds):
            return inner.sleep(seconds)

    return DeadlineBackend()


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
            transport = httpx2.HTTPTransport()
            pool = getattr(transport, "_pool", None)
            if pool is None or not hasattr(pool, "_network_backend"):  # httpx2 changed: fail loudly, not unbounded
                raise RooflineError("this httpx2 has no connection pool roofline can bound; pin httpx2 2.16")
            pool._network_backend = _deadline_backend(pool._network_backend)
            return httpx2.Client(event_hooks={"request": [hub_http.hf_request_event_hook]}, follow_redirects=True,
                                 timeout=httpx2.Timeout(CONNECT_READ_TIMEOUT_S), transport=bounded(transport))

        set_client_factory(factory)
        _installed = True
