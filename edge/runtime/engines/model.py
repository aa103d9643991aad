"""Where the model file of a run config is, and the preprocessing spec it implies."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from edge.config import MAX_INPUT_SIDE
from edge.errors import ConfigError
from edge.metadata import TRAINED_SIZE, ModelMetadata
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.preprocess import PreprocessSpec

ULTRALYTICS_PAD = 114  # the grey Ultralytics letterboxes with, in training and in predict


def model_path(cfg: Any) -> Path:
    """The ONNX file: model.path (relative to the config) or the cached model.asset."""
    if cfg.model.asset:
        from edge import assets

        return assets.resolve(cfg.model.asset)
    if cfg.model.path:
        return cfg.resolve_path(cfg.model.path)
    raise ConfigError(
        "key 'model': the onnxruntime backend needs model.path or model.asset (model.engine is for the TensorRT backend)"
    )


def engine_path(cfg: Any) -> Path:
    """The TensorRT engine: model.engine, relative to the config."""
    if not cfg.model.engine:
        raise ConfigError("key 'model.engine': the tensorrt backend needs an engine file: set model.engine to MODEL.engine")
    return cfg.resolve_path(cfg.model.engine)


def pick_input(cfg: Any, inputs: list[TensorInfo]) -> TensorInfo:
    if cfg.input.name:
        for t in inputs:
            if t.name == cfg.input.name:
                return t
        raise ConfigError(
            f"key 'input.name': the model has no input {cfg.input.name!r}; its inputs: {', '.join(t.name for t in inputs)}"
        )
    if len(inputs) != 1:
        raise ConfigError(
            f"key 'input.name': the model has {len(inputs)} inputs ({', '.join(t.name for t in inputs)}); name the image input"
        )
    return inputs[0]


def preprocess_spec(cfg: Any, tensor: TensorInfo, meta: Optional[ModelMetadata] = None) -> PreprocessSpec:
    """Fill the config's 'auto' input keys (layout, size, dtype, padding) from the model's input tensor and, for an
    Ultralytics export, its metadata (imgsz for a dynamic input, pad 114)."""
    i = cfg.input
    ultralytics = meta is not None and meta.ultralytics
    shape = tensor.shape
    write = f"edge dla MODEL --shape {tensor.name}=1x3xHxW --fix OUT.onnx"
    if len(shape) != 4:
        # ONNX Runtime shows an input declared without any shape as [] too
        fix = f"; if the file declares no shape, write one: {write}" if not shape else ""
        raise ConfigError(f"model input {tensor.name!r} has shape {list(shape)}; an image input must be 4-D (NCHW or NHWC){fix}")
    if 0 in shape:  # some exporters write 0 for an unknown size; ONNX Runtime takes it for an empty axis
        raise ConfigError(
            f"model input {tensor.name!r} has shape {list(shape)}: a dimension of 0 holds no image; write the size: {write}"
        )
    layout = i.layout
    if layout == "auto":
        if shape[1] == 3:
            layout = "nchw"
        elif shape[3] == 3:
            layout = "nhwc"
        else:
            raise ConfigError(
                f"key 'input.layout': cannot tell NCHW from NHWC for input {tensor.name!r} {list(shape)}; set nchw or nhwc"
            )
    channels = shape[1] if layout == "nchw" else shape[3]
    # a named layout whose channel count is no image's while the other end holds 3 (auto found 3 where it looked)
    if isinstance(channels, int) and channels not in (1, 3, 4) and (shape[3] if layout == "nchw" else shape[1]) == 3:
        other = "nhwc" if layout == "nchw" else "nchw"
        raise ConfigError(
            f"key 'input.layout': {layout} but the model input {tensor.name!r} is {list(shape)}, which is {other.upper()}"
        )
    h_dim, w_dim = (shape[2], shape[3]) if layout == "nchw" else (shape[1], shape[2])
    if i.size:
        width, height = i.size
        for have, want, key in ((w_dim, width, "width"), (h_dim, height, "height")):
            if isinstance(have, int) and have > 0 and have != want:
                raise ConfigError(f"key 'input.size': {key} {want} but the model input {tensor.name!r} is {list(shape)}")
    elif isinstance(w_dim, int) and isinstance(h_dim, int) and w_dim > 0 and h_dim > 0:
        width, height = w_dim, h_dim
        if max(width, height) > MAX_INPUT_SIDE:  # what input.size allows: one such frame is gigabytes
            raise ConfigError(
                f"model input {tensor.name!r} is {list(shape)}: more than {MAX_INPUT_SIDE} pixels a side; "
                "export the model with the input size it runs at"
            )
    elif ultralytics and meta.imgsz is not None:
        height, width = meta.imgsz
    else:
        raise ConfigError(
            f"key 'input.size': the model input {tensor.name!r} has dynamic size {list(shape)}; set input.size: "
            f"[width, height], e.g. [{TRAINED_SIZE}, {TRAINED_SIZE}] (the size it was trained at)"
        )
    dtype = i.dtype
    if dtype == "auto":
        dtype = {"float16": "float16", "uint8": "uint8"}.get(tensor.dtype.name, "float32")
    return PreprocessSpec(
        width=width,
        height=height,
        color=i.color,
        layout=layout,
        dtype=dtype,
        resize=i.resize,
        pad_value=i.pad_value if i.pad_value is not None else (ULTRALYTICS_PAD if ultralytics else 0),
        scale=i.scale,
        offset=i.offset,
        mean=tuple(i.mean),
        std=tuple(i.std),
    )
