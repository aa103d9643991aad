"""A small HTTP server for a run's endpoints (Prometheus /metrics, the live view), bounded in every direction.

At most ``max_connections`` requests are served at once (one thread each; more get 503 at once), a client that
sends nothing is dropped after ``timeout_s``, and ``close()`` returns within about a second: the accept loop polls
for shutdown and long responses (the MJPEG stream) watch ``closing``. A port that is taken, privileged or on an
address this machine does not have is one EdgeError line, raised when the server is made, before the run starts.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn
from typing import Any, Callable, Dict

from edge.config import short
from edge.errors import EdgeError

log = logging.getLogger("edge.http")

Route = Callable[["Handler"], None]
_BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 13\r\nRetry-After: 5\r\n\r\ntoo many now\n"
)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: nothing idles on a kept-alive socket
    server: _Server

    def setup(self) -> None:
        self.timeout = self.server.timeout_s  # socket timeout for reading the request and for each write
        super().setup()

    def do_GET(self) -> None:
        route = self.server.routes.get(urllib.parse.urlsplit(self.path).path)
        if route is None:
            self.reply(404, b"not found\n", "text/plain")
            return
        try:
            route(self)
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass  # the client went away; nothing to tell anyone

    def reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        log.debug("%s %s", self.address_string(), format % args)


class _Server(ThreadingMixIn, HTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True  # a restart right after a stop must not trip over TIME_WAIT

    def __init__(self, address: tuple, routes: Dict[str, Route], max_connections: int, timeout_s: float) -> None:
        self.routes, self.timeout_s = routes, timeout_s
        self.slots = threading.BoundedSemaphore(max_connections)
        self.closing = threading.Event()
        super().__init__(address, Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.warning("http: request from %s failed", client_address[0], exc_info=True)


def _family(key: str, address: str, port: int) -> int:
    bad = EdgeError(
        f"{key.rsplit('.', 1)[0]}.address {short(address)}: not an IP address or host name of this machine; "
        "use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"
    )
    # "" would mean every interface to the socket module; a NUL would cut the name short in C.
    if not address or any(ord(c) <= 32 for c in address):
        raise bad
    try:
        infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError, ValueError):
        raise bad from None
    return infos[0][0]


class HttpServer:
    """Serve ``routes`` (path -> function of the request handler) on ``address:port`` from a background thread."""

    def __init__(
        self, key: str, address: str, port: int, routes: Dict[str, Route], max_connections: int = 8, timeout_s: float = 10.0
    ) -> None:
        family = _family(key, address, port)
        server_cls = type("_BoundServer", (_Server,), {"address_family": family})
        try:
            self.httpd = server_cls((address, port), routes, max_connections, timeout_s)
        except OSError as exc:
            raise port_error(key, address, port, exc) from None
        self.url = f"http://{'[' + address + ']' if ':' in address else address}:{port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.25}, name=key, daemon=True)
        self.thread.start()

    @property
    def closing(self) -> threading.Event:
        return self.httpd.closing

    def close(self) -> None:
        self.httpd.closing.set()
        self.httpd.shutdown()  # returns once the accept loop has seen it (within poll_interval)
        self.httpd.server_close()
        self.thread.join(timeout=2.0)


def port_error(key: str, address: str, port: int, exc: OSError) -> EdgeError:
    """One line for a port that cannot be bound, naming the key and the fix."""
    where = f"{key} {port}"
    if exc.errno == errno.EADDRINUSE:
        return EdgeError(f"{where}: {address}:{port} is already in use (another edge-run or service?); choose a free port")
    if exc.errno == errno.EACCES:
        return EdgeError(f"{where}: binding {address}:{port} is not allowed for this user; use a port 1024..65535")
    if exc.errno == errno.EADDRNOTAVAIL:
        return EdgeError(
            f"{where}: {address} is not an address of this machine; use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"
        )
    return EdgeError(f"{where}: cannot listen on {address}:{port} ({exc.strerror or exc})")
