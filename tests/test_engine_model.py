"""What a run takes from the model's input tensor: which input, its layout, size, dtype and padding
(edge/runtime/engines/model.py), and the refusals when the config and the model disagree."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from edge.config import load_config
from edge.errors import ConfigError
from edge.metadata import read
from edge.runtime.engines import TensorInfo
from edge.runtime.engines.model import engine_path, model_path, pick_input, preprocess_spec
from tests.conftest import require_or_skip

F32 = np.dtype(np.float32)


def cfg(*sets: str):
    return load_config(None, ["model.asset=blazeface-back-256", *sets])


def spec(shape, *sets, dtype=F32, meta=None):
    return preprocess_spec(cfg(*sets), TensorInfo("images", tuple(shape), dtype), meta)


def refused(shape, *sets, meta=None) -> str:
    with pytest.raises(ConfigError) as e:
        spec(shape, *sets, meta=meta)
    return str(e.value)


def letterbox_grey() -> int:
    """The default ``padding_value`` of Ultralytics' LetterBox, read from its source (importing it needs torchvision,
    which the tests leave out)."""
    found = importlib.util.find_spec("ultralytics")
    require_or_skip(found is not None, "ultralytics not installed: 'pip install --no-deps ultralytics==8.4.190' (test-only)")
    tree = ast.parse((Path(found.origin).parent / "data" / "augment.py").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LetterBox"]
    (init,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    args = init.args.args[-len(init.args.defaults) :]
    return next(ast.literal_eval(d) for a, d in zip(args, init.args.defaults) if a.arg == "padding_value")


def test_the_layout_and_size_come_from_the_input_tensor():
    # MediaPipe's BlazeFace (back camera) takes [1, 256, 256, 3]; a YOLO export [1, 3, 640, 640]
    s = spec((1, 256, 256, 3))
    assert (s.layout, s.width, s.height, s.dtype, s.pad_value) == ("nhwc", 256, 256, "float32", 0)
    s = spec((1, 3, 480, 640))  # height before width in NCHW
    assert (s.layout, s.width, s.height) == ("nchw", 640, 480)
    s = spec((1, 192, 320, 3))  # and in NHWC
    assert (s.layout, s.width, s.height) == ("nhwc", 320, 192)
    s = spec((1, 3, 1, 64))  # one row or one column of pixels is still a size
    assert (s.width, s.height) == (64, 1)
    s = spec((1, 3, 64, 1))
    assert (s.width, s.height) == (1, 64)
    s = spec((1, 3, 8, 8), "input.scale=0.5", "input.offset=-1", "input.resize=stretch", "input.color=bgr")
    assert (s.scale, s.offset, s.resize, s.color) == (0.5, -1.0, "stretch", "bgr")
    s = spec((1, 1, 28, 28), "input.layout=nchw", "input.mean=[0]", "input.std=[1]")  # a grey input, named
    assert (s.layout, s.width, s.height, s.mean, s.std) == ("nchw", 28, 28, (0.0,), (1.0,))


def test_an_ultralytics_export_pads_with_its_own_grey_and_sizes_a_dynamic_input_from_imgsz():
    grey = letterbox_grey()  # what Ultralytics pads with
    meta = read("m.onnx", {"names": "{0: 'person'}", "imgsz": "[480, 640]"})  # (height, width), as Ultralytics writes
    s = spec((1, 3, "height", "width"), meta=meta)
    assert (s.width, s.height, s.pad_value) == (640, 480, grey)
    assert spec((1, 3, 480, 640), "input.pad_value=0", meta=meta).pad_value == 0  # the config still decides
    assert spec((1, 3, 480, 640)).pad_value == 0  # not an Ultralytics file: black


def test_input_size_fills_a_dynamic_input_and_must_match_a_static_one():
    s = spec((1, 3, "h", "w"), "input.size=[320, 192]")
    assert (s.width, s.height) == (320, 192)
    s = spec((1, 3, 192, "w"), "input.size=[320, 192]")  # one side static and equal
    assert (s.width, s.height) == (320, 192)
    said = refused((1, 3, 192, 320), "input.size=[320, 320]")
    assert said == "key 'input.size': height 320 but the model input 'images' is [1, 3, 192, 320]"
    said = refused((1, 3, 192, 320), "input.size=[192, 192]")
    assert said == "key 'input.size': width 192 but the model input 'images' is [1, 3, 192, 320]"
    said = refused((1, 3, 1, 64), "input.size=[64, 2]")
    assert said == "key 'input.size': height 2 but the model input 'images' is [1, 3, 1, 64]"
    # a TensorRT engine shows a dynamic side as -1, ONNX Runtime as a name: either way input.size must say it
    for dynamic in ((1, 3, -1, -1), (1, 3, "h", 640), (1, 3, 480, -1)):
        assert refused(dynamic).startswith("key 'input.size': the model input 'images' has dynamic size ")
    said = refused((1, 3, "h", "w"))
    assert said == (
        "key 'input.size': the model input 'images' has dynamic size [1, 3, 'h', 'w']; set input.size: [width, height], "
        "e.g. [640, 640] (the size it was trained at)"
    )


def test_a_model_larger_than_a_frame_may_be_is_refused():
    assert spec((1, 3, 16384, 8)).height == 16384  # the config's own limit a side (docs/robustness.md)
    said = refused((1, 3, 16385, 8))
    assert said.startswith("model input 'images' is [1, 3, 16385, 8]: more than 16384 pixels a side; export the model")


def test_the_layout_refusals_name_the_input_and_what_to_set():
    said = refused((1, 4, 4, 4))
    assert said == "key 'input.layout': cannot tell NCHW from NHWC for input 'images' [1, 4, 4, 4]; set nchw or nhwc"
    said = refused((1, 256, 256, 3), "input.layout=nchw")
    assert said == "key 'input.layout': nchw but the model input 'images' is [1, 256, 256, 3], which is NHWC"
    said = refused((1, 3, 256, 256), "input.layout=nhwc")
    assert said == "key 'input.layout': nhwc but the model input 'images' is [1, 3, 256, 256], which is NCHW"
    said = refused((1, 8, 4, 3), "input.layout=nchw")  # 8 channels, 3 at the end: NHWC
    assert said == "key 'input.layout': nchw but the model input 'images' is [1, 8, 4, 3], which is NHWC"
    # a named layout whose channel count is an image's (1, 3 or 4: grey, colour, colour and alpha) is taken as said
    assert spec((1, 3, 8, 3), "input.layout=nhwc").layout == "nhwc"
    for c in (1, 4):
        assert spec((1, c, 8, 3), "input.layout=nchw", "input.mean=[0]", "input.std=[1]").layout == "nchw"


@pytest.mark.parametrize(
    "shape, said",
    [
        ((1, 3, 8), "model input 'images' has shape [1, 3, 8]; an image input must be 4-D (NCHW or NHWC)"),
        (
            (),
            "model input 'images' has shape []; an image input must be 4-D (NCHW or NHWC); if the file declares no "
            "shape, write one: edge dla MODEL --shape images=1x3xHxW --fix OUT.onnx",
        ),
        (
            (0, 3, 8, 8),
            "model input 'images' has shape [0, 3, 8, 8]: a dimension of 0 holds no image; write the size: edge dla "
            "MODEL --shape images=1x3xHxW --fix OUT.onnx",
        ),
    ],
)
def test_an_input_that_is_no_image_is_refused_with_the_command_that_fixes_it(shape, said):
    assert refused(shape) == said


@pytest.mark.parametrize(
    "tensor_dtype, sets, want",
    [
        (np.float16, (), "float16"),  # an FP16 export takes half floats
        (np.uint8, (), "uint8"),  # an export with the preprocessing inside takes bytes
        (np.float64, (), "float32"),
        (np.float16, ("input.dtype=float32",), "float32"),
    ],
)
def test_the_input_dtype_follows_the_tensor_unless_set(tensor_dtype, sets, want):
    assert spec((1, 3, 8, 8), *sets, dtype=np.dtype(tensor_dtype)).dtype == want


def test_the_image_input_is_the_only_one_or_the_one_named():
    a, b = TensorInfo("images", (1, 3, 8, 8), F32), TensorInfo("scale", (1, 2), F32)
    assert pick_input(cfg(), [a]) is a
    assert pick_input(cfg("input.name=scale"), [a, b]) is b
    with pytest.raises(ConfigError) as e:
        pick_input(cfg(), [a, b])
    assert str(e.value) == "key 'input.name': the model has 2 inputs (images, scale); name the image input"
    with pytest.raises(ConfigError) as e:
        pick_input(cfg("input.name=image"), [a, b])
    assert str(e.value) == "key 'input.name': the model has no input 'image'; its inputs: images, scale"


def test_the_model_and_engine_files_are_named_or_refused(tmp_path):
    from edge import assets

    assert model_path(cfg()) == assets.resolve("blazeface-back-256") and model_path(cfg()).is_file()
    (tmp_path / "m.onnx").write_bytes(b"")
    (tmp_path / "m.engine").write_bytes(bytes(64))
    c = load_config(None, [f"model.path={tmp_path / 'm.onnx'}"])
    assert model_path(c) == tmp_path / "m.onnx"
    with pytest.raises(ConfigError) as e:
        engine_path(c)
    assert str(e.value) == "key 'model.engine': the tensorrt backend needs an engine file: set model.engine to MODEL.engine"
    c = load_config(None, [f"model.engine={tmp_path / 'm.engine'}"])
    assert engine_path(c) == tmp_path / "m.engine"
    with pytest.raises(ConfigError) as e:
        model_path(c)
    assert str(e.value).startswith("key 'model': the onnxruntime backend needs model.path or model.asset")
