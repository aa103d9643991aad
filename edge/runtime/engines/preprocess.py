"""The one definition of preprocessing: frame (uint8 BGR, HxWx3) to network input.

Calibration, the ONNX Runtime backend, the TensorRT backend and the CUDA kernel's reference test all use
``Preprocessor``. The resize keeps a ``Transform`` so boxes found in network-input pixels map back to frame pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge.errors import ConfigError

_DTYPES = {"float32": np.float32, "float16": np.float16, "uint8": np.uint8}


@dataclass(frozen=True)
class PreprocessSpec:
    width: int
    height: int
    color: str = "rgb"  # the network's channel order
    layout: str = "nchw"
    dtype: str = "float32"
    resize: str = "letterbox"
    pad_value: int = 0
    scale: float = 1.0 / 255.0
    offset: float = 0.0
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    std: tuple[float, ...] = (1.0, 1.0, 1.0)

    def __post_init__(self) -> None:
        for key, allowed in (("color", ("rgb", "bgr")), ("layout", ("nchw", "nhwc")), ("resize", ("letterbox", "stretch"))):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"preprocess {key} {getattr(self, key)!r}: expected one of {', '.join(allowed)}")
        if self.dtype not in _DTYPES:
            raise ConfigError(f"preprocess dtype {self.dtype!r}: expected one of {', '.join(_DTYPES)}")

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        if self.layout == "nchw":
            return (1, 3, self.height, self.width)
        return (1, self.height, self.width, 3)

    def channel_affine(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-channel (a, b) with out = pixel * a + b, the same normalisation folded into one multiply-add."""
        mean = np.broadcast_to(np.asarray(self.mean, np.float64), (3,))
        std = np.broadcast_to(np.asarray(self.std, np.float64), (3,))
        a = self.scale / std
        b = (self.offset - mean) / std
        return a.astype(np.float32), b.astype(np.float32)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["mean"], d["std"] = list(self.mean), list(self.std)
        return d


@dataclass(frozen=True)
class Transform:
    """Maps network-input pixels to frame pixels: frame = (input - pad) / scale."""

    scale_x: float
    scale_y: float
    pad_x: float
    pad_y: float
    frame_width: int
    frame_height: int

    def to_frame(self, xy: np.ndarray) -> np.ndarray:
        """Points or boxes (..., 2k) in input pixels as x,y pairs, to frame pixels, clipped to the frame."""
        pts = _pairs(xy)
        out = np.empty_like(pts)
        out[..., 0] = np.clip((pts[..., 0] - self.pad_x) / self.scale_x, 0, self.frame_width)
        out[..., 1] = np.clip((pts[..., 1] - self.pad_y) / self.scale_y, 0, self.frame_height)
        return out.reshape(np.shape(xy))

    def to_input(self, xy: np.ndarray) -> np.ndarray:
        """The inverse of ``to_frame`` (without clipping)."""
        pts = _pairs(xy)
        out = np.empty_like(pts)
        out[..., 0] = pts[..., 0] * self.scale_x + self.pad_x
        out[..., 1] = pts[..., 1] * self.scale_y + self.pad_y
        return out.reshape(np.shape(xy))


def _pairs(xy: np.ndarray) -> np.ndarray:
    """(..., 2k) values as (..., k, 2) x,y pairs; an empty batch (no boxes in a frame) stays empty."""
    shape = np.shape(xy)
    if not shape or shape[-1] % 2:
        raise ValueError(f"points need an even last axis (x, y pairs), got shape {shape}")
    return np.asarray(xy, np.float32).reshape(*shape[:-1], shape[-1] // 2, 2)


def plan_resize(spec: PreprocessSpec, frame_w: int, frame_h: int) -> tuple[int, int, Transform]:
    """The resized image size and where it sits in the input: the geometry shared with the CUDA kernel."""
    if spec.resize == "stretch":
        return spec.width, spec.height, Transform(spec.width / frame_w, spec.height / frame_h, 0.0, 0.0, frame_w, frame_h)
    r = min(spec.width / frame_w, spec.height / frame_h)
    new_w = max(1, min(spec.width, round(frame_w * r)))
    new_h = max(1, min(spec.height, round(frame_h * r)))
    pad_x = (spec.width - new_w) // 2
    pad_y = (spec.height - new_h) // 2
    # The effective scale per axis is the one the integer resize really applied.
    return new_w, new_h, Transform(new_w / frame_w, new_h / frame_h, float(pad_x), float(pad_y), frame_w, frame_h)


class Preprocessor:
    """Callable: BGR uint8 frame -> (input tensor with a batch axis, Transform)."""

    def __init__(self, spec: PreprocessSpec) -> None:
        import cv2  # noqa: F401  (fail here, at setup, if OpenCV is missing)

        self.spec = spec
        self._a, self._b = spec.channel_affine()
        self._identity_norm = bool(np.all(self._a == 1.0) and np.all(self._b == 0.0))

    def __call__(self, frame: np.ndarray) -> tuple[np.ndarray, Transform]:
        import cv2

        spec = self.spec
        h, w = frame.shape[:2]
        new_w, new_h, tf = plan_resize(spec, w, h)
        resized = frame if (new_w, new_h) == (w, h) else cv2.resize(frame, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
        if (new_w, new_h) == (spec.width, spec.height):
            canvas = resized
        else:
            canvas = np.full((spec.height, spec.width, 3), spec.pad_value, np.uint8)
            x0, y0 = int(tf.pad_x), int(tf.pad_y)
            canvas[y0 : y0 + new_h, x0 : x0 + new_w] = resized
        if spec.color == "rgb":
            canvas = cv2.cvtColor(canvas, cv2.COLOR_BGR2RGB)
        if spec.dtype == "uint8":
            out = np.ascontiguousarray(canvas)
        else:
            out = canvas.astype(np.float32)
            if not self._identity_norm:
                out *= self._a
                out += self._b
            out = out.astype(_DTYPES[spec.dtype], copy=False)
        if spec.layout == "nchw":
            out = np.ascontiguousarray(out.transpose(2, 0, 1))
        return out[None], tf
