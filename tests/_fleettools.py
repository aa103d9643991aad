"""Real servers on 127.0.0.1 for the fleet tests: mosquitto, Prometheus, headless Chromium, and edge-run running in
the background. Every wait has a deadline; every process is stopped by its own pid.

A missing program skips the test with the reason, unless EDGE_REQUIRE_SERVERS=1 (CI), where it fails instead
(conftest.require_or_skip).
"""

from __future__ import annotations

import base64
import getpass
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from ._deploytools import free_port
from .conftest import edge_run_cmd, require_or_skip


def wait_until(check: Any, timeout: float, step: float = 0.1) -> Any:
    """Poll ``check()`` until it returns something truthy or ``timeout`` seconds pass; returns the last value."""
    deadline = time.monotonic() + timeout
    value = check()
    while not value and time.monotonic() < deadline:
        time.sleep(step)
        value = check()
    return value


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def http_get(url: str, timeout: float = 10.0, headers: Optional[dict] = None) -> Tuple[int, bytes, dict]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - loopback URLs made by the tests
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)
    except (urllib.error.URLError, OSError):  # not listening (yet), reset
        return 0, b"", {}


def stop(proc: Optional[subprocess.Popen], sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


# -- mosquitto ---------------------------------------------------------------
class Mosquitto:
    """mosquitto on 127.0.0.1:port; optional password file and TLS listener. kill()/start() keep the port."""

    def __init__(self, folder: Path, users: Optional[dict] = None, tls: Optional[dict] = None, extra: Sequence[str] = ()) -> None:
        exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        require_or_skip(os.access(exe, os.X_OK), "mosquitto is not installed (apt-get install -y mosquitto)")
        self.exe, self.dir, self.port = exe, folder, free_port()
        self.proc: Optional[subprocess.Popen] = None
        # `user`: started as root, mosquitto would switch to user mosquitto, who cannot read the test's private folder.
        lines = [
            f"listener {self.port} 127.0.0.1",
            "persistence false",
            f"log_dest file {folder / 'mosquitto.log'}",
            f"user {getpass.getuser()}",
        ]
        if users:
            pw = folder / "passwd"
            for i, (user, password) in enumerate(users.items()):
                cmd = ["mosquitto_passwd", "-b", *(["-c"] if i == 0 else []), str(pw), user, password]
                subprocess.run(cmd, check=True, capture_output=True, timeout=30)
            lines += ["allow_anonymous false", f"password_file {pw}"]
        else:
            lines.append("allow_anonymous true")
        if tls:
            lines += [f"cafile {tls['ca']}", f"certfile {tls['cert']}", f"keyfile {tls['key']}"]
        lines += list(extra)  # e.g. max_packet_size 400
        self.conf = folder / "mosquitto.conf"
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self) -> Mosquitto:
        self.proc = subprocess.Popen([self.exe, "-c", str(self.conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert wait_until(lambda: port_open(self.port), 10), f"mosquitto did not listen on {self.port}: {self.log()}"
        return self

    def kill(self) -> None:
        stop(self.proc, signal.SIGKILL)

    def stop(self) -> None:
        stop(self.proc)

    def log(self) -> str:
        p = self.dir / "mosquitto.log"
        return p.read_text(errors="replace")[-2000:] if p.exists() else ""


class Subscriber:
    """A paho client that records every message under ``topic`` (subscribing again after each reconnect)."""

    def __init__(self, port: int, topic: str, tls_ca: Optional[str] = None, auth: Optional[Tuple[str, str]] = None) -> None:
        import paho.mqtt.client as mqtt

        self.messages: List[Tuple[str, bytes, bool, float]] = []  # topic, payload, retained, time.time() received
        self.lock = threading.Lock()
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"test-sub-{os.getpid()}-{port}")
        if auth:
            c.username_pw_set(*auth)
        if tls_ca:
            c.tls_set(ca_certs=tls_ca)
        c.on_connect = lambda cl, u, f, rc, p: cl.subscribe(f"{topic}/#", qos=1)
        c.on_message = self._on_message
        c.reconnect_delay_set(0.2, 1)
        c.connect_async("127.0.0.1", port)
        c.loop_start()
        self.client = c

    def _on_message(self, _c: Any, _u: Any, msg: Any) -> None:
        with self.lock:
            self.messages.append((msg.topic, msg.payload, bool(msg.retain), time.time()))

    def on(self, suffix: str) -> List[Tuple[dict, bool, float]]:
        with self.lock:
            return [(json.loads(p), r, t) for topic, p, r, t in self.messages if topic.endswith("/" + suffix)]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def make_tls(folder: Path) -> dict:
    """A throw-away CA and a server certificate for 127.0.0.1 (openssl)."""
    require_or_skip(shutil.which("openssl") is not None, "openssl is not installed")

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60, cwd=folder)

    def self_signed(cn: str, stem: str) -> None:  # a CA: key and certificate in one step
        ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={cn}", "-keyout", f"{stem}.key", "-out", f"{stem}.crt")  # fmt: skip

    self_signed("edge test CA", "ca")
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key", "-out", "server.csr")
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-extfile", "san.ext", "-out", "server.crt")  # fmt: skip
    self_signed("other CA", "other")
    return {
        "ca": str(folder / "ca.crt"),
        "cert": str(folder / "server.crt"),
        "key": str(folder / "server.key"),
        "other_ca": str(folder / "other.crt"),
    }


# -- Prometheus --------------------------------------------------------------
class Prometheus:
    """Debian's prometheus on 127.0.0.1, scraping every second; ``scrape`` is the scrape_configs list."""

    def __init__(self, folder: Path, scrape: list) -> None:
        exe = shutil.which("prometheus")
        require_or_skip(exe is not None, "prometheus is not installed (apt-get install -y prometheus)")
        self.port = free_port()
        config = folder / "prometheus.yml"
        config.write_text(
            json.dumps({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": scrape})
        )
        self.log = open(folder / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                exe,
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        ready = wait_until(lambda: port_open(self.port) and http_get(self.url("/-/ready"))[0] == 200, 60, 0.5)
        assert ready, f"prometheus did not become ready: {(folder / 'prometheus.log').read_text()[-1500:]}"

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def query(self, expr: str) -> list:
        status, body, _ = http_get(self.url("/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
        assert status == 200, body
        data = json.loads(body)
        assert data["status"] == "success", data
        return data["data"]["result"]

    def targets(self) -> list:
        return json.loads(http_get(self.url("/api/v1/targets"))[1])["data"]["activeTargets"]

    def stop(self) -> None:
        stop(self.proc)
        self.log.close()


# -- Chromium ----------------------------------------------------------------
class Chromium:
    """Headless Chromium driven through the DevTools protocol over a pipe (--remote-debugging-pipe: JSON messages
    separated by NUL on fds 3 and 4), so a page with a never-ending MJPEG stream can still be inspected and shot."""

    def __init__(self, folder: Path, width: int = 1000, height: int = 700) -> None:
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        require_or_skip(exe is not None, "chromium is not installed (apt-get install -y chromium fonts-dejavu-core)")
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()
        args = f"--headless --no-sandbox --disable-gpu --remote-debugging-pipe --user-data-dir={folder / 'profile'} --window-size={width},{height}"
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" {args} about:blank 3<&{to_chrome_r} 4>&{from_chrome_w}', exe],
            pass_fds=(to_chrome_r, from_chrome_w),
            stdout=subprocess.DEVNULL,
            stderr=open(folder / "chromium.log", "wb"),  # noqa: SIM115 - the child keeps it; dbus complaints go here
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._id, self._buf, self.session = 0, b"", None

    def call(self, method: str, params: Optional[dict] = None, timeout: float = 30.0) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if self.session and not method.startswith(("Target.", "Browser.")):
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self._buf:
                left = deadline - time.monotonic()
                assert left > 0 and select.select([self._r], [], [], left)[0], f"chromium did not answer {method} in {timeout} s"
                chunk = os.read(self._r, 1 << 20)
                assert chunk, "chromium exited"
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                return reply["result"]

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", {"url": url})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    def evaluate(self, expression: str) -> Any:
        return self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})["result"].get("value")

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"})["data"])

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (AssertionError, OSError):
            pass
        stop(self.proc, timeout=10)
        os.close(self._w)
        os.close(self._r)


# -- edge-run in the background --------------------------------------------
class EdgeRun:
    """edge-run as a separate process, its output in files (a pipe could fill up while the test waits)."""

    def __init__(self, folder: Path, *args: str, env: Optional[dict] = None) -> None:
        self.out, self.err = folder / "edge-run.out", folder / "edge-run.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen([*edge_run_cmd(), *args], stdout=out, stderr=err, env={**os.environ, **(env or {})})

    def wait(self, timeout: float = 120) -> int:
        return self.proc.wait(timeout)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop(self.proc, sig, timeout=30)

    @property
    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err.read_text(errors="replace")
