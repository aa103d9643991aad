"""Credentials never leave the process: every URI form the hostile review found, and generated ones."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.redact import RedactingFormatter, redact, redact_data


@pytest.mark.parametrize(
    "text, secret, kept",
    [
        ("rtsp://admin:s3cret@10.0.0.2/stream", "s3cret", "rtsp://admin:***@10.0.0.2/stream"),
        ("RTSP://admin:s3cret@cam/x", "s3cret", "RTSP://admin:***@cam/x"),  # any scheme case
        ("rtsp://admin:p@ss@host/x", "ss@host/x" and "p@ss", "rtsp://admin:***@host/x"),  # '@' in the password
        ("mqtts://user:pw@broker:8883/edge", "pw@", "mqtts://user:***@broker:8883/edge"),
        ("https://TOKEN123@github.com/x", "TOKEN123", "https://***@github.com/x"),
        ("http://cam/snap.jpg?user=a&password=hunter2&x=1", "hunter2", "password=***&x=1"),
        ("http://cam/live?token=abc.def", "abc.def", "token=***"),
        ("source 'rtsp://u:v@h/x': cannot be opened", "u:v", "rtsp://u:***@h/x"),
        # a URI passed where a path goes: pathlib keeps one slash, and may put a folder in front
        ("calibration images 'rtsp:/admin:s3cret@cam/stream': not a folder", "s3cret", "rtsp:/admin:***@cam/stream"),
        ("file not found: /tmp/cfg/mqtt:/admin:s3cret@host/m.onnx", "s3cret", "/tmp/cfg/mqtt:/admin:***@host/m.onnx"),
    ],
)
def test_known_forms(text, secret, kept):
    out = redact(text)
    assert secret not in out and kept in out


def test_text_without_credentials_is_unchanged():
    for text in ("rtsp://10.0.0.2:554/stream", "model.onnx", "a=b", "user@example.com wrote", "x @ y"):
        assert redact(text) == text


_password = st.text(
    alphabet=st.characters(blacklist_characters="/?#\"'<> \t\r\n\x0b\x0c", blacklist_categories=("Cs",)), min_size=3, max_size=20
)


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["rtsp", "RTSP", "Rtsps", "http", "HTTPS", "mqtt", "mqtts", "ws"]),
    user=st.from_regex(r"[A-Za-z0-9_.-]{1,8}", fullmatch=True),
    password=_password.filter(lambda p: "***" not in p),
    host=st.from_regex(r"[a-z0-9][a-z0-9.-]{0,10}", fullmatch=True),
)
def test_generated_passwords_never_survive(scheme, user, password, host):
    uri = f"{scheme}://{user}:{password}@{host}/path"
    for text in (uri, str(Path(uri)), str(Path("/srv/configs") / uri)):  # as given, and as a path prints it
        out = redact(f"error: source '{text}' failed")
        assert f":{password}@" not in out and "***@" + host in out


def test_summaries_and_log_lines_are_redacted():
    data = {"source": {"uri": "rtsp://a:b@c/d"}, "list": ["mqtt://x:y@z"], "n": 1}
    assert redact_data(data) == {"source": {"uri": "rtsp://a:***@c/d"}, "list": ["mqtt://x:***@z"], "n": 1}
    record = logging.LogRecord("edge", logging.WARNING, __file__, 1, "reconnect %s", ("rtsp://a:secret@c/d",), None)
    assert "secret" not in RedactingFormatter("%(message)s").format(record)


def test_the_cli_keeps_one_redacting_handler_and_leaves_the_others(capsys):
    import logging

    from edge.errors import drop_log_handler, setup_logging

    root = logging.getLogger()
    level, foreign = root.level, logging.NullHandler()
    root.addHandler(foreign)
    try:
        setup_logging("edge")
        setup_logging("edge", "warning")  # a second CLI call in one process: still one line per record
        ours = [h for h in root.handlers if getattr(h, "_edge", False)]
        assert len(ours) == 1 and root.level == logging.WARNING
        logging.getLogger("edge.test").warning("to rtsp://user:secret@cam/1")
        err = capsys.readouterr().err
        assert err.count("edge: WARNING edge.test: to rtsp://") == 1 and "secret" not in err
        drop_log_handler()
        assert not any(getattr(h, "_edge", False) for h in root.handlers) and foreign in root.handlers
    finally:
        root.removeHandler(foreign)
        root.setLevel(level)
        drop_log_handler()
