"""sd_notify against a real unix datagram socket, standing in for systemd's notify socket.

The frame loop here is a small stand-in for edge-run's pipeline: it calls ``ready()`` and ``frame_done()`` per
frame as the pipeline does, then stalls like a camera that stopped delivering.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

from edge.runtime.outputs.notify import Notifier, Watchdog, watchdog_interval_s


class Receiver:
    """Collects (time, datagram) pairs from a bound AF_UNIX/SOCK_DGRAM socket."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.05)
        self.messages: List[Tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            self.messages.append((time.monotonic(), data.decode()))

    def close(self) -> List[Tuple[float, str]]:
        time.sleep(0.05)
        self._stop.set()
        self._thread.join()
        self.sock.close()
        return self.messages


@pytest.fixture
def path_socket() -> Iterator[Tuple[str, Receiver]]:
    folder = tempfile.mkdtemp(prefix="nfy", dir="/tmp")  # unix socket paths must stay under 108 bytes
    address = os.path.join(folder, "notify")
    receiver = Receiver(address)
    yield address, receiver
    receiver.close()
    os.unlink(address)
    os.rmdir(folder)


def test_without_notify_socket_every_call_is_a_no_op(path_socket: Tuple[str, Receiver]) -> None:
    """Outside systemd (no NOTIFY_SOCKET) nothing is sent anywhere, even with a socket listening and a watchdog
    interval in the environment; with the variable set, the same calls reach it (the control)."""
    address, receiver = path_socket
    notifier = Notifier.from_env({"WATCHDOG_USEC": "1000000"})
    assert not notifier.enabled
    assert not notifier.ready() and not notifier.status("x") and not notifier.stopping()
    watchdog = Watchdog.from_env(notifier, {"WATCHDOG_USEC": "1000000"})
    assert not watchdog.enabled
    watchdog.frame_done()
    time.sleep(0.1)
    assert receiver.messages == []
    assert Notifier.from_env({"NOTIFY_SOCKET": address}).ready()
    deadline = time.monotonic() + 5
    while not receiver.messages and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [m for _, m in receiver.messages] == ["READY=1"]


def test_ready_once_status_and_stopping_on_a_path_socket(path_socket: Tuple[str, Receiver]) -> None:
    address, receiver = path_socket
    notifier = Notifier.from_env({"NOTIFY_SOCKET": address})
    assert notifier.ready("first frame after 1.2 s")
    assert not notifier.ready("again")  # only the first call sends
    assert notifier.status("12.5 fps\n7.9 W")
    assert notifier.stopping()
    notifier.close()
    assert [m for _, m in receiver.close()] == [
        "READY=1\nSTATUS=first frame after 1.2 s",
        "STATUS=12.5 fps 7.9 W",  # a newline would have started a new field
        "STOPPING=1",
    ]


def test_abstract_namespace_socket() -> None:
    name = f"edge-test-{uuid.uuid4().hex}"
    receiver = Receiver("\0" + name)
    notifier = Notifier(f"@{name}")
    assert notifier.ready()
    notifier.close()
    assert [m for _, m in receiver.close()] == ["READY=1"]


def test_watchdog_pings_while_frames_flow_and_stops_when_they_stall(path_socket: Tuple[str, Receiver]) -> None:
    address, receiver = path_socket
    env = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid())}  # WatchdogSec=0.2
    notifier = Notifier.from_env(env)
    watchdog = Watchdog.from_env(notifier, env)
    assert watchdog_interval_s(env) == pytest.approx(0.1)
    flow_end = time.monotonic() + 0.6
    while time.monotonic() < flow_end:  # ~100 frames/s
        notifier.ready()
        watchdog.frame_done()
        time.sleep(0.01)
    last_frame = time.monotonic()
    time.sleep(0.6)  # the camera stalls: no frames, so no pings
    messages = receiver.close()
    assert messages[0][1] == "READY=1" and [m for _, m in messages].count("READY=1") == 1
    pings = [t for t, m in messages if m == "WATCHDOG=1"]
    assert 4 <= len(pings) <= 8, pings  # every 0.1 s over 0.6 s, not once per frame
    assert all(t <= last_frame + 0.05 for t in pings), "a ping arrived after frames stopped"


@pytest.mark.parametrize(
    "env",
    [
        {"WATCHDOG_USEC": "500000", "WATCHDOG_PID": "1"},  # meant for another process
        {"WATCHDOG_USEC": "0"},
        {"WATCHDOG_USEC": "soon"},
        {},
    ],
)
def test_watchdog_interval_off(env: dict) -> None:
    assert watchdog_interval_s(env) is None


def test_unsupported_address_and_vanished_socket_do_not_raise(tmp_path: Path) -> None:
    assert not Notifier("vsock:2:1234").enabled
    gone = Notifier(str(tmp_path / "nobody-listens"))
    assert gone.enabled and not gone.ready() and not gone.status("x")
