"""HTTP to a server the user points at (bench, doctor), bounded in time and size.

Standard library only (http.client): the client must not perturb a measurement, and `roofline
bench` runs in the smallest environment. Every read has a total deadline, not only a per-read
timeout (a body that drips one byte every half second never times out a read), and a size cap for
the whole body and for each line of a stream. Reads go through `read1`, one system call at most, so
the deadline is checked between arrivals however slowly they come; the socket's own timeout is set
to what is left of the deadline before each read.

Errors are one line; the URL in them is redacted (no userinfo, no token in the query) and
whatever the server sent is shown escaped (roofline.untrusted).
"""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse
from typing import Annotated

import msgspec
from msgspec import Meta

from roofline.errors import RooflineError
from roofline.predict.traffic import CONTEXT_LIMIT
from roofline.schema import Name, checked
from roofline.untrusted import printable, redact_url

JSON_LIMIT = 4 * 2**20  # /v1/models, /version: a few KB; anything near this is not an API answer
LINE_LIMIT = 1 * 2**20  # one server-sent-event line (a chunk of a few tokens is < 1 KB)
ERROR_LIMIT = 4096  # bytes of an error body worth reading
READ_SIZE = 64 * 1024


class Deadline:
    """A point in time every read of one request must finish by."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def passed(self) -> bool:
        return self.left() <= 0


class Overrun(RooflineError):
    """A body or a line that went past its deadline or its size cap; `stalled`: nothing arrived
    for the whole timeout (rather than data that kept coming too long, or too much)."""

    def __init__(self, message: str, stalled: bool = False):
        super().__init__(message)
        self.stalled = stalled


def split_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, base path) of the API; a URL without a path gets /v1."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise RooflineError(f"--url {printable(redact_url(url))!r}: give the API base such as http://127.0.0.1:8000/v1")
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        raise RooflineError(f"--url {printable(redact_url(url))!r}: bad port") from None
    path = parsed.path.rstrip("/") or "/v1"
    return parsed.scheme, parsed.hostname, port, path


class Connection:
    """One HTTP connection per request (streams are not pipelined), with the errors a user can
    act on turned into one sentence."""

    def __init__(self, url: str, timeout_s: float, base: str | None = None):
        self.url = url
        self.scheme, self.host, self.port, self.base = split_url(url)
        if base is not None:  # a path outside the API base, such as vLLM's /version
            self.base = base
        self.timeout_s = timeout_s
        self.deadline = Deadline(timeout_s)
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        self.conn = cls(self.host, self.port, timeout=timeout_s)
        self.sock: socket.socket | None = None
        self.last_data = time.monotonic()
        # the deadline also covers what http.client reads by itself (the status line and headers, byte by byte
        # if the server drips them): when it passes, the socket is shut and every read ends
        self.expired = False
        self.watchdog: threading.Timer | None = None

    def where(self) -> str:
        return f"{self.host}:{self.port}"

    def request(self, method: str, path: str, body: dict | None = None) -> http.client.HTTPResponse:
        headers = {"Accept": "text/event-stream, application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            return self._send(method, path, data, headers)
        except (socket.timeout, TimeoutError, http.client.HTTPException, OSError) as exc:
            raise self._failure(exc) from None

    def _send(self, method: str, path: str, data: bytes | None, headers: dict) -> http.client.HTTPResponse:
        if self.watchdog is None:
            self.watchdog = threading.Timer(max(0.0, self.deadline.left()), self._expire)
            self.watchdog.daemon = True
            self.watchdog.start()
        self.conn.connect()
        self.sock = self.conn.sock  # kept: http.client drops its own reference on Connection: close
        if self.expired:  # the watchdog fired before there was a socket to shut
            self._expire()
        self.arm()
        self.conn.request(method, self.base + path, body=data, headers=headers)
        response = self.conn.getresponse()
        if self.expired:
            raise socket.timeout
        return response

    def _failure(self, exc: BaseException) -> RooflineError:
        """One line for what ended a request before its body."""
        if self.expired:
            return RooflineError(f"no complete answer from {self.where()} within {self.timeout_s:g} s "
                                 f"({exc.__class__.__name__} when the deadline passed)")
        if isinstance(exc, ConnectionRefusedError):
            return RooflineError(f"connection refused by {self.where()}: is the server running?")
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return RooflineError(f"no answer from {self.where()} within {self.timeout_s:g} s")
        if isinstance(exc, http.client.HTTPException):
            return RooflineError(f"{self.where()} did not answer HTTP ({exc.__class__.__name__}: "
                                 f"{printable(str(exc), 80)})")
        return RooflineError(f"cannot reach {printable(redact_url(self.url))}: "
                             f"{printable(getattr(exc, 'strerror', None) or exc, 120)}")

    def _expire(self) -> None:
        self.expired = True
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def arm(self) -> None:
        """The socket's read timeout: what is left of the deadline (at least a millisecond)."""
        if self.sock is not None:
            self.sock.settimeout(max(0.001, min(self.timeout_s, self.deadline.left())))

    def read1(self, resp: http.client.HTTPResponse, what: str) -> bytes:
        """The next bytes that arrive (b"" at the end), within the deadline."""
        if self.deadline.passed():
            raise Overrun(f"{what}: still arriving after {self.timeout_s:g} s; giving up")
        self.arm()
        try:
            piece = resp.read1(READ_SIZE)
        except (socket.timeout, TimeoutError):
            raise self._cut_short(what) from None
        except (OSError, http.client.HTTPException):
            if self.expired:  # the watchdog shut the socket: not the end of the body
                raise self._cut_short(what) from None
            raise
        if self.expired:  # an empty read after the watchdog shut the socket is not the end of the body
            raise self._cut_short(what)
        self.last_data = time.monotonic()
        return piece

    def _cut_short(self, what: str) -> Overrun:
        """The deadline cut a read short: data still flowing is a slow stream, silence a stall."""
        if time.monotonic() - self.last_data < self.timeout_s / 2:
            return Overrun(f"{what}: still arriving after {self.timeout_s:g} s; giving up")
        return Overrun(f"{what}: no more data from {self.where()} within the {self.timeout_s:g} s timeout",
                       stalled=True)

    def read_body(self, resp: http.client.HTTPResponse, what: str, limit: int) -> bytes:
        """The whole body, refused past `limit` bytes or past the deadline."""
        parts, size = [], 0
        while True:
            piece = self.read1(resp, what)
            if not piece:
                return b"".join(parts)
            size += len(piece)
            if size > limit:
                raise Overrun(f"{what}: answer larger than {limit // 1024} KiB; not what this server should send")
            parts.append(piece)

    def lines(self, resp: http.client.HTTPResponse, what: str, limit: int = LINE_LIMIT):
        """The body's lines (without their ends) as they complete; a line past `limit` bytes or a
        stream past the deadline is an Overrun."""
        pending = b""
        while True:
            piece = self.read1(resp, what)
            if not piece:
                if pending:
                    yield pending
                return
            pending += piece
            while True:
                cut = pending.find(b"\n")
                if cut < 0:
                    break
                line, pending = pending[:cut], pending[cut + 1:]
                yield line.rstrip(b"\r")
            if len(pending) > limit:
                raise Overrun(f"{what}: a line longer than {limit // 1024} KiB without an end")

    def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
        self.conn.close()
        if self.sock is not None:
            self.sock.close()


def http_error(conn: Connection, resp: http.client.HTTPResponse, path: str) -> RooflineError:
    """One line for a non-200 answer: status, reason and the server's message, escaped."""
    try:
        body = conn.read1(resp, path)[:ERROR_LIMIT].decode("utf-8", "replace")
    except (RooflineError, OSError, http.client.HTTPException):
        body = ""
    message = body.strip()
    try:
        parsed = json.loads(body)
        err = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
        message = err.get("message", message) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        pass
    message = printable(" ".join(str(message).split()), 300)
    return RooflineError(f"HTTP {resp.status} {printable(resp.reason, 60)} from {path}"
                         + (f": {message}" if message else ""))


def not_json(name: str):
    raise ValueError(f"{name} is not JSON")


def get_json(url: str, path: str, timeout_s: float, base: str | None = None, limit: int = JSON_LIMIT):
    """GET a small JSON answer, within `timeout_s` in all and `limit` bytes."""
    conn = Connection(url, timeout_s, base)
    try:
        resp = conn.request("GET", path)
        if resp.status != 200:
            raise http_error(conn, resp, conn.base + path)
        try:
            raw = conn.read_body(resp, conn.base + path, limit)
        except (OSError, http.client.HTTPException) as exc:
            raise RooflineError(f"{conn.base + path} broke off ({exc.__class__.__name__})") from None
        try:
            return json.loads(raw, parse_constant=not_json)
        except ValueError:
            raise RooflineError(f"{conn.base + path} did not answer JSON") from None
    finally:
        conn.close()


class ModelEntry(msgspec.Struct):
    """One entry of an OpenAI /v1/models answer (vLLM adds root and max_model_len)."""

    id: Name
    root: Name | None = None
    max_model_len: Annotated[int, Meta(ge=1, le=CONTEXT_LIMIT)] | None = None


class ModelList(msgspec.Struct):
    data: list[ModelEntry]


MODELS_LIMIT = 10_000  # entries of one /v1/models answer


def served_models(url: str, timeout_s: float) -> list[ModelEntry]:
    """The models a server lists, each checked (an id that is a string, a positive max_model_len)."""
    listing = get_json(url, "/models", timeout_s)
    where = f"{redact_url(url)}/models"
    if not isinstance(listing, dict) or not isinstance(listing.get("data"), list):
        raise RooflineError(f"{printable(where)} is not an OpenAI model list: is this an OpenAI-compatible server?")
    if len(listing["data"]) > MODELS_LIMIT:
        raise RooflineError(f"{printable(where)} lists {len(listing['data'])} models; not a model server's answer")
    entries = [e for e in listing["data"] if isinstance(e, dict) and e.get("id")]
    return checked({"data": entries}, ModelList, printable(where)).data
