"""sd_notify for edge-run: tell systemd when the pipeline is ready, that frames still flow, and what it is doing.

The protocol (sd_notify(3)) is one datagram of newline-separated ``KEY=VALUE`` lines sent to the unix socket
named by ``$NOTIFY_SOCKET``; a leading ``@`` names a socket in the abstract namespace. Without the variable
(started by hand, or not as ``Type=notify``) every call does nothing, so the pipeline calls them unconditionally::

    notifier = Notifier.from_env()
    watchdog = Watchdog.from_env(notifier)
    ...                                  # per processed frame, in one thread:
    notifier.ready()                     #   sends READY=1 the first time only
    watchdog.frame_done()                #   WATCHDOG=1 at most every half WatchdogSec
    notifier.status("12.5 fps, 7.9 W")   # now and then
    notifier.stopping()                  # on SIGTERM
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Mapping, Optional

log = logging.getLogger(__name__)

_SEND_TIMEOUT_S = 1.0  # systemd reads at once; never let a wedged socket hold up the frame path for long


class Notifier:
    """A client for ``$NOTIFY_SOCKET``. Failures are logged, never raised: the service must not die for them."""

    def __init__(self, address: Optional[str]) -> None:
        self._address: Optional[str] = None
        if address and address[0] in "/@":
            self._address = "\0" + address[1:] if address[0] == "@" else address
        elif address:
            log.warning("NOTIFY_SOCKET=%r: only unix socket paths and @abstract names are supported; not notifying", address)
        self._sock: Optional[socket.socket] = None
        self._ready = False
        self._warned = False

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> Notifier:
        env = os.environ if environ is None else environ
        return cls(env.get("NOTIFY_SOCKET"))

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def send(self, *fields: str) -> bool:
        """Send ``KEY=VALUE`` fields in one datagram; True when it was sent."""
        if self._address is None:
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.settimeout(_SEND_TIMEOUT_S)
            self._sock.sendto("\n".join(fields).encode(), self._address)
            return True
        except OSError as exc:
            # Once at warning level: a failing watchdog ping would otherwise log on every frame.
            log.log(logging.DEBUG if self._warned else logging.WARNING, "sd_notify %s failed: %s", fields[0], exc)
            self._warned = True
            return False

    def ready(self, status: Optional[str] = None) -> bool:
        """READY=1, the first time only (the pipeline may call it for every frame)."""
        if self._ready:
            return False
        self._ready = self.send("READY=1", *([f"STATUS={_one_line(status)}"] if status else []))
        return self._ready

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={_one_line(text)}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self, status: Optional[str] = None) -> bool:
        return self.send("STOPPING=1", *([f"STATUS={_one_line(status)}"] if status else []))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _one_line(text: str) -> str:
    return " ".join(text.split())  # a newline would start a new KEY=VALUE field


def watchdog_interval_s(environ: Optional[Mapping[str, str]] = None) -> Optional[float]:
    """How often to ping: half of ``WATCHDOG_USEC``, as sd_watchdog_enabled(3) advises; None when the watchdog is off.

    Like sd_watchdog_enabled, a ``WATCHDOG_PID`` naming another process means the watchdog is not ours.
    """
    env = os.environ if environ is None else environ
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
        pid = int(env.get("WATCHDOG_PID") or os.getpid())
    except ValueError:
        return None
    if usec <= 0 or pid != os.getpid():
        return None
    return usec / 2e6


class Watchdog:
    """Pings systemd's watchdog from the frame path, so the pings stop when frames stop.

    ``frame_done()`` runs once per processed frame: one clock read and a comparison, plus a datagram at most
    once per interval. There is no timer thread on purpose: a stalled camera or a hung inference must starve
    the watchdog, so systemd kills and restarts the service. Call it from one thread.
    """

    def __init__(self, notifier: Notifier, interval_s: Optional[float]) -> None:
        self._notifier = notifier
        self._interval = interval_s if interval_s and notifier.enabled else None
        self._next = 0.0  # the first frame pings at once

    @classmethod
    def from_env(cls, notifier: Notifier, environ: Optional[Mapping[str, str]] = None) -> Watchdog:
        return cls(notifier, watchdog_interval_s(environ))

    @property
    def enabled(self) -> bool:
        return self._interval is not None

    def frame_done(self) -> None:
        if self._interval is None:
            return
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self._interval
            self._notifier.watchdog()
