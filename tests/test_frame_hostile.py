"""Hostile inputs for issue 16's keys and formats: any value of source.format, color_matrix, color_range,
frame_memory and preprocess with any source ends as a run config or one line and exit 2 (never a traceback); any
array handed over as a frame of any format is converted or refused in one line; the ring's bookkeeping holds under
any order of acquires and releases; and the kernel's arithmetic (its numpy copy) stays within one intensity level
of OpenCV for generated frame sizes, formats and specs."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge.errors import EdgeError, guard
from edge.runtime.engines.preprocess import Preprocessor, PreprocessSpec
from edge.runtime.sources.frames import Frame, FrameRing
from edge.runtime.sources.pixels import FORMATS, colour, to_bgr
from tests.conftest import DEMO_CONFIG
from tests.kernel_reference import emulate

ROOT = Path(__file__).resolve().parents[1]
VALUES = st.one_of(
    st.sampled_from(["auto", "bgr", "bgrx", "rgba", "nv12", "yuyv", "uyvy", "mapped", "upload", "gpu", "cpu"]),
    st.sampled_from(["bt601", "bt709", "limited", "full", "BT709", "", "null", "[]", "{a: 1}", "nan", "7", "yuy2"]),
    st.text(max_size=12),
)
URIS = st.sampled_from(
    [
        "asset://megamind",
        "csi://0",
        "csi://x",
        "/dev/video0",
        "v4l2:///dev/video9",
        "rtsp://u:p@127.0.0.1:9/x",
        "/nonexistent.mp4",
    ]
)


@given(
    st.dictionaries(
        st.sampled_from(["source.format", "source.color_matrix", "source.color_range", "frame_memory", "preprocess"]),
        VALUES,
        max_size=5,
    ),
    URIS,
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # read per example
def test_any_frame_key_is_a_config_or_one_line_and_exit_2(capsys, values, uri):
    from edge.config import load_config
    from edge.runtime.sources import open_source

    def main(_args):
        sets = [f"{k}={v}" for k, v in values.items()] + [f"source.uri={uri}"]
        cfg = load_config(DEMO_CONFIG, sets)
        if uri.startswith("rtsp"):
            return 0  # a stream would try to connect; its format rules are the file's, checked above
        src = open_source(cfg.source, threading.Event(), base_dir=cfg.base_dir, gpu=cfg.preprocess == "gpu")
        src.close()
        return 0

    code = guard("edge-run", main, None)
    err = capsys.readouterr().err
    assert code in (0, 2), err
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("edge-run: error: ") and "Traceback" not in err


@given(
    st.sampled_from(list(FORMATS)),
    st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 5)),
    st.sampled_from([np.uint8, np.uint16, np.float32]),
)
@settings(max_examples=200, deadline=None)
def test_any_array_as_a_frame_is_converted_or_refused_in_one_line(fmt, shape, dtype):
    dims = tuple(d for d in shape if d) or (0,)
    array = np.zeros(dims, dtype)
    try:
        out = to_bgr(array, fmt, colour("bt709", "full"))
        size = Frame(0, 0.0, array, format=fmt).size
    except EdgeError as exc:
        assert "\n" not in str(exc) and "source.format" in str(exc)
        return
    assert out.dtype == np.uint8 and out.shape == (size[1], size[0], 3)


@given(st.lists(st.tuples(st.booleans(), st.sampled_from([(4, 4, 3), (4, 6, 3), (6, 4)])), max_size=60))
@settings(max_examples=150, deadline=None)
def test_the_ring_never_hands_one_buffer_out_twice(ops):
    stop = threading.Event()
    stop.set()  # a full ring returns None at once instead of waiting
    ring = FrameRing(3, stop=stop)
    out = []
    for acquire, shape in ops:
        if acquire:
            buf = ring.acquire(shape)
            if buf is not None:
                assert buf.array.shape == shape and all(buf is not o for o in out)
                out.append(buf)
        elif out:
            out.pop(0).release()
        assert ring.in_use == len(out) and ring.buffers <= 3
    for buf in out:
        buf.release()
    assert ring.in_use == 0


@given(
    st.sampled_from(list(FORMATS)),
    st.sampled_from(["bt601", "bt709"]),
    st.sampled_from(["limited", "full"]),
    st.integers(1, 40).map(lambda n: 2 * n),
    st.integers(1, 40).map(lambda n: 2 * n),
    st.integers(4, 48),
    st.integers(4, 48),
    st.sampled_from(["letterbox", "stretch"]),
    st.sampled_from(["float32", "float16", "uint8"]),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=80, deadline=None)
def test_kernel_arithmetic_stays_within_one_level_of_opencv(fmt, matrix, range_, w, h, out_w, out_h, resize, dtype, seed):
    raw = np.random.default_rng(seed).integers(0, 256, FORMATS[fmt].shape(w, h), dtype=np.uint8)
    frame = Frame(0, 0.0, raw, format=fmt, colour=colour(matrix, range_))
    spec = PreprocessSpec(out_w, out_h, resize=resize, dtype=dtype, pad_value=114, mean=(0.4, 0.5, 0.6), std=(0.2, 0.3, 0.25))
    want = Preprocessor(spec)(frame.bgr())[0].astype(np.float64)
    got = emulate(spec, frame).astype(np.float64)
    level = float(np.abs(spec.channel_affine()[0]).max()) if dtype != "uint8" else 1.0
    slack = 0.02 if dtype == "float16" else 1e-5  # float16 rounds values up to ~10 to 1/128
    assert np.abs(got - want).max() <= level * (1 + 1e-3) + slack


def test_params_struct_matches_the_kernels_field_for_field():
    """PARAMS_DTYPE is passed by value as the kernel's Params: same fields, same order, same sizes."""
    from edge.runtime.engines.cuda.preprocess import PARAMS_DTYPE

    source = (ROOT / "edge/runtime/engines/cuda/preprocess.cu").read_text()
    body = re.search(r"struct Params \{(.*?)\};", source, re.S).group(1)
    fields = []
    for decl in re.findall(r"^\s*(int|float)\s+([^;]+);", body, re.M):
        for name in decl[1].split(","):
            name = name.strip()
            count = int(re.search(r"\[(\d+)\]", name).group(1)) if "[" in name else 1
            fields.append((re.sub(r"\[.*", "", name), decl[0], count))
    assert [f[0] for f in fields] == list(PARAMS_DTYPE.names)
    for name, ctype, count in fields:
        dt = PARAMS_DTYPE.fields[name][0]
        assert (dt.base.kind, dt.base.itemsize, int(np.prod(dt.shape or (1,)))) == ("i" if ctype == "int" else "f", 4, count)
    assert PARAMS_DTYPE.itemsize == 4 * sum(f[2] for f in fields)
