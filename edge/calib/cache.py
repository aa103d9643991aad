"""TensorRT INT8 calibration caches: the plain-text file TensorRT's calibrators read and write.

    TRT-8502-EntropyCalibration2
    input:0: 3c010204
    conv1_output: 3d8f5c29

Line 1 names the TensorRT version as an integer (8.5.2 -> 8502, 8.6.2 -> 8602, 10.3.0 -> 100300) and the algorithm.
Every other line is a tensor name, a colon, a space and the IEEE-754 float32 bits of its scale (amax / 127) in hex.
TensorRT writes 8 digits; NVIDIA's TAO writes them without leading zeros (``hex(...)[2:]`` in
https://github.com/NVIDIA/tao_deploy/blob/main/nvidia_tao_deploy/engine/builder.py, calibration_cache_from_dict),
and TensorRT reads both, so edge reads 1 to 8 digits and writes 8. A scale is a positive, finite number: the reader
refuses NaN, infinity, zero and negative values (one line naming the tensor), and the writer leaves out a tensor
without a positive finite scale (an all-zero constant, such as an integer pad, has none): TensorRT then runs the
layers touching it in higher precision instead of with a range of zero.

TensorRT skips a cache whose header does not match it without a word and calibrates again, so edge checks the
header and the tensor names itself and says what is wrong.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from edge.config import short
from edge.errors import EdgeError
from edge.outputs import write_atomic

ALGORITHMS = ("EntropyCalibration2", "EntropyCalibration", "MinMaxCalibration", "LegacyCalibration")
MAX_CACHE_BYTES = 64 << 20  # one line per tensor: a large detector's cache is tens of kB
_HEADER = re.compile(r"^TRT-(\d+)-(\w+)$")


def version_tag(version: str) -> int:
    """'8.5.2' -> 8502, '8.6.1' -> 8601, '10.3.0' -> 100300: TensorRT's integer form (major >= 10 uses two digits each)."""
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]]
    major, minor, patch = (parts + [0, 0, 0])[:3]
    if major >= 10:
        return major * 10000 + minor * 100 + patch
    return major * 1000 + minor * 100 + patch


def scale_to_hex(scale: float) -> str:
    return struct.pack(">f", scale).hex()


def hex_to_scale(text: str) -> float:
    """1 to 8 hex digits (leading zeros optional) -> the float32 with those bits."""
    return struct.unpack(">f", struct.pack(">I", int(text, 16)))[0]


# The smallest normal float32. A scale below it (a denormal, such as the bits 00000001) is a range of practically
# zero: the tensor it belongs to is better kept in higher precision, as for a zero scale.
MIN_SCALE = 1.1754943508222875e-38


def writable(scale: float) -> bool:
    """Whether a scale can go in a cache: positive, normal and finite (as a float32)."""
    if not (math.isfinite(scale) and scale >= MIN_SCALE):
        return False
    try:
        return math.isfinite(struct.unpack(">f", struct.pack(">f", scale))[0])
    except OverflowError:  # beyond float32
        return False


def _fits(name: str, scale: float) -> bool:
    return writable(scale) and "\n" not in name and "\r" not in name


@dataclass
class CalibrationCache:
    trt_version: int  # the integer tag of the header
    algorithm: str
    scales: Dict[str, float] = field(default_factory=dict)  # tensor name -> scale (amax / 127)

    @property
    def header(self) -> str:
        return f"TRT-{self.trt_version}-{self.algorithm}"

    def unwritable(self) -> List[str]:
        """Tensors a cache cannot hold: a scale that is not positive and finite, or a name with a line break in it
        (the format is one line per tensor). ``to_bytes`` leaves them out."""
        return [name for name, s in self.scales.items() if not _fits(name, s)]

    def to_bytes(self) -> bytes:
        # Names are TensorRT's tensor names, which come from the ONNX file as UTF-8; TensorRT's own caches carry
        # them byte for byte, so non-ASCII names are written as UTF-8 too.
        lines = [self.header] + [f"{name}: {scale_to_hex(s)}" for name, s in self.scales.items() if _fits(name, s)]
        return ("\n".join(lines) + "\n").encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, origin: str = "calibration cache") -> CalibrationCache:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise EdgeError(f"{origin}: not a TensorRT calibration cache (not text)") from None
        lines = [line for line in text.splitlines() if line.strip()]
        m = _HEADER.match(lines[0].strip()) if lines else None
        if m is None:
            raise EdgeError(
                f"{origin}: first line should be TRT-<version>-<Algorithm> (e.g. TRT-8502-EntropyCalibration2), got "
                f"{short(lines[0], 60) if lines else 'an empty file'}"
            )
        cache = cls(int(m.group(1)), m.group(2))
        for n, line in enumerate(lines[1:], start=2):
            # Names may contain colons; the scale is what follows the last ': '.
            name, sep, hexbits = line.rpartition(": ")
            hexbits = hexbits.strip()
            if not sep or not re.fullmatch(r"[0-9a-fA-F]{1,8}", hexbits):
                raise EdgeError(f"{origin}: line {n} should be '<tensor name>: <hex float32 bits>', got {short(line, 80)}")
            scale = hex_to_scale(hexbits)
            if not writable(scale):
                raise EdgeError(
                    f"{origin}: line {n}: tensor {short(name, 80)} has scale {scale} ({hexbits}); a scale must be positive and "
                    "finite (and not denormal): recalibrate, or delete the line (TensorRT then keeps that tensor in higher precision)"
                )
            cache.scales[name] = scale
        return cache

    def problems(
        self, trt_version: Optional[str] = None, algorithm: Optional[str] = None, tensors: Iterable[str] = ()
    ) -> List[str]:
        """Why this cache does not fit a build: another TensorRT, another algorithm, tensors it lacks."""
        out = []
        if trt_version is not None and version_tag(trt_version) != self.trt_version:
            out.append(
                f"it was written by TensorRT tag {self.trt_version}, this is {trt_version} (tag {version_tag(trt_version)}); TensorRT would ignore it"
            )
        if algorithm is not None and algorithm != self.algorithm:
            out.append(f"it holds {self.algorithm} scales, the build asks for {algorithm}")
        missing = [t for t in tensors if t not in self.scales]
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            out.append(f"{len(missing)} network tensors have no scale ({', '.join(missing[:3])}{more})")
        return out


def read_cache(path: str | Path) -> CalibrationCache:
    from edge.inputs import read_small

    p = Path(path)
    data = read_small(p, MAX_CACHE_BYTES, "calibration cache", "write it again with `edge calib`")
    return CalibrationCache.from_bytes(data, origin=f"calibration cache '{p}'")


def write_cache(path: str | Path, cache: CalibrationCache) -> None:
    """Through the atomic-write path, so a failed write never replaces a good cache."""
    write_atomic(path, cache.to_bytes())
