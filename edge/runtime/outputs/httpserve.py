"""A small HTTP server for a run's endpoints (Prometheus /metrics, the live view), bounded in every direction.

At most ``max_connections`` requests are served at once (one thread each) and at most ``max_per_client`` from one
address. The request line and headers must arrive within ``head_timeout_s`` in all (a client that sends a byte now
and then is cut off like one that sends nothing); when every slot is taken, the connection that has spent longest
on its head (longer than a round trip) gives its slot to the new one, so half-open connections cannot lock a real
client out; only then does a client get 503. ``rate_per_s`` caps connections per second: beyond it the accept loop
answers 429 itself, before any thread is started or a byte read, so a flood costs little more than the accepts.
Requests are answered only when ``access`` allows them (Host header, optional secret: edge.runtime.outputs.access).
``close()`` returns within about a second: the accept loop polls for shutdown and long responses (the MJPEG stream)
watch ``closing``. A port that is taken, privileged or on an address this machine does not have is one EdgeError
line, raised when the server is made, before the run starts.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn
from typing import Any, Callable, Dict, Optional

from edge.config import short
from edge.errors import EdgeError, one_line
from edge.runtime.outputs.access import Access

log = logging.getLogger("edge.http")

Route = Callable[["Handler"], None]

EVICTABLE_AFTER_S = 0.05  # a head still incomplete after this long may give its slot (a real one takes a round trip)


def _plain(status: bytes, body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.0 " + status + b"\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n" % len(body) + extra + b"\r\n" + body


_BUSY = _plain(b"503 Service Unavailable", b"too many now\n", b"Retry-After: 5\r\n")
_YOURS = _plain(b"503 Service Unavailable", b"too many connections from your address\n", b"Retry-After: 5\r\n")
_SLOW_DOWN = _plain(b"429 Too Many Requests", b"too many requests\n", b"Retry-After: 1\r\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: nothing idles on a kept-alive socket
    server: _Server

    def setup(self) -> None:
        self.timeout = self.server.timeout_s  # socket timeout for each read and write
        super().setup()

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self.server.head_done(self.connection)  # the head is read (or refused): no longer evictable
        return ok

    def do_GET(self) -> None:
        access = self.server.access
        if not access.host_ok(self.headers.get("Host"), self.connection.getsockname()[0]):
            self.server.refused("Host", self.headers.get("Host"))
            self.reply(421, b"this server answers requests for its own addresses and view/metrics.allowed_hosts\n", "text/plain")
            return
        if not access.authorised(self.headers.get("Authorization")):
            self.server.refused("Authorization", self.client_address[0])
            self.reply(401, b"credentials needed\n", "text/plain", {"WWW-Authenticate": 'Basic realm="edge", charset="UTF-8"'})
            return
        route = self.server.routes.get(urllib.parse.urlsplit(self.path).path)
        if route is None:
            self.reply(404, b"not found\n", "text/plain")
            return
        try:
            route(self)
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass  # the client went away; nothing to tell anyone

    def reply(self, status: int, body: bytes, content_type: str, headers: Optional[Dict[str, str]] = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        # the request line is the client's: escaped, as the base class would, before it reaches a terminal
        log.debug("%s %s", self.address_string(), one_line(format % args, 300))


class _Server(ThreadingMixIn, HTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True  # a restart right after a stop must not trip over TIME_WAIT

    def __init__(
        self,
        key: str,
        address: tuple,
        routes: Dict[str, Route],
        max_connections: int,
        timeout_s: float,
        access: Access,
        max_per_client: int,
        head_timeout_s: float,
        rate_per_s: Optional[float],
    ) -> None:
        self.routes, self.timeout_s, self.access = routes, timeout_s, access
        self.max_per_client, self.head_timeout_s, self.rate_per_s = max_per_client, head_timeout_s, rate_per_s
        self.slots = threading.BoundedSemaphore(max_connections)
        self.closing = threading.Event()
        self._lock = threading.Lock()
        self._heads: Dict[Any, float] = {}  # connection -> when it was accepted, until its head is read
        self._per_client: Dict[str, int] = {}
        self._tokens, self._t_tokens = rate_per_s or 0.0, time.monotonic()
        self._refusals: Dict[str, int] = {}
        self.key = key
        super().__init__(address, Handler)

    # -- connections --------------------------------------------------------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.rate_ok():  # answered from the accept loop: no thread, nothing read or parsed
            self._turn_away(request, _SLOW_DOWN)
            return
        client = client_address[0]
        with self._lock:
            crowded = self._per_client.get(client, 0) >= self.max_per_client
        if crowded or not self._take_slot():
            self._turn_away(request, _YOURS if crowded else _BUSY)
            return
        with self._lock:
            self._per_client[client] = self._per_client.get(client, 0) + 1
            self._heads[request] = time.monotonic()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._done(request, client)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done(request, client_address[0])

    def _done(self, request: Any, client: str) -> None:
        with self._lock:
            self._heads.pop(request, None)
            left = self._per_client.get(client, 1) - 1
            if left > 0:
                self._per_client[client] = left
            else:
                self._per_client.pop(client, None)
        self.slots.release()

    def _take_slot(self) -> bool:
        """A free slot, or the slot of the connection slowest to send its head (it is cut off)."""
        if self.slots.acquire(blocking=False):
            return True
        now = time.monotonic()
        with self._lock:
            stale = [(t, c) for c, t in self._heads.items() if now - t >= EVICTABLE_AFTER_S]
        if not stale:
            return False
        self._cut(min(stale, key=lambda tc: tc[0])[1])
        return self.slots.acquire(timeout=1.0)

    def _cut(self, connection: Any) -> None:
        with self._lock:
            self._heads.pop(connection, None)
        try:
            connection.shutdown(socket.SHUT_RDWR)  # its handler's read returns at once and the thread ends
        except OSError:
            pass

    def _turn_away(self, request: Any, reply: bytes) -> None:
        try:
            request.settimeout(1.0)
            request.sendall(reply)
        except OSError:
            pass
        self.shutdown_request(request)

    def head_done(self, connection: Any) -> None:
        with self._lock:
            self._heads.pop(connection, None)

    def service_actions(self) -> None:
        """Every poll of the accept loop: cut connections whose head is past its deadline."""
        now = time.monotonic()
        with self._lock:
            late = [c for c, t in self._heads.items() if now - t > self.head_timeout_s]
        for connection in late:
            self._cut(connection)

    # -- requests -----------------------------------------------------------------------------------------------
    def rate_ok(self) -> bool:
        """A token bucket of ``rate_per_s`` requests a second (a burst of as many)."""
        if self.rate_per_s is None:
            return True
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.rate_per_s, self._tokens + (now - self._t_tokens) * self.rate_per_s)
            self._t_tokens = now
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True

    def refused(self, what: str, value: Any) -> None:
        """The first refusal of each kind is a warning (a proxy or a name not listed shows at once); the rest,
        which an attacker can send by the thousand, go to debug."""
        with self._lock:
            self._refusals[what] = count = self._refusals.get(what, 0) + 1
        say = log.warning if count == 1 else log.debug
        say("%s %s: refused a request for %s %s (%d so far)", self.key, self.server_address[1], what, one_line(value, 120), count)

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
        self,
        key: str,
        address: str,
        port: int,
        routes: Dict[str, Route],
        max_connections: int = 8,
        timeout_s: float = 10.0,
        access: Optional[Access] = None,
        max_per_client: int = 4,
        head_timeout_s: float = 10.0,
        rate_per_s: Optional[float] = None,
    ) -> None:
        family = _family(key, address, port)
        server_cls = type("_BoundServer", (_Server,), {"address_family": family})
        try:
            self.httpd = server_cls(
                key,
                (address, port),
                routes,
                max_connections,
                timeout_s,
                access or Access(),
                max_per_client,
                head_timeout_s,
                rate_per_s,
            )
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
