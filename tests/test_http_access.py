"""The run's HTTP endpoints against the network cases of the review (../shared/reference/reviews/
hostile-network-2026-12.md): DNS rebinding (S1), a request line that writes escapes into the log (S2), slowloris
from many loopback addresses (R1, R2), a /metrics flood (R3), and the optional secret. Real sockets on loopback,
the real server; edge-run itself for the end-to-end case."""

from __future__ import annotations

import base64
import logging
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.errors import EdgeError
from edge.runtime.outputs.access import Access, read_secret, split_host
from edge.runtime.outputs.httpserve import HttpServer

from ._deploytools import free_port
from ._fleettools import EdgeRun, http_get, wait_until
from .conftest import DEMO_CONFIG, PROMPT_S

SECRET = "0123456789abcdef0123456789abcdef"


def ok_route(h) -> None:
    h.reply(200, b"frame\n", "text/plain")


def raw(port: int, request: bytes, source: str = "127.0.0.1", timeout: float = 5.0) -> bytes:
    """Send ``request`` from ``source`` and read the whole reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0)) as s:
        s.sendall(request)
        return b"".join(iter(lambda: s.recv(4096), b""))


def status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/") else 0


@pytest.fixture
def server():
    made = []

    def make(**kw) -> HttpServer:
        s = HttpServer("view.port", "127.0.0.1", free_port(), {"/frame.jpg": ok_route}, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def port_of(s: HttpServer) -> int:
    return s.httpd.server_address[1]


# -- S1: the Host header -------------------------------------------------------------------------------------------
def test_a_rebound_name_is_refused_and_this_machines_names_and_addresses_are_served(server):
    s = server(access=Access(["cam.lan"]))
    port = port_of(s)

    def get(host: str) -> int:
        return status(raw(port, f"GET /frame.jpg HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()))

    # what a page of evil.attacker.example sends once its name points at 127.0.0.1
    for host in ("evil.attacker.example", f"evil.attacker.example:{port}", "127.0.0.1.nip.io", "localhost.evil.example"):
        assert get(host) == 421, host
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "127.0.0.1", "cam.lan", "CAM.LAN.", "localhost:9000"):
        assert get(host) == 200, host  # localhost:9000: an `ssh -L 9000:127.0.0.1:PORT` tunnel
    assert get(socket.gethostname()) == 200
    assert status(raw(port, b"GET /frame.jpg HTTP/1.0\r\n\r\n")) == 200  # no Host: no browser, no rebinding
    for host in ("[::1", "a:b:c", "x:99x", ""):
        assert get(host) == 421, host


def test_the_address_the_client_reached_is_accepted_when_bound_to_every_interface():
    port = free_port()
    s = HttpServer("view.port", "0.0.0.0", port, {"/frame.jpg": ok_route})
    try:
        # 127.0.0.5 is this machine's address as far as the connection goes; a name must be listed
        assert status(raw(port, b"GET /frame.jpg HTTP/1.1\r\nHost: 127.0.0.5\r\n\r\n")) == 200
        assert status(raw(port, b"GET /frame.jpg HTTP/1.1\r\nHost: camera.example\r\n\r\n")) == 421
    finally:
        s.close()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_only_a_listed_name_or_an_ip_address_passes_for_any_host_header(host):
    access = Access(["cam.lan"])
    name = split_host(host)
    if access.host_ok(host, "10.1.2.3"):
        assert name is not None
        import ipaddress

        listed = name in access.names
        try:
            ip = ipaddress.ip_address(name.split("%")[0])
        except ValueError:
            ip = None
        assert listed or (ip is not None and (ip.is_loopback or str(ip) == "10.1.2.3" or getattr(ip, "ipv4_mapped", None)))


# -- S2: the request line in the log ----------------------------------------------------------------------------------
def test_escape_sequences_in_a_request_line_are_logged_escaped(server, caplog):
    s = server()
    with caplog.at_level(logging.DEBUG, logger="edge.http"):
        raw(port_of(s), b"GET /\x1b]0;pwned\x07\x1b[2J\x1b[31mX HTTP/1.0\r\n\r\n")
        assert wait_until(lambda: any("pwned" in r.getMessage() for r in caplog.records), 5)
    lines = [r.getMessage() for r in caplog.records if r.name == "edge.http"]
    assert lines and not any("\x1b" in line or "\x07" in line for line in lines)
    assert any("\\x1b]0;pwned\\x07" in line for line in lines)


# -- R1, R2: slowloris ------------------------------------------------------------------------------------------------
def slow_client(port: int, source: str, stop: threading.Event, every: float) -> None:
    """A request head sent one header line at a time, forever (until the server cuts it off or the test ends)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0)) as s:
            s.sendall(b"GET /frame.jpg HTTP/1.1\r\nHost: localhost\r\n")
            while not stop.wait(every):
                s.sendall(b"X-a: b\r\n")
    except OSError:
        pass  # cut off, refused or turned away


def test_thirty_slow_heads_from_eight_addresses_do_not_lock_out_a_real_client(server):
    """The view's slots (max_viewers 4 + 4): 30 connections from 127.0.0.2..127.0.0.9 trickle headers; a real
    client from 127.0.0.1 is answered 200 at once (not after a slow head's 60 s deadline), over and over."""
    s = server(max_connections=8, head_timeout_s=60.0)
    port, stop = port_of(s), threading.Event()
    threads = [
        threading.Thread(target=slow_client, args=(port, f"127.0.0.{2 + i % 8}", stop, 0.3), daemon=True) for i in range(30)
    ]
    for t in threads:
        t.start()
    try:
        time.sleep(1.5)  # every slot taken by a slow head
        for _ in range(5):
            t0 = time.monotonic()
            reply = raw(port, b"GET /frame.jpg HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert status(reply) == 200 and time.monotonic() - t0 < PROMPT_S
            time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(10)


def test_a_head_that_trickles_in_is_cut_at_the_deadline(server):
    s = server(head_timeout_s=1.5)
    with socket.create_connection(("127.0.0.1", port_of(s)), timeout=5) as c:
        c.sendall(b"GET /frame.jpg HTTP/1.1\r\n")
        t0, closed = time.monotonic(), False
        while time.monotonic() - t0 < 2 * PROMPT_S:
            try:
                c.sendall(b"X-a: b\r\n")  # a byte now and then: each read alone is well within timeout_s
                c.settimeout(0.4)
                if c.recv(100) == b"":
                    closed = True
                    break
            except socket.timeout:
                continue
            except OSError:
                closed = True
                break
        assert closed and 1.3 < time.monotonic() - t0 < PROMPT_S  # cut at the whole head's 1.5 s, not per read


def test_one_address_gets_at_most_its_share_of_the_slots(server):
    s = server(max_connections=8, max_per_client=2)
    port = port_of(s)

    def hold() -> socket.socket:
        return socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.3", 0), timeout=5)

    def finish(c: socket.socket) -> int:  # the held connection sends its request and is answered
        c.sendall(b"GET /frame.jpg HTTP/1.0\r\n\r\n")
        reply = b"".join(iter(lambda: c.recv(4096), b""))
        c.close()
        return status(reply)

    first, second = hold(), hold()
    time.sleep(0.2)
    assert b"too many connections from your address" in raw(port, b"GET /frame.jpg HTTP/1.0\r\n\r\n", "127.0.0.3")
    assert status(raw(port, b"GET /frame.jpg HTTP/1.0\r\n\r\n", "127.0.0.4")) == 200
    assert finish(first) == 200  # both held ones had a slot of their own
    time.sleep(0.2)
    third = hold()  # the address is back to one of its two
    time.sleep(0.2)
    assert b"too many connections from your address" in raw(port, b"GET /frame.jpg HTTP/1.0\r\n\r\n", "127.0.0.3")
    assert finish(second) == 200 and finish(third) == 200
    assert wait_until(lambda: status(raw(port, b"GET /frame.jpg HTTP/1.0\r\n\r\n", "127.0.0.3")) == 200, 5)


# -- R3: a /metrics flood -----------------------------------------------------------------------------------------------
def test_requests_beyond_the_rate_get_429_and_the_bucket_refills(server):
    s = server(rate_per_s=10.0)
    port = port_of(s)
    codes = [status(raw(port, b"GET /frame.jpg HTTP/1.0\r\n\r\n")) for _ in range(40)]
    assert codes[:10] == [200] * 10 and 429 in codes and set(codes) <= {200, 429}
    time.sleep(0.5)
    assert status(raw(port, b"GET /frame.jpg HTTP/1.0\r\n\r\n")) == 200


# -- the secret ----------------------------------------------------------------------------------------------------------
def secret_file(tmp_path: Path, text: str = SECRET, mode: int = 0o600) -> Path:
    path = tmp_path / "view.secret"
    path.write_text(text + "\n")
    path.chmod(mode)
    return path


def test_with_a_secret_only_requests_that_carry_it_are_answered(server, tmp_path):
    s = server(access=Access((), read_secret("view.auth_file", secret_file(tmp_path))))
    port = port_of(s)
    reply = raw(port, b"GET /frame.jpg HTTP/1.0\r\nHost: localhost\r\n\r\n")
    assert status(reply) == 401 and b'WWW-Authenticate: Basic realm="edge"' in reply and b"frame" not in reply
    basic = base64.b64encode(f"anyone:{SECRET}".encode())
    for auth in (b"Bearer " + SECRET.encode(), b"Basic " + basic, b"bearer  " + SECRET.encode()):
        assert status(raw(port, b"GET /frame.jpg HTTP/1.0\r\nAuthorization: " + auth + b"\r\n\r\n")) == 200, auth
    for auth in (b"Bearer " + SECRET[:-1].encode(), b"Basic " + base64.b64encode(SECRET.encode()), b"Basic !!!", b"Token x"):
        assert status(raw(port, b"GET /frame.jpg HTTP/1.0\r\nAuthorization: " + auth + b"\r\n\r\n")) == 401, auth


@pytest.mark.parametrize(
    "text, mode, message",
    [
        (SECRET, 0o644, "mode 644 lets other users read it; chmod 600 it"),
        (SECRET, 0o640, "mode 640 lets other users read it"),
        ("short", 0o600, "at least 16 printable ASCII characters"),
        ("two words " + SECRET, 0o600, "without spaces"),
        ("x" * 5000, 0o600, "5001 bytes is not one secret"),
    ],
)
def test_a_secret_file_that_is_not_private_or_not_one_secret_is_refused(tmp_path, text, mode, message):
    with pytest.raises(EdgeError, match=message):
        read_secret("view.auth_file", secret_file(tmp_path, text, mode))


def test_a_fifo_as_the_secret_file_is_refused_without_opening_it(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    t0 = time.monotonic()
    with pytest.raises(EdgeError, match="not a regular file"):
        read_secret("metrics.auth_file", fifo)
    assert time.monotonic() - t0 < PROMPT_S  # opening a FIFO without a writer would block for good
    with pytest.raises(EdgeError, match="No such file"):
        read_secret("metrics.auth_file", tmp_path / "missing")


# -- end to end through edge-run --------------------------------------------------------------------------------------
def test_edge_run_serves_its_view_to_its_own_names_and_with_the_secret_only(tmp_path, demo_model, megamind):
    port = free_port()
    secret = secret_file(tmp_path)
    run = EdgeRun(
        tmp_path, "-c", str(DEMO_CONFIG), "--loop", "--duration", "60", "-q", "--view-port", str(port),
        "--set", f"view.auth_file={secret}", "--set", "view.allowed_hosts=[cam.lan]",
    )  # fmt: skip
    try:
        bearer = {"Authorization": f"Bearer {SECRET}"}
        url = f"http://127.0.0.1:{port}/stats.json"
        assert wait_until(lambda: http_get(url, timeout=5, headers=bearer)[0] == 200, 60), run.stderr
        assert http_get(url, timeout=5)[0] == 401
        assert http_get(url, timeout=5, headers={**bearer, "Host": "evil.attacker.example"})[0] == 421
        assert http_get(url, timeout=5, headers={**bearer, "Host": "cam.lan:8090"})[0] == 200
        code, body, headers = http_get(f"http://127.0.0.1:{port}/frame.jpg", timeout=5, headers=bearer)
        assert code == 200 and body[:2] == b"\xff\xd8"
    finally:
        run.stop()
    assert run.proc.returncode == 0, run.stderr
    assert f"view.port {port}: refused a request for Host evil.attacker.example (1 so far)" in run.stderr
    assert SECRET not in run.stderr + run.stdout


def test_a_view_on_every_interface_without_a_secret_says_so(tmp_path, demo_model, megamind):
    port = free_port()
    run = EdgeRun(
        tmp_path, "-c", str(DEMO_CONFIG), "--frames", "30", "-q", "--view-port", str(port), "--set", "view.address=0.0.0.0"
    )
    assert run.wait(120) == 0, run.stderr
    assert (
        "view.address 0.0.0.0: anyone who can reach this machine can read the camera's frames; set view.auth_file" in run.stderr
    )


# -- credentials in what the endpoints and MQTT send ---------------------------------------------------------------------
def test_stats_json_masks_a_password_in_any_string(server):
    """/stats.json carries names (the model, the backend); a URI with a password among them is masked like a log line."""
    from edge.runtime.outputs.view import LiveView

    class Live:
        def stats(self):
            return {"model": "rtsp://admin:hunter2hunter2@cam.lan/stream1", "fps": 10.0}

    from edge.config import ViewConfig

    view = LiveView(ViewConfig())
    view.live = Live()
    s = server()
    s.httpd.routes["/stats.json"] = view.stats
    reply = raw(port_of(s), b"GET /stats.json HTTP/1.0\r\n\r\n")
    assert status(reply) == 200 and b"hunter2" not in reply and b"rtsp://admin:***@cam.lan/stream1" in reply
    view.close()


@pytest.mark.parametrize(
    "header, name",
    [
        ("[::1]", "::1"),
        ("[::1]:8090", "::1"),
        ("[::1]x", None),
        ("[::1]:abc", None),
        ("[::1", None),
        ("[", None),
        ("cam.lan:8090", "cam.lan"),
        ("CAM.lan.", "cam.lan"),
        ("x:99x", None),
        (":8090", None),
        ("  10.0.0.5 ", "10.0.0.5"),
    ],
)
def test_host_headers_split_into_their_name(header, name):
    assert split_host(header) == name


@pytest.mark.parametrize(
    "secret, ok",
    [
        ("a" * 16, True),  # the shortest accepted
        ("a" * 15, False),
        ("!~" * 8, True),  # the printable ends, 33 and 126
        ("a" * 15 + "\x7f", False),
        ("a" * 4095, True),  # with its newline exactly MAX_SECRET_FILE bytes
        ("a" * 4096, False),  # one byte over
    ],
)
def test_secret_length_and_characters_at_their_bounds(tmp_path, secret, ok):
    path = secret_file(tmp_path, secret)
    if ok:
        assert read_secret("view.auth_file", path) == secret
    else:
        with pytest.raises(EdgeError):
            read_secret("view.auth_file", path)


def test_basic_auth_that_is_not_strict_base64_is_refused():
    """Lenient base64 would skip a stray character and let the secret through."""
    access = Access((), SECRET)
    good = base64.b64encode(f"u:{SECRET}".encode()).decode()
    assert access.authorised(f"Basic {good}")
    assert not access.authorised(f"Basic {good[:4]}*{good[4:]}")
