"""The TensorRT calibration-cache format: header tag, hex float32 scales, byte-exact round trip, mismatch reports."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    [(b"hello\n", "first line"), (b"TRT-8502-EntropyCalibration2\nx: zz\n", "line 2"), (b"\xff\xfe", "not text")],
)
def test_damaged_caches_are_reported(data, message):
    with pytest.raises(EdgeError, match=message):
        CalibrationCache.from_bytes(data)


def test_unpadded_hex_as_nvidia_tao_writes_it():
    """TAO writes hex(struct.unpack("i", struct.pack("f", scale))[0])[2:] (nvidia_tao_deploy/engine/builder.py,
    calibration_cache_from_dict): no leading zeros. 0x00800000 is the smallest normal float32, 2**-126."""
    cache = CalibrationCache.from_bytes(b"TRT-8502-EntropyCalibration2\ntiny: 800000\ninput_1: 3c010204\n")
    assert cache.scales["tiny"] == 2.0**-126
    assert cache.scales["input_1"] == struct.unpack(">f", bytes.fromhex("3c010204"))[0]


@pytest.mark.parametrize(
    "bits, what",
    [("0", "0.0"), ("00000000", "0.0"), ("80000000", "-0.0"), ("bf800000", "-1.0"), ("7f800000", "inf"), ("7fc00000", "nan")],
)
def test_non_positive_and_non_finite_scales_are_refused_naming_the_tensor(bits, what):
    with pytest.raises(EdgeError, match=rf"line 3: tensor 'conv1' has scale {what} \({bits}\); a scale must be positive") as e:
        CalibrationCache.from_bytes(f"TRT-8502-EntropyCalibration2\ninput: 3c010204\nconv1: {bits}\n".encode())
    assert "\n" not in str(e.value)


def test_the_writer_never_writes_a_scale_that_is_not_positive_and_finite(tmp_path):
    cache = CalibrationCache(8602, "EntropyCalibration2", {"x": 0.5, "pad": 0.0, "neg": -1.0, "nan": float("nan"), "big": 1e39})
    assert cache.unwritable() == ["pad", "neg", "nan", "big"]  # 1e39 overflows float32
    write_cache(tmp_path / "m.cache", cache)
    assert (tmp_path / "m.cache").read_text() == "TRT-8602-EntropyCalibration2\nx: 3f000000\n"
    assert read_cache(tmp_path / "m.cache").scales == {"x": 0.5}


@given(st.floats(min_value=2.0**-126, max_value=2.0**127, allow_nan=False, width=32))
def test_positive_float32_scales_round_trip_exactly(scale):
    cache = CalibrationCache(100300, "EntropyCalibration2", {"t": scale})
    assert CalibrationCache.from_bytes(cache.to_bytes()).scales == {"t": scale}


@given(st.binary(max_size=200) | st.text(max_size=200).map(lambda t: ("TRT-8502-EntropyCalibration2\n" + t).encode("utf-8")))
@settings(max_examples=300, deadline=None)
def test_any_bytes_are_a_cache_or_one_line_error(data):
    try:
        cache = CalibrationCache.from_bytes(data)
    except EdgeError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400
    else:
        assert all(s > 0 and s == s and s != float("inf") for s in cache.scales.values())


def test_non_ascii_tensor_names_round_trip_as_utf8(tmp_path):
    """ONNX names are UTF-8 and TensorRT keeps them byte for byte; a name with a line break cannot be one line."""
    cache = CalibrationCache(8502, "EntropyCalibration2", {"conv_é/输出": 0.5, "bad\nname": 0.5})
    assert cache.unwritable() == ["bad\nname"]
    write_cache(tmp_path / "c.cache", cache)
    back = read_cache(tmp_path / "c.cache")
    assert back.scales == {"conv_é/输出": 0.5}
    assert "conv_é/输出: 3f000000".encode() in (tmp_path / "c.cache").read_bytes()
