"""Who a run's HTTP endpoints answer: requests addressed to this machine (the Host header), and, when a secret is
configured, only those that carry it.

The Host check is against DNS rebinding: a web page in a browser that can reach the port (the `ssh -L` tunnel the
docs show, a LAN) points its own name at that address and reads the responses as same-origin. Its requests then
carry the page's name as Host. An IP address as Host cannot come from such a page (it would be another origin), so
loopback addresses and the address the client connected to are accepted as they are; names must be listed. The port
is not compared: a tunnel may forward another local port, and the name is what rebinding controls.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import os
import re
import socket
import stat
from pathlib import Path
from typing import Iterable, Optional, Set

from edge.config import short
from edge.errors import EdgeError

MAX_SECRET_FILE = 4096  # a token is one line; anything larger is not one
MIN_SECRET = 16  # characters: shorter ones can be guessed over the network


def machine_names() -> Set[str]:
    """The names a browser on this machine or the LAN uses for it (no DNS lookup: at boot a Jetson may have no
    resolver yet, and a lookup could hold the start for seconds; a fully qualified name goes in allowed_hosts)."""
    host = socket.gethostname().lower().rstrip(".")
    return {n for n in ("localhost", host, f"{host}.local") if n and n != ".local"}


def split_host(value: str) -> Optional[str]:
    """The name or address of a Host header ("cam.lan:8090", "[::1]:8090", "10.0.0.5"), lowercased; None when it is
    not one."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1 :] if end > 0 else "x"
        if end < 0 or (rest and not re.fullmatch(r":\d{1,5}", rest)):
            return None
        return value[1:end]
    name, _, port = value.partition(":")
    if port and not port.isdigit():
        return None
    return name.rstrip(".") or None


def _address(text: str) -> Optional[ipaddress._BaseAddress]:
    try:
        ip = ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped or ip


class Access:
    def __init__(self, allowed_hosts: Iterable[str] = (), secret: Optional[str] = None) -> None:
        self.names = machine_names() | {h.lower().rstrip(".") for h in allowed_hosts}
        self._secret = secret.encode() if secret is not None else None

    def host_ok(self, host: Optional[str], local_address: str) -> bool:
        """True for a request without Host (HTTP/1.0: no browser sends one), a listed name, a loopback address or
        the address this connection reached."""
        if host is None:
            return True
        name = split_host(host)
        if name is None:
            return False
        if name in self.names:
            return True
        ip = _address(name)
        return ip is not None and (ip.is_loopback or ip == _address(local_address))

    @property
    def needs_secret(self) -> bool:
        return self._secret is not None

    def authorised(self, header: Optional[str]) -> bool:
        """``Authorization: Bearer SECRET`` (Prometheus' credentials_file) or Basic with SECRET as the password (any
        user name: what a browser's login box sends)."""
        if self._secret is None:
            return True
        scheme, _, value = (header or "").strip().partition(" ")
        given = b""
        if scheme.lower() == "bearer":
            given = value.strip().encode()
        elif scheme.lower() == "basic":
            try:
                given = base64.b64decode(value.strip(), validate=True).partition(b":")[2]
            except (binascii.Error, ValueError):
                return False
        return hmac.compare_digest(given, self._secret)


def read_secret(key: str, path: Path) -> str:
    """The secret in ``path``: a regular file of one line, readable by its owner only (a token on the command line
    or in a world-readable file is visible to every user of the machine)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise EdgeError(f"{key} {short(str(path))}: {exc.strerror or exc}; write the secret into a file first") from None
    if not stat.S_ISREG(info.st_mode):
        raise EdgeError(f"{key} {short(str(path))}: not a regular file; give a file holding the secret")
    if info.st_mode & 0o077:
        raise EdgeError(f"{key} {short(str(path))}: mode {info.st_mode & 0o777:o} lets other users read it; chmod 600 it")
    if info.st_size > MAX_SECRET_FILE:
        raise EdgeError(f"{key} {short(str(path))}: {info.st_size} bytes is not one secret (at most {MAX_SECRET_FILE})")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SECRET_FILE + 1)
    except OSError as exc:
        raise EdgeError(
            f"{key} {short(str(path))}: {exc.strerror or exc}; the user that runs edge must own it "
            "(for the service: chown edge FILE)"
        ) from None
    try:
        secret = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        secret = ""
    if len(secret) < MIN_SECRET or any(not 33 <= ord(c) <= 126 for c in secret):
        raise EdgeError(
            f"{key} {short(str(path))}: the secret must be one line of at least {MIN_SECRET} printable ASCII characters "
            "without spaces, e.g. from `openssl rand -hex 24`"
        )
    return secret
