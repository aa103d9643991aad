"""Credentials never reach a log line, an error, a summary or a report.

Camera URIs carry passwords (``rtsp://admin:pw@cam/…``), MQTT and HTTP URLs carry users and tokens. ``redact`` is
applied where text leaves the process: the CLI guard's error line, every log record, summaries and reports.
"""

from __future__ import annotations

import logging
import re
from typing import Any

# scheme://userinfo@  -- any scheme and case; the userinfo runs to the last '@' before the host, so an '@' inside
# the password does not leak its tail. Authority ends at '/', '?', '#', whitespace or a quote. One slash is enough:
# a URI given where a path is expected comes back from pathlib as "rtsp:/user:pw@host/...".
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*:/{1,2})([^/?#\ \t\r\n\"'<>]*)@")
# query or fragment parameters that are secrets by name: ?token=…&password=…
_QUERY_SECRET = re.compile(
    r"(?i)([?&;#](?:access_token|auth|authorization|api_?key|key|password|passwd|pass|pwd|secret|sig|signature|token)=)"
    r"[^&#\s\"'<>]*"
)
MASK = "***"


def _userinfo(m: re.Match[str]) -> str:
    info = m.group(2)
    user = info.split(":", 1)[0] if ":" in info else ""
    return f"{m.group(1)}{user + ':' if user else ''}{MASK}@"


def redact(text: Any) -> str:
    """``text`` with URI passwords, bare-token userinfo and secret query parameters masked."""
    s = str(text)
    if "@" in s:
        s = _USERINFO.sub(_userinfo, s)
    if "=" in s:
        s = _QUERY_SECRET.sub(lambda m: m.group(1) + MASK, s)
    return s


def redact_data(value: Any) -> Any:
    """A JSON-like structure with every string redacted (summaries, manifests, reports)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_data(v) for v in value]
    return value


class RedactingFormatter(logging.Formatter):
    """A log formatter that redacts the finished line, arguments and tracebacks included, and escapes the control
    characters of the message (file names, topics and request lines from outside), so a record is one line that
    cannot drive the terminal; a traceback keeps its own lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        from edge.errors import printable

        record.message = printable(record.message)
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
