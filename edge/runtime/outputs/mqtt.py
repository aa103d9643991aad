"""The MQTT sink: each frame's result to a broker (paho-mqtt), without ever making the pipeline wait for the network.

Topics under the URL's prefix P (``mqtt://[user:pass@]host[:port]/P``):

- ``P/results``: the frame's JSONL record plus ``t_wall`` (epoch seconds), every frame or only frames with
  detections, QoS 0 or 1; in a pool (many sources), ``P/SOURCE/results`` per source (the names are checked to be
  plain letters, digits, ``-_.``);
- ``P/status``: retained; ``{"state": "online", t_wall, model, hashes, backend, versions, host}`` on every
  connect; ``{"state": "offline", "reason": "stopped", t_wall, ...}`` on a clean stop; and the last will, which the
  broker sends when the connection dies: ``{"state": "offline", "reason": "connection lost", ...}`` without a time,
  since it is written before the connection it speaks for.

MQTT 5 (the default) tells the client the broker's largest packet; with ``max_packet_bytes`` (3.1.1 brokers say
nothing) it is the limit every PUBLISH packet is checked against before it is handed to paho. A result over it is
dropped and counted, never sent: the broker would close the connection, losing what was in flight, and at QoS 1
paho would send it again after every reconnect, blocking everything behind it.

The sink thread only serialises a record and appends it to a bounded queue; when the queue is full the oldest
message goes and is counted. A publisher thread hands messages to paho while the broker is connected, with a cap
on messages in flight; paho's own thread reconnects with backoff. Credentials are never printed: every URL shown
goes through ``edge.redact``.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Deque, Dict, Optional, Tuple

import numpy as np

from edge.config import short
from edge.errors import EdgeError
from edge.inputs import missing
from edge.lazy import require
from edge.outputs import strict_json
from edge.redact import MASK, redact
from edge.runtime.outputs.sinks import Sink
from edge.runtime.postprocess import Result
from edge.runtime.sources import Frame

log = logging.getLogger("edge.mqtt")

DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883}
MAX_IN_FLIGHT = 100  # messages handed to paho and not yet written (QoS 0) or acknowledged (QoS 1)
CONNECT_TIMEOUT_S = 5.0  # the first connection: TCP/TLS, then the broker's answer
DRAIN_S = 2.0  # at the end, how long queued messages may take to go out
# CONNACK answers that no retry can fix (MQTT 3.1.1 return codes 1, 2, 4, 5 as paho names them).
_PERMANENT = ("Unsupported protocol version", "Client identifier not valid", "Bad user name or password", "Not authorized")


@dataclass
class BrokerUrl:
    tls: bool
    host: str
    port: int
    prefix: str
    username: Optional[str]
    password: Optional[str]

    def __str__(self) -> str:
        """The URL for messages, rebuilt from its parts with the password masked."""
        auth = ""
        if self.username is not None:
            auth = urllib.parse.quote(self.username, safe="") + (f":{MASK}" if self.password is not None else "") + "@"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'mqtts' if self.tls else 'mqtt'}://{auth}{host}:{self.port}/{self.prefix}"


def parse_url(url: str, key: str = "sinks.mqtt.url") -> BrokerUrl:
    """``mqtt://[user[:password]@]host[:port]/topic/prefix`` or ``mqtts://…``; anything else is one EdgeError line."""
    shown = _shown(url)
    form = "mqtt://[user:pass@]host[:port]/topic/prefix (or mqtts:// for TLS)"

    def bad(why: str) -> EdgeError:
        return EdgeError(f"{key} {shown}: {why}; expected {form}")

    try:
        u = urllib.parse.urlsplit(url.strip())
    except ValueError:
        raise bad("the host is not valid (a broken [IPv6] address?)") from None
    try:
        port = u.port
    except ValueError:
        raise bad("the port is not a number 1..65535") from None
    scheme = u.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise bad(f"scheme {short(u.scheme)!s} is not mqtt or mqtts" if u.scheme else "no scheme")
    host = u.hostname
    if not host or any(c.isspace() or ord(c) < 32 for c in host):
        raise bad("no broker host")
    if port == 0:
        raise bad("port 0")
    if u.query or u.fragment or "?" in u.geturl() or "#" in url:
        raise bad(
            "'?' and '#' have no place in it: no MQTT wildcards in the prefix, no ?query (qos, TLS files go under sinks.mqtt)"
        )
    try:  # strict: unquote's default would turn bytes that are not UTF-8 into U+FFFD without a word
        prefix = urllib.parse.unquote(u.path, errors="strict").strip("/")
        user = urllib.parse.unquote(u.username, errors="strict") if u.username is not None else None
        password = urllib.parse.unquote(u.password, errors="strict") if u.password is not None else None
        for part in (prefix, user or "", password or ""):
            part.encode("utf-8")
    except UnicodeError:
        raise bad("not valid UTF-8") from None
    if not prefix:
        raise bad("no topic prefix after the host, e.g. mqtt://broker:1883/edge/cam-yard")
    if any(c in prefix for c in "+#\x00") or prefix.startswith("$"):
        raise bad("the topic prefix may not hold MQTT wildcards (+ #), NUL or start with $")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in prefix + (user or "")):
        # a newline or an escape sequence would reach every log line and terminal that shows the URL
        raise bad("control characters (newline, escape) have no place in the topic prefix or the user name")
    if len(prefix.encode("utf-8")) > 1024:
        raise bad("the topic prefix is longer than 1024 bytes")
    return BrokerUrl(scheme == "mqtts", host, port or DEFAULT_PORTS[scheme], prefix, user, password)


def _shown(url: str) -> str:
    """A URL that did not parse, for its error message: everything before the last '@' after the scheme is masked,
    because a broken URL (``://user:pw@host``, a user name with a space) can hide its password from redact."""
    at = url.rfind("@")
    if at >= 0:
        head = url.find("://")
        url = (url[: head + 3] if 0 <= head < at else "") + MASK + url[at:]
    return short(url)


def _client_id() -> str:
    # MQTT 3.1.1 brokers must accept ids of up to 23 characters; the pid keeps two cameras on one host apart.
    return f"edge-{socket.gethostname()}"[:16] + f"-{os.getpid() % 1_000_000}"


class MqttSink(Sink):
    name = "mqtt"

    def __init__(self, cfg: Any, info: Dict[str, str]) -> None:
        mqtt = require("paho.mqtt.client", "the MQTT sink (sinks.mqtt)")
        self._mqtt = mqtt
        self.url = parse_url(cfg.url)
        self.qos, self.only_detections, self.capacity = cfg.qos, cfg.only_detections, cfg.queue_size
        self.results_topic, self.status_topic = f"{self.url.prefix}/results", f"{self.url.prefix}/status"
        self._info = info
        self._queue: Deque[Tuple[str, bytes]] = collections.deque()  # (topic, payload)
        self._cond = threading.Condition()
        self._connected = False
        self._closing = False
        self._in_flight = 0
        self._disconnects = 0  # lets a publish that raced a disconnect tell whether it was already counted lost
        self._status_mids: set = set()
        self._counting = True  # off once close() has settled the counts
        self._refused: Optional[str] = None
        self._connack = threading.Event()
        self.published = 0  # written to the socket (QoS 0) or acknowledged by the broker (QoS 1)
        self.dropped = 0  # oldest dropped from a full queue, lost in flight when the connection broke, unsent at the end
        self.lost_in_flight = 0
        self.too_large = 0  # over the packet limit: dropped before sending (also in dropped)
        self.connects = 0
        self.v5 = cfg.protocol == "5"
        self._configured_limit = cfg.max_packet_bytes
        self.packet_limit: Optional[int] = cfg.max_packet_bytes  # with the broker's own, once it has said it

        client_id = cfg.client_id or _client_id()
        if self.v5:
            client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
        else:
            client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True)
        self.client = client
        if self.url.username is not None:
            client.username_pw_set(self.url.username, self.url.password)
        if self.url.tls:
            self._tls(client, cfg)
        elif cfg.ca_file or cfg.cert_file:
            raise EdgeError(f"sinks.mqtt.url {self.url}: ca_file/cert_file are for TLS; use mqtts://")
        # no time in the will: it is set once, before the connection it will speak for, and sent when that dies
        client.will_set(self.status_topic, self._status("offline", timed=False, reason="connection lost"), qos=1, retain=True)
        client.reconnect_delay_set(1, 10)  # a restarted broker sees its cameras back within 10 s
        client.on_connect, client.on_disconnect, client.on_publish = self._on_connect, self._on_disconnect, self._on_publish
        self._connect(cfg.keepalive_s)
        self._thread = threading.Thread(target=self._publish_loop, name="mqtt-publish", daemon=True)
        self._thread.start()

    def _tls(self, client: Any, cfg: Any) -> None:
        if bool(cfg.cert_file) != bool(cfg.key_file):
            raise EdgeError("sinks.mqtt: cert_file and key_file go together (a client certificate and its key)")
        for key in ("ca_file", "cert_file", "key_file"):
            path = getattr(cfg, key)
            if path and not os.path.isfile(path):
                raise EdgeError(f"sinks.mqtt.{key} {path}: {missing(path)}")
        try:
            client.tls_set(ca_certs=cfg.ca_file, certfile=cfg.cert_file, keyfile=cfg.key_file)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise EdgeError(
                f"sinks.mqtt: cannot use the TLS files ({short(str(exc))}); ca_file must be PEM certificates, "
                "cert_file/key_file a PEM certificate and its key"
            ) from None

    def _status(self, state: str, timed: bool = True, **extra: Any) -> str:
        when = {"t_wall": round(time.time(), 3)} if timed else {}
        return redact(json.dumps({"state": state, **when, **self._info, **extra}, separators=(",", ":")))

    # -- connection ---------------------------------------------------------
    def _connect(self, keepalive: int) -> None:
        """Connect now and wait for the broker's answer: refused credentials or a failed TLS check are errors before
        the run starts. A broker that is merely not there yet is not: paho's thread keeps trying in the background."""
        c = self.client
        c.connect_timeout = CONNECT_TIMEOUT_S
        start = {"clean_start": True} if self.v5 else {}
        try:
            c.connect(self.url.host, self.url.port, keepalive, **start)
        except ssl.SSLError as exc:
            reason = str(getattr(exc, "reason", None) or exc)
            if reason in ("WRONG_VERSION_NUMBER", "UNEXPECTED_EOF_WHILE_READING", "RECORD_LAYER_FAILURE"):
                raise self._mismatch("does not speak TLS on this port: use mqtt://, or the broker's TLS port") from None
            raise EdgeError(
                f"sinks.mqtt.url {self.url}: TLS with the broker failed ({short(reason)}); "
                "check sinks.mqtt.ca_file (the CA that signed the broker's certificate) and the host name in the URL"
            ) from None
        except (OSError, ValueError) as exc:
            if self.url.tls and isinstance(exc, ConnectionResetError):  # a plain MQTT listener drops a TLS hello
                raise self._mismatch("does not speak TLS on this port: use mqtt://, or the broker's TLS port") from None
            log.warning(
                "mqtt: broker %s not reachable (%s); the run goes on and publishes once it is (up to %d messages wait, the oldest are dropped)",
                self.url,
                short(str(exc) or type(exc).__name__),
                self.capacity,
            )
            c.connect_async(self.url.host, self.url.port, keepalive, **start)
            c.loop_start()
            return
        c.loop_start()
        if not self._connack.wait(CONNECT_TIMEOUT_S):
            if not self.url.tls and _speaks_tls(self.url.host, self.url.port):
                self._stop_client()
                raise self._mismatch("answers like a TLS port: use mqtts:// (and sinks.mqtt.ca_file)")
            log.warning(
                "mqtt: broker %s did not answer within %.0f s; publishing starts when it does", self.url, CONNECT_TIMEOUT_S
            )
        if self._refused is not None:
            self._stop_client()
            if self._refused == "Unsupported protocol version" and self.v5:
                raise EdgeError(
                    f'sinks.mqtt.url {self.url}: the broker does not speak MQTT 5; set sinks.mqtt.protocol: "3.1.1" '
                    "(and sinks.mqtt.max_packet_bytes to its packet limit, which 3.1.1 cannot ask for)"
                )
            raise EdgeError(
                f"sinks.mqtt.url {self.url}: the broker refused the connection: {self._refused}; check the user and "
                "password in the URL and the broker's access rules"
            )

    def _mismatch(self, what: str) -> EdgeError:
        return EdgeError(f"sinks.mqtt.url {self.url}: the broker at {self.url.host}:{self.url.port} {what}")

    def _on_connect(self, client: Any, _userdata: Any, _flags: Any, reason: Any, properties: Any) -> None:
        if reason.is_failure:
            if str(reason) in _PERMANENT and self.connects == 0:
                self._refused = str(reason)
                client.disconnect()  # no retries for an answer that will not change
            else:
                log.warning("mqtt: broker %s refused the connection: %s; retrying", self.url, reason)
            self._connack.set()
            return
        broker = getattr(properties, "MaximumPacketSize", None) if properties is not None else None
        limits = [n for n in (self._configured_limit, broker) if n]
        info = client.publish(self.status_topic, self._status("online"), qos=1, retain=True)
        with self._cond:
            self.packet_limit = min(limits) if limits else None
            self._status_mids.add(info.mid)
            self._connected = True
            self.connects += 1
            self._cond.notify_all()
        log.info("mqtt: connected to %s%s", self.url, " again" if self.connects > 1 else "")
        self._connack.set()

    def _on_disconnect(self, _client: Any, _userdata: Any, _flags: Any, reason: Any, _properties: Any) -> None:
        with self._cond:
            was = self._connected
            self._connected = False
            self._disconnects += 1
            if self.qos == 0:
                # QoS 0 messages paho had not yet written die with the socket (paho marks them lost, no callback).
                self.lost_in_flight += self._in_flight
                self.dropped += self._in_flight
                self._in_flight = 0
            self._cond.notify_all()
        if was and not self._closing:
            log.warning(
                "mqtt: lost the broker %s (%s); reconnecting, up to %d messages wait (the oldest are dropped)",
                self.url,
                reason,
                self.capacity,
            )

    def _on_publish(self, _client: Any, _userdata: Any, mid: int, _reason: Any, _properties: Any) -> None:
        with self._cond:
            if mid in self._status_mids or not self._counting:
                self._status_mids.discard(mid)
                return
            self.published += 1
            self._in_flight = max(0, self._in_flight - 1)
            self._cond.notify_all()

    # -- publishing ---------------------------------------------------------
    def write(self, frame: Frame, result: Result, record: dict, annotated: Optional[np.ndarray]) -> None:
        if self.only_detections and not (result.detections or result.classes or result.segments):
            return
        # redact: two substring tests on a plain record; a URI with a password in any string is masked
        payload = redact(json.dumps(strict_json({**record, "t_wall": round(time.time(), 3)}), separators=(",", ":"))).encode()
        source = record.get("source")
        topic = f"{self.url.prefix}/{source}/results" if source else self.results_topic
        with self._cond:
            if len(self._queue) >= self.capacity:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append((topic, payload))
            self._cond.notify_all()

    def _ready(self) -> bool:
        return self._connected and bool(self._queue) and self._in_flight < MAX_IN_FLIGHT

    def _publish_loop(self) -> None:
        ok = self._mqtt.MQTT_ERR_SUCCESS
        while True:
            with self._cond:
                while not self._closing and not self._ready():
                    self._cond.wait(0.5)
                if self._closing:
                    return  # close() has drained what it could and counts what is left
                message = self._queue.popleft()
                size = packet_size(*message, self.qos, self.v5)
                if self.packet_limit is not None and size > self.packet_limit:
                    self.too_large += 1
                    self.dropped += 1
                    first = self.too_large == 1
                    limit = self.packet_limit
                else:
                    self._in_flight += 1
                    disconnects, first, limit = self._disconnects, False, None
            if limit is not None:
                if first:
                    log.warning(
                        "mqtt: a %d-byte result is over the packet limit of %d bytes (%s); dropped, not sent, and "
                        "so is every later one that large (counted in the summary)",
                        size,
                        limit,
                        "sinks.mqtt.max_packet_bytes" if limit == self._configured_limit else "the broker's",
                    )
                continue
            info = self.client.publish(*message, qos=self.qos)
            if info.rc != ok and self.qos == 0:
                # Not connected after all (raced a disconnect): put it back unless newer ones filled the queue.
                with self._cond:
                    if disconnects != self._disconnects:  # _on_disconnect already counted it lost: take that back
                        self.lost_in_flight -= 1
                        self.dropped -= 1
                    else:
                        self._in_flight -= 1
                    if len(self._queue) < self.capacity:
                        self._queue.appendleft(message)
                    else:
                        self.dropped += 1
            # QoS 1: paho keeps an unsent message and sends it after the reconnect.

    # -- the end ------------------------------------------------------------
    def _stop_client(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def stats(self) -> Dict[str, Any]:
        with self._cond:
            return {
                "url": str(self.url),
                "qos": self.qos,
                "published": self.published,
                # QoS 0: written to the socket, nothing says the broker got it; QoS 1: acknowledged by the broker
                "sent" if self.qos == 0 else "acknowledged": self.published,
                "dropped": self.dropped,
                "too_large": self.too_large,
                "packet_limit": self.packet_limit,
                "protocol": "5" if self.v5 else "3.1.1",
                "lost_in_flight": self.lost_in_flight,
                "queued": len(self._queue),
                "connected": self._connected,
                "connects": self.connects,
            }

    def close(self, failed: bool = False) -> Optional[str]:
        deadline = time.monotonic() + DRAIN_S
        with self._cond:
            # Let what is queued go out while the broker is there, for at most DRAIN_S.
            while (self._queue or self._in_flight) and self._connected and time.monotonic() < deadline:
                self._cond.wait(0.1)
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout=2.0)
        with self._cond:
            unsent = len(self._queue) + self._in_flight
            self.dropped += unsent
            self._queue.clear()
            self._in_flight = 0
            self._counting = False
            connected = self._connected
        if connected:
            # A clean stop says so itself; the last will is only for a connection that dies.
            info = self.client.publish(self.status_topic, self._status("offline", reason="stopped"), qos=1, retain=True)
            try:
                info.wait_for_publish(timeout=1.0)
            except RuntimeError:  # the broker went away in the meantime: its last will says offline anyway
                pass
        self._stop_client()
        how = "sent (QoS 0: no delivery receipt)" if self.qos == 0 else "acknowledged by the broker (QoS 1)"
        note = f"mqtt: {self.published} messages {how} -> {self.url} ({self.results_topic})"
        if self.too_large:
            note += f"; {self.too_large} over the {self.packet_limit}-byte packet limit, dropped before sending"
        if self.dropped - self.too_large:
            note += f"; {self.dropped - self.too_large} dropped while the broker was away or slow"
        return note


def packet_size(topic: str, payload: bytes, qos: int, v5: bool) -> int:
    """Bytes of the PUBLISH packet for ``payload`` on ``topic`` (MQTT 3.1.1 section 3.3, MQTT 5 section 3.3):
    fixed header with its variable-length remaining length, topic, packet id above QoS 0, an empty property list in 5."""
    remaining = 2 + len(topic.encode("utf-8")) + (2 if qos else 0) + (1 if v5 else 0) + len(payload)
    length_bytes = 1 if remaining < 128 else 2 if remaining < 16_384 else 3 if remaining < 2_097_152 else 4
    return 1 + length_bytes + remaining


def _speaks_tls(host: str, port: int) -> bool:
    """True when the port treats an MQTT CONNECT sent in clear as a TLS listener does: it resets the connection
    (mosquitto, OpenSSL) or answers with a TLS alert record (content type 21). A broker answers with a CONNACK; a
    port that closes quietly or says nothing within 2 s may be a busy broker, and is left to the reconnects."""
    connect = bytes([0x10, 12, 0, 4]) + b"MQTT" + bytes([4, 2, 0, 5, 0, 0])  # CONNECT, 3.1.1, clean, empty client id
    try:
        with socket.create_connection((host, port), timeout=2.0) as s:
            s.sendall(connect)
            first = s.recv(1)
    except ConnectionResetError:
        return True
    except OSError:
        return False
    return first[:1] == b"\x15"
