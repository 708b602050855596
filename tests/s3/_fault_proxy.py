"""A small HTTP proxy on 127.0.0.1 that forwards S3 requests to moto and fails a seeded fraction of them.

Failure kinds (chosen per failed request, uniformly from ``kinds``):

- ``"503"``: ``503 Service Unavailable`` with S3's ``SlowDown`` XML body (throttling), request not forwarded;
- ``"500"``: ``500 Internal Server Error`` with S3's ``InternalError`` XML body, request not forwarded;
- ``"drop"``: the connection is closed abruptly before any response (request not forwarded);
- ``"drop-after"``: the request IS forwarded and applied by moto, then the connection is closed
  without the response (the client cannot know that its write happened).

``rate`` may be changed while the proxy runs; ``predicate(method, path)`` restricts which requests may
fail (default: all). ``counts`` records what happened.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
import http.client
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import random
import socket
import threading

__all__ = ["FaultProxy"]

_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}
_BODIES = {
    "503": (
        503,
        b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
        b"<Message>Please reduce your request rate.</Message></Error>",
    ),
    "500": (
        500,
        b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
        b"<Message>We encountered an internal error. Please try again.</Message></Error>",
    ),
}


class FaultProxy:
    """Forward to ``upstream`` (``host``, ``port``), failing a seeded fraction of requests.

    Args:
        upstream: moto's address.
        rate: Fraction of (eligible) requests to fail, 0..1.
        seed: Random seed.
        kinds: Failure kinds to draw from.
        predicate: ``predicate(method, path) -> bool``: whether a request may fail.
    """

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        rate: float = 0.0,
        seed: int = 0,
        kinds: tuple[str, ...] = ("503", "500", "drop", "drop-after"),
        predicate: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.upstream = upstream
        self.rate = rate
        self.kinds = kinds
        self.predicate = predicate
        self.counts: Counter[str] = Counter()
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    parts = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _drop(self) -> None:
                self.close_connection = True
                try:
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

            def _handle(self) -> None:
                body = self._body()
                kind = proxy._decide(self.command, self.path)
                if kind in _BODIES:
                    status, payload = _BODIES[kind]
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    return
                if kind == "drop":
                    self._drop()
                    return
                status, reason, headers, payload = proxy._forward(self.command, self.path, self.headers, body)
                if kind == "drop-after":
                    self._drop()
                    return
                self.send_response(status, reason)
                head = self.command == "HEAD"  # a HEAD answer keeps moto's Content-Length (the object's size)
                for name, value in headers:
                    if name.lower() not in _HOP and (head or name.lower() != "content-length"):
                        self.send_header(name, value)
                if not head:
                    self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._local = threading.local()
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fault-proxy", daemon=True
        )

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:{port}``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _decide(self, method: str, path: str) -> str | None:
        with self._lock:
            self.counts["requests"] += 1
            if self.rate <= 0 or (self.predicate is not None and not self.predicate(method, path)):
                return None
            if self._random.random() >= self.rate:
                return None
            kind = self._random.choice(self.kinds)
            self.counts[kind] += 1
            return kind

    def _forward(self, method: str, path: str, headers: object, body: bytes) -> tuple[int, str, list, bytes]:
        connection = getattr(self._local, "connection", None)
        for attempt in range(2):  # a stale keep-alive connection to moto is reopened once
            if connection is None:
                connection = http.client.HTTPConnection(*self.upstream, timeout=60)
                self._local.connection = connection
            try:
                forwarded = {k: v for k, v in headers.items() if k.lower() not in _HOP}  # type: ignore[attr-defined]
                forwarded["Content-Length"] = str(len(body))
                connection.request(method, path, body=body, headers=forwarded)
                response = connection.getresponse()
                payload = response.read()
                return response.status, response.reason, response.getheaders(), payload
            except (http.client.HTTPException, OSError):
                connection.close()
                connection = self._local.connection = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def start(self) -> FaultProxy:
        """Start serving (returns self)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
