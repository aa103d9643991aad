"""The TensorRT calibration-cache format: header tag, hex float32 scales, byte-exact round trip, mismatch reports."""

from __future__ import annotations

import struct

import pytest

from edge.calib.cache import CalibrationCache, read_cache, version_tag, write_cache
from edge.errors import EdgeError


@pytest.mark.parametrize("version, tag", [("8.5.2", 8502), ("8.6.1.6", 8601), ("7.2.2", 7202), ("10.3.0", 100300)])
def test_version_tags(version, tag):
    assert version_tag(version) == tag


def test_round_trip_is_byte_exact_and_scales_are_big_endian_float_bits(tmp_path):
    text = b"TRT-8502-EntropyCalibration2\ninput:0: 3c010204\n(Unnamed Layer* 4) [Convolution]_output: 3d8f5c29\n"
    cache = CalibrationCache.from_bytes(text)
    assert cache.trt_version == 8502 and cache.algorithm == "EntropyCalibration2"
    assert cache.scales["input:0"] == struct.unpack(">f", bytes.fromhex("3c010204"))[0]
    assert "(Unnamed Layer* 4) [Convolution]_output" in cache.scales
    write_cache(tmp_path / "m.cache", cache)
    assert (tmp_path / "m.cache").read_bytes() == text
    assert read_cache(tmp_path / "m.cache").scales == cache.scales


def test_problems_name_version_algorithm_and_missing_tensors():
    cache = CalibrationCache(8502, "EntropyCalibration2", {"a": 0.1})
    problems = cache.problems("10.3.0", "MinMaxCalibration", ["a", "b", "c"])
    assert "tag 8502" in problems[0] and "100300" in problems[0]
    assert "MinMaxCalibration" in problems[1]
    assert "2 network tensors have no scale (b, c)" in problems[2]
    assert cache.problems("8.5.2", "EntropyCalibration2", ["a"]) == []


@pytest.mark.parametrize(
    "data, message",
    [(b"hello\n", "first line"), (b"TRT-8502-EntropyCalibration2\nx: zz\n", "line 2"), (b"\xff\xfe", "not ASCII")],
)
def test_damaged_caches_are_reported(data, message):
    with pytest.raises(EdgeError, match=message):
        CalibrationCache.from_bytes(data)
